"""nvbandwidth's command line, parsed as the nvbandwidth binary parses it.

nvbandwidth v0.8 parses with Boost.Program_options in its default style; this module follows
the same rules (its own code, no Boost): ``--opt value``, ``--opt=value``, ``-b 64`` and
``-b64``; switches grouped (``-vs``); a long option given as any unique prefix of its name
(``--buf 64``), an exact name beating a prefix (``--testcase``); ``-t``/``-p`` take every
token up to the next option and add to the list when repeated; any other option given twice,
a stray word, an unknown option, a missing value or a bad number is an error
(:class:`ArgError`). Besides v0.8's options it knows the newer releases' additions, spelled
as they are (NVIDIA/nvbandwidth's README of each release; v0.9 is PR #62; ``--pair`` arrived
with the argparse rewrite, PR #69 in the stored history):

* v0.9: ``-P``/``--targetNumPairs N`` (pair sampling of the multinode device-to-device
  testcases; -1, the default, measures all pairs) and ``-H``/``--useHugePages``;
* v0.10: ``--pair UUID1 UUID2`` (device-to-device testcases between those two GPUs only),
  ``-F``/``--format text|json|perf`` and ``--version``.

Values are checked as Boost's ``lexical_cast`` checks them for the option's C++ type
(unsigned 64 or 32 bits, signed 64 bits); whether gpubw can honour them is for
:mod:`gpubw.cli.nvbandwidth` to say. Which options a release accepts is
:attr:`gpubw.model.nvbandwidth_versions.NvbVersion.options` (``parse(args, release.options)``:
another is an unknown option). v0.10 parses with p-ranav/argparse; its exact rules are not
public, so the same rules serve (a superset: prefixes, ``-b64``), and :func:`help_text` writes
each release's help (v0.10's as its README shows it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, NamedTuple

from gpubw.model.nvbandwidth_versions import NvbVersion

SWITCH, U64, U32, I64, LIST, PAIR, FORMAT = "switch", "u64", "u32", "i64", "list", "pair", "fmt"
#: what -F/--format accepts (nvbandwidth v0.10)
FORMATS = ("text", "json", "perf")
_LIMITS = {U64: (0, 2**64 - 1), U32: (0, 2**32 - 1), I64: (-(2**63), 2**63 - 1)}
_NUMBER = {U64: re.compile(r"\+?[0-9]+"), U32: re.compile(r"\+?[0-9]+"),
           I64: re.compile(r"[+-]?[0-9]+")}  # fmt: skip


class ArgError(ValueError):
    """A command line nvbandwidth would refuse (its "Invalid Arguments"); the message says
    why, for gpubw's own error line; ``unknown``: the option it does not know, if that is
    why."""

    def __init__(self, message: str, unknown: str = "") -> None:
        super().__init__(message)
        self.unknown = unknown

    def argparse_text(self) -> str:
        """The reason in p-ranav/argparse's words where they are known (``Unknown argument:
        --nope``), else gpubw's."""
        return f"Unknown argument: {self.unknown}" if self.unknown else str(self)


class Option(NamedTuple):
    """One of nvbandwidth's options: long name, short letter ("" for none), kind, default
    shown by ``-h`` (None: none), help text, hidden from ``-h``."""

    long: str
    short: str
    kind: str
    default: str | None
    help: str
    hidden: bool = False


#: nvbandwidth's options, in its ``-h`` order (help texts are nvbandwidth's, typo included)
OPTIONS = (
    Option("help", "h", SWITCH, None, "Produce help message"),
    Option("bufferSize", "b", U64, "512", "Memcpy buffer size in MiB"),
    Option("list", "l", SWITCH, None, "List available testcases"),
    Option("testcase", "t", LIST, None, "Testcase(s) to run (by name or index)"),
    Option("testcasePrefixes", "p", LIST, None, "Testcase(s) to run (by prefix))"),
    Option("verbose", "v", SWITCH, None, "Verbose output"),
    Option("skipVerification", "s", SWITCH, None, "Skips data verification after copy"),
    Option("disableAffinity", "d", SWITCH, None, "Disable automatic CPU affinity control"),
    Option("testSamples", "i", U32, "3", "Iterations of the benchmark"),
    Option("targetNumPairs", "P", I64, "-1",
           "Target pairs for multinode device-to-device tests (-1: all,  >0: sampled)"),
    Option("useMean", "m", SWITCH, None, "Use mean instead of median for results"),
    Option("json", "j", SWITCH, None, "Print output in json format instead of plain text."),
    Option("useHugePages", "H", SWITCH, None, "Use huge pages for host memory allocation"),
    Option("format", "F", FORMAT, "text", "Output format: text, json, or perf"),
    Option("pair", "", PAIR, None,
           "Run device-to-device tests only between these two GPUs (by UUID)"),
    Option("version", "", SWITCH, None, "Print nvbandwidth release version and exit"),
    Option("loopCount", "", U64, "16",
           "Iterations of memcpy to be performed within a test sample", hidden=True),
    Option("perfFormatter", "", SWITCH, None,
           "Use perf formatter prefix (&&&& PERF) in output", hidden=True),
)  # fmt: skip
_BY_SHORT = {o.short: o for o in OPTIONS if o.short}


def long_option(name: str, allowed: Sequence[str] | None = None) -> Option:
    """The option a long name means: exact, else the one option it is a prefix of (among
    the ``allowed`` long names; None: all)."""
    known = [o for o in OPTIONS if allowed is None or o.long in allowed]
    exact = [o for o in known if o.long == name]
    if exact:
        return exact[0]
    matches = [o for o in known if name and o.long.startswith(name)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        names = ", ".join(f"--{o.long}" for o in matches)
        raise ArgError(f"option '--{name}' is ambiguous and matches {names}")
    raise ArgError(f"unrecognised option '--{name}'", unknown=f"--{name}")


def _is_option(token: str) -> bool:
    """Whether ``token`` is one of nvbandwidth's options (so it cannot be a value)."""
    if token.startswith("--") and len(token) > 2:
        try:
            long_option(token[2:].partition("=")[0])
        except ArgError:
            return False
        return True
    return len(token) > 1 and token[0] == "-" and token[1] in _BY_SHORT


def _number(option: Option, text: str) -> int:
    if not _NUMBER[option.kind].fullmatch(text):
        raise ArgError(f"the argument ('{text}') for option '--{option.long}' is invalid")
    value = int(text)
    low, high = _LIMITS[option.kind]
    if not low <= value <= high:
        raise ArgError(f"the argument ('{text}') for option '--{option.long}' is out of range")
    return value


def _convert(option: Option, text: str) -> Any:
    if option.kind == FORMAT:
        if text not in FORMATS:
            raise ArgError(f"the argument ('{text}') for option '--format' is invalid "
                           f"(allowed: {', '.join(FORMATS)})")  # fmt: skip
        return text
    return _number(option, text)


def _store(values: dict[str, Any], option: Option, value: Any) -> None:
    if option.kind == LIST:
        values.setdefault(option.long, []).extend(value)
        return
    if option.long in values:
        raise ArgError(f"option '--{option.long}' cannot be specified more than once")
    values[option.long] = value


def _take(option: Option, attached: str | None, args: Sequence[str], i: int) -> tuple[Any, int]:
    """(value, next index) of ``option``: its attached value or the tokens after it."""
    if option.kind == SWITCH:
        if attached is not None:
            raise ArgError(f"option '--{option.long}' does not take any arguments")
        return True, i
    if option.kind == PAIR:
        given = ([attached] if attached is not None else []) + list(args[i : i + 2])
        if len(given) < 2 or any(_is_option(t) for t in given[:2]):
            raise ArgError(f"option '--{option.long}' requires two arguments (two GPU UUIDs)")
        return tuple(given[:2]), i + 2 - (attached is not None)
    if attached is None:
        if i >= len(args) or _is_option(args[i]):
            raise ArgError(f"the required argument for option '--{option.long}' is missing")
        attached, i = args[i], i + 1
    if option.kind != LIST:
        return _convert(option, attached), i
    items = [attached]
    while i < len(args) and not (args[i].startswith("-") and len(args[i]) > 1):
        items.append(args[i])
        i += 1
    return items, i


def _shorts(
    group: str, args: Sequence[str], i: int, values: dict[str, Any], allowed: Sequence[str]
) -> int:
    """A token of short options (``-v``, ``-vs``, ``-b64``, ``-b 64``); the next index."""
    for n, letter in enumerate(group):
        option = _BY_SHORT.get(letter)
        if option is None or option.long not in allowed:
            raise ArgError(f"unrecognised option '-{letter}'", unknown=f"-{letter}")
        rest = group[n + 1 :]
        if option.kind == SWITCH:
            _store(values, option, True)
            continue
        value, i = _take(option, rest or None, args, i)
        _store(values, option, value)
        break
    return i


def parse(args: Sequence[str], allowed: Sequence[str] | None = None) -> dict[str, Any]:
    """nvbandwidth's command line (without the program name) -> {long name: value}, only
    the options given (``-t``/``-p``: lists; switches: True); ``allowed``: the long names
    the release takes (None: all). Raises :class:`ArgError`."""
    allowed = [o.long for o in OPTIONS] if allowed is None else allowed
    values: dict[str, Any] = {}
    i = 0
    while i < len(args):
        token = args[i]
        if token.startswith("--") and len(token) > 2:
            name, eq, attached = token[2:].partition("=")
            option = long_option(name, allowed)
            value, i = _take(option, attached if eq else None, args, i + 1)
            _store(values, option, value)
        elif token.startswith("-") and len(token) > 1 and token != "--":
            i = _shorts(token[1:], args, i + 1, values, allowed)
        else:
            raise ArgError(f"unexpected word '{token}' (nvbandwidth takes no positional arguments)")
    return values


def _left(option: Option) -> str:
    """An option's first column in ``-h``, Boost's way: ``  -b [ --bufferSize ] arg (=512)``."""
    name = f"-{option.short} [ --{option.long} ]" if option.short else f"--{option.long}"
    arg = "" if option.kind == SWITCH else " arg"
    if option.kind == PAIR:
        arg = " UUID1 UUID2"
    default = f" (={option.default})" if option.default is not None else ""
    return f"  {name}{arg}{default}"


def _wrap(text: str, width: int) -> list[str]:
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return [*lines, line]


#: v0.10's ``-h`` (p-ranav/argparse), as NVIDIA's README for v0.10 shows it
V010_HELP = """Usage: nvbandwidth [options]

A tool for bandwidth measurements on NVIDIA GPUs.

Arguments:
  -h, --help                shows help message and exits
      --version             Print nvbandwidth release version and exit
  -b, --bufferSize SIZE     Memcpy buffer size in MiB [default: 512]
  -l, --list                List available testcases
  -t, --testcase TEST       Testcase(s) to run (by name or index)
  -p, --testcasePrefixes PREFIX  Testcase(s) to run (by prefix)
  -v, --verbose             Verbose output
  -s, --skipVerification    Skips data verification after copy
  -d, --disableAffinity     Disable automatic CPU affinity control
  -i, --testSamples N       Iterations of the benchmark [default: 3]
  -P, --targetNumPairs N    Target pairs for multinode tests [default: -1]
  -m, --useMean             Use mean instead of median for results
  -H, --useHugePages        Use huge pages for host allocations
  -F, --format FORMAT       Output format: text, json, or perf [default: text]
      --pair UUID1 UUID2    Run device-to-device tests only between these two GPUs (by UUID)
"""


def help_text(release: NvbVersion | None = None) -> str:
    """``-h`` of ``release``: v0.10's argparse help, or v0.8's option table as Boost lays it
    out (80 columns) with that release's options (None: every option gpubw knows)."""
    if release is not None and release.argparse_cli:
        return V010_HELP
    visible = [
        o for o in OPTIONS if not o.hidden and (release is None or o.long in release.options)
    ]
    column = min(max(len(_left(o)) for o in visible) + 1, 40)
    out = ["nvbandwidth CLI:"]
    for option in visible:
        left = _left(option)
        text = _wrap(option.help, 79 - column)
        if len(left) >= column:
            out.append(left)
        else:
            out.append(left.ljust(column) + text.pop(0))
        out += [" " * column + line for line in text]
    return "\n".join(out) + "\n"


__all__ = [
    "FORMATS",
    "OPTIONS",
    "V010_HELP",
    "ArgError",
    "Option",
    "help_text",
    "long_option",
    "parse",
]
