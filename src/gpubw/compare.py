"""Compare two bandwidth reports testcase by testcase (``gpubw compare``).

Each report may be a gpubw JSON report (``gpubw -j -o r.json``), nvbandwidth's own ``-j``
output, or a reference-figures file like ``reference/h200x2-nvbandwidth-v0.8.json``. For every
matrix present in both, the figure compared is the mean of its applicable cells (per device
or per pair, in GB/s or ns), so reports from machines with different device counts compare.

    gpubw compare CANDIDATE BASELINE [--threshold 3] [--size BYTES]

One line per matrix: both figures, the ratio candidate / baseline and a flag where the
candidate is outside the baseline by more than the threshold (LOW / HIGH; latency: SLOWER).
Whether a figure is a latency (lower is better) comes from the matrix's ``kind`` (a gpubw
report, nvbandwidth's JSON as :mod:`gpubw.nvbandwidth_json` reads it), or a reference
file's ``kind`` or unit (ns); an older gpubw report without ``kind`` is read by its unit.
The command exits 1 if any line is flagged, 0 otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

from gpubw.argtypes import finite_float
from gpubw.errors import UsageError
from gpubw.results import KIND_BANDWIDTH, KIND_LATENCY, LATENCY


class Figure(NamedTuple):
    """One matrix's figure: a range (low == high for a measured figure), in ``unit``."""

    low: float
    high: float
    unit: str  # the display unit: "GB/s" or "ns"
    kind: str = KIND_BANDWIDTH  # KIND_BANDWIDTH or KIND_LATENCY (lower is better)


Figures = dict[str, Figure]  # matrix key -> its figure


def _kind(m: dict[str, Any]) -> str:
    """A gpubw matrix's kind; a report written before ``kind`` existed: from its unit."""
    kind = m.get("kind")
    if kind in (KIND_BANDWIDTH, KIND_LATENCY):
        return str(kind)
    return KIND_LATENCY if m.get("unit") == LATENCY else KIND_BANDWIDTH


def _mean(values: list[list[float | None]]) -> float | None:
    if not isinstance(values, list) or not all(isinstance(row, list) for row in values):
        raise TypeError("a matrix's values must be a list of rows")
    cells = [v for row in values for v in row if v is not None]
    for v in cells:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"a matrix cell is {v!r:.40}, not a number or null")
    return sum(cells) / len(cells) if cells else None


def _usable(x: float) -> bool:
    """A figure that can be compared: finite and above zero (NaN, inf and 0 are flagged)."""
    return math.isfinite(x) and x > 0


def figures_from(doc: dict[str, Any], size: int | None = None) -> tuple[str, Figures]:
    """(label, figures) from any of the three supported formats."""
    out: Figures = {}
    if "nvbandwidth" in doc:  # nvbandwidth -j
        from gpubw.nvbandwidth_json import parse

        parsed = parse(doc)
        for tc in parsed["testcases"]:
            for m in tc.get("matrices", []):
                v = _mean(m["values"])
                if v is not None:
                    lat = _kind(m) == KIND_LATENCY
                    shown = v * 1e9 if lat else v / 1e9
                    out[m["key"]] = Figure(shown, shown, "ns" if lat else "GB/s", _kind(m))
        return "nvbandwidth", out
    if "figures" in json.dumps(doc.get("testcases", [{}])[:1]):  # reference file
        for tc in doc["testcases"]:
            kind = tc.get("kind") or (KIND_LATENCY if tc["unit"] == "ns" else KIND_BANDWIDTH)
            for key, (lo, hi) in tc["figures"].items():
                out[key] = Figure(lo, hi, tc["unit"], kind)
        return "reference", out
    label = "gpubw" + (" (SIMULATED)" if doc.get("simulated") else "")
    testcases = doc.get("testcases", [])
    if not isinstance(testcases, list) or not all(isinstance(t, dict) for t in testcases):
        raise TypeError("'testcases' must be a list of objects")
    for tc in testcases:
        if not isinstance(tc.get("matrices", []), list):
            raise TypeError("a testcase's 'matrices' must be a list")
        if tc.get("status") != "Passed":
            continue
        if size is not None and tc.get("size_bytes") not in (None, size):
            continue
        for m in tc.get("matrices", []):
            v = _mean(m["values"])
            if v is None:
                continue
            shown = v * m.get("scale", 1.0)
            out[m["key"]] = Figure(shown, shown, m.get("display_unit", m["unit"]), _kind(m))
    return label, out


def compare(cand: Figures, base: Figures, threshold: float) -> tuple[list[str], int]:
    lines = [f"{'matrix':<52} {'candidate':>11} {'baseline':>15} {'ratio':>7}  flag"]
    flagged = 0
    for key, (lo, hi, unit, kind) in base.items():
        if key not in cand:
            lines.append(f"{key:<52} {'missing':>11} {_fmt(lo, hi):>15} {'':>7}  MISSING")
            flagged += 1
            continue
        c = cand[key][0]
        mid = (lo + hi) / 2
        ratio = c / mid if mid else float("nan")
        if not _usable(c) or not (_usable(lo) and _usable(hi)):  # NaN, inf or 0: no figure
            flagged += 1
            which = "candidate" if not _usable(c) else "baseline"
            lines.append(
                f"{key:<52} {c:>8.1f} {unit:<4}{_fmt(lo, hi):>13} {'':>7}  INVALID ({which} "
                "is NaN, infinite or 0)"
            )
            continue
        if kind == KIND_LATENCY:  # lower is better
            flag = "SLOWER" if c > hi * (1 + threshold / 100) else ""
        elif c < lo * (1 - threshold / 100):
            flag = "LOW"
        elif c > hi * (1 + threshold / 100):
            flag = "HIGH"
        else:
            flag = ""
        if flag:
            flagged += 1
        lines.append(f"{key:<52} {c:>8.1f} {unit:<4}{_fmt(lo, hi):>13} {ratio:>7.3f}  {flag}")
    for key in cand:
        if key not in base:
            c, _, unit, _ = cand[key]
            lines.append(f"{key:<52} {c:>8.1f} {unit:<4}{'(none)':>13} {'':>7}")
    return lines, flagged


def _fmt(lo: float, hi: float) -> str:
    return f"{lo:.1f}" if lo == hi else f"{lo:.1f}-{hi:.1f}"


def load_figures(path: str, size: int | None = None) -> tuple[str, Figures]:
    """(label, figures) of a report file; UsageError naming the file if it cannot be read."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"cannot read report {path!r}: {exc}") from None
    except RecursionError:
        raise UsageError(f"cannot read report {path!r}: JSON nested too deeply") from None
    if not isinstance(doc, dict):
        raise UsageError(f"report {path!r} is not a JSON object")
    try:
        label, figures = figures_from(doc, size)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, RecursionError) as exc:
        raise UsageError(
            f"{path!r} is neither a gpubw report, nvbandwidth -j output nor a reference file "
            f"({type(exc).__name__}: {str(exc)[:200]})"
        ) from None
    if not figures:
        at = f" at --size {size}" if size is not None else ""
        raise UsageError(
            f"report {path!r} holds no figure to compare{at} (no Passed testcase with "
            "applicable cells)"
        )
    return label, figures


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError (one line, exit 2) instead of printing usage."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"gpubw compare: {message} (see gpubw compare -h)")


def compare_files(argv: list[str]) -> tuple[list[str], int]:
    """Parse ``gpubw compare`` arguments; return the lines to print and the flagged count."""
    p = _Parser(prog="gpubw compare", description=__doc__.split("\n\n")[0])
    p.add_argument("candidate", help="gpubw JSON report, nvbandwidth -j output or reference")
    p.add_argument("baseline", help="the same kinds of file")
    p.add_argument("--threshold", type=finite_float, default=3.0, help="percent (default 3)")
    p.add_argument(
        "--size",
        type=int,
        default=None,
        help="for gpubw sweeps: compare only results at this buffer size (bytes)",
    )
    a = p.parse_args(argv)
    if a.threshold < 0:
        raise UsageError(f"--threshold must be >= 0 percent, got {a.threshold:g}")
    cl, cf = load_figures(a.candidate, a.size)
    bl, bf = load_figures(a.baseline, a.size)
    if not set(cf) & set(bf):
        raise UsageError(
            f"{a.candidate!r} and {a.baseline!r} have no matrix in common: nothing to compare "
            f"(candidate: {', '.join(sorted(cf)[:4])}; baseline: {', '.join(sorted(bf)[:4])})"
        )
    lines, flagged = compare(cf, bf, a.threshold)
    head = [f"candidate: {a.candidate} [{cl}]", f"baseline:  {a.baseline} [{bl}]"]
    tail = [
        "",
        f"{flagged} matrix figure(s) outside +/-{a.threshold:g} % "
        "(LOW/HIGH: bandwidth below/above; SLOWER: latency above)",
    ]
    return head + lines + tail, flagged
