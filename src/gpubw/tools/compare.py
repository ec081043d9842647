"""Compare two bandwidth reports cell by cell (``gpubw compare``).

Each report may be a gpubw JSON report (``gpubw -j -o r.json``), nvbandwidth's own ``-j``
output, or a reference-figures file like ``reference/h200x2-nvbandwidth-v0.8.json``.

    gpubw compare CANDIDATE BASELINE [--threshold 3] [--size 1GiB] [--fail-on low|high|both]
                  [--format text|json] [-o FILE]

Every cell of every matrix is compared with the same cell (same matrix, buffer size, row and
column) of the baseline, so one slow GPU or link is found even when the mean of its matrix
hides it. A reference file gives one range per matrix, for every device and pair: each cell
of the candidate's matrix is compared with that range (a reference is only ever the
baseline). NaN, infinite or zero figures on either side are INVALID, and fail.

**Sizes.** Results of a size sweep are compared size by size. ``--size`` (parsed like ``-b``:
``512``, ``1GiB``, ``64M``) keeps only that buffer size. A sweep against a report without
sizes (nvbandwidth's JSON, a reference file) needs ``--size``: which size is meant is not
guessed.

**Direction.** Whether a figure is a latency (lower is better) comes from the matrix's
``kind`` (an older gpubw report without ``kind``: its unit; a reference file: its ``kind`` or
unit ns). A cell outside the baseline by more than the threshold is flagged LOW / HIGH
(bandwidth below / above) or SLOWER / FASTER (latency above / below). ``--fail-on low`` (the
default) fails on cells *slower* than the baseline (LOW, SLOWER): faster is not a regression;
``high`` fails on faster cells (HIGH, FASTER), ``both`` on either. A cell the baseline has and
the candidate lacks (or reports as N/A) is MISSING, and always fails. A file with no figure,
or two files without a matrix in common, is a usage error.

Output and command line (:mod:`gpubw.cli.compare`): the failing cells worst first, each
with the devices at its two ends (index, name and PCI bus id from the reports' ``devices``),
then one line per matrix; ``--format json`` gives every cell. Exit status: 1 if any cell
fails, 0 otherwise, 2 on bad input.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from gpubw.model.errors import UsageError
from gpubw.model.infile import read_input
from gpubw.model.results import BANDWIDTH, KIND_BANDWIDTH, KIND_LATENCY, LATENCY, Matrix
from gpubw.model.sizes import format_size

LOW, HIGH, SLOWER, FASTER = "LOW", "HIGH", "SLOWER", "FASTER"
MISSING, INVALID = "MISSING", "INVALID"  # these two always fail
FAIL_ON = ("low", "high", "both")
#: which flags fail for each --fail-on (MISSING always does)
FAILING = {
    "low": frozenset({LOW, SLOWER, MISSING, INVALID}),
    "high": frozenset({HIGH, FASTER, MISSING, INVALID}),
    "both": frozenset({LOW, SLOWER, HIGH, FASTER, MISSING, INVALID}),
}
#: how many failing cells the text output lists (JSON lists all)
TEXT_CELLS = 25
ANY = "*"  # a reference file's row/column: every cell of the matrix


@attrs.frozen
class Cell:
    """One cell of one side: a figure in display units (GB/s or ns), or a range."""

    matrix: str
    size: int | None  # bytes; None where the report does not say
    row: str
    column: str
    low: float | None  # None: N/A
    high: float | None
    unit: str  # display unit
    kind: str  # KIND_BANDWIDTH or KIND_LATENCY
    source: str = ""  # "host", "GPU 3", ...
    destination: str = ""
    bidirectional: bool = False  # source <-> destination: both ways at once


@attrs.frozen
class Side:
    """What one report file holds: its label, its cells and its device records."""

    path: str
    label: str
    cells: tuple[Cell, ...]
    devices: tuple[Mapping[str, Any], ...] = ()
    sized: bool = True  # False: the format has no buffer sizes (nvbandwidth, reference)


@attrs.frozen
class Comparison:
    """One cell of the candidate against the baseline."""

    matrix: str
    size: int | None
    row: str
    column: str
    source: str
    destination: str
    kind: str
    unit: str
    candidate: float | None
    baseline_low: float | None
    baseline_high: float | None
    flag: str  # LOW, HIGH, SLOWER, FASTER, MISSING or ""
    fails: bool
    bidirectional: bool = False  # source <-> destination: both ways at once

    @property
    def ratio(self) -> float | None:
        """candidate / baseline (the middle of a range)."""
        if self.candidate is None or self.baseline_low is None or self.baseline_high is None:
            return None
        mid = (self.baseline_low + self.baseline_high) / 2
        if not (_usable(mid) and _usable(self.candidate)):  # INVALID: no ratio
            return None
        return self.candidate / mid

    @property
    def speed(self) -> float | None:
        """How fast the candidate is relative to the baseline (> 1 faster), whatever the kind."""
        r = self.ratio
        if r is None:
            return None
        if self.kind == KIND_LATENCY:
            return 1 / r if r else math.inf
        return r


# -- reading ---------------------------------------------------------------------------------


def _kind(m: Mapping[str, Any]) -> str:
    """A matrix's kind; a report written before ``kind`` existed: from its unit."""
    kind = m.get("kind")
    if kind in (KIND_BANDWIDTH, KIND_LATENCY):
        return str(kind)
    return KIND_LATENCY if m.get("unit") in (LATENCY, "ns") else KIND_BANDWIDTH


def _label_name(label: str) -> str:
    return f"GPU {label}" if label.isdigit() else label


def _ends(m: Mapping[str, Any], rows: list[str], cols: list[str]) -> Any:
    """Source, destination and whether both ways, of each cell, from the matrix's axes (a
    report carries none: those its header names) by gpubw.acceptance.expect's rules."""
    from gpubw.model.verdicts import cell_places

    try:
        matrix = Matrix(
            key=str(m["key"]),
            description=str(m.get("description", "")),
            unit=BANDWIDTH if _kind(m) == KIND_BANDWIDTH else LATENCY,
            row_labels=rows,
            column_labels=cols,
            values=[[0.0 for _ in row] for row in m["values"]],
        )
        places = cell_places(matrix)
    except ValueError:
        places = []

    def name(e: Any, label: str) -> str:
        if e.kind == "gpu":
            return f"GPU {e.index}"
        if e.kind == "host":
            return "host"
        if e.kind == "peers":
            return "its peers"
        return _label_name(label)

    out = {}
    for p in places:
        src, dst = name(p.source, rows[p.row]), name(p.destination, cols[p.column])
        out[(p.row, p.column)] = (src, dst, p.bidirectional)
    return out


def _matrix_cells(m: Mapping[str, Any], size: int | None, scale: float, unit: str) -> list[Cell]:
    values = m["values"]
    if not isinstance(values, list) or not all(isinstance(r, list) for r in values):
        raise TypeError("a matrix's values must be a list of rows")
    ncols = max((len(r) for r in values), default=0)
    rows = [str(x) for x in (m.get("row_labels") or range(len(values)))]
    cols = [str(x) for x in (m.get("column_labels") or range(ncols))]
    ends = _ends(m, rows, cols)
    kind = _kind(m)
    out = []
    for r, row in enumerate(values):
        for c, v in enumerate(row):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise TypeError(f"a matrix cell is {v!r:.40}, not a number or null")
            x = None if v is None else float(v) * scale  # NaN, inf: compared as INVALID
            src, dst, both = ends.get((r, c), (f"row {rows[r]}", f"column {cols[c]}", False))
            out.append(
                Cell(str(m["key"]), size, rows[r], cols[c], x, x, unit, kind, src, dst, both)
            )
    return out


def side_from(doc: Mapping[str, Any], path: str = "") -> Side:
    """The cells of a decoded report of any of the three supported formats."""
    from gpubw.model.report_io import display_scale, display_unit

    cells: list[Cell] = []
    if "nvbandwidth" in doc:  # nvbandwidth -j
        from gpubw.model.nvbandwidth_json import parse

        parsed = parse(doc)
        for tc in parsed["testcases"]:
            if tc.get("status") != "Passed":
                continue
            for m in tc.get("matrices", []):
                u = str(m["unit"])
                cells += _matrix_cells(m, None, display_scale(u), display_unit(u))
        return Side(path, "nvbandwidth", tuple(cells), tuple(parsed["devices"]), sized=False)
    tcs = doc.get("testcases", [])
    if not isinstance(tcs, list) or not all(isinstance(t, Mapping) for t in tcs):
        raise TypeError("'testcases' must be a list of objects")
    if tcs and isinstance(tcs[0], Mapping) and "figures" in tcs[0]:  # reference file
        for tc in tcs:
            unit = str(tc["unit"])
            kind = tc.get("kind") or (KIND_LATENCY if unit == "ns" else KIND_BANDWIDTH)
            for key, (lo, hi) in tc["figures"].items():
                cells.append(Cell(str(key), None, ANY, ANY, float(lo), float(hi), unit, kind))
        return Side(path, "reference", tuple(cells), sized=False)
    label = "gpubw" + (" (SIMULATED)" if doc.get("simulated") else "")
    for tc in tcs:
        if not isinstance(tc.get("matrices", []), list):
            raise TypeError("a testcase's 'matrices' must be a list")
        if tc.get("status") != "Passed":
            continue
        size = tc.get("size_bytes")
        for m in tc.get("matrices", []):
            unit = str(m.get("unit", ""))
            scale = float(m.get("scale", display_scale(unit)))
            cells += _matrix_cells(m, size, scale, str(m.get("display_unit", display_unit(unit))))
    devices = doc.get("devices") or []
    return Side(path, label, tuple(cells), tuple(d for d in devices if isinstance(d, Mapping)))


def load_side(path: str) -> Side:
    """The cells of a report file; UsageError naming the file if it cannot be read."""
    try:
        doc = json.loads(read_input(path, "report"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"cannot read report {path!r}: {exc}") from None
    except RecursionError:
        raise UsageError(f"cannot read report {path!r}: JSON nested too deeply") from None
    if not isinstance(doc, dict):
        raise UsageError(f"report {path!r} is not a JSON object")
    try:
        side = side_from(doc, path)
    except UsageError as exc:
        raise UsageError(f"{path!r}: {exc}") from None
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, RecursionError) as exc:
        raise UsageError(
            f"{path!r} is neither a gpubw report, nvbandwidth -j output nor a reference file "
            f"({type(exc).__name__}: {str(exc)[:200]})"
        ) from None
    if not any(c.low is not None for c in side.cells):
        raise UsageError(
            f"report {path!r} holds no figure to compare (no Passed testcase with applicable cells)"
        )
    return side


# -- matching sizes --------------------------------------------------------------------------


def _sizes(cells: Iterable[Cell]) -> dict[str, set[int | None]]:
    out: dict[str, set[int | None]] = {}
    for c in cells:
        out.setdefault(c.matrix, set()).add(c.size)
    return out


def _show_sizes(sizes: Iterable[int | None]) -> str:
    return ", ".join(format_size(s) for s in sorted(s for s in sizes if s is not None))


def _size_pairs(
    cand: Side, base: Side, warnings: list[str]
) -> dict[tuple[str, int | None], int | None]:
    """(matrix, candidate size) -> the baseline size it is compared with. UsageError when a
    sweep meets a report without sizes (which size is meant is not guessed)."""
    cs, bs = _sizes(cand.cells), _sizes(base.cells)
    pairs: dict[tuple[str, int | None], int | None] = {}
    ambiguous: list[str] = []
    for key in sorted(set(cs) | set(bs)):
        c, b = cs.get(key, set()), bs.get(key, set())
        if not c or not b:
            continue
        if len(c) == 1 and len(b) == 1:
            (sc,), (sb,) = c, b
            pairs[(key, sc)] = sb
            if sc is not None and sb is not None and sc != sb:
                warnings.append(
                    f"{key}: candidate at {format_size(sc)}, baseline at {format_size(sb)}"
                )
            continue
        if (None in c and len(b) > 1) or (None in b and len(c) > 1):
            ambiguous.append(key)
            continue
        for s in c & b:
            pairs[(key, s)] = s
    if ambiguous:
        sweep = cand if len(cs.get(ambiguous[0], ())) > 1 else base
        raise UsageError(
            f"{sweep.path} has {ambiguous[0]} at several buffer sizes "
            f"({_show_sizes((cs if sweep is cand else bs)[ambiguous[0]])}) and the other "
            f"report has it without a size: choose the size to compare with --size "
            f"({len(ambiguous)} matri{'x' if len(ambiguous) == 1 else 'ces'} affected)",
            param="size",
        )
    return pairs


def select_size(side: Side, size: int) -> Side:
    """Only the cells at ``size`` (and those with no size, e.g. latency testcases); a
    UsageError if a sized report has nothing at that size."""
    kept = tuple(c for c in side.cells if c.size in (None, size))
    if side.sized and not any(c.size == size for c in side.cells):
        sizes = {c.size for c in side.cells}
        raise UsageError(
            f"--size {format_size(size)}: {side.path} has no result at that size "
            f"(it has {_show_sizes(sizes) or 'no sized results'})",
            param="size",
        )
    return attrs.evolve(side, cells=kept)


# -- comparing -------------------------------------------------------------------------------


def _flag(kind: str, c: float, lo: float, hi: float, t: float) -> str:
    below, above = c < lo * (1 - t / 100), c > hi * (1 + t / 100)
    if kind == KIND_LATENCY:
        return SLOWER if above else FASTER if below else ""
    return LOW if below else HIGH if above else ""


def compare_sides(
    cand: Side, base: Side, threshold: float, fail_on: str = "low"
) -> tuple[list[Comparison], list[Cell], list[str]]:
    """(comparisons worst first, candidate cells the baseline lacks, warnings)."""
    if fail_on not in FAIL_ON:
        raise UsageError(f"--fail-on {fail_on!r}: allowed: {', '.join(FAIL_ON)}", param="fail_on")
    if any(c.row == ANY for c in cand.cells):
        raise UsageError(
            f"{cand.path} is a reference-figures file: it can only be the baseline "
            "(the second file)"
        )
    warnings: list[str] = []
    pairs = _size_pairs(cand, base, warnings)
    index = {(c.matrix, c.size, c.row, c.column): c for c in cand.cells}
    failing = FAILING[fail_on]
    out: list[Comparison] = []
    used: set[tuple[str, int | None, str, str]] = set()
    by_base_size: dict[tuple[str, int | None], list[int | None]] = {}
    for (key, sc), sb in pairs.items():
        by_base_size.setdefault((key, sb), []).append(sc)
    for b in base.cells:
        if b.low is None or b.high is None:
            continue
        for sc in by_base_size.get((b.matrix, b.size), []) if b.row != ANY else []:
            cc = index.get((b.matrix, sc, b.row, b.column))
            used.add((b.matrix, sc, b.row, b.column))
            out.append(_compare_one(b, cc, sc, cc or b, threshold, failing))
        if b.row == ANY:  # a reference range: every cell of the candidate's matrix
            matched = [c for c in cand.cells if c.matrix == b.matrix and c.low is not None]
            if not matched:
                out.append(_compare_one(b, None, None, None, threshold, failing))
            for cc in matched:
                used.add((cc.matrix, cc.size, cc.row, cc.column))
                out.append(_compare_one(b, cc, cc.size, cc, threshold, failing))
        elif (b.matrix, b.size) not in by_base_size:
            out.append(_compare_one(b, None, b.size, b, threshold, failing))
    extra = [
        c
        for c in cand.cells
        if (c.matrix, c.size, c.row, c.column) not in used and c.low is not None
    ]
    return worst_first(out, fail_on), extra, warnings


def _compare_one(
    b: Cell,
    cc: Cell | None,
    size: int | None,
    ends: Cell | None,
    threshold: float,
    failing: frozenset[str],
) -> Comparison:
    """Candidate cell ``cc`` against baseline ``b``; ``ends`` is the cell that names the two
    ends (None: none does)."""
    assert b.low is not None and b.high is not None
    value = None if cc is None else cc.low
    if value is None:
        flag = MISSING
    elif not (_usable(value) and _usable(b.low) and _usable(b.high)):
        flag = INVALID  # NaN, infinite or 0 on either side: no figure to compare
    else:
        flag = _flag(b.kind, value, b.low, b.high, threshold)
    row, col = (cc.row, cc.column) if cc else (b.row, b.column)
    src, dst = (ends.source, ends.destination) if ends else ("", "")
    return Comparison(
        b.matrix, size, row, col, src, dst, b.kind, b.unit, value, b.low, b.high, flag,
        flag in failing, bidirectional=ends is not None and ends.bidirectional,
    )  # fmt: skip


def _usable(x: float) -> bool:
    """A figure that can be compared: finite and above zero."""
    return math.isfinite(x) and x > 0


def invalid_side(x: Comparison) -> str:
    """Which side of an INVALID cell holds the NaN, infinite or zero figure."""
    return "candidate" if x.candidate is None or not _usable(x.candidate) else "baseline"


def worst_first(rows: Sequence[Comparison], fail_on: str = "low") -> list[Comparison]:
    """Failing cells first, then flagged ones, each group from the worst deviation in the
    failing direction (``both``: the largest deviation either way)."""

    def badness(x: Comparison) -> float:
        s = x.speed
        if s is None:
            return -math.inf
        if fail_on == "high":
            return -s
        if fail_on == "both":
            return -abs(math.log(s)) if s > 0 else -math.inf
        return s

    return sorted(rows, key=lambda x: (not x.fails, not x.flag, badness(x)))
