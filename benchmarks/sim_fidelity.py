#!/usr/bin/env python3
"""How close the simulated H200 presets come to the real machines they model: every cell of
the default suite, simulated, against the median of the real reports in ``results/``.

    python benchmarks/sim_fidelity.py                 # h200x1 and h200x2, every cell
    python benchmarks/sim_fidelity.py h200x2 --worst 10
    python benchmarks/sim_fidelity.py --check          # exit 1 if a cell is off by > 5 %

For each preset the default suite runs on the simulated system (512 MiB, as the real runs);
the real reports are its source measurements (:data:`SOURCES`: gpubw's own runs of the
default suite and nvandwidth v0.8's ``-j`` output, on the lent 2 x H200 machine and on one
H200). A cell's figure of a tool is the median over that tool's reports (a contention cell
such as host_to_all_bidirectional_memcpy_ce moves by up to 15 % from run to run on the same
machine, so one run is no yardstick); each line shows the simulated figure, each tool's
median and how many reports it has, the ratio simulated / median, and the ratio's range over
the single reports. ``--check`` fails when a ratio to a median is outside the tolerance.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from gpubw import report_to_dict, run
from gpubw.tools.compare import Cell, load_side, side_from

RESULTS = Path(__file__).resolve().parent / "results"
SIZE = 512 << 20

#: The real reports each preset is fitted to, by tool (globs under results/).
SOURCES: dict[str, dict[str, tuple[str, ...]]] = {
    "h200x2": {
        "gpubw": ("h200x2-2026-*.json",),
        "nvbandwidth": ("nvbandwidth-v0.8-h200x2-*.json",),
    },
    "h200x1": {
        "gpubw": (
            "h200x1-2026-*.json",
            "h200x1-single-gpu-machine-*.json",
            "full-h200x1-*.json",
        ),
        "nvbandwidth": ("nvbandwidth-v0.8-h200x1-*.json",),
    },
}

Key = tuple[str, str, str]  # matrix, row, column


def source_files(preset: str, tool: str) -> list[Path]:
    """The real reports of ``tool`` that ``preset`` is fitted to."""
    return sorted({p for g in SOURCES[preset][tool] for p in RESULTS.glob(g)})


def _cells(cells: Sequence[Cell]) -> dict[Key, float]:
    """The figures at 512 MiB (or of a report without sizes), by matrix, row and column."""
    return {
        (c.matrix, c.row, c.column): c.low
        for c in cells
        if c.low is not None and c.size in (None, SIZE)
    }


def simulated(preset: str) -> tuple[dict[Key, float], set[str]]:
    """The default suite's cells on the simulated ``preset``, and the matrices of plugin
    testcases (figures of the plugins' own ``simulate`` functions, shown but not checked)."""
    doc = report_to_dict(run(simulate=preset))
    plugin = {
        m["key"] for tc in doc["testcases"] if tc["plugin"] != "gpubw" for m in tc["matrices"]
    }
    return _cells(side_from(doc).cells), plugin


def real(preset: str, tool: str) -> dict[Key, list[float]]:
    """Every source report's figure of each cell."""
    out: dict[Key, list[float]] = {}
    for path in source_files(preset, tool):
        for key, value in _cells(load_side(str(path)).cells).items():
            out.setdefault(key, []).append(value)
    return out


Row = tuple[Key, float, dict[str, tuple[float, int, float, float]], bool]


def rows(preset: str) -> list[Row]:
    """Per cell the simulated figure; per tool (median, reports, lowest and highest ratio to
    a single report); whether a plugin's testcase made it. Only cells that a tool measured."""
    sim, plugin = simulated(preset)
    tools = {tool: real(preset, tool) for tool in SOURCES[preset]}
    out = []
    for key in sorted(sim):
        per: dict[str, tuple[float, int, float, float]] = {}
        for tool, figures in tools.items():
            values = figures.get(key)
            if values:
                ratios = [sim[key] / v for v in values]
                per[tool] = (statistics.median(values), len(values), min(ratios), max(ratios))
        if per:
            out.append((key, sim[key], per, key[0] in plugin))
    return out


def worst_ratio(per: dict[str, tuple[float, int, float, float]], sim: float) -> float:
    """The ratio simulated / median farthest from 1 over the tools."""
    return max((sim / m for m, _, _, _ in per.values()), key=lambda r: abs(r - 1))


def show(preset: str, tolerance: float, worst: int | None) -> int:
    """Print the preset's table; the number of gpubw's own cells outside the tolerance."""
    table = rows(preset)
    if worst is not None:
        table = sorted(table, key=lambda t: (t[3], -abs(worst_ratio(t[2], t[1]) - 1)))[:worst]
    print(f"== {preset}: simulated / median of the real reports (GB/s or ns)")
    for tool in SOURCES[preset]:
        print(f"   {tool}: {len(source_files(preset, tool))} reports")
    print(f"{'matrix':56} {'cell':>6} {'sim':>8}  {'tool':11} {'median':>8} {'n':>2} "
          f"{'ratio':>6}  single reports")  # fmt: skip
    bad = 0
    for (matrix, r, c), sim, per, plugin in table:
        for k, (tool, (median, n, lo, hi)) in enumerate(per.items()):
            ratio = sim / median
            flag = "  OUT" if abs(ratio - 1) > tolerance / 100 else ""
            flag += " (plugin: not checked)" if plugin and flag else ""
            bad += bool(flag) and not plugin
            head = f"{matrix[:56]:56} {r + ':' + c:>6} {sim:8.1f}" if k == 0 else " " * 72
            print(f"{head}  {tool:11} {median:8.1f} {n:2} {ratio:6.3f}  {lo:.3f}-{hi:.3f}{flag}")
    checked = sum(len(p) for _, _, p, plugin in table if not plugin)
    print(f"{bad} of {checked} figures of gpubw's testcases outside +-{tolerance:g} %\n")
    return bad


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("presets", nargs="*", help=f"of {', '.join(SOURCES)} (default: all)")
    parser.add_argument("--tolerance", type=float, default=5.0, help="percent (default 5)")
    parser.add_argument("--worst", type=int, help="show only the N cells farthest off")
    parser.add_argument("--check", action="store_true", help="exit 1 if a cell is outside")
    args = parser.parse_args(argv)
    unknown = [p for p in args.presets if p not in SOURCES]
    if unknown:
        parser.error(f"no source measurements for preset {unknown[0]!r}; presets: "
                     f"{', '.join(SOURCES)}")  # fmt: skip
    bad = sum(show(p, args.tolerance, args.worst) for p in args.presets or list(SOURCES))
    return 1 if args.check and bad else 0


if __name__ == "__main__":
    sys.exit(main())
