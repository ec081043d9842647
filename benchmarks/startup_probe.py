"""What a gpubw process pays to start CUDA, piece by piece (issue 11 item 5), on a real GPU.

    python3 benchmarks/startup_probe.py [--mode sequential|parallel|overlap|modules]

Each mode is meant to run in a fresh process (the driver's state is per process):
sequential   cuInit, then each device's primary context retained one after the other, then
             released one after the other; prints each step's seconds
parallel     the same, with one thread per device for the retains and the releases
overlap      cuInit on a helper thread while the main thread imports gpubw's run path: shows
             whether cuda.bindings lets go of the GIL during cuInit
calls        each driver call of a start timed alone: cuInit, then per device the retain, the
             first cuCtxSetCurrent, the first and the second cuMemGetInfo
handover     contexts made (retained and used) on a helper thread, then used on the main
             thread: each main-thread call timed (what gpubw's prestart leaves to the main thread)
exit-release / exit-keep (-os: leave by os._exit once atexit ran and output is flushed)
             cuInit and every context made and used, then released (or not) before main
             returns; prints when main returned, in ms since GPUBW_T0 (the shell's clock
             before python3 ran): the shell's own end time minus it is the process exit
nvml         NVML's node facts read on the main thread while cuInit runs on a helper thread,
             against both one after the other: whether NVML and the driver start overlap
spin         `calls` with a thread spinning on a CPU meanwhile (is a slow cuInit after the GPUs
             sat idle waiting on a sleeping CPU?)
pipeline     device 1's context made on a helper thread while device 0 (context made first)
             allocates and copies 64 MiB on the main thread: whether device 0's work waits
modules      the modules a one-testcase gpubw run imports that have no byte-compiled file
             beside them (so every process compiles them again), and sys.flags
"""

from __future__ import annotations

import argparse
import importlib
import sys
import threading
import time


def _ok(result: tuple) -> object:
    from cuda.bindings import driver as cu

    if result[0] != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(str(result[0]))
    return result[1] if len(result) > 1 else None


def _steps(parallel: bool) -> dict[str, float]:
    t = time.perf_counter()
    from cuda.bindings import driver as cu

    out = {"import cuda.bindings.driver": time.perf_counter() - t}
    t = time.perf_counter()
    _ok(cu.cuInit(0))
    out["cuInit"] = time.perf_counter() - t
    count = int(_ok(cu.cuDeviceGetCount()))
    handles = [_ok(cu.cuDeviceGet(i)) for i in range(count)]
    ctxs: dict[int, object] = {}

    def retain(i: int) -> None:
        ctxs[i] = _ok(cu.cuDevicePrimaryCtxRetain(handles[i]))
        _ok(cu.cuCtxSetCurrent(ctxs[i]))
        _ok(cu.cuMemGetInfo())

    def release(i: int) -> None:
        _ok(cu.cuDevicePrimaryCtxRelease(handles[i]))

    for name, fn in (("retain+use", retain), ("release", release)):
        t = time.perf_counter()
        if parallel:
            threads = [threading.Thread(target=fn, args=(i,)) for i in range(count)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
        else:
            for i in range(count):
                fn(i)
        out[f"{name} x{count}"] = time.perf_counter() - t
    return out


def _calls() -> dict[str, float]:
    from cuda.bindings import driver as cu

    out: dict[str, float] = {}

    def timed(name: str, fn: object, *args: object) -> object:
        t = time.perf_counter()
        value = _ok(fn(*args))  # type: ignore[operator]
        out[name] = time.perf_counter() - t
        return value

    timed("cuInit", cu.cuInit, 0)
    count = int(_ok(cu.cuDeviceGetCount()))
    for i in range(count):
        handle = _ok(cu.cuDeviceGet(i))
        ctx = timed(f"retain {i}", cu.cuDevicePrimaryCtxRetain, handle)
        timed(f"set current {i}", cu.cuCtxSetCurrent, ctx)
        timed(f"1st cuMemGetInfo {i}", cu.cuMemGetInfo)
        timed(f"2nd cuMemGetInfo {i}", cu.cuMemGetInfo)
    for i in range(count):
        timed(f"release {i}", cu.cuDevicePrimaryCtxRelease, _ok(cu.cuDeviceGet(i)))
    return out


def _handover() -> dict[str, float]:
    from cuda.bindings import driver as cu

    out: dict[str, float] = {}
    ctxs: dict[int, object] = {}

    def start() -> None:
        _ok(cu.cuInit(0))
        for i in range(int(_ok(cu.cuDeviceGetCount()))):
            ctxs[i] = _ok(cu.cuDevicePrimaryCtxRetain(_ok(cu.cuDeviceGet(i))))
            _ok(cu.cuCtxSetCurrent(ctxs[i]))
            _ok(cu.cuMemGetInfo())
        _ok(cu.cuCtxSetCurrent(None))

    t = time.perf_counter()
    th = threading.Thread(target=start)
    th.start()
    th.join()
    out["helper thread"] = time.perf_counter() - t
    for i, ctx in ctxs.items():
        for name, fn, args in (("set current", cu.cuCtxSetCurrent, (ctx,)),
                               ("1st cuMemGetInfo", cu.cuMemGetInfo, ()),
                               ("2nd cuMemGetInfo", cu.cuMemGetInfo, ())):  # fmt: skip
            t = time.perf_counter()
            _ok(fn(*args))
            out[f"main: {name} {i}"] = time.perf_counter() - t
    return out


def _overlap() -> dict[str, float]:
    from cuda.bindings import driver as cu

    done: dict[str, float] = {}

    def init() -> None:
        t = time.perf_counter()
        _ok(cu.cuInit(0))
        done["cuInit on the helper thread"] = time.perf_counter() - t

    t0 = time.perf_counter()
    th = threading.Thread(target=init)
    th.start()
    t = time.perf_counter()
    for name in ("gpubw.runner.core", "gpubw.api", "gpubw.model.report_io", "gpubw.backend.cuda"):
        importlib.import_module(name)
    done["imports on the main thread meanwhile"] = time.perf_counter() - t
    th.join()
    done["both, wall"] = time.perf_counter() - t0
    return done


def _spin() -> dict[str, float]:
    stop = threading.Event()

    def burn() -> None:
        while not stop.is_set():
            pass

    th = threading.Thread(target=burn, daemon=True)
    th.start()
    try:
        return _calls()
    finally:
        stop.set()
        th.join()


def _exit(release: bool, hard: bool) -> dict[str, float]:
    import os

    from cuda.bindings import driver as cu

    t0 = float(os.environ.get("GPUBW_T0") or time.time())
    t = time.perf_counter()
    _ok(cu.cuInit(0))
    handles = [_ok(cu.cuDeviceGet(i)) for i in range(int(_ok(cu.cuDeviceGetCount())))]
    for h in handles:
        _ok(cu.cuCtxSetCurrent(_ok(cu.cuDevicePrimaryCtxRetain(h))))
        _ok(cu.cuMemGetInfo())
    out = {"start": time.perf_counter() - t}
    if release:
        t = time.perf_counter()
        _ok(cu.cuCtxSetCurrent(None))
        for h in handles:
            _ok(cu.cuDevicePrimaryCtxRelease(h))
        out["release"] = time.perf_counter() - t
    out["main returned (since GPUBW_T0)"] = time.time() - t0
    if hard:  # what a command could do once its report is out: atexit, flush, os._exit
        import atexit

        atexit._run_exitfuncs()
        print(_line("exit-" + ("release" if release else "keep") + "-os", out), flush=True)
        sys.stderr.flush()
        os._exit(0)
    return out


def _nvml() -> dict[str, float]:
    from cuda.bindings import driver as cu

    from gpubw.hw.nvml_read import read_facts

    out: dict[str, float] = {}

    def init() -> None:
        t = time.perf_counter()
        _ok(cu.cuInit(0))
        out["cuInit on the helper thread"] = time.perf_counter() - t

    t0 = time.perf_counter()
    th = threading.Thread(target=init)
    th.start()
    t = time.perf_counter()
    read_facts()
    out["NVML facts on the main thread meanwhile"] = time.perf_counter() - t
    th.join()
    out["both, wall"] = time.perf_counter() - t0
    t = time.perf_counter()
    read_facts()
    out["NVML facts again, alone"] = time.perf_counter() - t
    return out


def _pipeline() -> dict[str, float]:
    from cuda.bindings import driver as cu

    out: dict[str, float] = {}
    _ok(cu.cuInit(0))
    handles = [_ok(cu.cuDeviceGet(i)) for i in range(int(_ok(cu.cuDeviceGetCount())))]
    t = time.perf_counter()
    ctx0 = _ok(cu.cuDevicePrimaryCtxRetain(handles[0]))
    _ok(cu.cuCtxSetCurrent(ctx0))
    _ok(cu.cuMemGetInfo())
    out["context 0"] = time.perf_counter() - t
    if len(handles) < 2:
        return out

    def second() -> None:
        s = time.perf_counter()
        _ok(cu.cuCtxSetCurrent(_ok(cu.cuDevicePrimaryCtxRetain(handles[1]))))
        _ok(cu.cuMemGetInfo())
        out["context 1 on the helper thread"] = time.perf_counter() - s

    def work() -> float:
        s = time.perf_counter()
        a = _ok(cu.cuMemAlloc(64 << 20))
        b = _ok(cu.cuMemAlloc(64 << 20))
        for _ in range(8):
            _ok(cu.cuMemcpyDtoD(b, a, 64 << 20))
        _ok(cu.cuCtxSynchronize())
        _ok(cu.cuMemFree(a))
        _ok(cu.cuMemFree(b))
        return time.perf_counter() - s

    out["device 0 work alone"] = work()
    t = time.perf_counter()
    th = threading.Thread(target=second)
    th.start()
    out["device 0 work meanwhile"] = work()
    th.join()
    out["both, wall"] = time.perf_counter() - t
    out["device 0 work after"] = work()
    return out


def _modules() -> None:
    import os
    import subprocess

    code = (
        "import sys, runpy; sys.argv=['gpubw','-t','device_local_copy','-b','64','-q','-j',"
        "'-o','/dev/null']\ntry:\n    runpy.run_module('gpubw', run_name='__main__')\n"
        "except SystemExit:\n    pass\nimport os\n"
        "for m in list(sys.modules.values()):\n"
        "    f = getattr(m, '__file__', None) or ''\n"
        "    c = getattr(getattr(m, '__spec__', None), 'cached', None)\n"
        "    if f.endswith('.py') and c and not os.path.exists(c):\n"
        "        print('no pyc:', m.__name__, f)\n"
    )
    print("sys.flags.dont_write_bytecode:", sys.flags.dont_write_bytecode,
          "PYTHONDONTWRITEBYTECODE:", os.environ.get("PYTHONDONTWRITEBYTECODE"))  # fmt: skip
    lines = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, encoding="utf-8"
    ).stdout
    missing = [ln for ln in lines.splitlines() if ln.startswith("no pyc:")]
    print(f"{len(missing)} modules imported without a .pyc beside them")
    for ln in missing[:60]:
        print(" ", ln)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    modes = ["sequential", "parallel", "overlap", "calls", "handover", "modules", "exit-release",
             "exit-keep", "exit-release-os", "exit-keep-os", "nvml", "pipeline",
             "spin"]  # fmt: skip
    ap.add_argument("--mode", default="sequential", choices=modes)
    mode = ap.parse_args().mode
    if mode == "modules":
        _modules()
        return
    if mode == "calls":
        steps = _calls()
    elif mode == "handover":
        steps = _handover()
    elif mode.startswith("exit-"):
        steps = _exit(mode.startswith("exit-release"), mode.endswith("-os"))
    elif mode == "nvml":
        steps = _nvml()
    elif mode == "spin":
        steps = _spin()
    elif mode == "pipeline":
        steps = _pipeline()
    elif mode == "overlap":
        steps = _overlap()
    else:
        steps = _steps(mode == "parallel")
    print(_line(mode, steps))


def _line(mode: str, steps: dict[str, float]) -> str:
    return mode + ": " + "; ".join(f"{k} {v * 1e3:.1f} ms" for k, v in steps.items())


if __name__ == "__main__":
    main()
