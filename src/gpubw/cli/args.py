"""The ``gpubw`` command's arguments: the parser (nvbandwidth's options, plus output files,
formats and simulation), its help and epilog, and the mapping of library parameters to flags.

Split out of the command's dispatcher (:mod:`gpubw.cli.command`, which must stay light for
``gpubw -l``) to keep modules small; this module never imports it. Nothing here imports CUDA
at import time.
"""

from __future__ import annotations

import argparse
import re
import textwrap
from collections.abc import Callable
from typing import Any

from gpubw.cli.accept import JUDGE_HELP, add_run_options
from gpubw.cli.argtypes import (
    gate_timeout_seconds,
    loops_int,
    sample_pairs,
    samples_int,
    seconds,
    seed_int,
)
from gpubw.cli.parsing import GIVEN, Parser
from gpubw.cli.parsing import Once as _Once
from gpubw.model.errors import UsageError
from gpubw.model.options import (
    DEFAULT_LOOPS,
    DEFAULT_SAMPLES,
    DEFAULT_WORLD_TIMEOUT_S,
    MAX_GATE_TIMEOUT_S,
    MAX_LOOPS,
    MAX_SAMPLES,
    MAX_WORLD_TIMEOUT_S,
    MIN_WORLD_TIMEOUT_S,
    RunOptions,
)
from gpubw.version import __version__

PROG = "gpubw"
DEFAULT_FORMAT = "text"
DEFAULT_GATE_TIMEOUT_S = RunOptions().gate_timeout_s
#: suggested when there is no driver
SUGGESTED_PRESET = "h200x2"

EXIT_CODES = """\
exit codes:
  0    every selected testcase Passed or was Waived (also -h, -l)
  1    a testcase Error or Not Found, a prefix that matched nothing, no NVIDIA driver
  2    usage error (bad option value, -t with -p, unknown format, unwritable -o, bad --simulate,
       bad expectations file)
  3    ran fine, below expectation: a cell failed --expect / --outlier-pct (gpubw check and
       gpubw compare too: a cell slower than the baseline)
  130  interrupted by SIGINT (Ctrl-C); 143 by SIGTERM
  141  standard output's reader left (gpubw | head): stopped quietly, as SIGPIPE would

commands (gpubw COMMAND -h for each):
  check        judge a saved report against expectations (exit 3: below expectation)
  expect-from  an expectations file from a known-good report
  info         devices, PCIe/NVLink/ECC/clock facts, peer links
  compare      two reports cell by cell: gpubw compare CANDIDATE BASELINE [--size 1GiB]
               [--fail-on low|high|both] [--format json] (exit 3: a cell regressed)
  plot         figures of a report, a second one overlaid: gpubw plot REPORT.json
               [OTHER.json] -o FILE.pdf (needs: pip install 'gpubw[plot]')
  completion   a shell completion script: gpubw completion bash|zsh|fish
"""
EXIT_CODES += "\n" + JUDGE_HELP


# -- argument parsing ----------------------------------------------------------------------
#: the sub-commands, in the order the usage line names them (:data:`gpubw.cli.command.COMMANDS`
#: runs them)
SUBCOMMANDS = ("check", "expect-from", "info", "compare", "plot", "fleet", "completion")


def given_flags(ns: argparse.Namespace) -> set[str]:
    """The destinations of the options given on the command line (also those given their
    default value), as :class:`_Once` noted them while parsing."""
    return set(getattr(ns, GIVEN, set()))


#: options whose value is a number or a size: "-b -1GiB" hands them "-1GiB" (so the message
#: names the bad value) instead of argparse's "expected one argument"
_NUMERIC_OPTIONS = frozenset(
    {
        "-b",
        "--buffer-size",
        "--bufferSize",
        "-i",
        "--samples",
        "--testSamples",
        "--loop-count",
        "--loopCount",
        "--gate-timeout",
        "--outlier-pct",
        "--cv-threshold",
    }
)
_NEGATIVE = re.compile(r"-[0-9.]")


def attach_negative_values(argv: list[str]) -> list[str]:
    """``-b -1GiB`` -> ``-b-1GiB``, ``--samples -2`` -> ``--samples=-2`` (up to ``--``)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            return out + argv[i:]
        if token in _NUMERIC_OPTIONS and i + 1 < len(argv) and _NEGATIVE.match(argv[i + 1]):
            glue = "=" if token.startswith("--") else ""
            out.append(f"{token}{glue}{argv[i + 1]}")
            i += 2
            continue
        out.append(token)
        i += 1
    return out


class _MainParser(Parser):
    """The main command's parser: its help ends with the options installed writers declare."""

    def format_help(self) -> str:
        return super().format_help() + "".join(f"{line}\n" for line in writer_options_help())


def writer_options_help() -> list[str]:
    """``gpubw -h``'s lines on the options writers declare (every writer is loaded)."""
    from gpubw.runner.writer_registry import Writers
    from gpubw.writers import writer_options

    writers = Writers.discover()
    lines: list[str] = []
    for name in writers.names:
        for o in writer_options(writers.get(name)):
            value = o.metavar or ("|".join(o.choices) if o.choices else "VALUE")
            text = f"{o.flag} {value}  (--format {name}) {o.help}"
            lines += textwrap.wrap(text, 96, initial_indent="  ", subsequent_indent="      ")
    return ["", "options of output formats:", *lines] if lines else []


def parse_command_line(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The main command line parsed, and what it leaves for the options of the writer
    ``--format`` names (:func:`writer_settings`)."""
    return build_parser().parse_known_args(attach_negative_values(argv))


def writer_settings(cls: Any, rest: list[str]) -> dict[str, str | None]:
    """The values of the options writer class ``cls`` declares, read from ``rest`` (what
    the main parser left); anything else there is a usage error, worded as argparse's."""
    from gpubw.writers import writer_options

    options = writer_options(cls)
    p = Parser(prog=PROG, add_help=False)
    for o in options:
        p.add_argument(
            o.flag,
            dest=o.dest,
            choices=o.choices or None,
            default=o.default,
            metavar=o.metavar,
            action=_Once,
        )
    ns, unknown = p.parse_known_args(rest)
    if unknown:
        p.error(f"unrecognized arguments: {' '.join(unknown)}")
    return {o.dest: getattr(ns, o.dest) for o in options}


def build_parser() -> argparse.ArgumentParser:
    """The main command's parser; its usage line names the sub-commands too."""
    p = _MainParser(
        prog=PROG,
        description=(
            "Measure how fast bytes move on NVIDIA GPU systems (host<->device, "
            "device<->device, device memory). Options follow nvbandwidth's."
        ),
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = p.add_argument
    _add_selection(add)
    _add_measurement(add)
    _add_output(add)
    add_run_options(p)
    _add_rank_options(add)
    _add_last(add)
    options = p.format_usage().removeprefix("usage: ").rstrip()
    commands = f"{PROG} {{{','.join(SUBCOMMANDS)}}} ...   ({PROG} COMMAND -h)"
    p.usage = f"{options}\n       {commands}"
    return p


def _add_selection(add: Callable[..., Any]) -> None:
    """What to run: the buffer sizes, -l, the testcases by key, index or prefix."""
    add(
        "-b",
        "--buffer-size",
        "--bufferSize",
        dest="buffer_size",
        metavar="SIZE",
        action=_Once,
        help="memcpy buffer size: a number is MiB (default 512); units B, KiB, MiB, GiB, KB, "
        "MB, GB; a list 64,512,1GiB; a range START:STOP:xFACTOR, e.g. 1MiB:4GiB:x2",
    )
    add("-l", "--list", action="store_true", help="list available testcases and exit")
    add(
        "-t",
        "--testcase",
        dest="testcase",
        metavar="ID",
        nargs="+",
        action="extend",
        default=[],
        help="testcase(s) to run, by key or index (repeatable); without -t or -p the default "
        "suite runs: every testcase but the pageable ones (57, 58), which run only when named",
    )
    add(
        "-p",
        "--testcase-prefixes",
        "--testcasePrefixes",
        dest="prefixes",
        metavar="PREFIX",
        nargs="+",
        action="extend",
        default=[],
        help="testcase(s) to run, by key prefix (repeatable)",
    )


def _add_measurement(add: Callable[..., Any]) -> None:
    """How to measure: verbosity, verification, affinity, samples, the statistic."""
    add("-v", "--verbose", action="store_true", help="verbose output (per-sample figures)")
    add(
        "--trace",
        action="store_true",
        help="record where the run's time goes (allocation, pinning, pattern fill, warm-up, "
        "timed copies, verification, kernel load, NVML, teardown) into the JSON report's "
        "trace; benchmarks/overhead.py reads it",
    )
    add(
        "-s",
        "--skip-verification",
        "--skipVerification",
        dest="skip_verification",
        action="store_true",
        help="skip data verification after copies",
    )
    add(
        "-d",
        "--disable-affinity",
        "--disableAffinity",
        dest="disable_affinity",
        action="store_true",
        help="disable automatic CPU affinity control",
    )
    add(
        "-i",
        "--samples",
        "--testSamples",
        dest="samples",
        metavar="N",
        type=samples_int,
        action=_Once,
        default=DEFAULT_SAMPLES,
        help=f"samples (iterations) of each measurement, 1..{MAX_SAMPLES} (default "
        f"{DEFAULT_SAMPLES})",
    )
    add(
        "-m",
        "--use-mean",
        "--useMean",
        dest="use_mean",
        action="store_true",
        help="use the mean instead of the median of the samples",
    )


def _add_output(add: Callable[..., Any]) -> None:
    """Where the report goes and in what format, the system, the loops and the gate."""
    add("-j", "--json", action="store_true", help="JSON output (same as --format json)")
    add(
        "--loop-count",
        "--loopCount",
        dest="loops",
        metavar="N",
        type=loops_int,
        action=_Once,
        default=DEFAULT_LOOPS,
        help=f"copies per sample, 1..{MAX_LOOPS} (default {DEFAULT_LOOPS})",
    )
    add(
        "--perf-formatter",
        "--perfFormatter",
        dest="perf_formatter",
        action="store_true",
        help=argparse.SUPPRESS,
    )
    add(
        "-o",
        "--output",
        metavar="FILE",
        action=_Once,
        help="write the report to FILE (atomically; a device or FIFO in place; - is stdout)",
    )
    add(
        "--format",
        metavar="NAME",
        action=_Once,
        help="report format: any installed writer (text, json, ...; default text)",
    )
    add(
        "--simulate",
        metavar="NAME|FILE",
        action=_Once,
        help=f"run on a simulated system: a preset name (e.g. {SUGGESTED_PRESET}) or a JSON "
        "system file; every output is marked as simulated",
    )
    add(
        "--gate-timeout",
        dest="gate_timeout",
        metavar="SECONDS",
        type=gate_timeout_seconds,
        action=_Once,
        default=DEFAULT_GATE_TIMEOUT_S,
        help="longest a stream may wait at the spin gate, at most "
        f"{MAX_GATE_TIMEOUT_S:g} (default {DEFAULT_GATE_TIMEOUT_S:g})",
    )


def _add_last(add: Callable[..., Any]) -> None:
    """Progress on stderr, and the version."""
    add(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress on stderr (by default a progress line on a terminal, else one line "
        "per finished testcase)",
    )
    add("--version", action="version", version=f"{PROG} {__version__}")


def _add_rank_options(add: Callable[..., Any]) -> None:
    """The options of multi-rank runs and pair sampling."""
    add(
        "--world-timeout",
        dest="world_timeout",
        metavar="SECONDS",
        type=seconds(MAX_WORLD_TIMEOUT_S, MIN_WORLD_TIMEOUT_S),
        action=_Once,
        default=DEFAULT_WORLD_TIMEOUT_S,
        help="longest a collective step may wait for the other ranks (MPI, or a simulated "
        f"rack), {MIN_WORLD_TIMEOUT_S:g} to {MAX_WORLD_TIMEOUT_S:g} (default "
        f"{DEFAULT_WORLD_TIMEOUT_S:g}); inside a sample the other ranks' own copy bounds "
        "(--gate-timeout plus 120 s) come on top; while "
        "a host's first rank runs a single-node testcase, its other ranks wait that "
        "testcase's own bounds plus this",
    )
    add(
        "--sample-pairs",
        dest="sample_pairs",
        metavar="K|FRACTION",
        type=sample_pairs,
        action=_Once,
        help="measure only K cells (or a fraction, e.g. 0.1 or 10%%) of every N x N testcase, "
        "every device at least once as source and destination, and the same share of the "
        "pairs of the multinode 1 x N column testcases (at least one column per NVLink "
        "domain); the others are null",
    )
    add(
        "--seed",
        metavar="N",
        type=seed_int,
        action=_Once,
        default=0,
        help="seed of --sample-pairs (the same seed measures the same cells; default 0)",
    )
    add(
        "--handle-type",
        dest="handle_type",
        choices=("auto", "fabric", "posix-fd", "ipc"),
        action=_Once,
        default="auto",
        help="how MPI ranks share device memory: fabric handles (across nodes; needs IMEX), "
        "POSIX file descriptors or legacy CUDA IPC (one host); auto (default) takes the best "
        "that every rank can use",
    )


# -- library parameters -> flags (the library never quotes flags; see UsageError.param) ---
#: the library parameter a UsageError names -> the flag that sets it
PARAM_FLAGS: dict[str, str] = {
    "sizes": "-b/--buffer-size",
    "testcases": "-t/--testcase",
    "testcase_prefixes": "-p/--testcase-prefixes",
    "testcase_selection": "-t/--testcase with -p/--testcase-prefixes",
    "samples": "-i/--samples",
    "loops": "--loop-count",
    "sample_pairs": "--sample-pairs",
    "simulate": "--simulate",
}


def usage_message(exc: UsageError) -> str:
    """A UsageError's message, led by the flag of the parameter it names (if any)."""
    flag = PARAM_FLAGS.get(exc.param or "")
    return f"{flag}: {exc}" if flag else str(exc)
