"""Where a run's time goes, per testcase: the timed copies against everything else (issue 36).

    gpubw -j -o r.json --trace [OPTIONS...]
    python benchmarks/overhead.py r.json [--json]

For each step of the report (a testcase at one size) it prints the step's wall time, the
time of its timed copies, the untimed rest broken down by category (allocation, host
registration, pattern fill, setup, enqueue, warm-up, verification, kernel load, NVML,
synchronisation, teardown, and ``other``: what no traced span covered) and the untimed part
as a percentage of the timed part; then the totals, and the run's time outside the steps.

The breakdown comes from the report's ``trace`` (``--trace``; :mod:`gpubw.model.trace`): its
events never overlap, and each step's ``testcase`` event is the step's wall time on the same
clock (monotonic on real GPUs; on the simulated backend its modelled time, which only moves
with the backend's calls). A report without a trace (an older one, or a run without
``--trace``) gets the estimate issue 36 made by hand: timed = samples x loops x bytes per copy
/ figure, summed over the cells of each testcase's first bandwidth matrix, against the step's
``duration_s``; its categories are then unknown.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

#: The untimed categories, in the order they are printed (``other`` is what no span covered).
UNTIMED = (
    "allocation",
    "host_registration",
    "pattern_fill",
    "setup",
    "enqueue",
    "warmup",
    "interference",
    "verification",
    "kernel_load",
    "nvml",
    "sync",
    "teardown",
)
#: Short column names of the text table.
SHORT = {
    "allocation": "alloc",
    "host_registration": "pin",
    "pattern_fill": "fill",
    "setup": "setup",
    "enqueue": "enq",
    "warmup": "warm",
    "interference": "interf",
    "verification": "verify",
    "kernel_load": "kernels",
    "nvml": "nvml",
    "sync": "sync",
    "teardown": "free",
    "other": "other",
}


def breakdown(report: Mapping[str, Any]) -> dict[str, Any]:
    """The report's steps and totals as plain data: ``clock``, ``steps`` (each: step,
    testcase, size, status, wall_s, timed_s, untimed_s, untimed_pct_of_timed, categories: s
    per category with ``other``), ``totals`` (the same sums), ``outside_s`` (traced time
    outside every step, per category) and ``run_s`` (the report's duration_s)."""
    trace = report.get("trace")
    steps = _traced(report, trace) if trace is not None else _estimated(report)
    totals: dict[str, float] = defaultdict(float)
    for s in steps:
        totals["wall_s"] += s["wall_s"]
        totals["timed_s"] += s["timed_s"]
        for cat, sec in (s["categories"] or {}).items():
            totals[cat] += sec
    totals["untimed_s"] = totals["wall_s"] - totals["timed_s"]
    outside: dict[str, float] = defaultdict(float)
    for e in (trace or {}).get("events", ()):
        if e["step"] is None:
            outside[e["category"]] += e["duration_ns"] / 1e9
    return {
        "clock": None if trace is None else trace.get("clock"),
        "steps": steps,
        "totals": {**totals, "untimed_pct_of_timed": _pct(totals["untimed_s"], totals["timed_s"])},
        "outside_s": dict(outside),
        "run_s": report.get("duration_s"),
    }


def _pct(part: float, whole: float) -> float | None:
    return None if whole <= 0 else 100.0 * part / whole


def _traced(report: Mapping[str, Any], trace: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each step's wall (its ``testcase`` event) and its events summed by category."""
    per: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    walls: dict[int, float] = {}
    for e in trace.get("events", ()):
        if e["step"] is None:
            continue
        if e["category"] == "testcase":
            walls[e["step"]] = e["duration_ns"] / 1e9
        else:
            per[e["step"]][e["category"]] += e["duration_ns"] / 1e9
    results = report.get("testcases", ())
    steps = []
    for step in sorted(walls):
        cats = {c: 0.0 for c in UNTIMED} | dict(per[step])  # every category, a newer one too
        timed = cats.pop("timed", 0.0)
        wall = walls[step]
        cats["other"] = wall - timed - sum(cats.values())
        result = results[step] if step < len(results) else {}
        steps.append(_row(step, result, wall, timed, cats))
    return steps


def _estimated(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Without a trace: timed = samples x loops x bytes / figure over the cells of each
    testcase's first bandwidth matrix; wall = the step's duration_s."""
    options = report.get("options", {})
    samples, loops = options.get("samples", 3), options.get("loops", 16)
    steps = []
    for step, t in enumerate(report.get("testcases", ())):
        timed = 0.0
        for m in t.get("matrices", ()):
            if m.get("unit") != "bytes/s" or not m.get("bytes_per_copy"):
                continue
            for row in m["values"]:
                for v in row:
                    if v:
                        timed += samples * loops * m["bytes_per_copy"] / v
            break
        steps.append(_row(step, t, float(t.get("duration_s") or 0.0), timed, None))
    return steps


def _row(
    step: int, result: Mapping[str, Any], wall: float, timed: float, cats: dict[str, float] | None
) -> dict[str, Any]:
    return {
        "step": step,
        "testcase": result.get("key"),
        "size": result.get("size_bytes"),
        "status": result.get("status"),
        "wall_s": wall,
        "timed_s": timed,
        "untimed_s": wall - timed,
        "untimed_pct_of_timed": _pct(wall - timed, timed),
        "categories": cats,
    }


def render(data: Mapping[str, Any]) -> str:
    """The breakdown as a text table (ms)."""
    cols = [*UNTIMED, "other"]
    traced = data["clock"] is not None
    head = f"{'#':>3} {'testcase':<48} {'wall':>9} {'timed':>9} {'untimed':>9} {'%timed':>7}"
    if traced:
        head += "".join(f" {SHORT[c]:>8}" for c in cols)
    lines = [
        f"clock: {data['clock'] or 'none (no trace: timed estimated from the figures)'}; "
        "times in ms; %timed: the untimed part as a percentage of the timed part",
        head,
    ]
    for s in data["steps"]:
        name = s["testcase"] or "?"
        if s["size"]:
            name += f" ({s['size'] / 2**20:g} MiB)"
        lines.append(_line(str(s["step"]), name[:48], s, cols if traced else ()))
    t = data["totals"]
    lines.append(_line("", "TOTAL", {**t, "categories": t}, cols if traced else ()))
    if data["outside_s"]:
        outside = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in sorted(data["outside_s"].items()))
        lines.append(f"outside the steps (traced): {outside}")
    if data["run_s"] is not None:
        lines.append(f"the run's duration_s (wall clock of the whole run): {data['run_s']:.3f} s")
    return "\n".join(lines)


def _line(step: str, name: str, s: Mapping[str, Any], cols: Sequence[str]) -> str:
    pct = s.get("untimed_pct_of_timed")
    out = (
        f"{step:>3} {name:<48} {s['wall_s'] * 1e3:9.1f} {s['timed_s'] * 1e3:9.1f} "
        f"{s['untimed_s'] * 1e3:9.1f} {'-' if pct is None else f'{pct:.0f}%':>7}"
    )
    cats = s.get("categories") or {}
    return out + "".join(f" {cats.get(c, 0.0) * 1e3:8.1f}" for c in cols)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("report", help="a gpubw JSON report (best made with --trace)")
    p.add_argument("--json", action="store_true", help="the breakdown as JSON")
    ns = p.parse_args(argv)
    try:
        with open(ns.report, encoding="utf-8") as f:
            report = json.load(f)
    except (OSError, ValueError) as exc:
        print(f"overhead.py: cannot read {ns.report}: {exc}", file=sys.stderr)
        return 2
    if not isinstance(report, dict) or "testcases" not in report:
        print(f"overhead.py: {ns.report} is not a gpubw JSON report", file=sys.stderr)
        return 2
    data = breakdown(report)
    print(json.dumps(data, indent=1) if ns.json else render(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
