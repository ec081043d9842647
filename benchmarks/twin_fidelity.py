"""How faithfully a twin (``gpubw --simulate REPORT``) reproduces the report it was built
from: every measured figure of each report, simulated / measured, and the cells outside the
+-3 % goal of issue 37.

    python benchmarks/twin_fidelity.py [REPORT ...]     (default: the real reports below)

Each report's twin is built the way ``--simulate`` builds it (the fit included), then its
Passed testcases run on the twin with gpubw's default options (the model's jitter on), at
the report's buffer size; the output lists per report the number of figures, how many lie
within 3 %, the worst ones, and the time the twin took to build, and to build and run.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import gpubw
from gpubw.backend.sim.twin import cell_name, measured_cells
from gpubw.model.report_io import read_report
from gpubw.runner.simulation import resolve_simulation

RESULTS = Path(__file__).parent / "results"
#: the real reports issue 37 names: 2 and 1 GPUs, gpubw's JSON and nvbandwidth's
REPORTS = (
    "h200x2-2026-12-01.json",
    "nvbandwidth-v0.8-h200x2-2026-12-01.json",
    "full-h200x1-2026-12-02e.json",
    "nvbandwidth-v0.8-h200x1-2026-12-01.json",
    "v010-h100-2026-12-06b.json",
)
GOAL = 0.03


def fidelity(path: str | Path) -> tuple[dict[str, tuple[float, float]], float, float]:
    """Per measured figure (its name): (measured, simulated on the twin); the seconds the
    twin took to build (with its fit), and to build and run (``gpubw.run`` builds it again)."""
    measured = measured_cells(read_report(path))
    t0 = time.perf_counter()
    resolve_simulation(str(path))  # the build alone, timed (the run below builds it again)
    built = time.perf_counter() - t0
    keys = sorted({k[0] for k in measured}, key=list(dict.fromkeys(k[0] for k in measured)).index)
    sizes = {t.size for t in read_report(path).testcases if t.size} or {512 << 20}
    t0 = time.perf_counter()
    report = gpubw.run(
        [k for k in keys if not k.startswith("multinode")], sizes=min(sizes), simulate=str(path)
    )
    ran = time.perf_counter() - t0
    simulated = measured_cells(report)
    out = {cell_name(k): (v, simulated.get(k, float("nan"))) for k, v in measured.items()}
    return out, built, ran


def main(paths: list[str]) -> int:
    worst_all = 0.0
    for path in paths or [str(RESULTS / name) for name in REPORTS]:
        cells, built, ran = fidelity(path)
        dev = {k: s / m - 1.0 for k, (m, s) in cells.items()}
        within = sum(abs(d) <= GOAL for d in dev.values())
        worst = sorted(dev, key=lambda k: -abs(dev[k]) if dev[k] == dev[k] else -1e9)
        worst_all = max([worst_all, *(abs(dev[k]) for k in worst[:1])])
        print(f"{Path(path).name}: {within}/{len(dev)} figures within +-3 %; twin built in "
              f"{built:.1f} s, built and run in {ran:.1f} s")  # fmt: skip
        for k in worst[:4]:
            m, s = cells[k]
            print(f"  {k}: measured {m:.6g}, twin {s:.6g} ({dev[k]:+.2%})")
    print(f"worst figure of all: {worst_all:.2%} (goal {GOAL:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
