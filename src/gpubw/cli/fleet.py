"""``gpubw fleet``'s command line: the paths, the rule (``--threshold``, ``--z``,
``--min-nodes``), the output (``--format``, ``-o``, ``-v``) and the exit code. The work is
:mod:`gpubw.fleet`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpubw.cli.argtypes import fleet_threshold, min_nodes_int, robust_z, since
from gpubw.cli.parsing import Parser
from gpubw.model.errors import GpubwError, UsageError

if TYPE_CHECKING:
    from gpubw.fleet.analysis import FleetReport
    from gpubw.fleet.stats import Settings

PROG = "gpubw fleet"


def fleet_parser() -> argparse.ArgumentParser:
    """``gpubw fleet``'s parser."""
    from gpubw.fleet.formats import FORMATTERS

    p = Parser(
        prog=PROG,
        description=(
            "Judge many nodes' reports against their fleet: per comparable figure the "
            "fleet's median and MAD, and the nodes, GPUs, pairs and links below it."
        ),
        epilog=(
            "PATH: gpubw JSON reports, nvbandwidth -j output (v0.8, v0.10), or folders of "
            "them (*.json, recursively). Exit status as gpubw check: 0 every node within its "
            "fleet, 3 findings, 2 bad input, 1 an error (-o cannot be written)."
        ),
    )
    p.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="report files or folders (none: the newest report of each node in --db)",
    )
    p.add_argument(
        "--threshold",
        type=fleet_threshold,
        default=0.10,
        help="a figure more than this under the fleet median is low: 10%% or 0.1 (default 10%%)",
    )
    p.add_argument(
        "--z",
        type=robust_z,
        default=-4.0,
        help="a figure whose robust z is below this is low (default -4)",
    )
    p.add_argument(
        "--min-nodes",
        type=min_nodes_int,
        default=5,
        help="nodes a fleet (one SKU, the same options) needs to be judged (default 5)",
    )
    p.add_argument("--format", choices=tuple(FORMATTERS), default="text", help="default text")
    p.add_argument(
        "-o", "--output", default=None, metavar="FILE", help="write to FILE (- : stdout)"
    )
    p.add_argument(
        "-v", "--verbose", action="store_true", help="text: every finding and its figures"
    )
    _history_options(p)
    return p


def _history_options(p: argparse.ArgumentParser) -> None:
    """--db and --since: the history (:mod:`gpubw.fleet.history`)."""
    p.add_argument(
        "--db",
        default=None,
        metavar="FILE",
        help="keep every report's cells in this SQLite file (made if absent; adding a "
        "report twice is a no-op); without PATH, judge the newest report of each node in it",
    )
    p.add_argument(
        "--since",
        type=since,
        default=None,
        metavar="SPAN",
        help="with --db: the history's window, e.g. 12h, 30d, 2w; each GPU's trend, and a GPU "
        "whose figure fell more than --threshold under its own median in it is flagged",
    )


def fleet_main(argv: Sequence[str]) -> int:
    """``gpubw fleet PATH...``: 3 if a finding stands, else 0."""
    from gpubw.fleet.formats import FORMATTERS, FormatOptions
    from gpubw.fleet.stats import Settings
    from gpubw.model.console import printable
    from gpubw.model.outfile import OutputTarget

    a = fleet_parser().parse_args(list(argv))
    target = OutputTarget(a.output, label=f"{PROG}: -o").check() if a.output else None
    if target is not None and not target.is_stdout:
        _refuse_inputs(a.output, a.paths, a.db)
    settings = Settings(threshold=a.threshold, z=a.z, min_nodes=a.min_nodes)
    report = _analyse(a, settings)
    out = FORMATTERS[a.format](report, FormatOptions(verbose=a.verbose))
    if a.format == "text":  # host names, paths and device names come from the files
        out = "\n".join(printable(line) for line in out.split("\n"))
    if target is None or target.is_stdout:
        print(out, end="")
        return report.exit_code
    try:
        with target.open("w") as f:
            f.write(out)
    except OSError as exc:
        raise GpubwError(f"{PROG}: -o {a.output}: {exc.strerror or exc}") from None
    return report.exit_code


def _refuse_inputs(output: str, paths: Sequence[str], db: str | None) -> None:
    from gpubw.model.infile import refuse_input_as_output

    inputs: dict[str, str | None] = {f"PATH {p}": p for p in paths}
    inputs["--db"] = db
    refuse_input_as_output(output, inputs, label=f"{PROG}: -o", what="the fleet's result")


def _analyse(a: argparse.Namespace, settings: Settings) -> FleetReport:
    """The fleet of the paths, or of the history (--db) without them; with --since, each
    GPU's trend. UsageError for a command line that names nothing to judge."""
    from gpubw.fleet.analysis import analyse

    if a.format == "html":  # before any report is read: matplotlib draws the page
        from gpubw.fleet.html import require_matplotlib

        require_matplotlib()
    if a.since is not None and a.db is None:
        raise UsageError(f"{PROG}: --since needs --db FILE (the history it looks back in)")
    if a.db is None:
        if not a.paths:
            raise UsageError(f"{PROG}: give report files or folders (PATH), or --db FILE")
        return analyse(a.paths, settings)
    from gpubw.fleet.kept import Window, analyse_kept

    return analyse_kept(a.paths, settings, Window(a.db, a.since))
