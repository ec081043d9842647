"""``gpubw plot REPORT.json [OTHER.json] -o FILE [-t ID... | -p PREFIX...] [--dpi N]``: the
command line of the plot sub-command; the drawing is :mod:`gpubw.tools.plot`'s.

Cut out of :mod:`gpubw.tools.plot` along the seam between reading a command line and
drawing. :mod:`gpubw.tools.plot` is imported when the command runs: matplotlib, an optional
dependency (``pip install 'gpubw[plot]'``), is missing then is a usage error that says how to
install it, and ``gpubw completion`` reads this parser without either.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import NoReturn

from gpubw.cli.argtypes import MAX_DPI, dpi_int
from gpubw.model.console import to_stderr
from gpubw.model.errors import GpubwError, UsageError

#: what ``gpubw plot`` says when matplotlib is missing
_HINT = "gpubw plot needs matplotlib: pip install 'gpubw[plot]'"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"gpubw plot: {message}")


def plot_parser() -> argparse.ArgumentParser:
    """``gpubw plot``'s parser."""
    p = _Parser(
        prog="gpubw plot",
        description="Draw a report, one figure per testcase; a second report is overlaid.",
        epilog="-o FILE.pdf: one page per figure. -o FILE.png (svg, ...): FILE-<testcase>.png "
        "per figure (just FILE.png for a single figure); the names written are printed.",
    )
    p.add_argument("report", help="a gpubw JSON report (gpubw -j -o FILE) or nvbandwidth -j output")
    p.add_argument("other", nargs="?", default=None, help="a second report, drawn over the first")
    p.add_argument("-o", "--output", required=True, help="plot.pdf, or plot.png (one per figure)")
    p.add_argument(
        "-t",
        "--testcase",
        nargs="+",
        action="extend",
        default=[],
        metavar="ID",
        help="only these testcases, by key or index, as gpubw -t (repeatable)",
    )
    p.add_argument(
        "-p",
        "--testcase-prefixes",
        "--testcasePrefixes",
        dest="prefixes",
        nargs="+",
        action="extend",
        default=[],
        metavar="PREFIX",
        help="only testcases whose key starts with PREFIX, as gpubw -p (repeatable)",
    )
    p.add_argument(
        "--dpi", type=dpi_int, default=120, help=f"resolution, 1..{MAX_DPI} (default 120)"
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``gpubw plot``; returns 0. The files written are printed when their names were
    derived from -o; notes on what is not drawn (testcases that did not pass, NaN or zero
    cells) go to stderr, with the run's label when there are two."""
    try:
        from gpubw.tools import plot
    except ModuleNotFoundError as exc:
        raise _missing(exc) from None
    try:
        args = plot_parser().parse_args(argv)
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    paths = [args.report, *([args.other] if args.other else [])]
    try:
        written, notes = plot.draw(paths, args.output, args.testcase, args.prefixes, args.dpi)
    except ModuleNotFoundError as exc:
        if _matplotlib(exc):
            raise UsageError(_HINT) from None
        raise
    if len(written) > 1 and written[0] != written[-1]:
        print("\n".join(written))  # the names were derived from -o: say what they are
    for note in notes:
        to_stderr(f"gpubw plot: {note}")
    return 0


def _matplotlib(exc: ModuleNotFoundError) -> bool:
    return (exc.name or "").split(".")[0] == "matplotlib"


def _missing(exc: ModuleNotFoundError) -> GpubwError:
    """The error of a plot command that cannot even import its drawing."""
    if _matplotlib(exc):
        return UsageError(_HINT)
    return GpubwError(f"the plot command is not available: {exc}")
