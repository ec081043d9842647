#!/usr/bin/env python3
"""Issue 35/36: tune gpubw's TMA copy kernel (gpubw_copy_tma) against the copy engine and the
SM copy on one GPU, through gpubw's own testcases (same protocol, bytes counted once):

    python3 benchmarks/tune_tma.py [SIZE_MIB] [ROUNDS]

Each variant runs in a child process that recompiles the kernels with GPUBW_KERNEL_DEFINES
(GPUBW_TMA_CHUNK bytes per bulk copy, GPUBW_TMA_STAGES buffers per block; their product must
fit a block's 48 KB of static shared memory) and sets the blocks per SM of the launch
(gpubw.measure.initiators.TMA_BLOCKS_PER_SM, TMA_CHUNK). Variants are interleaved ROUNDS
times; printed: each one's GB/s per round and its median's ratio to device_local_copy (CE).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

# name: (chunk bytes, stages, blocks per SM)
VARIANTS = {
    "c8k-s4-b4": (8192, 4, 4),  # the shipped one
    "c8k-s4-b2": (8192, 4, 2),
    "c8k-s4-b6": (8192, 4, 6),
    "c16k-s2-b4": (16384, 2, 4),
    "c16k-s2-b6": (16384, 2, 6),
    "c4k-s8-b4": (4096, 8, 4),
    "c8k-s5-b4": (8192, 5, 4),
    "c12k-s3-b4": (12288, 3, 4),
}


def child(name: str, mib: int) -> dict[str, float]:
    """Run the TMA, CE and SM local copies with one variant; GB/s per testcase."""
    chunk, stages, per_sm = VARIANTS[name]
    os.environ["GPUBW_KERNEL_DEFINES"] = f"GPUBW_TMA_CHUNK={chunk},GPUBW_TMA_STAGES={stages}"
    import gpubw.measure.initiators as ini
    from gpubw.api import run

    ini.TMA_BLOCKS_PER_SM = per_sm
    ini.TMA_CHUNK = chunk
    keys = ["device_local_copy_tma"] + (
        ["device_local_copy", "device_local_copy_sm"] if name == "c8k-s4-b4" else []
    )
    report = run(keys, sizes=[mib << 20], samples=5)
    out = {}
    for t in report.testcases:
        for m in t.matrices[:1]:
            out[t.key] = round(m.values[0][0] / 1e9, 1) if m.values[0][0] else float("nan")
    return out


def main() -> int:
    if sys.argv[1:2] == ["child"]:
        print(json.dumps(child(sys.argv[2], int(sys.argv[3]))))
        return 0
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    got: dict[str, list[float]] = {}
    for _ in range(rounds):
        for name in VARIANTS:
            p = subprocess.run(
                [sys.executable, __file__, "child", name, str(mib)],
                capture_output=True,
                encoding="utf-8",
                check=False,
            )
            if p.returncode:
                print(name, "failed:", p.stderr.strip().splitlines()[-1:] or p.returncode)
                continue
            for key, v in json.loads(p.stdout.splitlines()[-1]).items():
                got.setdefault(key if key != "device_local_copy_tma" else name, []).append(v)
    ce = statistics.median(got.get("device_local_copy", [float("nan")]))
    for name, vals in got.items():
        print(
            f"{name:22s} median {statistics.median(vals):8.1f} GB/s",
            f"x{statistics.median(vals) / ce:.3f} of CE",
            vals,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
