#!/usr/bin/env python3
"""The peer harness: the same device-memory work as gpubw's kernels, done by PyTorch and CuPy
in one process on one GPU, timed the way gpubw times it, printed and written as JSON beside
gpubw's own figures from the same call.

    python3 benchmarks/peers.py OUT.json [--size-mib 4096] [--loops 16] [--samples 3]
                                [--gpubw REPORT.json] [--devices 0,1]

Work (fp32 arrays of SIZE each, the element count of gpubw's arrays): copy c = a, scale
b = 3c, add c = a + b, triad a = b + 3c, write a = 3 (fill), read sum(a). Bytes are counted
as gpubw counts them: every array read plus every array written once per pass (copy, scale:
2 x array; add, triad: 3 x; write, read: 1 x; the read's scalar result is not counted). A
sample is `loops` back-to-back operations between two CUDA events, after one warm-up sample;
the figure is the median of `samples` samples, in GB/s (10^9 bytes/s). Each operation's result
is checked against its exact value (the inputs are a = 1, b = 2, c = 0.5, as gpubw-stream's).

With --gpubw, the gpubw report of the same call (`gpubw -t device_local_copy_sm stream_copy
... -b SIZE -j`) is read and each row gets gpubw's figure on the same device, so the JSON
holds the whole comparison. benchmarks/gpu_check.sh's `peers` step runs both.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

MIB = 1 << 20
# row: (arrays read, arrays written, gpubw testcase, description)
ROWS = {
    "copy": (1, 1, "stream_copy", "c = a"),
    "scale": (1, 1, "stream_scale", "b = 3·c"),
    "add": (2, 1, "stream_add", "c = a + b"),
    "triad": (2, 1, "stream_triad", "a = b + 3·c"),
    "write": (0, 1, "stream_write", "a = 3 (fill, no reads)"),
    "read": (1, 0, "stream_read", "sum(a)"),
}
EXPECTED = {"copy": 1.0, "scale": 1.5, "add": 3.0, "triad": 3.5, "write": 3.0}


def nominal_bytes_per_s(device: int) -> float | None:
    """Bus width x memory clock x 2, from the driver (what gpubw's DeviceInfo reports)."""
    try:
        import cupy as cp

        attrs = cp.cuda.Device(device).attributes
        return float(attrs["GlobalMemoryBusWidth"]) / 8 * attrs["MemoryClockRate"] * 1e3 * 2
    except Exception:
        return None


def timed(run: Callable[[], None], loops: int, samples: int, event: Any, sync: Any) -> list[float]:
    """Seconds per sample: `loops` runs between two events, after one warm-up sample."""
    out = []
    for s in range(samples + 1):
        e0, e1 = event(), event()
        e0.record()
        for _ in range(loops):
            run()
        e1.record()
        e1.synchronize()
        if s:
            out.append(sync(e0, e1))
    return out


def torch_rows(n: int, device: int, loops: int, samples: int) -> dict[str, dict[str, Any]]:
    import torch

    dev = torch.device("cuda", device)
    torch.cuda.set_device(dev)
    a, b, c = (torch.empty(n, dtype=torch.float32, device=dev) for _ in range(3))
    res: dict[str, Any] = {}
    ops: dict[str, tuple[str, Callable[[], Any], Any]] = {
        "copy": ("c.copy_(a)", lambda: c.copy_(a), c),
        "scale": ("torch.mul(c, 3.0, out=b)", lambda: torch.mul(c, 3.0, out=b), b),
        "add": ("torch.add(a, b, out=c)", lambda: torch.add(a, b, out=c), c),
        "triad": ("torch.add(b, c, alpha=3.0, out=a)", lambda: torch.add(b, c, alpha=3, out=a), a),
        "write": ("a.fill_(3.0)", lambda: a.fill_(3.0), a),
        "read": ("a.sum()", lambda: res.__setitem__("sum", a.sum()), None),
    }
    out = {}
    for key, (code, fn, result) in ops.items():
        a.fill_(1.0), b.fill_(2.0), c.fill_(0.5)
        if result is not None:
            result.fill_(float("nan"))
        secs = timed(
            fn,
            loops,
            samples,
            lambda: torch.cuda.Event(enable_timing=True),
            lambda e0, e1: e0.elapsed_time(e1) / 1e3,
        )
        torch.cuda.synchronize()
        ok = (
            bool((result == EXPECTED[key]).all())
            if result is not None
            else (float(res["sum"]) == float(n))
        )
        out[key] = {"code": code, "seconds": secs, "verified": ok}
    return out


def cupy_rows(n: int, device: int, loops: int, samples: int) -> dict[str, dict[str, Any]]:
    import cupy as cp

    with cp.cuda.Device(device):
        a, b, c = (cp.empty(n, dtype=cp.float32) for _ in range(3))
        triad = cp.ElementwiseKernel("T b, T c", "T a", "a = b + (T)3 * c", "peers_triad")
        res: dict[str, Any] = {}
        ops: dict[str, tuple[str, Callable[[], Any], Any]] = {
            "copy": ("cupy.copyto(c, a)", lambda: cp.copyto(c, a), c),
            "scale": ("cupy.multiply(c, 3.0, out=b)", lambda: cp.multiply(c, 3.0, out=b), b),
            "add": ("cupy.add(a, b, out=c)", lambda: cp.add(a, b, out=c), c),
            "triad": ("ElementwiseKernel a = b + 3 * c", lambda: triad(b, c, a), a),
            "write": ("a.fill(3.0)", lambda: a.fill(3.0), a),
            "read": ("a.sum()", lambda: res.__setitem__("sum", a.sum()), None),
        }
        out = {}
        for key, (code, fn, result) in ops.items():
            a.fill(1.0), b.fill(2.0), c.fill(0.5)
            if result is not None:
                result.fill(float("nan"))
            secs = timed(
                fn,
                loops,
                samples,
                cp.cuda.Event,
                lambda e0, e1: cp.cuda.get_elapsed_time(e0, e1) / 1e3,
            )
            cp.cuda.Device().synchronize()
            ok = (
                bool((result == EXPECTED[key]).all())
                if result is not None
                else (float(res["sum"]) == float(n))
            )
            out[key] = {"code": code, "seconds": secs, "verified": ok}
    return out


def gpubw_figures(path: str, device: int) -> dict[str, dict[str, Any]]:
    """testcase key -> {GBps, samples, status} of device `device` from a gpubw JSON report."""
    with open(path, encoding="utf-8") as f:
        report = json.load(f)
    out = {}
    for t in report["testcases"]:
        for m in t.get("matrices", []):
            cols = m["column_labels"]
            if str(device) not in cols:
                continue
            j = cols.index(str(device))
            value = m["values"][0][j]
            samples = (m.get("samples") or [[[]] * len(cols)])[0][j] or []
            if value is None:
                continue
            out[m["key"]] = {
                "GBps": value / 1e9,
                "samples_GBps": [x / 1e9 for x in samples if x is not None],
                "bytes_counted": m.get("bytes_counted"),
                "status": t["status"],
            }
    return out


def one_device(args: argparse.Namespace, size: int, device: int) -> dict[str, Any]:
    """Both peers' rows on one device, with gpubw's figures of that device."""
    n = size // 4
    started = time.time()
    import cupy
    import torch

    tools = {"torch": torch_rows(n, device, args.loops, args.samples)}
    torch.cuda.empty_cache()  # the peers' arrays are freed before the next tool allocates
    tools["cupy"] = cupy_rows(n, device, args.loops, args.samples)
    cupy.get_default_memory_pool().free_all_blocks()
    ours = gpubw_figures(args.gpubw, device) if args.gpubw else {}
    rows = []
    for key, (reads, writes, testcase, what) in ROWS.items():
        counted = (reads + writes) * size * args.loops
        row: dict[str, Any] = {"work": key, "what": what, "bytes_per_pass": counted // args.loops}
        for tool, res in tools.items():
            r = res[key]
            rates = [counted / s / 1e9 for s in r["seconds"]]
            row[tool] = {
                "code": r["code"],
                "GBps": statistics.median(rates),
                "samples_GBps": rates,
                "verified": r["verified"],
            }
        if testcase in ours:
            row["gpubw"] = {"testcase": testcase, **ours[testcase]}
        for extra, key2 in (("sm", "device_local_copy_sm"), ("ce", "device_local_copy")):
            if key == "copy" and f"{key2}_read_write" in ours:
                row[f"gpubw_device_local_copy_{extra}"] = {
                    "testcase": key2,
                    **ours[f"{key2}_read_write"],
                }
        rows.append(row)
    return {
        "device": device,
        "nominal_bytes_per_s": nominal_bytes_per_s(device),
        "started": started,
        "rows": rows,
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--size-mib", type=int, default=4096)
    ap.add_argument("--loops", type=int, default=16)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--devices", default="0", help="comma-separated device ordinals")
    ap.add_argument("--gpubw", help="gpubw JSON report of the same call")
    args = ap.parse_args(argv)
    size = args.size_mib * MIB
    docs = [one_device(args, size, int(d)) for d in args.devices.split(",")]
    versions = {mod: __import__(mod).__version__ for mod in ("torch", "cupy")}
    doc = {
        "what": "gpubw vs PyTorch vs CuPy, same GPU, same call (benchmarks/peers.py)",
        "size_bytes_per_array": size,
        "dtype": "fp32",
        "loops": args.loops,
        "samples": args.samples,
        "statistic": "median",
        "versions": versions,
        "gpubw_report": args.gpubw,
        "devices": docs,
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
    for d in docs:
        nominal = d["nominal_bytes_per_s"]

        def pct(v: float, nominal: float | None = nominal) -> str:
            return f"{100 * v * 1e9 / nominal:5.1f}%" if nominal else ""

        print(
            f"GPU {d['device']}: GB/s read + write, {args.size_mib} MiB fp32 arrays, median "
            f"of {args.samples} x {args.loops}; nominal "
            f"{nominal / 1e9 if nominal else float('nan'):.0f} GB/s"
        )
        for row in d["rows"]:
            cells = []
            for tool in (
                "gpubw",
                "gpubw_device_local_copy_sm",
                "gpubw_device_local_copy_ce",
                "torch",
                "cupy",
            ):
                if tool in row:
                    v = row[tool]["GBps"]
                    flag = "" if row[tool].get("verified", True) else " UNVERIFIED"
                    name = tool.replace("gpubw_device_local_copy_", "dlc_")
                    cells.append(f"{name} {v:7.1f} {pct(v)}{flag}")
            print(f"  {row['work']:6} " + " | ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
