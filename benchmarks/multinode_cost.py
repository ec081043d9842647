"""Where the time of a multinode run goes under a real MPI launcher (issue 23 item 6).

    mpirun -np 2 python3 benchmarks/multinode_cost.py OUTDIR [--poll-max-us U] [gpubw options ...]

Runs ``gpubw [gpubw options]`` in every rank, in this process, with timers around the parts
of a multinode testcase: each cell a rank takes part in (``series.measure_own_pairs``: a rank
outside a cell takes no part in it), each collective of the world or of a group of ranks
(barrier, bcast, gather, allgather, allreduce, agree, the groups' allgather and agree: every
one goes through ``World._run``; those between two cells are the series' hand-overs),
and each collective allocation (``SharedBuffer.create``: the export and import of one
buffer's handle by every rank; ``create_all``: every rank's at once). A cell's time
*outside the copies* is its wall time minus the time of its measured copies (samples x
loops x bytes / the sample's bandwidth, the slowest pair of each sample: what the events
timed); it holds the fills, the warm-up copies, queuing, verification and the agreement
points. Each rank writes
OUTDIR/cost-rank<R>.json (every cell and testcase); rank 0 prints one line per testcase:

    key  cells  cell wall (ms)  copies (ms)  outside (ms)  share  collectives/cell  (ms)
    allocations (ms, per testcase)  testcase wall outside cells (ms)  hand-overs (per cell, ms)

``--poll-max-us U`` sets the longest sleep between two polls of a waiting MPI rank
(``gpubw.world.mpi._MAX_SLEEP_S``, 200 µs in gpubw) for this run: what the agreements cost
with a tighter poll.

Times are means per cell in milliseconds, from rank 0, over the cells it issues; the JSON
also has the cells it only watches (rank 0 takes part in every cell: ``cells_watched``,
``watched_cell_ms``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from gpubw.cli import main as gpubw_main
from gpubw.measure import series
from gpubw.memory import shared
from gpubw.runner import core
from gpubw.world import base

_state: dict[str, Any] = {"key": None, "cell": None, "tc_start": 0.0}
_cells: list[dict[str, Any]] = []
_testcases: list[dict[str, Any]] = []
_alloc: dict[str, list[float]] = defaultdict(list)
_outside_cells: dict[str, list[float]] = defaultdict(list)
_handovers: dict[str, list[float]] = defaultdict(list)


def _copy_seconds(part: dict[int, tuple[int, tuple[float, ...]]], loops: int) -> float:
    """The measured copies' time of this rank's pairs of one cell: per sample, the slowest
    pair's bytes x loops / its bandwidth, summed over samples."""
    figures = list(part.values())
    samples = len(figures[0][1]) if figures else 0
    total = 0.0
    for s in range(samples):
        total += max(n * loops / rates[s] for n, rates in figures if rates[s])
    return total


def _wrap_run(orig: Callable[..., Any]) -> Callable[..., Any]:
    def timed(self: Any, name: str, timeout_s: Any, body: Any, group: Any = None) -> Any:
        t0 = time.perf_counter()
        try:
            return orig(self, name, timeout_s, body, group)
        finally:
            dt = time.perf_counter() - t0
            cell = _state["cell"]
            if cell is not None:
                cell["collectives"] += 1
                cell["collective_s"] += dt
            elif _state["key"] is not None:
                _outside_cells[_state["key"]].append(dt)
                if group is not None:
                    _handovers[_state["key"]].append(dt)

    return timed


def _wrap_measure(orig: Callable[..., Any]) -> Callable[..., Any]:
    def timed(self: Any, pairs: Any, gate: Any) -> Any:
        me = self.world.rank
        issuing = any(p.rank == me for p in pairs)  # else rank 0 watching another's cell
        cell = {"key": _state["key"], "collectives": 0, "collective_s": 0.0, "issuing": issuing}
        _state["cell"] = cell
        t0 = time.perf_counter()
        try:
            part, labels = orig(self, pairs, gate)
        finally:
            cell["wall_s"] = time.perf_counter() - t0
            _state["cell"] = None
        cell["copies_s"] = _copy_seconds(part, self.loops)
        cell["bytes"] = int(sum(n for n, _ in part.values()))
        _cells.append(cell)
        return part, labels

    return timed


def _timed_create(create: Callable[..., Any]) -> Callable[..., Any]:
    def timed(cls: Any, *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return create(cls, *args)
        finally:
            _alloc[_state["key"]].append(time.perf_counter() - t0)

    return timed


def _wrap_one(orig: Callable[..., Any]) -> Callable[..., Any]:
    def timed(entry: Any, *args: Any) -> Any:
        _state["key"] = entry.key
        t0 = time.perf_counter()
        try:
            return orig(entry, *args)
        finally:
            _testcases.append({"key": entry.key, "wall_s": time.perf_counter() - t0})
            _state["key"] = None

    return timed


def _install() -> None:
    base.World._run = _wrap_run(base.World._run)  # type: ignore[method-assign]
    series.measure_own_pairs = _wrap_measure(series.measure_own_pairs)
    for name in ("create", "create_all"):  # one owner's, every owner's at once
        create = getattr(shared.SharedBuffer, name).__func__
        setattr(shared.SharedBuffer, name, classmethod(_timed_create(create)))
    core._run_one = _wrap_one(core._run_one)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _summary(key: str, wall_s: float) -> dict[str, Any]:
    every = [c for c in _cells if c["key"] == key]
    cells = [c for c in every if c["issuing"]]
    per = {
        "key": key,
        "cells": len(cells),
        "cells_watched": len(every) - len(cells),
        "watched_cell_ms": _mean([c["wall_s"] for c in every if not c["issuing"]]) * 1e3,
        "cell_wall_ms": _mean([c["wall_s"] for c in cells]) * 1e3,
        "copies_ms": _mean([c["copies_s"] for c in cells]) * 1e3,
        "collectives_per_cell": _mean([c["collectives"] for c in cells]),
        "collective_ms": _mean([c["collective_s"] for c in cells]) * 1e3,
        "allocations": len(_alloc[key]),
        "allocation_ms_total": sum(_alloc[key]) * 1e3,
        "collectives_outside_cells": len(_outside_cells[key]),
        "handovers": len(_handovers[key]),
        "handover_ms": _mean(_handovers[key]) * 1e3,
        "testcase_wall_ms": wall_s * 1e3,
        "outside_cells_ms": (wall_s - sum(c["wall_s"] for c in every)) * 1e3,
    }
    per["outside_ms"] = per["cell_wall_ms"] - per["copies_ms"]
    per["outside_share"] = per["outside_ms"] / per["cell_wall_ms"] if cells else 0.0
    return per


def _print(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'testcase':58} {'cells':>5} {'cell ms':>9} {'copies':>9} {'outside':>8} "
        f"{'share':>6} {'coll/cell':>9} {'coll ms':>8} {'allocs':>6} {'alloc ms':>9} "
        f"{'setup ms':>9} {'hand-overs':>10} {'ms':>6}"
    )
    for r in rows:
        print(
            f"{r['key']:58} {r['cells']:5d} {r['cell_wall_ms']:9.2f} {r['copies_ms']:9.2f} "
            f"{r['outside_ms']:8.2f} {r['outside_share']:6.1%} {r['collectives_per_cell']:9.1f} "
            f"{r['collective_ms']:8.2f} {r['allocations']:6d} {r['allocation_ms_total']:9.1f} "
            f"{r['outside_cells_ms']:9.1f} {r['handovers']:10d} {r['handover_ms']:6.2f}"
        )


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    out, args = sys.argv[1], sys.argv[2:]
    if args[:1] == ["--poll-max-us"]:
        from gpubw.world import mpi

        mpi._MAX_SLEEP_S = float(args[1]) * 1e-6
        args = args[2:]
    os.makedirs(out, exist_ok=True)
    _install()
    start = time.perf_counter()
    code = gpubw_main(args)
    wall = time.perf_counter() - start
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
    rows = [_summary(t["key"], t["wall_s"]) for t in _testcases]
    record = {
        "rank": rank,
        "exit_code": code,
        "wall_s": wall,
        "argv": args,
        "testcases": rows,
        "cells": _cells,
    }
    path = os.path.join(out, f"cost-rank{rank}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    if rank == 0:
        print(f"gpubw {' '.join(args)}: exit {code}, {wall:.1f} s")
        _print(rows)
    return code


if __name__ == "__main__":
    sys.exit(main())
