#!/usr/bin/env python3
"""``gpubw fleet --db`` at scale (issue 38, goal: ingest of 1,000 reports <= 20 s on the
2-core machine): the fleet of benchmarks/fleet_scale.py (N node reports of 8 GPUs, the
default suite, each its own host, UUIDs, time and noise) added to a history file, timed:

* the reading alone (in worker processes, as the command reads), for comparison;
* the ingest, in-process: every file read so and its cells added in one transaction,
  with SQLite's default rollback journal and, into another file, with WAL;
* the same reports added again (each a no-op: its digest is there);
* ``gpubw fleet DIR --db F`` as a user runs it (ingest, statistics, findings, text);
* ``gpubw fleet --db F --since 3650d`` (the fleet from the history alone, and every GPU's
  trend over the window).

    python benchmarks/fleet_db.py                  # 1,000 nodes
    python benchmarks/fleet_db.py --nodes 200 --base my-h200x8.json

Prints each step's wall and CPU seconds (this process and its children: on a busy machine
the CPU seconds are the figure to compare), the file's size and rows, and the load average
before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from fleet_scale import _base, node_doc

from gpubw.fleet.gather import read_all, report_files
from gpubw.fleet.history import open_history


def ingest(reports: Path, db: Path, journal: str | None = None) -> tuple[int, int]:
    """Every report of the folder added to ``db``; (added, already there)."""
    with open_history(str(db), create=True) as history:
        if journal:
            history.conn.execute(f"PRAGMA journal_mode = {journal}")
        for _ in history.keep(read_all(report_files([reports]))):
            pass
        return history.added, history.known


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the reading workers, the
    gpubw commands)."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


def timed(what: str, work: Callable[[], object]) -> object:
    """Runs ``work``; prints its wall and CPU seconds and what it returned."""
    t0, c0 = time.perf_counter(), _cpu()
    out = work()
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    print(f"{what:<44} wall {wall:6.2f} s  CPU {cpu:6.2f} s  {out}")
    return out


def gpubw(*args: str) -> int:
    cmd = [sys.executable, "-m", "gpubw", "fleet", *args]
    return subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL).returncode


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--base", help="an h200x8 gpubw JSON report (default: simulate one)")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpubw-fleet-db-") as tmp:
        folder = Path(tmp)
        base = _base(a.base, folder)
        reports = folder / "reports"
        reports.mkdir()
        for i in range(a.nodes):
            (reports / f"n{i:04d}.json").write_text(json.dumps(node_doc(base, i)), encoding="utf-8")
        load = os.getloadavg()
        print(f"{a.nodes} reports; CPUs: {len(os.sched_getaffinity(0))}; load before {load[0]:.2f}")
        db, wal = folder / "fleet.db", folder / "wal.db"
        timed("read only (no history)", lambda: sum(1 for _ in read_all(report_files([reports]))))
        timed("ingest (rollback journal)", lambda: ingest(reports, db))
        timed("ingest (WAL)", lambda: ingest(reports, wal, "WAL"))
        timed("ingest again (each a no-op)", lambda: ingest(reports, db))
        conn = sqlite3.connect(db)
        rows = [
            conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("reports", "cells")
        ]
        conn.close()
        print(f"file: {db.stat().st_size / 1e6:.0f} MB, {rows[0]} reports, {rows[1]} cells")
        out = str(folder / "out.txt")
        timed(
            "gpubw fleet DIR --db NEW -o FILE",
            lambda: gpubw(str(reports), "--db", str(folder / "new.db"), "-o", out),
        )
        timed(
            "gpubw fleet --db F --since 3650d -o FILE",
            lambda: gpubw("--db", str(db), "--since", "3650d", "-o", out),
        )
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
