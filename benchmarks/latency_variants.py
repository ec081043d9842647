#!/usr/bin/env python3
"""Issue 36 item 3: which part of the pointer chase makes gpubw's host latency read higher
than nvbandwidth's. nvbandwidth's recipe (2 MiB ring of 8-byte nodes, node i -> node i + 16,
grid = SMs x 1 thread, one launch per target block, floor(10^6 / SMs) steps each, events
around each launch, the sum of the launch times / 10^6), with the dereference compiled in
several ways, on pinned host memory and on device memory, interleaved:

    python3 benchmarks/latency_variants.py [--rounds 5] [--device 0]

Variants: ``volatile`` (gpubw's ``ld.volatile.u64``), ``generic`` (a plain C++ load through a
generic pointer, as nvbandwidth's ``p = p->next``), ``global`` (``ld.global.u64``) and
``relaxed`` (``ld.relaxed.gpu.global.u64``). CuPy compiles them with NVRTC and launches them.
Prints each variant's median over the rounds, in ns per access.
"""

from __future__ import annotations

import argparse
import array
import ctypes
import statistics

import cupy as cp

SRC = r"""
typedef unsigned long long u64;
#define CHASE(NAME, LOAD) \
extern "C" __global__ void NAME(const void *start, u64 steps, unsigned target, u64 *sink) { \
    if (blockIdx.x != target || threadIdx.x != 0) return; \
    u64 p = (u64)start; \
    for (u64 s = 0; s < steps; ++s) { u64 next; LOAD; p = next; } \
    *sink = p; }
CHASE(chase_volatile, asm volatile("ld.volatile.u64 %0, [%1];" : "=l"(next) : "l"(p) : "memory"))
CHASE(chase_generic, next = *(const u64 *)p)
CHASE(chase_global, asm volatile("ld.global.u64 %0, [%1];" : "=l"(next) : "l"(p) : "memory"))
CHASE(chase_relaxed,
      asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(next) : "l"(p) : "memory"))
"""
VARIANTS = ("volatile", "generic", "global", "relaxed")
RING = 2 << 20
ACCESSES = 1_000_000


def ring(base: int) -> bytes:
    """Node i holds the address of node i + 16 (mod nodes)."""
    addrs = array.array("Q", range(base, base + RING, 8))
    return (addrs[16:] + addrs[:16]).tobytes()


def chase(kernel: cp.RawKernel, start: int, sms: int, sink: cp.ndarray) -> float:
    """nvbandwidth's recipe: seconds per access."""
    stream = cp.cuda.Stream(non_blocking=False)
    steps = ACCESSES // sms
    total = 0.0
    with stream:
        for target in range(sms):
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record(stream)
            kernel(
                (sms,),
                (1,),
                (cp.uint64(start), cp.uint64(steps), cp.uint32(target), sink),
                stream=stream,
            )
            b.record(stream)
            stream.synchronize()
            total += cp.cuda.get_elapsed_time(a, b) / 1e3
    return total / ACCESSES


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", type=int, default=0)
    args = ap.parse_args()
    cp.cuda.Device(args.device).use()
    sms = cp.cuda.Device(args.device).attributes["MultiProcessorCount"]
    module = cp.RawModule(code=SRC, options=("-std=c++17",))
    kernels = {v: module.get_function(f"chase_{v}") for v in VARIANTS}
    pinned = cp.cuda.alloc_pinned_memory(RING)
    hbase = pinned.ptr
    ctypes.memmove(hbase, ring(hbase), RING)
    dev = cp.cuda.alloc(RING)
    staging = ctypes.create_string_buffer(ring(dev.ptr), RING)
    dev.copy_from_host(ctypes.addressof(staging), RING)
    sink = cp.zeros(1, dtype=cp.uint64)
    results: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for where, base in (("host", hbase), ("device", dev.ptr)):
            for v in VARIANTS:
                results.setdefault(f"{where} {v}", []).append(
                    chase(kernels[v], base, sms, sink) * 1e9
                )
    for key, vals in results.items():
        print(
            f"{key:16s} median {statistics.median(vals):8.1f} ns",
            "runs",
            [round(x, 1) for x in vals],
        )


if __name__ == "__main__":
    main()
