#!/usr/bin/env python3
"""Whether the simulated backend of this tree gives the figures of a baseline tree: each
check runs one ``gpubw --simulate`` command with both trees' sources and compares the two
reports with ``gpubw compare --threshold 0.0001 --fail-on both`` (every figure within 1e-6 of
itself, issue 37 item 3).

    mkdir -p /tmp/base-eng && git archive 5bc97f3 src | tar -x -C /tmp/base-eng
    python benchmarks/sim_equivalence.py [--base-src /tmp/base-eng/src] [a b c d]

Prints, for each check, its command, how many cells were compared and how many failed, and
the comparison's failing lines; exits 1 if a check failed or a command did not run. The
checks: (a) an 8-GPU GB200 rack with rate jitter (``/tmp/eq/j1.json``, skipped if absent),
multinode at 64 MiB; (b) ``h200x2``, the default suite; (c) ``h200x8``, the default suite;
(d) ``gb200nvl72``, multinode with 72 sampled pairs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
BASE_SRC = "/tmp/base-eng/src"
CHECKS = {
    "a": ["--simulate", "/tmp/eq/j1.json", "-p", "multinode", "-b", "64MiB"],
    "b": ["--simulate", "h200x2"],
    "c": ["--simulate", "h200x8"],
    "d": ["--simulate", "gb200nvl72", "-p", "multinode", "--sample-pairs", "72"],
}


def _gpubw(args: list[str], src: str, out: Path) -> None:
    """Run ``gpubw ARGS -j -o OUT`` with the package from ``src``."""
    env = dict(os.environ, PYTHONPATH=src)
    cmd = [sys.executable, "-m", "gpubw", *args, "-j", "-o", str(out)]
    done = subprocess.run(cmd, env=env, cwd=HERE, capture_output=True, encoding="utf-8")
    if not out.exists():
        raise SystemExit(f"{' '.join(cmd)} (PYTHONPATH={src}) wrote no report:\n{done.stderr}")


def check(key: str, base_src: str, work: Path) -> bool:
    """Run check ``key`` with both trees; print its cells and failures; whether it passed."""
    args = CHECKS[key]
    if args[1].startswith("/") and not Path(args[1]).exists():
        print(f"({key}) skipped: {args[1]} does not exist")
        return True
    new, old = work / f"{key}-new.json", work / f"{key}-old.json"
    start = time.perf_counter()
    _gpubw(args, str(HERE / "src"), new)
    _gpubw(args, base_src, old)
    cmd = [sys.executable, "-m", "gpubw", "compare", str(new), str(old)]
    cmd += ["--threshold", "0.0001", "--fail-on", "both", "--format", "json"]
    env = dict(os.environ, PYTHONPATH=str(HERE / "src"))
    done = subprocess.run(cmd, env=env, cwd=HERE, capture_output=True, encoding="utf-8")
    try:
        result = json.loads(done.stdout)
    except ValueError:
        print(f"({key}) gpubw compare failed (exit {done.returncode}): {done.stderr.strip()}")
        return False
    compared, failed = result.get("compared", 0), result.get("failed", 0)
    took = time.perf_counter() - start
    print(f"({key}) gpubw {' '.join(args)}: {compared} cells, {failed} failed ({took:.0f} s)")
    for w in result.get("warnings", []):
        print(f"     warning: {w}")
    for c in [c for c in result.get("cells", []) if c.get("fails")][:10]:
        where = f"{c['matrix']} [{c['row']}, {c['column']}]"
        print(f"     {where}: {c['candidate']!r} against {c['baseline_low']!r}")
    return done.returncode == 0 and failed == 0 and compared > 0


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("checks", nargs="*", help=f"some of {' '.join(CHECKS)} (default: all)")
    p.add_argument("--base-src", default=BASE_SRC, help=f"the baseline's src (default {BASE_SRC})")
    args = p.parse_args()
    unknown = [k for k in args.checks if k not in CHECKS]
    if unknown:
        raise SystemExit(f"unknown check {unknown[0]!r}: the checks are {', '.join(CHECKS)}")
    if not (Path(args.base_src) / "gpubw").is_dir():
        raise SystemExit(f"--base-src {args.base_src}: no gpubw package there")
    with tempfile.TemporaryDirectory(prefix="sim-eq-") as tmp:
        results = [check(k, args.base_src, Path(tmp)) for k in args.checks or CHECKS]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
