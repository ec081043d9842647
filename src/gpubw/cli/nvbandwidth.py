"""``gpubw-nvbandwidth``: nvbandwidth's command line, run by gpubw, answered as nvbandwidth.

It takes nvbandwidth's options (:mod:`gpubw.cli.nvbandwidth_args`), runs gpubw with the
same meaning, writes nvbandwidth v0.8's text or ``-j`` JSON (:mod:`gpubw.writers.nvbandwidth`)
and exits as nvbandwidth does. A symlink named ``nvbandwidth`` to it stands in for the binary
(README, "Standing in for nvbandwidth").

=====  ====================================================================================
0      the run completed (Waived and unknown testcases included), ``-h``, ``-l``,
       ``--version``
1      invalid arguments (nvbandwidth's "ERROR: Invalid Arguments" block on standard output);
       an option gpubw cannot honour (``--pair``: one line on standard error); ``-t`` with
       ``-p``; prefixes that match nothing; a value gpubw refuses (``-i 0``); no driver; a
       testcase that failed (nothing runs after it, as nvbandwidth's process ends there)
130    interrupted by SIGINT; 143 by SIGTERM
=====  ====================================================================================

nvbandwidth has no ``--simulate``: ``GPUBW_SIMULATE=h200x2`` (a preset or a system file) runs
on a simulated system instead, and every output then says so in its git version
(``gpubw-0.1.0 (SIMULATED h200x2)``) and the driver version (``... (simulated)``).

Without an MPI launcher it is nvbandwidth's single-node build: the multinode testcases
(indexes 35-47) are left out of ``-l``, of a run of everything and of ``-p`` (by key or index
they can still be asked for: Waived, as in gpubw). Under MPI it is the multinode build.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from gpubw.cli.command import run_command
from gpubw.cli.flavour import Flavour
from gpubw.cli.nvbandwidth_args import ArgError, help_text, parse
from gpubw.model.console import to_stderr

PROG = "gpubw-nvbandwidth"
#: the environment variable that runs on a simulated system (nvbandwidth has no option for it)
SIMULATE_ENV = "GPUBW_SIMULATE"
TWO_SELECTIONS = "You cannot specify both testcase and testcasePrefix options at the same time"
NO_PREFIX_MATCH = "Specified list of testcase prefixes did not match any testcases"
PAIR_REFUSED = (
    "--pair (nvbandwidth v0.10: device-to-device testcases between two GPUs given by UUID) "
    "is not supported: gpubw cannot restrict a run to one pair of GPUs yet; run without "
    "--pair (CUDA_VISIBLE_DEVICES=UUID1,UUID2 keeps only those two GPUs, for every testcase)"
)
PAIRS_IGNORED = (
    "WARNING: --targetNumPairs samples the multinode device-to-device testcases only; it is "
    "ignored in a single-node run"
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
    return _main(args, argv0, command)


def _main(args: list[str], argv0: str, command: bool) -> int:
    try:
        values = parse(args)
    except ArgError as exc:
        return _invalid_arguments(argv0, args, exc)
    as_json = bool(values.get("json")) or values.get("format") == "json"
    if "pair" in values:
        _error(PAIR_REFUSED)
        return 1
    early = _without_a_run(values, as_json)
    if early is not None:
        return early
    bad = _bad_simulation()
    if bad:
        _error(bad)
        return 1
    multinode = _under_mpi()
    try:
        gpubw_args = translate(values, as_json, multinode)
    except _Stop as exc:
        return _stopped(str(exc), as_json)
    warnings = () if multinode or values.get("targetNumPairs", -1) <= 0 else (PAIRS_IGNORED,)
    return run_command(gpubw_args, command, flavour(warnings))


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


def _version_block() -> str:
    from gpubw.version import __version__
    from gpubw.writers.nvbandwidth import git_version_text, version_lines

    return "\n".join(version_lines(git_version_text(__version__, _simulated()))) + "\n"


def _invalid_arguments(argv0: str, args: list[str], exc: ArgError) -> int:
    """nvbandwidth's answer to a command line it cannot parse (plain text on standard
    output even with -j), and gpubw's reason on standard error; exit 1."""
    words = "".join(f"{word} " for word in [argv0, *args])
    _print(f"{_version_block()}ERROR: Invalid Arguments \n{words}:\n\n{help_text()}\n")
    _error(str(exc))
    return 1


def _without_a_run(values: dict[str, Any], as_json: bool) -> int | None:
    """``-h``, ``--version`` and ``-l`` (nothing printed with -j, as nvbandwidth), else None."""
    if not (values.get("help") or values.get("version") or values.get("list")):
        return None
    if as_json:
        return 0
    text = _version_block()
    if values.get("help"):
        text += help_text() + "\n"
    elif not values.get("version"):
        text += testcase_list(_under_mpi())
    _print(text)
    return 0


def _stopped(message: str, as_json: bool) -> int:
    """nvbandwidth stops before any testcase: its version block then the error on standard
    error, or, with -j, the JSON document holding the error; exit 1."""
    if as_json:
        from gpubw.version import __version__
        from gpubw.writers.nvbandwidth import (
            NVBANDWIDTH_VERSION,
            git_version_text,
            jsoncpp_dumps,
        )

        git = git_version_text(__version__, _simulated())
        doc = {"error": message, "git_version": git, "version": NVBANDWIDTH_VERSION}
        _print(jsoncpp_dumps({"nvbandwidth": doc}))
    else:
        _print(_version_block())
        if _rank0():
            to_stderr(message)
    return 1


# -- the testcases of this build ------------------------------------------------------------------


def _under_mpi() -> bool:
    from gpubw.cli.together import launched_with_ranks

    return launched_with_ranks()


def entries(multinode: bool) -> list[Any]:
    """The registry's testcases as this build lists them: every one under MPI; without the
    multinode ones otherwise (nvbandwidth's single-node build has none). Loads them all."""
    from gpubw.runner.ranks import is_multinode
    from gpubw.runner.registry import Registry

    registry = Registry.discover().load()
    return [e for e in registry.entries if multinode or not is_multinode(e)]


def testcase_list(multinode: bool) -> str:
    """``-l`` as nvbandwidth prints it (after the version block)."""
    from gpubw.cli.listing import json_escaped

    lines = ["Index, Name:", "\tDescription", "=" * 23]
    for e in entries(multinode):
        if e.failure is not None:
            text = f"(could not be loaded from {e.plugin}: {e.failure.message})"
        else:
            text = e.description or "(no description)"
        lines += [f"{e.index}, {e.key}:", *("\t" + line for line in text.splitlines()), ""]
    return json_escaped("\n".join(lines) + "\n")


# -- nvbandwidth's command line as gpubw's -------------------------------------------------------


def translate(values: dict[str, Any], as_json: bool, multinode: bool) -> list[str]:
    """gpubw's command line for nvbandwidth's options. Raises :class:`_Stop` where
    nvbandwidth stops before running anything (``-t`` with ``-p``, no prefix match)."""
    fmt = "nvbandwidth-json" if as_json else "nvbandwidth"
    args = ["-q", "--format", fmt]
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
    return args + _selection(values, multinode)


def _selection(values: dict[str, Any], multinode: bool) -> list[str]:
    """``-t`` items as given; ``-p`` expanded over this build's testcases; all of them when
    neither (under MPI gpubw's own "all")."""
    tokens, prefixes = values.get("testcase", []), values.get("testcasePrefixes", [])
    if tokens and prefixes:
        raise _Stop(TWO_SELECTIONS)
    if tokens:
        return ["-t", *tokens]
    if not prefixes and multinode:
        return []
    listed = [e.key for e in entries(multinode)]
    keys = [k for k in listed if any(k.startswith(p) for p in prefixes)] if prefixes else listed
    if not keys:
        raise _Stop(NO_PREFIX_MATCH)
    return ["-t", *keys]


__all__ = ["PROG", "SIMULATE_ENV", "entries", "exit_code", "flavour", "main", "testcase_list"]
