#!/usr/bin/env python3
"""Tune gpubw's SM copy kernel on real hardware: time each launch configuration on the paths
the SM testcases use (peer read/write over NVLink, host->device, device->host, device-local)
with gpubw's own MemcpyOperation (same gate, warm-up, events, median), and print GB/s.

    python3 benchmarks/tune_copy.py [--size-mib 512] [--json OUT.json]

Each configuration recompiles the kernel with GPUBW_KERNEL_DEFINES (unroll, min blocks) and
sets the launch shape to match (threads per block, blocks per SM).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

CONFIGS = [  # unroll, block, blocks per SM
    (8, 512, 2),
    (4, 512, 2),
    (16, 512, 1),
    (8, 1024, 1),
    (4, 512, 4),
    (8, 256, 4),
    (2, 512, 4),
    (4, 1024, 2),
]


def measure(size: int, unroll: int, block: int, per_sm: int) -> dict[str, float]:
    os.environ["GPUBW_KERNEL_DEFINES"] = (
        f"GPUBW_COPY_UNROLL={unroll},GPUBW_COPY_BLOCK={block},GPUBW_COPY_MIN_BLOCKS={per_sm}"
    )
    import gpubw.initiators as ini
    from gpubw import SM, Copy, DeviceBuffer, HostBuffer, MemcpyOperation, Prefer, RunOptions
    from gpubw.backend.cuda import CudaBackend
    from gpubw.system import System

    ini.COPY_BLOCK, ini.COPY_BLOCKS_PER_SM = block, per_sm
    out: dict[str, float] = {}
    with System(CudaBackend(), RunOptions(samples=3, loops=16)) as sysm:
        n = sysm.device_count
        op = MemcpyOperation(sysm, SM)
        opd = MemcpyOperation(sysm, SM, prefer=Prefer.DST)
        with (
            DeviceBuffer.allocate(sysm, 0, size) as d0,
            DeviceBuffer.allocate(sysm, 0, size) as e0,
            HostBuffer.allocate(sysm, size, 0) as h0,
        ):
            out["h2d"] = op.measure([Copy(h0, d0)]).pair_value(0)
            out["d2h"] = op.measure([Copy(d0, h0)]).pair_value(0)
            out["local"] = op.measure([Copy(e0, d0)]).pair_value(0)
            if n > 1:
                with DeviceBuffer.allocate(sysm, 1, size) as d1:
                    d0.enable_peer_access(d1)
                    out["peer_read"] = opd.measure([Copy(d1, d0)]).pair_value(0)
                    out["peer_write"] = op.measure([Copy(d0, d1)]).pair_value(0)
    return {k: v / 1e9 for k, v in out.items()}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--size-mib", type=int, default=512)
    p.add_argument("--json")
    p.add_argument("--config", help="unroll,block,per_sm (child mode)")
    a = p.parse_args()
    if a.config:
        u, b, s = (int(x) for x in a.config.split(","))
        print(json.dumps(measure(a.size_mib << 20, u, b, s)))
        return 0
    import subprocess

    rows = []
    for u, b, s in CONFIGS:
        r = subprocess.run(
            [sys.executable, __file__, "--size-mib", str(a.size_mib), "--config", f"{u},{b},{s}"],
            capture_output=True,
            text=True,
        )
        if r.returncode:
            res = {"error": (r.stderr.strip().splitlines() or ["?"])[-1]}
        else:
            res = json.loads(r.stdout.strip().splitlines()[-1])
        rows.append({"unroll": u, "block": b, "blocks_per_sm": s, **res})
        print(
            f"unroll {u:2} block {b:4} per_sm {s}: "
            + "  ".join(
                f"{k} {v:8.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in res.items()
            ),
            flush=True,
        )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
