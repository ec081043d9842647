"""``gpubw-nvbandwidth``: nvbandwidth's command line, run by gpubw, answered as nvbandwidth.

It emulates one nvbandwidth release exactly: v0.10 by default, v0.8 with
``GPUBW_NVBANDWIDTH_VERSION=0.8`` (nvbandwidth has no option for it; what differs is
:mod:`gpubw.model.nvbandwidth_versions`). It takes that release's options
(:mod:`gpubw.cli.nvbandwidth_args`), runs gpubw with the same meaning, writes that release's
text or JSON (:mod:`gpubw.writers.nvbandwidth`) and exits as nvbandwidth does. A symlink
named ``nvbandwidth`` to it stands in for the binary (README, "Standing in for nvbandwidth").

=====  ====================================================================================
0      the run completed (Waived and unknown testcases included), ``-h``, ``-l``,
       ``--version``
1      invalid arguments (v0.8: nvbandwidth's "ERROR: Invalid Arguments" block on standard
       output; v0.10: argparse's message and the help on standard error); a bad ``--pair``
       UUID; ``-t`` with ``-p``; prefixes that match nothing; a value gpubw refuses
       (``-i 0``); a bad ``GPUBW_NVBANDWIDTH_VERSION``; no driver; a testcase that failed
       (nothing runs after it, as nvbandwidth's process ends there)
130    interrupted by SIGINT; 143 by SIGTERM
=====  ====================================================================================

nvbandwidth has no ``--simulate``: ``GPUBW_SIMULATE=h200x2`` (a preset or a system file) runs
on a simulated system instead, and every output then says so in its git version
(``gpubw-0.1.0 (SIMULATED h200x2)``) and the driver version (``... (simulated)``).

The testcases are the release's build: its list (v0.10's 44, v0.8's 35) in its order, by its
indexes; under MPI its multinode build (the 13 multinode testcases follow). A run with
neither ``-t`` nor ``-p`` runs exactly that list; gpubw's own testcases and plugins' run only
when named (``-t KEY``, or ``-p``).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from typing import Any

from gpubw.cli.command import run_command
from gpubw.cli.flavour import Flavour
from gpubw.cli.nvbandwidth_args import ArgError, help_text, parse
from gpubw.model.console import printable, to_stderr
from gpubw.model.nvbandwidth_versions import (
    MULTINODE_TESTCASES,
    VERSION_ENV,
    VERSION_OPTION,
    NvbVersion,
    strtol_index,
    unknown_token,
    version_named,
)

PROG = "gpubw-nvbandwidth"
#: the environment variable that runs on a simulated system (nvbandwidth has no option for it)
SIMULATE_ENV = "GPUBW_SIMULATE"
TWO_SELECTIONS = "You cannot specify both testcase and testcasePrefix options at the same time"
NO_PREFIX_MATCH = "Specified list of testcase prefixes did not match any testcases"
PAIRS_IGNORED = (
    "WARNING: --targetNumPairs samples the multinode device-to-device testcases only; it is "
    "ignored in a single-node run"
)
#: a GPU's UUID as ``--pair`` takes it (nvbandwidth v0.10 requires the ``GPU-`` prefix)
_UUID = re.compile(
    r"GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)
#: nvbandwidth's switches -> gpubw's options
_SWITCHES = (
    ("verbose", "-v"),
    ("skipVerification", "-s"),
    ("disableAffinity", "-d"),
    ("useMean", "-m"),
    ("useHugePages", "--host-huge-pages"),
    ("perfFormatter", "--perf-formatter"),
)
#: nvbandwidth's valued options -> gpubw's
_VALUED = (("bufferSize", "-b"), ("testSamples", "-i"), ("loopCount", "--loop-count"))


class _Stop(Exception):
    """nvbandwidth would stop before running anything, with this message (exit 1)."""


def main(argv: Sequence[str] | None = None) -> int:
    """The ``gpubw-nvbandwidth`` command; returns the exit code (``argv`` None: this
    process is the command, its arguments in ``sys.argv``)."""
    command = argv is None
    args = list(sys.argv[1:] if argv is None else argv)
    argv0 = sys.argv[0] if command and sys.argv else "nvbandwidth"
    try:
        release = emulated()
    except ValueError as exc:
        _error(str(exc))
        return _refused(1, str(exc))
    return _main(args, argv0, command, release)


def emulated() -> NvbVersion:
    """The release ``GPUBW_NVBANDWIDTH_VERSION`` names (unset: v0.10); ValueError if none."""
    return version_named(os.environ.get(VERSION_ENV), VERSION_ENV)


def _main(args: list[str], argv0: str, command: bool, release: NvbVersion) -> int:
    try:
        values = parse(args, release.options)
        pair = _pair(values.get("pair"))
    except ArgError as exc:
        return _refused(_invalid_arguments(argv0, args, exc, release), str(exc))
    as_json = bool(values.get("json")) or values.get("format") == "json"
    early = _without_a_run(values, as_json, release)
    if early is not None:
        return early
    bad = _bad_simulation()
    if bad:
        _error(bad)
        return _refused(1, bad)
    multinode = _under_mpi()
    try:
        gpubw_args = translate(values, as_json, multinode, release) + pair
    except _Stop as exc:
        return _refused(_stopped(str(exc), as_json, release), str(exc))
    warnings = () if multinode or values.get("targetNumPairs", -1) <= 0 else (PAIRS_IGNORED,)
    return run_command(gpubw_args, command, flavour(warnings))


def _refused(code: int, reason: str) -> int:
    """This command ends before the run with ``code`` (its answer already printed); an MPI
    rank first meets the others, so that none waits for it (:mod:`gpubw.cli.together`)."""
    if not _under_mpi():
        return code
    from gpubw.cli.together import refused_with_ranks

    return refused_with_ranks(reason, PROG, code, said=True)


def _pair(given: tuple[str, str] | None) -> list[str]:
    """gpubw's ``--pair A,B`` for v0.10's ``--pair UUID1 UUID2``; an ArgError (nvbandwidth
    refuses the command line) unless both are GPU UUIDs and differ."""
    if given is None:
        return []
    for uuid in given:
        if not _UUID.fullmatch(uuid):
            raise ArgError(
                f"--pair {printable(uuid)!r}: not a GPU UUID; give two as nvidia-smi -L prints "
                "them, GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
            )
    if given[0].lower() == given[1].lower():
        raise ArgError(f"--pair {given[0]} {given[1]}: a pair is two different GPUs")
    return ["--pair", ",".join(given)]


def flavour(warnings: tuple[str, ...] = ()) -> Flavour:
    """How a gpubw run ends when nvbandwidth's command line asked for it."""
    from gpubw.writers.nvbandwidth import failure_message

    return Flavour(
        prog=PROG,
        usage_exit=1,
        exit_code=exit_code,
        failure=failure_message,
        stop_on_error=True,
        warnings=warnings,
        simulate_hint=f"{SIMULATE_ENV}=NAME {PROG}",
    )


def exit_code(report: Any) -> int:
    """nvbandwidth's exit code for a run: 128 + n after signal n, 1 when a testcase failed
    (or the run could not start), else 0: Waived and unknown testcases are no failure."""
    from gpubw.model.options import exit_status
    from gpubw.writers.nvbandwidth import failure_message

    return exit_status(signal=report.signal, failed=bool(failure_message(report)))


# -- output before (or instead of) a run --------------------------------------------------------


def _rank0() -> bool:
    """Whether this process prints: only world rank 0 does, as in nvbandwidth."""
    from gpubw.world.launch_env import world_rank

    return world_rank(os.environ) == 0


def _print(text: str) -> None:
    if _rank0():
        sys.stdout.write(text)
        sys.stdout.flush()


def _error(message: str) -> None:
    if _rank0():
        to_stderr(f"{PROG}: error: {message}")


def _simulated() -> str | None:
    return os.environ.get(SIMULATE_ENV) or None


def _bad_simulation() -> str:
    """Why GPUBW_SIMULATE names no simulated system ("" when unset or good), said with the
    variable's name (gpubw's own message would name --simulate, which this command lacks)."""
    name = _simulated()
    if name is None:
        return ""
    from gpubw.model.errors import UsageError
    from gpubw.runner.simulation import resolve_simulation

    try:
        resolve_simulation(name)
    except UsageError as exc:
        return f"{SIMULATE_ENV}={name}: {exc}"
    return ""


def _version_block(release: NvbVersion) -> str:
    from gpubw.version import __version__
    from gpubw.writers.nvbandwidth import git_version_text, version_lines

    git = git_version_text(__version__, _simulated())
    return "".join(f"{printable(line)}\n" for line in version_lines(git, release))


def _invalid_arguments(argv0: str, args: list[str], exc: ArgError, release: NvbVersion) -> int:
    """The release's answer to a command line it cannot parse; exit 1. v0.8: the version
    block, ``ERROR: Invalid Arguments ``, the words and the help on standard output (text
    even with -j), gpubw's reason on standard error. v0.10: argparse's way, the reason then
    the help, all on standard error."""
    if release.argparse_cli:
        if _rank0():
            to_stderr(exc.argparse_text())
            sys.stderr.write(help_text(release))
        return 1
    words = printable("".join(f"{word} " for word in [argv0, *args]))
    _print(
        f"{_version_block(release)}ERROR: Invalid Arguments \n{words}:\n\n{help_text(release)}\n"
    )
    _error(str(exc))
    return 1


def _without_a_run(values: dict[str, Any], as_json: bool, release: NvbVersion) -> int | None:
    """``-h``, ``--version`` and ``-l`` (nothing printed with -j, as nvbandwidth), else None."""
    if not (values.get("help") or values.get("version") or values.get("list")):
        return None
    if as_json:
        return 0
    if values.get("help") and release.argparse_cli:
        _print(help_text(release))
        return 0
    text = _version_block(release)
    if values.get("help"):
        text += help_text(release) + "\n"
    elif not values.get("version"):
        text += testcase_list(_under_mpi(), release)
    _print(text)
    return 0


def _stopped(message: str, as_json: bool, release: NvbVersion) -> int:
    """nvbandwidth stops before any testcase: its version block then the error on standard
    error, or, with -j, the JSON document holding the error; exit 1."""
    if as_json:
        from gpubw.version import __version__
        from gpubw.writers.nvbandwidth import git_version_text, jsoncpp_dumps

        git = git_version_text(__version__, _simulated())
        doc = {"error": message, "git_version": git, "version": release.version}
        _print(jsoncpp_dumps({"nvbandwidth": doc}))
    else:
        _print(_version_block(release))
        if _rank0():
            to_stderr(message)
    return 1


# -- the testcases of this build ------------------------------------------------------------------


def _under_mpi() -> bool:
    from gpubw.cli.together import launched_with_ranks

    return launched_with_ranks()


def entries(multinode: bool) -> list[Any]:
    """The registry's testcases this build can run: every one under MPI; without the
    multinode ones otherwise (nvbandwidth's single-node build has none). Loads them all."""
    from gpubw.runner.ranks import is_multinode
    from gpubw.runner.registry import Registry

    registry = Registry.discover().load()
    return [e for e in registry.entries if multinode or not is_multinode(e)]


def testcase_list(multinode: bool, release: NvbVersion) -> str:
    """``-l`` as the release prints it (after the version block): its build's testcases by
    its indexes, with gpubw's descriptions; nothing on standard error."""
    from gpubw.cli.listing import json_escaped

    known = {e.key: e for e in entries(multinode)}
    lines = ["Index, Name:", "\tDescription", *(["=" * 23] if release.list_rules else [])]
    for index, key in enumerate(release.build(multinode)):
        lines += [f"{index}, {key}:", *_description(known.get(key), release)]
        lines += [""] if release.list_rules else []
    text = "\n".join(lines) + ("\n" if release.list_rules else "\n\n")
    return json_escaped(text)


def _description(entry: Any, release: NvbVersion) -> list[str]:
    if entry is None:
        text = "(not in this gpubw: it reports the testcase as not found)"
    elif entry.failure is not None:
        text = f"(could not be loaded from {entry.plugin}: {entry.failure.message})"
    else:
        text = entry.description or "(no description)"
    lines = text.splitlines() or [""]
    return [release.list_first_indent + lines[0], *("\t" + line for line in lines[1:])]


# -- nvbandwidth's command line as gpubw's -------------------------------------------------------


def translate(
    values: dict[str, Any], as_json: bool, multinode: bool, release: NvbVersion
) -> list[str]:
    """gpubw's command line for nvbandwidth's options. Raises :class:`_Stop` where
    nvbandwidth stops before running anything (``-t`` with ``-p``, no prefix match)."""
    fmt = "nvbandwidth-json" if as_json else "nvbandwidth"
    args = ["-q", "--format", fmt, VERSION_OPTION, release.name]
    for name, flag in _VALUED:
        if name in values:
            args += [flag, str(values[name])]
    args += [flag for name, flag in _SWITCHES if values.get(name)]
    if values.get("format") == "perf" and "--perf-formatter" not in args:
        args.append("--perf-formatter")
    if multinode and values.get("targetNumPairs", -1) > 0:
        args += ["--sample-pairs", str(values["targetNumPairs"])]
    if _simulated():
        args += ["--simulate", str(_simulated())]
    return [*args, "-t", *selection(values, multinode, release)]


def selection(values: dict[str, Any], multinode: bool, release: NvbVersion) -> list[str]:
    """The ``-t`` items for gpubw: ``-t`` items read by the release's indexes (an index or
    a multinode key the build lacks: :func:`unknown_token`); ``-p`` expanded over the build's
    list, then gpubw's own testcases; the build's list when neither."""
    tokens, prefixes = values.get("testcase", []), values.get("testcasePrefixes", [])
    if tokens and prefixes:
        raise _Stop(TWO_SELECTIONS)
    build = release.build(multinode)
    if tokens:
        return [_item(token, build, multinode) for token in tokens]
    if not prefixes:
        return list(build)
    extra = [e.key for e in entries(multinode) if e.key not in build]
    keys = [k for k in [*build, *extra] if any(k.startswith(p) for p in prefixes)]
    if not keys:
        raise _Stop(NO_PREFIX_MATCH)
    return keys


def _item(token: str, build: tuple[str, ...], multinode: bool) -> str:
    index = strtol_index(token)
    if index is not None:
        return build[index] if 0 <= index < len(build) else unknown_token(token)
    if token in MULTINODE_TESTCASES and not multinode:
        return unknown_token(token)
    return token


__all__ = [
    "PROG",
    "SIMULATE_ENV",
    "emulated",
    "entries",
    "exit_code",
    "flavour",
    "main",
    "selection",
    "testcase_list",
    "translate",
]
