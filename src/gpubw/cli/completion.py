"""Shell completion of the ``gpubw`` command: ``gpubw completion bash|zsh|fish`` prints a
script for that shell.

The scripts are made from the command's own parsers (the run's, then check, expect-from,
info, compare, plot and completion), so they cannot drift from them. They complete the
sub-commands as the first word; every option of the command or sub-command (aliases
included), with the options installed writers declare (``--metrics-detail``); the values of
``-t``/``-p`` (testcase keys, the run's and plot's), ``--simulate`` (presets, and files),
``--format`` (installed writers) and of every option with choices (``--handle-type``,
``--fail-on``, ...); file names elsewhere. Keys, presets and writers are those installed
when the script is made: make it again after installing a plugin. ``--command
gpubw-nvbandwidth`` makes the script of nvbandwidth's command line instead (its own option
table, :data:`gpubw.cli.nvbandwidth_args.OPTIONS`), for that command and its link
``nvbandwidth``. Nothing a plugin names is ever evaluated by the shell: the words are quoted
array items matched by a prefix loop (bash, zsh), never ``compgen -W`` (which expands
``$(...)``), and quoted again inside fish's ``-a``.

gpubw writes the scripts itself, with no dependency: shtab writes no fish, and
argcomplete runs Python (and imports gpubw) at every press of TAB. zsh's script is the bash
one run by zsh's ``bashcompinit``.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence

import attrs

from gpubw.cli.parsing import Parser
from gpubw.version import __version__

PROG = "gpubw"
SHELLS = ("bash", "zsh", "fish")
#: what every value of an option is, by its destination: a word list made when the script is
KEYS, PRESETS, FORMATS = "keys", "presets", "formats"
VALUE_WORDS = {"testcase": KEYS, "prefixes": KEYS, "simulate": PRESETS, "format": FORMATS}
#: the destinations of options whose values are (or may be) file names
FILE_DESTS = frozenset({"output", "expect", "simulate"})
#: a word no shell reads as anything but itself (written unquoted in fish's script)
_PLAIN = re.compile(r"[A-Za-z0-9_.,:+=@%/-]+")
#: gpubw's nvbandwidth command, and the link name that stands in for NVIDIA's binary
NVBANDWIDTH, NVBANDWIDTH_LINK = "gpubw-nvbandwidth", "nvbandwidth"


@attrs.frozen
class Option:
    """One option as completion sees it: its spellings, whether it takes values (and how
    many: ``many`` for ``-t ID...``), the words its values are (None: none known) and
    whether file names are values too (``files``)."""

    strings: tuple[str, ...]
    takes_value: bool
    many: bool
    words: tuple[str, ...] | None
    help: str
    files: bool = False


@attrs.frozen
class Command:
    """The main command (``name`` empty) or a sub-command, with its options and the words
    its first argument is (``completion``'s shells; empty: file names)."""

    name: str
    help: str
    options: tuple[Option, ...]
    arguments: tuple[str, ...] = ()


def completion_parser() -> argparse.ArgumentParser:
    """``gpubw completion``'s parser."""
    p = Parser(
        prog="gpubw completion",
        description="Print a shell completion script. bash: gpubw completion bash > "
        "~/.local/share/bash-completion/completions/gpubw; zsh: source <(gpubw completion "
        "zsh) in ~/.zshrc; fish: gpubw completion fish > ~/.config/fish/completions/gpubw.fish. "
        "Make it again after installing a plugin (its testcase keys and formats are listed "
        "in the script).",
    )
    p.add_argument("shell", choices=SHELLS, help="the shell: bash, zsh or fish")
    p.add_argument(
        "--command",
        choices=(PROG, NVBANDWIDTH),
        default=PROG,
        help=f"the command to complete: {PROG} (the default) or {NVBANDWIDTH} (nvbandwidth's "
        f"options; its link named {NVBANDWIDTH_LINK} too)",
    )
    return p


def completion_main(argv: list[str]) -> int:
    """``gpubw completion SHELL [--command NAME]``: the script on standard output."""
    a = completion_parser().parse_args(argv)
    cmds = commands(_words()) if a.command == PROG else nvbandwidth_commands(_words())
    print(script(a.shell, cmds, a.command), end="")
    return 0


def nvbandwidth_commands(words: dict[str, tuple[str, ...]]) -> list[Command]:
    """``gpubw-nvbandwidth`` as completion sees it: one command, its options from
    nvbandwidth's own table (:data:`gpubw.cli.nvbandwidth_args.OPTIONS`, the hidden ones
    left out), ``-t``/``-p`` completing testcase keys and ``-F`` its formats."""
    from gpubw.cli import nvbandwidth_args as nv

    out = []
    for o in nv.OPTIONS:
        if o.hidden:
            continue
        spellings = ((f"-{o.short}",) if o.short else ()) + (f"--{o.long}",)
        values = words.get(KEYS) if o.kind == nv.LIST else None
        values = nv.FORMATS if o.kind == nv.FORMAT else values
        out.append(Option(spellings, o.kind != nv.SWITCH, o.kind == nv.LIST, values, _line(o.help)))
    return [Command("", "", tuple(out))]


def _words() -> dict[str, tuple[str, ...]]:
    """The installed testcase keys, simulated presets and output formats."""
    from gpubw.backend.sim import presets
    from gpubw.runner.registry import Registry
    from gpubw.runner.writer_registry import Writers

    return {
        KEYS: tuple(e.key for e in Registry.discover().entries),
        PRESETS: tuple(sorted(presets.names())),
        FORMATS: tuple(Writers.discover().names),
    }


def _subparsers() -> list[tuple[str, str, Callable[[], argparse.ArgumentParser]]]:
    """(name, one line of help, its parser or None) of each sub-command."""
    from gpubw.cli.accept import check_parser, expect_from_parser, info_parser
    from gpubw.cli.compare import compare_parser
    from gpubw.cli.fleet import fleet_parser
    from gpubw.cli.plot import plot_parser  # (matplotlib is imported only to draw)

    return [
        ("check", "judge a saved report", check_parser),
        ("expect-from", "expectations from a known-good report", expect_from_parser),
        ("info", "devices, NVML facts, peer links", info_parser),
        ("compare", "two reports cell by cell", compare_parser),
        ("plot", "figures of a report", plot_parser),
        ("fleet", "many nodes' reports against their fleet", fleet_parser),
        ("completion", "a shell completion script", completion_parser),
    ]


def options_of(
    parser: argparse.ArgumentParser, words: dict[str, tuple[str, ...]]
) -> tuple[Option, ...]:
    """The options of ``parser`` (positionals left out: they are file names)."""
    out = []
    for a in parser._actions:
        if not a.option_strings or a.help == argparse.SUPPRESS:
            continue
        takes = a.nargs != 0
        values = words.get(VALUE_WORDS.get(a.dest, ""))
        if a.choices is not None:
            values = tuple(str(c) for c in a.choices)
        many = a.nargs in ("+", "*")
        files = a.dest in FILE_DESTS or "FILE" in str(a.metavar or "")
        out.append(Option(tuple(a.option_strings), takes, many, values, _line(a.help), files))
    return tuple(out)


def arguments_of(parser: argparse.ArgumentParser) -> tuple[str, ...]:
    """The choices of ``parser``'s first positional argument (none: file names)."""
    first = next((a for a in parser._actions if not a.option_strings), None)
    return tuple(str(c) for c in first.choices) if first and first.choices else ()


def _line(text: str | None) -> str:
    """The first clause of a help text, for fish's descriptions."""
    first = (text or "").split(";")[0].split("(")[0].strip()
    return first.replace("%%", "%")[:60]


def _writer_options() -> tuple[Option, ...]:
    """The options installed writers declare."""
    from gpubw.runner.writer_registry import Writers
    from gpubw.writers import writer_options

    writers = Writers.discover()
    out = []
    for name in writers.names:
        for o in writer_options(writers.get(name)):
            out.append(Option((o.flag,), True, False, o.choices or None, _line(o.help)))
    return tuple(out)


def commands(words: dict[str, tuple[str, ...]]) -> list[Command]:
    """The main command and every sub-command, with their options."""
    from gpubw.cli.args import build_parser

    main = Command("", "", options_of(build_parser(), words) + _writer_options())
    subs = []
    for name, text, make in _subparsers():
        parser = make()
        subs.append(Command(name, text, options_of(parser, words), arguments_of(parser)))
    return [main, *subs]


def script(shell: str, cmds: Sequence[Command], prog: str = PROG) -> str:
    """The completion script of ``prog`` (``gpubw``, or ``gpubw-nvbandwidth`` and its link
    ``nvbandwidth``) for ``shell``."""
    if shell == "fish":
        return fish_script(cmds, prog)
    body = bash_script(cmds, prog)
    if shell == "zsh":
        head = f"# zsh completion for {prog}: source <({PROG} completion zsh) in ~/.zshrc\n"
        return head + "autoload -U +X bashcompinit && bashcompinit\n" + body
    return body


def _quote(words: Sequence[str]) -> str:
    """Words as one single-quoted shell string."""
    text = " ".join(words)
    return "'" + text.replace("'", "'\\''") + "'"


def _array(words: Sequence[str]) -> str:
    """Words as the items of a bash array, ``('a' 'b')``, each single-quoted: bash never
    expands what a plugin named (a key holding ``$(...)`` stays text)."""
    return "(" + " ".join(_quote([w]) for w in words) + ")"


def _bash_values(cmds: Sequence[Command], named: dict[tuple[str, ...], str], fn: str) -> list[str]:
    """The case arms that complete an option's value: ``cmd:option) ...``."""
    arms = []
    for cmd in cmds:
        for o in cmd.options:
            if not o.takes_value:
                continue
            pattern = "|".join(_quote([f"{cmd.name or 'main'}:{s}"]) for s in o.strings)
            actions = [] if o.words is None else [_match(o.words, fn, named)]
            if o.files:
                actions.append(_FILES.replace("=(", "+=(") if actions else _FILES)
            arms.append(f"        {pattern}) {'; '.join(actions) or 'COMPREPLY=()'}; return ;;")
    return arms


_FILES = 'COMPREPLY=($(compgen -f -- "$cur"))'


def _match(words: Sequence[str], fn: str, named: dict[tuple[str, ...], str] | None = None) -> str:
    """The words that begin with ``$cur``: ``words`` as quoted arguments of the matcher
    (``fn``_match), or the array ``named`` gives them. Never ``compgen -W``, which expands
    its word list (``$(...)`` in a plugin's testcase key would run at TAB)."""
    if named and tuple(words) in named:
        return f'{fn}_match "${{{named[tuple(words)]}[@]}}"'
    return f"{fn}_match " + " ".join(_quote([w]) for w in words)


def _matcher(fn: str) -> list[str]:
    """The function that puts its arguments that begin with ``$cur`` in COMPREPLY (a
    literal prefix: the pattern's ``$cur`` is quoted)."""
    return [
        f"{fn}_match() {{",
        "    local w; COMPREPLY=()",
        '    for w in "$@"; do [[ "$w" == "$cur"* ]] && COMPREPLY+=("$w"); done',
        "}",
    ]


def bash_script(cmds: Sequence[Command], prog: str = PROG) -> str:
    """The bash script of ``prog`` (zsh runs it too, through bashcompinit)."""
    fn = "_" + prog.replace("-", "_")
    subs = cmds[1:]
    keys = next((o.words for c in cmds for o in c.options if o.many and o.words), ())
    named = {keys: f"{fn}_keys"} if keys else {}
    many = {f"{c.name or 'main'}:{s}" for c in cmds for o in c.options if o.many for s in o.strings}
    options = [f"        {c.name or 'main'}) opts={_array(_spellings(c))} ;;" for c in cmds]
    arguments = [f"        {c.name}) {_match(c.arguments, fn)} ;;" for c in subs if c.arguments]
    first = [f'    case "${{COMP_WORDS[1]}}" in {"|".join(c.name for c in subs)}) '
             '((COMP_CWORD > 1)) && cmd="${COMP_WORDS[1]}" ;; esac'] if subs else []  # fmt: skip
    sub_names = [
        '    elif [[ "$cmd" == main && COMP_CWORD -eq 1 ]]; then',
        f"        {_match([c.name for c in subs], fn)}",
    ]
    lines = [
        f"# bash completion for {prog} {__version__}: made by {PROG} completion bash",
        *([f"{fn}_keys={_array(keys)}"] if keys else []),
        *_matcher(fn),
        f"{fn}_complete() {{",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
        "    local cmd=main opt i opts",
        *first,
        '    [[ "$prev" == "=" ]] && prev="${COMP_WORDS[COMP_CWORD-2]}"',
        "    for ((i = COMP_CWORD - 1; i > 0; i--)); do  # -t ID...: the option before its values",
        '        [[ "${COMP_WORDS[i]}" == -* ]] && { opt="${COMP_WORDS[i]}"; break; }',
        "    done",
        f'    case "$cmd:$opt" in {"|".join(_quote([m]) for m in sorted(many)) or "-"}) '
        "prev=$opt ;; esac",
        '    if [[ "$cur" != -* ]]; then',
        '        case "$cmd:$prev" in',
        *_bash_values(cmds, named, fn),
        "        esac",
        "    fi",
        '    case "$cmd" in',
        *options,
        "    esac",
        '    if [[ "$cur" == -* ]]; then',
        f'        {fn}_match "${{opts[@]}}"',
        *(sub_names if subs else []),
        "    else",
        '        case "$cmd" in',
        *arguments,
        f"        *) {_FILES} ;;",
        "        esac",
        "    fi",
        "}",
        f"complete -o filenames -F {fn}_complete {' '.join(_names(prog))}",
        "",
    ]
    return "\n".join(lines)


def _names(prog: str) -> tuple[str, ...]:
    """The command names a script completes: ``gpubw-nvbandwidth`` also as ``nvbandwidth``
    (the link that stands in for NVIDIA's binary)."""
    return (prog, NVBANDWIDTH_LINK) if prog == NVBANDWIDTH else (prog,)


def _spellings(cmd: Command) -> list[str]:
    return [s for o in cmd.options for s in o.strings]


def _fish_quote(text: str) -> str:
    """``text`` as one fish single-quoted string (fish's escapes there: ``\\'`` and
    ``\\\\``)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish_word(word: str) -> str:
    """A word as fish reads it literally: itself when it holds only plain characters, else
    fish-quoted."""
    return word if _PLAIN.fullmatch(word) else _fish_quote(word)


def _fish_words(words: Sequence[str]) -> str:
    """``-a``'s argument: fish expands it again at TAB, so each word is quoted inside it
    too where it needs to be (a plugin's ``(cmd)`` or ``$var`` stays text)."""
    return _fish_quote(" ".join(_fish_word(w) for w in words))


def _fish_option(o: Option, condition: str, prog: str) -> str:
    """One ``complete`` line of an option."""
    parts = [f"complete -c {prog} -n {_fish_quote(condition)}"]
    for s in o.strings:
        parts.append(f"-l {_fish_word(s[2:])}" if s.startswith("--") else f"-s {_fish_word(s[1:])}")
    if o.takes_value:
        parts.append("-r" if o.files else "-x")
        if o.words is not None:
            parts.append(f"-a {_fish_words(o.words)}")
    if o.help:
        parts.append(f"-d {_fish_quote(o.help)}")
    return " ".join(parts)


def fish_script(cmds: Sequence[Command], prog: str = PROG) -> str:
    """The fish script of ``prog`` (and of its other names)."""
    subs = cmds[1:]
    names = " ".join(c.name for c in subs)
    first = "__fish_use_subcommand"
    lines = [f"# fish completion for {prog} {__version__}: made by {PROG} completion fish"]
    for name in _names(prog):
        for c in subs:
            lines.append(f"complete -c {name} -n {first} -f -a {_fish_words([c.name])} "
                         f"-d {_fish_quote(c.help)}")  # fmt: skip
        main = f"not __fish_seen_subcommand_from {names}" if subs else "true"
        lines += [_fish_option(o, main, name) for o in cmds[0].options]
        for c in subs:
            seen = f"__fish_seen_subcommand_from {c.name}"
            lines += [_fish_option(o, seen, name) for o in c.options]
            if c.arguments:
                lines.append(f"complete -c {name} -n {_fish_quote(seen)} -f -a "
                             f"{_fish_words(c.arguments)}")  # fmt: skip
    return "\n".join(lines) + "\n"
