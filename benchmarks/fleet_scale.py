#!/usr/bin/env python3
"""``gpubw fleet`` at scale (issue 38): N node reports of 8 GPUs, the default suite, made by
perturbing one simulated h200x8 report (each node its own host name, GPU UUIDs, start time
and 1 % noise on every figure; three nodes with a fault: a host link, an NVLink pair and a
whole node at 80 %), then timed: reading, statistics, findings, and the command as a user
runs it.

    python benchmarks/fleet_scale.py                      # 1,000 nodes
    python benchmarks/fleet_scale.py --nodes 200 --base my-h200x8.json

``--base`` is a gpubw JSON report of an h200x8 run (default: made here with
``gpubw --simulate h200x8 -j``, about 2 minutes on a 2-core machine). The reports are
written to a temporary folder (about 0.8 GB for 1,000) and removed afterwards. Prints the
timings, the load average before and after, and the findings (which must be the three
faults: the script exits 1 otherwise).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from gpubw.fleet.analysis import analyse
from gpubw.fleet.gather import gather
from gpubw.fleet.stats import Settings, fleets

#: node -> (what the fault touches, the finding it must give)
FAULTS = {"n0100": ("host 3", ("host-link", 3, None)), "n0200": ("pair 1 5", ("pair", 1, 5)),
          "n0300": ("node", ("node", None, None))}  # fmt: skip


def _factor(fault: str, description: str, row: str, column: str, n_rows: int) -> float:
    """The fault's factor for one cell (bandwidth only; 1 elsewhere)."""
    if not fault or "(ns)" in description:
        return 1.0
    if fault == "node":
        return 0.8
    if fault.startswith("host "):
        host = "CPU(row)" in description and n_rows == 1
        return 0.8 if host and column == fault.split()[1] else 1.0
    a, b = fault.split()[1:]
    pair = "GPU(row)" in description and "GPU(column)" in description and n_rows > 1
    return 0.8 if pair and {row, column} == {a, b} else 1.0


def node_doc(base: dict[str, Any], i: int) -> dict[str, Any]:
    """Node ``i``'s report: ``base`` perturbed."""
    rng = random.Random(i)
    doc = copy.deepcopy(base)
    node = f"n{i:04d}"
    doc["host"] = node
    doc["started"] = f"2026-12-06T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}+00:00"
    for d in doc["devices"]:
        d["uuid"] = f"GPU-{i:08x}-0000-0000-0000-{d['ordinal']:012x}"
    fault = FAULTS.get(node, ("", None))[0]
    for t in doc["testcases"]:
        for m in t["matrices"]:
            n_rows = len(m["row_labels"])
            for r, row in enumerate(m["values"]):
                for c, v in enumerate(row):
                    if v is not None:
                        f = _factor(
                            fault,
                            m["description"],
                            m["row_labels"][r],
                            m["column_labels"][c],
                            n_rows,
                        )
                        f = 1 / f if m["unit"] == "s" else f
                        row[c] = v * f * (1 + 0.01 * rng.gauss(0, 1))
    return doc


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the reading workers)."""
    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _base(path: str | None, folder: Path) -> dict[str, Any]:
    if path:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    out = folder / "base.json"
    cmd = [sys.executable, "-m", "gpubw", "--simulate", "h200x8", "-j", "-o", str(out), "-q"]
    subprocess.run(cmd, check=True)
    return json.loads(out.read_text(encoding="utf-8"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--base", help="an h200x8 gpubw JSON report (default: simulate one)")
    p.add_argument(
        "--keep", help="make the reports in this folder and keep them; reuse them if there"
    )
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpubw-fleet-") as tmp:
        folder = Path(tmp)
        reports = Path(a.keep) if a.keep else folder / "reports"
        reports.mkdir(exist_ok=True)
        t0 = time.perf_counter()
        if len(list(reports.glob("n*.json"))) != a.nodes:
            base = _base(a.base, folder)
            (folder / "base.json").unlink(missing_ok=True)
            for i in range(a.nodes):
                doc = json.dumps(node_doc(base, i))
                (reports / f"n{i:04d}.json").write_text(doc, encoding="utf-8")
        made = time.perf_counter() - t0
        size = sum(f.stat().st_size for f in reports.iterdir())
        load = os.getloadavg()
        c0, t0 = _cpu(), time.perf_counter()
        gathered = gather([reports])
        c1, t1 = _cpu(), time.perf_counter()
        found, _ = fleets(gathered.entries, Settings())
        c2, t2 = _cpu(), time.perf_counter()
        report = analyse([reports])
        c3, t3 = _cpu(), time.perf_counter()
        cmd = [sys.executable, "-m", "gpubw", "fleet", str(reports), "-o", str(folder / "out.txt")]
        code = subprocess.run(cmd, check=False).returncode
        c4, t4 = _cpu(), time.perf_counter()
        figures = sum(int((~np.isnan(f.values)).sum()) for f in found)
        print(f"{a.nodes} reports ({size / 1e6:.0f} MB, {figures} figures) written in {made:.1f} s")
        print(
            f"CPUs: {len(os.sched_getaffinity(0))}; "
            f"load average before: {load[0]:.2f} {load[1]:.2f}"
        )
        print("wall and CPU seconds (this process and its workers):")
        print(f"read (gather):             {t1 - t0:6.2f} s wall, {c1 - c0:6.2f} s CPU")
        print(f"statistics (fleets):       {t2 - t1:6.2f} s wall, {c2 - c1:6.2f} s CPU")
        print(f"all, in-process (analyse): {t3 - t2:6.2f} s wall, {c3 - c2:6.2f} s CPU")
        print(
            f"gpubw fleet DIR -o FILE:   {t4 - t3:6.2f} s wall, {c4 - c3:6.2f} s CPU (exit {code})"
        )
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        got = {(f.node, f.scope, f.gpu, f.peer) for f in report.all_findings}
        want = {
            (node, *finding) for node, (_, finding) in FAULTS.items() if int(node[1:]) < a.nodes
        }
        for f in report.all_findings:
            print(
                f"  {f.describe()}: {len(f.figures)} of {f.judged} figures, "
                f"worst ratio {f.worst.ratio:.3f}"
            )
        if got != want:
            print(
                f"findings differ from the faults: got {sorted(got, key=str)}, "
                f"want {sorted(want, key=str)}"
            )
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
