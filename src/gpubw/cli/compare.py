"""``gpubw compare``'s command line and output: text (the failing cells worst first, the
devices they name, one line per matrix) and JSON (every cell). The comparison itself is
:mod:`gpubw.tools.compare`.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from gpubw.cli.argtypes import buffer_size, finite_float
from gpubw.cli.parsing import Parser
from gpubw.model import schemas
from gpubw.model.console import printable_lines
from gpubw.model.errors import GpubwError, UsageError
from gpubw.model.options import EXIT_BELOW_EXPECTATION
from gpubw.model.sizes import format_size
from gpubw.tools.compare import (
    ANY,
    FAIL_ON,
    INVALID,
    TEXT_CELLS,
    Cell,
    Comparison,
    Side,
    compare_sides,
    invalid_side,
    load_side,
    select_size,
    worst_first,
)

# -- output ----------------------------------------------------------------------------------


def _device_text(devices: Sequence[Mapping[str, Any]], end: str) -> str | None:
    """``GPU 3: NVIDIA H200, 0000:3B:00.0`` for an end naming a GPU the report describes."""
    if not end.startswith("GPU "):
        return None
    try:
        i = int(end[4:])
    except ValueError:
        return None
    rec = next((d for d in devices if d.get("ordinal") == i), None)
    if rec is None and i < len(devices):
        rec = devices[i]
    if rec is None:
        return None
    bus = rec.get("pci_bus_id") or rec.get("pci_short") or ""
    return f"{end}: {rec.get('name', '?')}" + (f", {bus}" if bus else "")


def device_record(devices: Sequence[Mapping[str, Any]], end: str) -> dict[str, Any] | None:
    """The JSON record of one end of a cell: index, name, PCI bus id (GPUs only)."""
    text = _device_text(devices, end)
    if text is None:
        return None
    i = int(end[4:])
    rec = next((d for d in devices if d.get("ordinal") == i), None) or devices[i]
    return {
        "index": i,
        "name": str(rec.get("name", "")),
        "pci_bus_id": str(rec.get("pci_bus_id") or rec.get("pci_short") or ""),
    }


def _num(x: float | None, width: int = 9) -> str:
    return f"{'N/A':>{width}}" if x is None else f"{x:>{width}.2f}"


def _base(x: Comparison) -> str:
    if x.baseline_low is None or x.baseline_high is None:
        return "N/A"
    if x.baseline_low == x.baseline_high:
        return f"{x.baseline_low:.2f}"
    return f"{x.baseline_low:.2f}-{x.baseline_high:.2f}"


def _size(s: int | None) -> str:
    return "-" if s is None else format_size(s)


def _where(x: Comparison) -> str:
    if x.row == ANY:
        return "(whole matrix)"
    if x.source and x.destination and x.source != x.destination:
        return f"{x.source} {'<->' if x.bidirectional else '->'} {x.destination}"
    return x.source or f"[{x.row}][{x.column}]"


def _matrix_lines(rows: Sequence[Comparison], fail_on: str) -> list[str]:
    groups: dict[tuple[str, int | None], list[Comparison]] = {}
    for x in rows:
        groups.setdefault((x.matrix, x.size), []).append(x)
    head = f"{'matrix':<54} {'size':>9} {'cells':>5} {'failed':>6} {'median':>7} {'worst':>7}"
    lines = [head + "  worst cell"]
    worst_of = {k: worst_first(xs, fail_on)[0] for k, xs in groups.items()}
    ordered = worst_first(list(worst_of.values()), fail_on)
    for worst in ordered:
        key, size = worst.matrix, worst.size
        xs = groups[(key, size)]
        ratios = [x.ratio for x in xs if x.ratio is not None]
        med = f"{statistics.median(ratios):7.3f}" if ratios else f"{'-':>7}"
        wr = f"{worst.ratio:7.3f}" if worst.ratio is not None else f"{'-':>7}"
        lines.append(
            f"{key:<54} {_size(size):>9} {len(xs):>5} {sum(x.fails for x in xs):>6} {med} {wr}"
            f"  {_where(worst)}{' ' + worst.flag if worst.flag else ''}"
        )
    return lines


@attrs.frozen
class Outcome:
    """One comparison as its text and JSON show it: the two sides, the compared cells
    (``rows``), the candidate's cells with no counterpart (``extra``), the size warnings, and
    the rule (``threshold`` percent, ``fail_on``, the one ``size`` compared or None)."""

    cand: Side
    base: Side
    rows: Sequence[Comparison]
    extra: Sequence[Cell]
    warnings: Sequence[str]
    threshold: float
    fail_on: str
    size: int | None


def text_lines(outcome: Outcome, limit: int = TEXT_CELLS) -> list[str]:
    """The text of ``gpubw compare``: what was compared, the cells outside the threshold
    (at most ``limit``, worst first) and their devices, per matrix, and the count failed."""
    rows, threshold, fail_on = outcome.rows, outcome.threshold, outcome.fail_on
    cand, base, size = outcome.cand, outcome.base, outcome.size
    failed = [x for x in rows if x.fails]
    direction = {
        "low": "slower than the baseline",
        "high": "faster than the baseline",
        "both": "slower or faster than the baseline",
    }[fail_on]
    lines = [
        f"candidate: {cand.path} [{cand.label}]",
        f"baseline:  {base.path} [{base.label}]",
        f"{len(rows)} cell(s) of {len({(x.matrix, x.size) for x in rows})} matrices compared"
        + (f" at {format_size(size)}" if size is not None else "")
        + f"; a cell fails when {direction} by more than {threshold:g} % (--fail-on {fail_on})"
        " or MISSING",
    ]
    lines += [f"note: sizes differ: {w}" for w in outcome.warnings]
    lines += _outside_lines(outcome, limit)
    if rows:
        lines += ["", "per matrix (ratio = candidate / baseline; worst first):"]
        lines += _matrix_lines(rows, fail_on)
    if outcome.extra:
        lines += ["", f"{len(outcome.extra)} candidate cell(s) have no counterpart in the baseline"]
    lines += [
        "",
        f"{len(failed)} cell(s) failed (LOW/HIGH: bandwidth below/above; SLOWER/FASTER: "
        f"latency above/below; +/-{threshold:g} %)",
    ]
    return lines


def _outside_lines(outcome: Outcome, limit: int) -> list[str]:
    """The cells outside the threshold (failing first, then flagged but not failing), at
    most ``limit`` of them, and the devices they name."""
    failed = [x for x in outcome.rows if x.fails]
    flagged = [x for x in outcome.rows if x.flag and not x.fails]
    shown = (failed + flagged)[: max(0, limit)]
    lines: list[str] = []
    if failed or flagged:
        lines += ["", "cells outside the threshold, worst first:"]
        lines.append(
            f"{'matrix':<54} {'size':>9}  {'cell':<24} {'candidate':>9} {'baseline':>16} "
            f"{'ratio':>6}  flag"
        )
        named: list[str] = []
        for x in shown:
            ratio = f"{x.ratio:6.3f}" if x.ratio is not None else f"{'':>6}"
            note = "" if x.fails or not x.flag else " (not failing)"
            if x.flag == INVALID:
                note = f" ({invalid_side(x)} is NaN, infinite or 0)"
            lines.append(
                f"{x.matrix:<54} {_size(x.size):>9}  {_where(x):<24} {_num(x.candidate)} "
                f"{_base(x):>11} {x.unit:<4} {ratio}  {x.flag}{note}"
            )
            for end in (x.source, x.destination):
                text = _device_text(outcome.cand.devices or outcome.base.devices, end)
                if text and text not in named:
                    named.append(text)
        more = len(failed) + len(flagged) - len(shown)
        if more > 0:
            lines.append(f"... and {more} more (--format json lists every cell)")
        if named:
            lines += ["", "devices:"] + [f"  {t}" for t in sorted(named, key=_gpu_order)]
    return lines


def _gpu_order(text: str) -> int:
    head = text.split(":", 1)[0]
    return int(head[4:]) if head[4:].isdigit() else 0


def json_doc(outcome: Outcome) -> dict[str, Any]:
    """The JSON of ``gpubw compare`` (schemas/compare.schema.json): every compared cell."""
    cand, base, rows = outcome.cand, outcome.base, outcome.rows
    devices = cand.devices or base.devices

    def cell(x: Comparison) -> dict[str, Any]:
        return {
            "matrix": x.matrix,
            "size_bytes": x.size,
            "row": x.row,
            "column": x.column,
            "source": x.source,
            "destination": x.destination,
            "source_device": device_record(devices, x.source),
            "destination_device": device_record(devices, x.destination),
            "kind": x.kind,
            "unit": x.unit,
            "candidate": _finite(x.candidate),
            "baseline_low": _finite(x.baseline_low),
            "baseline_high": _finite(x.baseline_high),
            "ratio": _finite(x.ratio),
            "flag": x.flag,
            "fails": x.fails,
        }

    failed = sum(x.fails for x in rows)
    return {
        "schema_version": schemas.VERSIONS[schemas.COMPARE],
        "tool": "gpubw compare",
        "candidate": {"path": cand.path, "label": cand.label},
        "baseline": {"path": base.path, "label": base.label},
        "threshold_pct": outcome.threshold,
        "fail_on": outcome.fail_on,
        "size_bytes": outcome.size,
        "compared": len(rows),
        "failed": failed,
        "exit_code": EXIT_BELOW_EXPECTATION if failed else 0,
        "warnings": list(outcome.warnings),
        "cells": [cell(x) for x in rows],
        "extra": [
            {"matrix": c.matrix, "size_bytes": c.size, "row": c.row, "column": c.column}
            for c in outcome.extra
        ],
    }


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


# -- the command -----------------------------------------------------------------------------


def compare_parser() -> argparse.ArgumentParser:
    """``gpubw compare``'s parser."""
    p = Parser(
        prog="gpubw compare",
        description="Compare two bandwidth reports cell by cell (per GPU, per pair, per size).",
        epilog=(
            "Each file may be a gpubw JSON report, nvbandwidth -j output or a reference-figures "
            "file. Exit status: 0 if no cell fails; 3 if a cell fails (a regression, as gpubw "
            "check's below expectation); 1 on an error (-o cannot be written); 2 on bad input. "
            "Changed: a failed cell used to exit 1."
        ),
    )
    p.add_argument("candidate", help="gpubw JSON report, nvbandwidth -j output or reference")
    p.add_argument("baseline", help="the same kinds of file")
    p.add_argument(
        "--threshold", type=finite_float, default=3.0, help="tolerance in percent (default 3)"
    )
    p.add_argument(
        "--size",
        default=None,
        help="compare only results at this buffer size, written as for -b (512, 1GiB, 64M); "
        "needed for a sweep compared with a report without sizes",
    )
    p.add_argument(
        "--fail-on",
        choices=FAIL_ON,
        default="low",
        help="low (default): cells slower than the baseline fail (bandwidth lower, latency "
        "higher); high: faster cells fail; both",
    )
    p.add_argument("--format", choices=("text", "json"), default="text", help="default text")
    p.add_argument("-o", "--output", default=None, help="write the result to FILE (- : stdout)")
    return p


def compare_files(argv: Sequence[str]) -> tuple[list[str], int]:
    """Run ``gpubw compare``: return the lines to print (none when written with ``-o``) and
    the number of failing cells."""
    from gpubw.model.infile import refuse_input_as_output
    from gpubw.model.outfile import OutputTarget

    a = compare_parser().parse_args(list(argv))
    if a.threshold < 0:
        raise UsageError(f"--threshold must be >= 0 percent, got {a.threshold:g}")
    size = None if a.size is None else buffer_size(a.size, "--size")
    inputs = {"the candidate": a.candidate, "the baseline": a.baseline}
    refuse_input_as_output(a.output, inputs, label="gpubw compare: -o", what="the comparison")
    target = OutputTarget(a.output, label="gpubw compare: -o").check() if a.output else None
    cand, base = load_side(a.candidate), load_side(a.baseline)
    if size is not None:
        cand, base = select_size(cand, size), select_size(base, size)
    common = {c.matrix for c in cand.cells} & {c.matrix for c in base.cells}
    if not common:
        ck, bk = sorted({c.matrix for c in cand.cells}), sorted({c.matrix for c in base.cells})
        raise UsageError(
            f"{a.candidate!r} and {a.baseline!r} have no matrix in common: nothing to compare "
            f"(candidate: {', '.join(ck[:4])}; baseline: {', '.join(bk[:4])})"
        )
    rows, extra, warnings = compare_sides(cand, base, a.threshold, a.fail_on)
    outcome = Outcome(cand, base, rows, extra, warnings, a.threshold, a.fail_on, size)
    if a.format == "json":
        lines = json.dumps(json_doc(outcome), indent=2, allow_nan=False).splitlines()
    else:  # paths, labels, matrix and device names come from the files: escaped
        lines = printable_lines(text_lines(outcome))
    failed = sum(x.fails for x in rows)
    if target is not None and not target.is_stdout:
        try:
            with target.open("w") as f:
                f.write("\n".join(lines) + "\n")
        except OSError as exc:
            raise GpubwError(f"gpubw compare: -o {a.output}: {exc.strerror or exc}") from None
        return [], failed
    return lines, failed


def compare_main(argv: list[str]) -> int:
    """``gpubw compare CANDIDATE BASELINE``: 3 if any cell fails (a regression, as check's
    below expectation), else 0 (nothing printed when the result went to a file with -o)."""
    lines, failed = compare_files(argv)
    if lines:
        print("\n".join(lines))
    return EXIT_BELOW_EXPECTATION if failed else 0
