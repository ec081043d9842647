#!/usr/bin/env python3
"""Tune the device-memory kernels on real hardware: `python3 benchmarks/tune_copy.py kernels
OUT.json [SIZE_MIB]` (needs CuPy, which the lent H200 machines have).

The kernels are gpubw's own source files (src/gpubw/kernels/gpubw.cu and the stream plugin's
stream.cu), compiled by NVRTC through CuPy with each variant's macros, launched over arrays of
SIZE_MIB (default 4096) MiB each. A sample is `LOOPS` passes between two CUDA events (in one
launch for a resident grid, one launch per pass for a grid that covers the array once);
bytes are counted as gpubw counts them (copy/scale 2 x array, add/triad 3 x, read and write
1 x); the figure is the median of SAMPLES samples after one warm-up sample. Before each
variant the output array is poisoned (NaN) and after it the whole result is compared with the
exact expected value, so a variant that skips work fails instead of winning.

The search is adaptive but every variant it tries is written to OUT.json:
  1. launch shapes (layout, block, unroll, blocks per SM or one-shot) with the default hints;
  2. every load/store cache-hint pair on the best shape of each operation;
  3. the six best shapes again with the best hints; 4. the best three re-measured at SIZE, 1 GiB and
     256 MiB to show the run-to-run spread and the launch overhead of one-shot grids.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {
    "gpubw": ROOT / "src/gpubw/kernels/gpubw.cu",
    "stream": ROOT / "plugins/gpubw-stream/src/gpubw_stream/stream.cu",
}
MIB = 1 << 20
LOOPS, SAMPLES = 16, 5
# operation: (source, kernel, arrays read, arrays written)
OPS = {
    "gpubw_copy": ("gpubw", "gpubw_copy", 1, 1),
    "copy": ("stream", "stream_copy", 1, 1),
    "scale": ("stream", "stream_scale_f32", 1, 1),
    "add": ("stream", "stream_add_f32", 2, 1),
    "triad": ("stream", "stream_triad_f32", 2, 1),
    "write": ("stream", "stream_write", 0, 1),
    "read": ("stream", "stream_read_f32", 1, 0),
}
PAT3 = 0x4040000040400000  # two fp32 3.0


class Bench:
    def __init__(self, size: int) -> None:
        import cupy as cp

        self.cp = cp
        self.full = [cp.empty(size // 4, dtype=cp.float32) for _ in range(3)]
        self.resize(size)
        self.sm = cp.cuda.Device().attributes["MultiProcessorCount"]
        # one partial sum per block, for any grid over `size` bytes of 16-byte vectors
        self.partials = cp.zeros(size // 16 // 32 + 1024, dtype=cp.float64)
        self.modules: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}

    def resize(self, size: int) -> None:
        """Use the first ``size`` bytes of each array."""
        self.size, self.n, self.vecs = size, size // 4, size // 16
        self.a, self.b, self.c = (x[: self.n] for x in self.full)

    def module(self, source: str, defines: dict[str, str]) -> Any:
        key = (source, tuple(sorted(defines.items())))
        if key not in self.modules:
            opts = tuple(f"-D{k}={v}" for k, v in key[1])
            code = SOURCES[source].read_text()
            if source == "gpubw":  # the prelude gpubw.kernels.source() puts before each unit
                code = (ROOT / "src/gpubw/kernels/common.cuh").read_text() + code
            self.modules[key] = self.cp.RawModule(code=code, options=("--std=c++17", *opts))
        return self.modules[key]

    def setup(self, op: str) -> tuple[tuple[Any, ...], Any, float]:
        """Fill the arrays, poison the output; return (array args, output, expected)."""
        a, b, c = self.a, self.b, self.c
        a.fill(1.0), b.fill(2.0), c.fill(0.5)
        nan = float("nan")
        if op in ("gpubw_copy", "copy"):
            c.fill(nan)
            return (c, a), c, 1.0
        if op == "scale":
            b.fill(nan)
            return (b, c), b, 1.5
        if op == "add":
            c.fill(nan)
            return (c, a, b), c, 3.0
        if op == "triad":
            a.fill(nan)
            return (a, b, c), a, 3.5
        if op == "write":
            a.fill(nan)
            return (a,), a, 3.0
        return (a,), None, float(self.n)

    def run(self, op: str, v: dict[str, Any]) -> dict[str, Any]:
        cp, np = self.cp, __import__("numpy")
        source, kname, reads, writes = OPS[op]
        fn = self.module(source, v["defines"]).get_function(v.get("kernel", kname))
        block, unroll = v["block"], v["unroll"]
        tiled = v.get("tiled", True)
        work = -(-self.vecs // (block * unroll)) if tiled else -(-self.vecs // block)
        launch = v.get("launch", "oneshot" if v["per_sm"] == 0 else "persistent")
        if launch == "flat":  # one launch, one block per (pass, piece)
            grid, launches, per = work * LOOPS, 1, LOOPS
        elif launch == "oneshot":  # one launch per pass, one block per piece
            grid, launches, per = work, LOOPS, 1
        else:
            grid, launches, per = min(work, v["per_sm"] * self.sm), 1, LOOPS
        if op == "read" and grid > self.partials.size:
            raise ValueError(f"grid {grid} > {self.partials.size} partial sums")
        arrays, out, expected = self.setup(op)
        u64, u32 = np.uint64, np.uint32
        if op == "gpubw_copy":
            args = (*arrays, u64(self.vecs), u32(per))
        elif op == "write":
            args = (*arrays, u64(self.vecs), u64(PAT3), u64(PAT3), u32(per))
        elif op == "read":
            args = (*arrays, u64(self.vecs), self.partials, u32(per))
        else:
            args = (*arrays, u64(self.vecs), u32(per))
        counted = (reads + writes) * self.vecs * 16 * LOOPS
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        rates = []
        for s in range(SAMPLES + 1):
            e0.record()
            for _ in range(launches):
                fn((grid,), (block,), args)
            e1.record()
            e1.synchronize()
            if s or not SAMPLES:
                rates.append(counted / (cp.cuda.get_elapsed_time(e0, e1) / 1e3) / 1e9)
        if out is not None:
            ok = bool((out == expected).all())
        else:
            ok = float(self.partials[:grid].sum()) == expected
        return {
            "op": op,
            **v,
            "grid": grid,
            "launches_per_sample": launches,
            "size_bytes": self.size,
            "GBps": round(statistics.median(rates), 1),
            "samples": [round(r, 1) for r in rates],
            "verified": ok,
        }


def shapes(op: str) -> list[dict[str, Any]]:
    """Launch shapes to try (the hints are added by the caller)."""
    if (
        op == "gpubw_copy"
    ):  # its launch is gpubw.measure.initiators.copy_launch_shape: 2 x 512 per SM
        out = [{"block": 512, "unroll": u, "per_sm": 2} for u in (4, 8, 16)]
        out += [{"block": 512, "unroll": 8, "per_sm": p} for p in (1, 4)]
        out += [{"block": b, "unroll": u, "per_sm": 0} for b in (128, 256, 512) for u in (2, 4)]
        for s in out:
            s["defines"] = {
                "GPUBW_COPY_UNROLL": str(s["unroll"]),
                "GPUBW_COPY_BLOCK": str(s["block"]),
                "GPUBW_COPY_MIN_BLOCKS": str(min(2, max(1, s["per_sm"]))),
            }
        return out
    out = [{"layout": 0, "block": 256, "unroll": 4, "per_sm": 4}]  # the shipped 2026-11-29 one
    out += [{"layout": 0, "block": b, "unroll": 4, "per_sm": p} for b, p in ((128, 16), (512, 2))]
    out += [{"layout": 1, "block": 256, "unroll": 4, "per_sm": p} for p in (2, 4, 8)]
    out += [{"layout": 1, "block": 512, "unroll": u, "per_sm": 2} for u in (4, 8)]
    out += [{"layout": 1, "block": 128, "unroll": 4, "per_sm": 16}]
    out += [
        {"layout": 1, "block": b, "unroll": u, "per_sm": 0}
        for b in (128, 256, 512)
        for u in (1, 2, 4, 8)
        if not (op in ("add", "triad") and u == 8 and b == 512)
    ]
    for s in out:
        s["tiled"] = s["layout"] == 1
        s["defines"] = {
            "STREAM_LAYOUT": str(s["layout"]),
            "STREAM_BLOCK": str(s["block"]),
            "STREAM_UNROLL": str(s["unroll"]),
            "STREAM_READ_LAYOUT": str(s["layout"]),
        }
    return out


def hints(op: str) -> list[dict[str, str]]:
    if op == "gpubw_copy":
        return [
            {"GPUBW_COPY_LD": str(ld), "GPUBW_COPY_ST": str(st)}
            for ld in (0, 4, 5, 6)
            for st in (0, 1, 2, 3, 4)
        ]
    lds = (0, 1, 2, 5, 6) if op != "write" else (0,)
    sts = (0, 1, 3, 4) if op != "read" else (0,)
    if op == "write":
        sts = (0, 1, 2, 3, 4, 5)
    if op == "read":
        lds = (0, 1, 2, 3, 4, 5, 6)
    return [{"STREAM_LD": str(ld), "STREAM_ST": str(st)} for ld in lds for st in sts]


def flat_main(argv: list[str]) -> int:
    """Launch strategies at several sizes: the resident grid-stride kernels as shipped on
    2026-11-29, the flat kernels as one launch (loops x pieces blocks), one launch per pass
    and a resident grid, and gpubw_copy's shapes."""
    out_path = argv[0]
    sizes = [int(x) for x in argv[1].split(",")] if len(argv) > 1 else [4096, 1024, 256, 64, 16]
    bench = Bench(max(sizes) * MIB)
    rows: list[dict[str, Any]] = []
    old = {"STREAM_LAYOUT": "0", "STREAM_BLOCK": "256", "STREAM_UNROLL": "4"}
    flat = {"STREAM_BLOCK": "256"}
    names = {
        "copy": "stream_copy",
        "scale": "stream_scale_f32",
        "add": "stream_add_f32",
        "triad": "stream_triad_f32",
        "write": "stream_write",
    }
    for sz in sizes:
        bench.resize(sz * MIB)
        for op in ("copy", "triad", "write", "add", "scale"):
            k = names[op]
            flat_k = k + "_flat"
            variants = [
                {
                    "name": "shipped",
                    "block": 256,
                    "unroll": 4,
                    "per_sm": 4,
                    "tiled": False,
                    "defines": old,
                },
                {
                    "name": "u1-resident-8",
                    "block": 256,
                    "unroll": 1,
                    "per_sm": 8,
                    "tiled": False,
                    "defines": {**old, "STREAM_UNROLL": "1"},
                },
                {
                    "name": "flat-1launch",
                    "kernel": flat_k,
                    "block": 256,
                    "unroll": 1,
                    "per_sm": 0,
                    "launch": "flat",
                    "defines": flat,
                },
                {
                    "name": "flat-per-pass",
                    "kernel": flat_k,
                    "block": 256,
                    "unroll": 1,
                    "per_sm": 0,
                    "launch": "oneshot",
                    "defines": flat,
                },
                {
                    "name": "flat-resident-8",
                    "kernel": flat_k,
                    "block": 256,
                    "unroll": 1,
                    "per_sm": 8,
                    "launch": "persistent",
                    "defines": flat,
                },
                {
                    "name": "flat-1launch-b128",
                    "kernel": flat_k,
                    "block": 128,
                    "unroll": 1,
                    "per_sm": 0,
                    "launch": "flat",
                    "defines": flat,
                },
            ]
            if op == "write":
                variants.append(
                    {
                        "name": "flat-1launch-b512",
                        "kernel": flat_k,
                        "block": 512,
                        "unroll": 1,
                        "per_sm": 0,
                        "launch": "flat",
                        "defines": {"STREAM_BLOCK": "512"},
                    }
                )
            for v in variants:
                rows.append(_try(bench, op, v, f"F{sz}M"))
        if sz in (sizes[0], 256):
            # gpubw_copy as gpubw launches it (2 x 512 per SM), and gpubw_copy_flat (what
            # device_local_copy_sm launches beyond L2) as one launch of loops x pieces
            for u in (2, 8):
                g = {"GPUBW_COPY_UNROLL": str(u)}
                v = {"name": f"resident-2x512-u{u}", "block": 512, "unroll": u, "per_sm": 2}
                rows.append(_try(bench, "gpubw_copy", {**v, "defines": g}, f"F{sz}M"))
            for b, u in ((256, 1), (128, 2), (128, 1)):
                v = {
                    "name": f"flat-1launch-b{b}-u{u}",
                    "kernel": "gpubw_copy_flat",
                    "block": b,
                    "unroll": u,
                    "per_sm": 0,
                    "launch": "flat",
                }
                g = {"GPUBW_FLAT_UNROLL": str(u)}
                rows.append(_try(bench, "gpubw_copy", {**v, "defines": g}, f"F{sz}M"))
        with open(out_path, "w", encoding="utf-8") as f:
            json.dump({"loops": LOOPS, "samples": SAMPLES, "rows": rows}, f)
    return 0


def ncu_main(argv: list[str]) -> int:
    """One pass of each shape for Nsight Compute (no timing): run under
    ncu --clock-control none -k regex:'stream_|gpubw_' --metrics ... (gpu_check.sh ncu)."""
    global LOOPS, SAMPLES
    LOOPS, SAMPLES = 1, 0
    bench = Bench(4096 * MIB)
    old = {"STREAM_LAYOUT": "0", "STREAM_BLOCK": "256", "STREAM_UNROLL": "4"}
    for op, k in (
        ("copy", "stream_copy"),
        ("triad", "stream_triad_f32"),
        ("write", "stream_write"),
    ):
        for v in (
            {
                "name": "shipped",
                "block": 256,
                "unroll": 4,
                "per_sm": 4,
                "tiled": False,
                "defines": old,
            },
            {
                "name": "flat",
                "kernel": k + "_flat",
                "block": 256,
                "unroll": 1,
                "per_sm": 0,
                "launch": "flat",
                "defines": {"STREAM_BLOCK": "256"},
            },
        ):
            _try(bench, op, v, "ncu")
    return 0


def _try(bench: Bench, op: str, v: dict[str, Any], phase: str) -> dict[str, Any]:
    t = time.perf_counter()
    try:
        r = bench.run(op, v)
    except Exception as e:
        r = {"op": op, **v, "GBps": 0.0, "verified": False, "error": str(e)[:300]}
    r["phase"], r["seconds"] = phase, round(time.perf_counter() - t, 2)
    bad = "" if r.get("verified") else "  NOT VERIFIED " + r.get("error", "")
    print(
        f"{phase:6} {op:10} {v['name']:22} {r['GBps']:7.1f} grid={r.get('grid')}{bad}", flush=True
    )
    return r


def main(argv: list[str]) -> int:
    out_path = argv[0]
    size = int(argv[1]) * MIB if len(argv) > 1 else 4096 * MIB
    ops = argv[2].split(",") if len(argv) > 2 and argv[2] else list(OPS)
    # what decides the most first: copy (both kernels), triad, write, then the rest
    order = ["gpubw_copy", "copy", "triad", "write", "add", "scale", "read"]
    ops = sorted(ops, key=lambda o: order.index(o) if o in order else len(order))
    bench = Bench(size)
    rows: list[dict[str, Any]] = []
    budget = float(os.environ.get("TUNE_BUDGET_S", "240"))
    t0 = time.perf_counter()

    def save() -> None:
        with open(out_path, "w", encoding="utf-8") as f:
            doc = {"size_bytes": size, "loops": LOOPS, "samples": SAMPLES, "rows": rows}
            json.dump(doc, f)

    def attempt(op: str, v: dict[str, Any], phase: str) -> dict[str, Any]:
        if time.perf_counter() - t0 > budget:
            raise TimeoutError(f"TUNE_BUDGET_S={budget:.0f} s spent")
        t = time.perf_counter()
        try:
            r = bench.run(op, v)
        except Exception as e:  # a variant that does not compile or launch is recorded
            r = {"op": op, **v, "GBps": 0.0, "verified": False, "error": str(e)[:300]}
        r["phase"], r["seconds"] = phase, round(time.perf_counter() - t, 2)
        rows.append(r)
        save()
        tag = " ".join(f"{k.split('_')[-1]}={x}" for k, x in v["defines"].items())
        bad = "" if r.get("verified") else "  NOT VERIFIED " + r.get("error", "")
        print(f"{phase} {op:10} {r['GBps']:7.1f} grid={r.get('grid')} {tag}{bad}", flush=True)
        return r

    def ranked(op: str, phase: str) -> list[dict[str, Any]]:
        ok = [r for r in rows if r["op"] == op and r["phase"] == phase and r["verified"]]
        return sorted(ok, key=lambda r: -r["GBps"])

    def best(op: str, phase: str) -> dict[str, Any]:
        return ranked(op, phase)[0]

    def strip(r: dict[str, Any]) -> dict[str, Any]:
        keys = ("layout", "block", "unroll", "per_sm", "tiled", "defines")
        return {k: (dict(r[k]) if k == "defines" else r[k]) for k in keys if k in r}

    try:
        for op in ops:
            for s in shapes(op):
                attempt(op, s, "A")
            if not ranked(op, "A"):
                continue  # nothing verified: the rows say why
            b = strip(best(op, "A"))
            for h in hints(op):
                attempt(op, {**b, "defines": {**b["defines"], **h}}, "B")
            bh = best(op, "B")
            hint = {k: v for k, v in bh["defines"].items() if k in hints(op)[0]}
            top = [strip(r) for r in ranked(op, "A")[:6]]
            for s in top:
                attempt(op, {**s, "defines": {**s["defines"], **hint}}, "C")
        for op in ops:  # the best three again (spread), then at 1 GiB and 256 MiB
            top = [strip(r) for r in ranked(op, "C")[:3]]
            for sz in (size, 1024 * MIB, 256 * MIB):
                if sz <= size:
                    bench.resize(sz)
                    for v in top:
                        attempt(op, v, f"D{sz >> 20}M")
            bench.resize(size)
    except TimeoutError as e:
        print(f"stopped: {e}; {len(rows)} variants recorded")
    save()
    print("\nbest per operation (phase C), GB/s read + write:")
    for op in ops:
        if not ranked(op, "C"):
            print(f"  {op:10} no verified variant")
            continue
        r = best(op, "C")
        print(f"  {op:10} {r['GBps']:7.1f}  {r['defines']} per_sm={r['per_sm']} grid={r['grid']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
