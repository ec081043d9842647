#!/usr/bin/env python3
"""Tune gpubw's SM copy kernel on real hardware with gpubw's own MemcpyOperation (same gate,
warm-up, events, median as the testcases), printing GB/s per path.

    python3 benchmarks/tune_copy.py local   # kernel variants on device-local copies
    python3 benchmarks/tune_copy.py host    # grid sizes on host paths, one GPU and all at once
    python3 benchmarks/tune_copy.py peer    # kernel variants on NVLink peer read / write
    python3 benchmarks/tune_copy.py split   # the split-warp kernel, one GPU and all at once
    python3 benchmarks/tune_copy.py kernels OUT.json [SIZE_MIB]
                                            # device-memory kernels (gpubw_copy and every
                                            # STREAM kernel): launch shapes x cache hints
    python3 benchmarks/tune_copy.py flat OUT.json  # launch strategies at 16 MiB .. 4 GiB

Each variant runs in a child process that recompiles the kernel with GPUBW_KERNEL_DEFINES
(unroll, tiled layout, cache hints, launch bounds) and fixes the launch shape to match.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

MIB = 1 << 20
# name: (defines, block, blocks per SM or None, fixed grid or None)
VARIANTS = {
    "default": ("GPUBW_COPY_UNROLL=8", 512, 2, None),
    "u8-tiled-cgcs": ("GPUBW_COPY_UNROLL=8,GPUBW_COPY_TILED=1,GPUBW_COPY_HINT=2", 512, 2, None),
    "u8-stride-cg": ("GPUBW_COPY_UNROLL=8,GPUBW_COPY_TILED=0,GPUBW_COPY_HINT=0", 512, 2, None),
    "u8-tiled-cg": ("GPUBW_COPY_UNROLL=8,GPUBW_COPY_TILED=1,GPUBW_COPY_HINT=0", 512, 2, None),
    "u8-tiled-cs": ("GPUBW_COPY_UNROLL=8,GPUBW_COPY_TILED=1,GPUBW_COPY_HINT=1", 512, 2, None),
    "u8-stride-cs": ("GPUBW_COPY_UNROLL=8,GPUBW_COPY_TILED=0,GPUBW_COPY_HINT=1", 512, 2, None),
    "u16-tiled-cs-1": (
        "GPUBW_COPY_UNROLL=16,GPUBW_COPY_TILED=1,GPUBW_COPY_HINT=1,GPUBW_COPY_MIN_BLOCKS=1",
        512,
        1,
        None,
    ),
    "u8-tiled-cgcs-4": ("GPUBW_COPY_UNROLL=8,GPUBW_COPY_MIN_BLOCKS=2", 512, 4, None),
    "u4-tiled-cs-4": (
        "GPUBW_COPY_UNROLL=4,GPUBW_COPY_TILED=1,GPUBW_COPY_HINT=1,GPUBW_COPY_MIN_BLOCKS=4",
        512,
        4,
        None,
    ),
}
GRIDS = [16, 33, 66, 132, 264]


def child(mode: str, name: str, grid: int | None) -> dict[str, float]:
    defines, block, per_sm, fixed = VARIANTS[name]
    os.environ["GPUBW_KERNEL_DEFINES"] = f"{defines},GPUBW_COPY_BLOCK={block}"
    import gpubw.measure.initiators as ini
    from gpubw import (
        SM,
        SPLIT_WARP,
        Copy,
        DeviceBuffer,
        HostBuffer,
        Kind,
        MemcpyOperation,
        Prefer,
        RunOptions,
    )
    from gpubw.backend.cuda import CudaBackend
    from gpubw.memory.system import System

    g = grid or fixed

    def shape(device: object, elements: int) -> tuple[int, int]:
        n = g or per_sm * device.sm_count  # type: ignore[attr-defined]
        return min(n, max(1, -(-elements // block))), block

    ini.copy_launch_shape = shape
    out: dict[str, float] = {}
    size = 512 * MIB
    with System(CudaBackend(), RunOptions(samples=3, loops=16, sync_timeout_s=20)) as s:
        n = s.device_count
        loops = s.options.loops
        op = MemcpyOperation(s, SM, loops=loops)
        sw = MemcpyOperation(s, SPLIT_WARP, loops=loops)
        if mode == "local":
            for sz in (512 * MIB, 2048 * MIB):
                with DeviceBuffer.allocate(s, 0, sz) as a, DeviceBuffer.allocate(s, 0, sz) as b:
                    out[f"local{sz >> 20}M_rw"] = 2 * op.measure([Copy(a, b)]).pair_value(0)
        elif mode == "peer":
            with DeviceBuffer.allocate(s, 0, size) as a, DeviceBuffer.allocate(s, 1, size) as b:
                a.enable_peer_access(b)
                rd = MemcpyOperation(s, SM, prefer=Prefer.DST, loops=loops)
                out["peer_read"] = rd.measure([Copy(b, a)]).pair_value(0)
                out["peer_write"] = op.measure([Copy(a, b)]).pair_value(0)
        elif mode == "split":
            hs = [HostBuffer.allocate(s, d, size) for d in range(n)]
            ds = [DeviceBuffer.allocate(s, d, size) for d in range(n)]
            out["bidir"] = sw.measure([Copy(hs[0], ds[0])]).pair_value(0)
            out["bidir_all"] = sw.measure([Copy(h, d) for h, d in zip(hs, ds)]).pair_value(0)
            for b in hs + ds:
                b.close()
        else:
            hs = [HostBuffer.allocate(s, d, size) for d in range(n)]
            ds = [DeviceBuffer.allocate(s, d, size) for d in range(n)]
            out["h2d"] = op.measure([Copy(hs[0], ds[0])]).pair_value(0)
            out["d2h"] = op.measure([Copy(ds[0], hs[0])]).pair_value(0)
            out["bidir"] = sw.measure([Copy(hs[0], ds[0])]).pair_value(0)
            if n > 1:
                all_op = MemcpyOperation(s, SM, kind=Kind.FIRST, loops=loops)
                out["h2d_all"] = all_op.measure([Copy(h, d) for h, d in zip(hs, ds)]).pair_value(0)
                out["d2h_all"] = all_op.measure([Copy(d, h) for h, d in zip(hs, ds)]).pair_value(0)
                out["bidir_all"] = sw.measure([Copy(h, d) for h, d in zip(hs, ds)]).pair_value(0)
            for b in hs + ds:
                b.close()
    return {k: round(v / 1e9, 1) for k, v in out.items()}


def main() -> int:
    if sys.argv[1] == "kernels":
        from tune_kernels import main as kernels_main

        return kernels_main(sys.argv[2:])
    if sys.argv[1] == "flat":
        from tune_kernels import flat_main

        return flat_main(sys.argv[2:])
    if sys.argv[1] == "ncu":
        from tune_kernels import ncu_main

        return ncu_main(sys.argv[2:])
    if sys.argv[1] == "--child":
        mode, name, grid = sys.argv[2], sys.argv[3], sys.argv[4]
        print(json.dumps(child(mode, name, int(grid) or None)))
        return 0
    mode = sys.argv[1]
    jobs = (
        [("default", 0)]
        if mode == "split"
        else [(n, 0) for n in VARIANTS]
        if mode != "host"
        else [("default", 0)]
    )
    rows = []
    for name, grid in jobs:
        try:
            r = subprocess.run(
                [sys.executable, __file__, "--child", mode, name, str(grid)],
                capture_output=True,
                encoding="utf-8",
                timeout=150,
            )
        except subprocess.TimeoutExpired:
            res: dict[str, object] = {"error": "timed out after 150 s"}
        else:
            res = (
                json.loads(r.stdout.strip().splitlines()[-1])
                if r.returncode == 0
                else {"error": (r.stderr.strip().splitlines() or ["?"])[-1][:200]}
            )
        rows.append({"mode": mode, "variant": name, "grid": grid, **res})
        print(f"{mode:5} {name:15} grid {grid or 'auto':>4}: {res}", flush=True)
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
