#!/usr/bin/env python3
"""Issue 36 item 4: read-only and write-only device-memory kernels, launched several ways,
against PyTorch's ``sum`` and ``fill_`` on the same GPU in the same process (CuPy compiles and
launches the variants):

    python3 benchmarks/tune_oneway.py [--size-mib 4096] [--loops 16] [--samples 5] [--rounds 2]

A sample is ``loops`` passes between two CUDA events, after one warm-up sample; the figure is
the median of ``samples`` samples in GB/s (10^9 bytes/s), each pass counting the buffer's bytes
once (read: bytes read; write: bytes written), as gpubw's device_local_read_sm / _write_sm and
gpubw-stream's stream_read / stream_write count them. Variants run interleaved, ``rounds``
times, so drift between them shows.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

import cupy as cp
import torch

SRC = r"""
typedef unsigned long long u64; typedef unsigned int u32;
__device__ __forceinline__ uint4 ld_cg(const uint4 *p) {
    uint4 v; asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p)); return v; }
__device__ __forceinline__ uint4 ld_na(const uint4 *p) {
    uint4 v; asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p)); return v; }
__device__ __forceinline__ uint4 ld_plain(const uint4 *p) { return __ldg(p); }
__device__ __forceinline__ void st_def(uint4 *p, uint4 v) { *p = v; }
__device__ __forceinline__ void st_cs(uint4 *p, uint4 v) { __stcs(p, v); }
__device__ __forceinline__ void st_na(uint4 *p, uint4 v) {
    asm volatile("st.global.L1::no_allocate.v4.u32 [%0], {%1,%2,%3,%4};"
        :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory"); }
#define FOLD(v) (v.x ^ v.y ^ v.z ^ v.w)
// resident grid-stride, U loads in flight per thread
#define READ_RES(NAME, LD, U) \
extern "C" __global__ void NAME(const uint4 *__restrict__ s, u64 n, u32 *sink) { \
    const u64 T = (u64)gridDim.x * blockDim.x; u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; \
    u32 f = 0; \
    for (; i + (U - 1) * T < n; i += U * T) { uint4 v[U]; \
        _Pragma("unroll") for (int k = 0; k < U; ++k) v[k] = LD(s + i + k * T); \
        _Pragma("unroll") for (int k = 0; k < U; ++k) f ^= FOLD(v[k]); } \
    for (; i < n; i += T) { uint4 v = LD(s + i); f ^= FOLD(v); } \
    if (f == 0x5EEDF00DU) *sink = f; }
// flat: V consecutive-block vectors per thread, grid covers the buffer once
#define READ_FLAT(NAME, LD, V) \
extern "C" __global__ void NAME(const uint4 *__restrict__ s, u64 n, u32 *sink) { \
    const u64 base = (u64)blockIdx.x * blockDim.x * V + threadIdx.x; u32 f = 0; uint4 v[V]; \
    _Pragma("unroll") for (int k = 0; k < V; ++k) { u64 i = base + (u64)k * blockDim.x; \
        v[k] = i < n ? LD(s + i) : make_uint4(0, 0, 0, 0); } \
    _Pragma("unroll") for (int k = 0; k < V; ++k) f ^= FOLD(v[k]); \
    if (f == 0x5EEDF00DU) *sink = f; }
#define WRITE_RES(NAME, ST, U) \
extern "C" __global__ void NAME(uint4 *__restrict__ d, u64 n, u32 val) { \
    const uint4 v = make_uint4(val, val, val, val); \
    const u64 T = (u64)gridDim.x * blockDim.x; u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; \
    for (; i + (U - 1) * T < n; i += U * T) { \
        _Pragma("unroll") for (int k = 0; k < U; ++k) ST(d + i + k * T, v); } \
    for (; i < n; i += T) ST(d + i, v); }
#define WRITE_FLAT(NAME, ST, V) \
extern "C" __global__ void NAME(uint4 *__restrict__ d, u64 n, u32 val) { \
    const uint4 v = make_uint4(val, val, val, val); \
    const u64 base = (u64)blockIdx.x * blockDim.x * V + threadIdx.x; \
    _Pragma("unroll") for (int k = 0; k < V; ++k) { u64 i = base + (u64)k * blockDim.x; \
        if (i < n) ST(d + i, v); } }
READ_RES(r_res_cg_u8, ld_cg, 8)
READ_RES(r_res_na_u8, ld_na, 8)
READ_RES(r_res_plain_u8, ld_plain, 8)
READ_RES(r_res_na_u16, ld_na, 16)
READ_FLAT(r_flat_na_1, ld_na, 1)
READ_FLAT(r_flat_na_4, ld_na, 4)
READ_FLAT(r_flat_cg_4, ld_cg, 4)
READ_FLAT(r_flat_plain_4, ld_plain, 4)
READ_FLAT(r_flat_na_8, ld_na, 8)
WRITE_RES(w_res_def_u8, st_def, 8)
WRITE_RES(w_res_cs_u8, st_cs, 8)
WRITE_FLAT(w_flat_def_1, st_def, 1)
WRITE_FLAT(w_flat_def_4, st_def, 4)
WRITE_FLAT(w_flat_cs_4, st_cs, 4)
WRITE_FLAT(w_flat_na_4, st_na, 4)
WRITE_FLAT(w_flat_def_8, st_def, 8)
"""

# name: (kernel, block, grid: "res<k>" = k blocks per SM, "flat<V>" = once over the buffer)
READS = {
    "r_res_cg_u8": (512, "res2"),
    "r_res_na_u8": (512, "res2"),
    "r_res_plain_u8": (512, "res2"),
    "r_res_na_u16": (1024, "res1"),
    "r_flat_na_1": (256, "flat1"),
    "r_flat_na_4": (256, "flat4"),
    "r_flat_cg_4": (256, "flat4"),
    "r_flat_plain_4": (256, "flat4"),
    "r_flat_na_8": (256, "flat8"),
}
WRITES = {
    "w_res_def_u8": (512, "res2"),
    "w_res_cs_u8": (512, "res2"),
    "w_flat_def_1": (256, "flat1"),
    "w_flat_def_4": (256, "flat4"),
    "w_flat_cs_4": (256, "flat4"),
    "w_flat_na_4": (256, "flat4"),
    "w_flat_def_8": (256, "flat8"),
}


def timed(op: Callable[[], None], loops: int, samples: int, nbytes: int) -> float:
    """Median GB/s over samples of `loops` passes (one warm-up sample first)."""
    figures = []
    for s in range(samples + 1):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        for _ in range(loops):
            op()
        b.record()
        b.synchronize()
        if s:
            figures.append(nbytes * loops / (cp.cuda.get_elapsed_time(a, b) / 1e3) / 1e9)
    return statistics.median(figures)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=4096)
    ap.add_argument("--loops", type=int, default=16)
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    nbytes = args.size_mib << 20
    n = nbytes // 16
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    mod = cp.RawModule(code=SRC, options=("-std=c++17",))
    t = torch.ones(nbytes // 4, dtype=torch.float32, device="cuda")
    buf = cp.from_dlpack(t)  # the same memory for every variant
    sink = cp.zeros(1, dtype=cp.uint32)
    ops: dict[str, Callable[[], None]] = {
        "torch_sum": lambda: t.sum(),
        "torch_fill_": lambda: t.fill_(1.0),
    }
    for table, is_read in ((READS, True), (WRITES, False)):
        for name, (block, shape) in table.items():
            k = mod.get_function(name)
            per = int(shape[4:]) if shape.startswith("flat") else 1
            grid = sms * int(shape[3:]) if shape.startswith("res") else -(-n // (block * per))
            last = (
                (buf, cp.uint64(n), sink) if is_read else (buf, cp.uint64(n), cp.uint32(0x3F800000))
            )
            ops[name] = lambda k=k, g=grid, b=block, a=last: k((g,), (b,), a)
    results: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for name, op in ops.items():
            results.setdefault(name, []).append(timed(op, args.loops, args.samples, nbytes))
    torch.cuda.synchronize()
    assert float(t.sum()) == nbytes // 4, "fill variants must leave 1.0 everywhere"
    for name, vals in results.items():
        ref = results["torch_sum" if name.startswith(("r_", "torch_sum")) else "torch_fill_"]
        ratio = statistics.median(vals) / statistics.median(ref)
        print(
            f"{name:16s} {statistics.median(vals):8.1f} GB/s  x{ratio:.3f}",
            [round(v, 1) for v in vals],
        )


if __name__ == "__main__":
    main()
