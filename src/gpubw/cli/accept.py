"""The acceptance sub-commands and options of the ``gpubw`` command (parsing and printing
only; the work is in :mod:`gpubw.acceptance.node`):

* ``gpubw check REPORT [--expect FILE|builtin] [--outlier-pct P] [--cv-threshold C] [-j]
  [-o FILE]`` -- judge a saved report; exit 3 when a cell is below expectation, else 0;
* ``gpubw expect-from REPORT [--tolerance 5%] [-o FILE]`` -- an expectations file from a
  known-good run (each floor the worst cell of its group, less the tolerance);
* ``gpubw info [--simulate NAME|FILE] [-j] [-o FILE]`` -- devices, PCI bus ids, NVML facts
  and the peer-access / link matrix (like ``nvidia-smi topo -m``).

The run's own options (``--expect``, ``--outlier-pct``, ``--cv-threshold``,
``--host-huge-pages``) are added to the main parser by :func:`add_run_options`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any

from gpubw.cli.argtypes import cv_threshold, outlier_pct, tolerance
from gpubw.cli.parsing import Once, Parser
from gpubw.model.errors import UsageError
from gpubw.model.options import DEFAULT_CV_THRESHOLD, DEFAULT_OUTLIER_PCT

if TYPE_CHECKING:
    from gpubw.acceptance.node import NodeInfo

#: the default of --outlier-pct and --cv-threshold when not given (told apart from "off")
UNSET: Any = object()
JUDGE_HELP = """\
node acceptance (see README, "Is this node healthy?"):
  gpubw --expect builtin -j -o run.json  judge every cell (exit 3: ran fine, below expectation)
  gpubw check run.json --expect FILE     judge a saved report
  gpubw expect-from good.json --tolerance 5% -o FILE   expectations from a known-good run
  gpubw info                             devices, PCIe/NVLink/ECC/clock facts, peer links
"""


def add_judge_options(p: argparse.ArgumentParser, *, run: bool) -> None:
    what = "judge every cell of the run" if run else "judge the report's cells"
    p.add_argument(
        "--expect",
        action=Once,
        metavar="FILE|builtin",
        help=f"{what} against an expectations file (gpubw-expect-v1 JSON) or the built-in "
        "expectations for the devices (builtin); a failed cell exits 3",
    )
    p.add_argument(
        "--outlier-pct",
        action=Once,
        dest="outlier_pct",
        metavar="P",
        type=outlier_pct,
        default=UNSET,
        help=f"a cell below P %% of the median of its comparable peers fails (default "
        f"{DEFAULT_OUTLIER_PCT:g}; off to disable)"
        + (
            "; given without --expect, judges with this rule and the noise rule only" if run else ""
        ),
    )
    p.add_argument(
        "--cv-threshold",
        action=Once,
        dest="cv_threshold",
        metavar="C",
        type=cv_threshold,
        default=UNSET,
        help=f"a cell whose samples' coefficient of variation exceeds C (e.g. 10%% or 0.1; "
        f"default {DEFAULT_CV_THRESHOLD * 100:.0f}%%; off to disable) is flagged noisy (a warning)",
    )


def add_run_options(p: argparse.ArgumentParser) -> None:
    """The run's acceptance options (on the main parser), the node-check ones too
    (:mod:`gpubw.cli.node_options`)."""
    from gpubw.cli.node_options import add_node_options

    add_judge_options(p, run=True)
    add_node_options(p)
    p.add_argument(
        "--host-huge-pages",
        dest="host_huge_pages",
        action="store_true",
        help="host buffers from huge pages (mmap MAP_HUGETLB, registered with the driver); "
        "an error when /proc/meminfo shows too few HugePages_Free",
    )


def judging(ns: argparse.Namespace) -> bool:
    """Whether a run judges its cells: --expect, --outlier-pct or --cv-threshold given.
    Sets the defaults of the two thresholds that were not given."""
    given = ns.expect is not None or ns.outlier_pct is not UNSET or ns.cv_threshold is not UNSET
    if ns.outlier_pct is UNSET:
        ns.outlier_pct = DEFAULT_OUTLIER_PCT
    if ns.cv_threshold is UNSET:
        ns.cv_threshold = DEFAULT_CV_THRESHOLD
    return given


@contextmanager
def _out(path: str | None) -> Iterator[IO[str]]:
    if path is None or path == "-":
        yield sys.stdout
        sys.stdout.flush()
        return
    from gpubw.model.outfile import OutputTarget

    with OutputTarget(path).check().open("w") as f:
        yield f


def _not_an_input(output: str | None, inputs: dict[str, str | None]) -> None:
    """A usage error when ``-o`` names a file the command reads: it would overwrite it."""
    from gpubw.model.infile import refuse_input_as_output

    refuse_input_as_output(output, inputs, what="the output")


def _report(path: str) -> Any:
    """The Report in ``path``: gpubw's JSON report or nvbandwidth's own ``-j`` output."""
    from gpubw.model.errors import GpubwError
    from gpubw.model.report_io import read_report

    try:
        report = read_report(path)
    except UsageError:
        raise
    except GpubwError as exc:  # not a gpubw report: the user named the wrong file
        raise UsageError(str(exc)) from None
    _refuse_bad_figures(path, report)
    return report


def _displayed(value: float, unit: str) -> str:
    """A figure in the unit people read (GB/s, ns)."""
    from gpubw.model.results import LATENCY

    return f"{value * 1e9:g} ns" if unit == LATENCY else f"{value / 1e9:g} GB/s"


def _refuse_bad_figures(path: str, report: Any) -> None:
    """A Passed testcase's cell that is NaN, infinite, zero or negative is no measurement:
    judging it (every rule passes NaN) or making a floor of it would mislead, so it is a
    usage error naming the cell (``gpubw compare`` flags such cells INVALID instead)."""
    from gpubw.model.nvbandwidth_check import bad_figure
    from gpubw.model.results import Status

    for t in report.testcases:
        if t.status is not Status.PASSED:
            continue
        for m in t.matrices:
            for r, row in enumerate(m.values):
                for c, v in enumerate(row):
                    if v is not None and bad_figure(v):
                        shown = _displayed(v, m.unit)
                        raise UsageError(
                            f"{path}: testcase {t.key!r}, matrix {m.key!r}, cell "
                            f"[{m.row_labels[r]}][{m.column_labels[c]}] is {shown}; a figure "
                            "must be a finite number > 0 (or N/A)"
                        )


# -- gpubw check -----------------------------------------------------------------------------
def check_parser() -> argparse.ArgumentParser:
    """``gpubw check``'s parser."""
    p = Parser(
        prog="gpubw check",
        description="Judge a saved gpubw JSON report (or nvbandwidth's -j output): "
        "floors/ceilings from --expect, the "
        "peer-outlier rule and the noise rule. Exit 0: every cell as expected; 3: below "
        "expectation; 1: the report itself is not a complete, passing run (incomplete, "
        "interrupted, a testcase that did not pass: it beats 3); 2: a usage error (bad "
        "report or expectations file).",
    )
    p.add_argument(
        "report", help="a gpubw JSON report (gpubw -j -o FILE) or nvbandwidth's -j output"
    )
    add_judge_options(p, run=False)
    p.add_argument("-j", "--json", action="store_true", help="the verdicts as JSON")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE (atomically)")
    return p


def check_main(argv: list[str]) -> int:
    from gpubw.acceptance import node as acceptance
    from gpubw.acceptance.expect import failed
    from gpubw.model.console import printable_lines
    from gpubw.writers.text import verdict_summary

    p = check_parser()
    a = p.parse_args(argv)
    judging(a)
    report = _report(a.report)
    exp = acceptance.load(a.expect, report)
    if exp is not None:
        acceptance.refuse_unjudged(report, exp, a.expect)
    judged = acceptance.judge(report, exp, a.outlier_pct, a.cv_threshold)
    problem = report_problem(judged)
    code = 1 if problem else 3 if failed(judged.verdicts) else 0
    _not_an_input(a.output, {"the report": a.report, "--expect": a.expect})
    with _out(a.output) as f:
        if a.json:
            from gpubw.model import schemas
            from gpubw.model.report_io import json_safe

            doc = {
                "schema_version": schemas.VERSIONS[schemas.CHECK],
                "report": a.report,
                "simulated": judged.simulated,
                "expectations": judged.expectations,
                "verdicts": [v.as_dict() for v in judged.verdicts],
                "report_problem": problem,
                "exit_code": code,
            }
            f.write(json.dumps(json_safe(doc), indent=2) + "\n")
        else:
            head = [f"report: {a.report} ({judged.host or '?'}, {judged.started or '?'})"]
            if judged.simulated:
                head.insert(0, f"SIMULATED SYSTEM {judged.system_name}: modelled figures")
            if problem:
                head.append(f"NOT ACCEPTED: {problem}; exit code 1")
            f.write("\n".join(printable_lines([*head, *verdict_summary(judged)])) + "\n")
    return code


def report_problem(report: Any) -> str:
    """Why a report cannot pass however fast its cells are ("" if it can): the run's own
    error (a partial report says it is incomplete), a signal that stopped it, a testcase
    that did not pass."""
    if report.error:
        return f"the report says the run did not complete: {report.error}"
    if not report.testcases:
        return "the report holds no testcase: nothing was judged"
    if report.signal:
        return f"the run was interrupted by {report.signal}"
    bad = [t for t in report.testcases if not t.ok]
    if bad:
        names = ", ".join(f"{t.key} ({t.status.value})" for t in bad[:3])
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        return f"{len(bad)} testcase(s) did not pass: {names}{more}"
    return ""


# -- gpubw expect-from -----------------------------------------------------------------------
def expect_from_parser() -> argparse.ArgumentParser:
    """``gpubw expect-from``'s parser."""
    p = Parser(
        prog="gpubw expect-from",
        description="Make an expectations file (gpubw-expect-v1) from known-good reports: "
        "per testcase, matrix, size and link type, a floor at the worst cell of the run "
        "(a ceiling for latency), widened by --tolerance. Given several reports (a fleet's "
        "good runs of one kind of node), each limit is the median of the runs' limits.",
    )
    p.add_argument(
        "report",
        nargs="+",
        help="gpubw JSON reports of known-good runs, or nvbandwidth's -j output (one or more)",
    )
    p.add_argument(
        "--tolerance",
        type=tolerance,
        default=0.05,
        metavar="T",
        help="how far below the known-good figures a cell may be, e.g. 5%% or 0.05 (default 5%%)",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE (atomically)")
    return p


def expect_from_main(argv: list[str]) -> int:
    from gpubw.acceptance.expect import expect_from_reports
    from gpubw.acceptance.node import peer_links

    p = expect_from_parser()
    a = p.parse_args(argv)
    reports = [_report(path) for path in a.report]
    doc = expect_from_reports(reports, a.tolerance, peer_links=[peer_links(r) for r in reports])
    if not doc["rules"]:
        given = ", ".join(a.report)
        raise UsageError(f"{given}: no Passed testcase to make expectations from")
    for path in a.report:
        _not_an_input(a.output, {"the report": path})
    with _out(a.output) as f:
        f.write(json.dumps(doc, indent=2) + "\n")
    return 0


# -- gpubw info ------------------------------------------------------------------------------
def info_parser() -> argparse.ArgumentParser:
    """``gpubw info``'s parser."""
    p = Parser(
        prog="gpubw info",
        description="Devices, PCI bus ids, NVML facts (PCIe generation and width, NVLink, "
        "ECC, persistence, MIG, clocks and their reasons, processes) and the peer-access / "
        "link matrix. Nothing is measured.",
    )
    p.add_argument("--simulate", metavar="NAME|FILE", help="a simulated system")
    p.add_argument("-j", "--json", action="store_true", help="JSON output")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE (atomically)")
    return p


def info_main(argv: list[str]) -> int:
    from gpubw.acceptance import node as acceptance
    from gpubw.api import system_opener
    from gpubw.model.options import RunOptions

    p = info_parser()
    a = p.parse_args(argv)
    try:
        opener = system_opener(a.simulate)
    except UsageError as exc:
        raise UsageError(f"--simulate: {exc}") from None
    system = opener(RunOptions())
    try:
        node = acceptance.info(system)
    finally:
        system.close()
    with _out(a.output) as f:
        if a.json:
            f.write(json.dumps(acceptance.info_to_dict(node), indent=2) + "\n")
        else:
            f.write("\n".join(info_lines(node)) + "\n")
    return 0


def info_lines(node: NodeInfo) -> list[str]:
    """``gpubw info`` as text (control characters in names escaped): the devices, their
    NVML facts and the peer links. Moved here from :mod:`gpubw.acceptance.node`, which
    gathers the facts: this module prints them."""
    from gpubw.model.console import printable_lines
    from gpubw.writers import device_pci_short
    from gpubw.writers.node_summary import confidential_compute_line
    from gpubw.writers.text import device_facts_lines

    out = []
    if node.simulated:
        out.append(f"SIMULATED SYSTEM {node.system_name or 'model'}: these facts are modelled")
    v = node.versions
    out.append(f"Driver Version: {v.get('driver', 'unknown')}; CUDA Driver Version: "
               f"{v.get('cuda_driver', 'unknown')}")  # fmt: skip
    if not node.facts.available:
        out.append(f"NVML: not available ({node.facts.reason})")
    out.append(confidential_compute_line(node.facts.confidential_compute))
    out.append("")
    by_ordinal = {d["ordinal"]: d for d in node.devices}
    for d in node.devices:
        out.append(f"Device {d['ordinal']}: {d['name']} ({device_pci_short(d)}, "
                   f"{d.get('pci_bus_id', '?')})")  # fmt: skip
        out += device_facts_lines(d)  # (an info record has no end-of-run facts)
    n = len(node.devices)
    out += ["", "Peer access and links (row: the GPU that accesses; column: whose memory):"]
    w = max(6, *(len(node.links.get((a, b), "")) + 2 for a in range(n) for b in range(n)))
    out.append(" " * 6 + "".join(f"{'GPU' + str(b):>{w}}" for b in by_ordinal))
    for a in by_ordinal:
        row = "".join(f"{node.links.get((a, b), '?'):>{w}}" for b in by_ordinal)
        out.append(f"{'GPU' + str(a):<6}{row}")
    out += ["", "X = itself; NV<n> = NVLink, n links active; PCIe = peer access over PCIe; "
            "- = no peer access"]  # fmt: skip
    if node.twin is not None:
        out += ["", *twin_lines(node.twin)]
    if node.simulated:
        out.append(f"SIMULATED SYSTEM {node.system_name or 'model'}: these facts are modelled")
    return printable_lines(out)


def _gb(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e9:.2f}"


def _factor(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def twin_lines(twin: dict[str, Any]) -> list[str]:
    """What a twin inferred from its report (``gpubw info --simulate REPORT``), in GB/s."""
    out = [f"Twin of {twin['source']} ({twin['format']}, {twin['measured_cells']} measured "
           "figures); inferred (GB/s):"]  # fmt: skip
    for h in twin["host_links"]:
        out.append(
            f"  GPU {h['device']} host link: H2D CE {_gb(h['h2d_ce'])} SM {_gb(h['h2d_sm'])}, "
            f"D2H CE {_gb(h['d2h_ce'])} SM {_gb(h['d2h_sm'])}; both ways x"
            f"{_factor(h['h2d_bidirectional_factor'])} H2D, x{_factor(h['bidirectional_factor'])}"
            f" D2H, x{_factor(h['sm_load_factor'])} SM"
        )
    for p in twin["peers"]:
        out.append(f"  peer {p['from']} -> {p['to']}: CE {_gb(p['ce'])} SM {_gb(p['sm'])}")
    if twin["peers"]:
        out.append(f"  peer links both ways x{_factor(twin['peer_bidirectional_factor'])}, "
                   f"SM loads x{_factor(twin['peer_sm_load_factor'])}")  # fmt: skip
    local = twin["local_copy"]
    out.append(
        f"  local copy: CE {_gb(local['ce'])} SM {_gb(local['sm'])} TMA "
        f"{_gb(local['tma'])}; read {_gb(local['read'])} write {_gb(local['write'])}"
    )
    out.append(
        f"  host memory: read {_gb(twin['host_memory_bandwidth'])}, write "
        f"{_gb(twin['host_memory_write_bandwidth'])} (- = no shared limit)"
    )
    lat = twin["latency"]
    out.append(
        f"  latency (us): host {lat['host'] * 1e6:.3f}, peer {lat['peer'] * 1e6:.3f}, "
        f"local {lat['local'] * 1e6:.3f}"
    )
    for what in twin["missing"]:
        out.append(f"  not measured: {what}")
    for what in twin["assumed"]:
        out.append(f"  assumed: {what}")
    fit = twin["fit"]
    if fit is not None:
        out.append(
            f"  fit: {fit['iterations']} simulated runs; worst figure "
            f"{fit['worst_cell']} at {fit['worst_deviation']:+.2%} of the report's"
        )
    return out
