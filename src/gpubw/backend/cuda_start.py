"""CUDA started early, on a helper thread, while the ``gpubw`` command is still importing.

Starting CUDA is ~0.45 s of driver work on 2 x H200 (``cuInit`` ~0.22 s, then ~0.1 s to make
each device's primary context), and ``cuda.bindings`` lets go of the GIL while the driver
works (benchmarks/startup_probe.py ``--mode overlap``: 67-71 ms of imports ran on the main
thread during a 225 ms ``cuInit`` with no delay to either). So the command calls
:func:`prestart` as soon as its command line looks like a run on the real GPUs (before it
even parses it: :func:`gpubw.cli._startup.looks_like_gpu_run`; else right after parsing), and the
:class:`gpubw.backend.cuda.CudaBackend` opened later takes over what it made
(:func:`adopt`): the primary contexts retained here are the backend's to release. A
second helper thread meanwhile prepares the first kernel launch (:func:`_prepare_kernels`:
NVRTC loaded, gpubw's two kernel units in the kernel cache, the small protocol unit first,
the verification patterns); the backend waits for a unit (:func:`kernels_ready`) before it
loads it, so the copy-engine testcases run while the copy kernels still compile.

Nothing here is needed for correctness: when :func:`prestart` was not called, or its thread
failed, the backend does the same work itself (and reports any error with its own messages).
A command that prestarts and then never opens a backend (a usage error found later) calls
:func:`settle` as it ends: it stops the helper thread before its next context, waits for it
and releases what it retained.
At import time this module imports only the standard library and :mod:`gpubw.world.launch_env`
(which imports nothing else either; ``cuda.bindings.driver`` on
the first :func:`prestart`, ~20 ms; gpubw's kernel and pattern modules only on the kernel
helper thread), so calling it early is cheap.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
from collections.abc import Mapping
from typing import Any

from gpubw.world.launch_env import devices_to_start

_lock = threading.Lock()
_started: _Prestart | None = None


class _Prestart:
    """The helper thread and what it made: device handle -> retained primary context."""

    def __init__(self, driver: Any, environ: Mapping[str, str]) -> None:
        self.driver = driver
        #: the launcher's environment, which says which devices this process will drive
        self.environ = environ
        self.contexts: dict[int, Any] = {}
        #: ordinal -> device handle of every retained context (what releasing it needs)
        self.handles: dict[int, Any] = {}
        self.error: BaseException | None = None
        #: set when nobody is going to adopt the contexts (:func:`settle`): stop making them
        self.cancelled = threading.Event()
        #: the devices' compute capabilities and the driver's version, read right after
        #: cuInit (empty when that failed); ``probed`` is set once they are known
        self.targets: tuple[tuple[int, int], ...] = ()
        self.driver_version: int | None = None
        self.probed = threading.Event()
        self.thread = threading.Thread(target=self._run, name="gpubw-cuda-start", daemon=True)

    def _run(self) -> None:
        cu = self.driver
        try:
            if cu.cuInit(0)[0] != cu.CUresult.CUDA_SUCCESS:
                return  # the backend's own cuInit says why
            status, count = cu.cuDeviceGetCount()
            if status != cu.CUresult.CUDA_SUCCESS:
                return
            self._probe(int(count))
            # under MPI, a rank that is not its host's first drives one device: only its
            # context is made (each context holds ~0.5 GiB of its device's memory)
            for ordinal in devices_to_start(int(count), self.environ):
                if self.cancelled.is_set():
                    break
                status, handle = cu.cuDeviceGet(ordinal)
                if status != cu.CUresult.CUDA_SUCCESS:
                    return
                status, ctx = cu.cuDevicePrimaryCtxRetain(handle)
                if status != cu.CUresult.CUDA_SUCCESS:
                    return
                self.contexts[ordinal] = ctx
                self.handles[ordinal] = handle
                # the driver sets a context up at its first use, not at the retain (~0.09 s
                # of a first cuMemGetInfo per H200): use it here
                if cu.cuCtxSetCurrent(ctx)[0] == cu.CUresult.CUDA_SUCCESS:
                    cu.cuMemGetInfo()
            cu.cuCtxSetCurrent(None)
        except BaseException as exc:  # never in the way: the backend starts CUDA itself
            self.error = exc
        finally:
            self.probed.set()

    def _probe(self, count: int) -> None:
        """Read what compiling the kernels needs (compute capabilities, driver version), so
        :func:`_prepare_kernels` can start before the contexts exist; a failure leaves the
        compile to the backend."""
        cu = self.driver
        attr = cu.CUdevice_attribute
        ok = cu.CUresult.CUDA_SUCCESS
        try:
            targets = set()
            for ordinal in range(count):
                status, handle = cu.cuDeviceGet(ordinal)
                major = cu.cuDeviceGetAttribute(
                    attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, handle
                )
                minor = cu.cuDeviceGetAttribute(
                    attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, handle
                )
                if status != ok or major[0] != ok or minor[0] != ok:
                    return
                targets.add((int(major[1]), int(minor[1])))
            status, version = cu.cuDriverGetVersion()
            if status == ok:
                self.targets, self.driver_version = tuple(sorted(targets)), int(version)
        except Exception:  # the backend reads them itself
            pass
        finally:
            self.probed.set()


def prestart(driver: Any = None, environ: Mapping[str, str] | None = None) -> bool:
    """Start ``cuInit`` and the primary contexts of the devices this process will drive on
    a helper thread (every device, except on an MPI rank that is not its host's first:
    :func:`gpubw.world.launch_env.devices_to_start`); once per process: a second call while the
    first is not adopted does nothing. ``driver`` replaces ``cuda.bindings.driver`` and
    ``environ`` ``os.environ`` (tests). False when there is no driver binding to start."""
    global _started
    cu: Any = driver if driver is not None else _driver_module()
    if cu is None:
        return False
    with _lock:
        if _started is not None:
            return True
        _started = _Prestart(cu, os.environ if environ is None else environ)
        _started.thread.start()
        if driver is None:
            compiled = {name: threading.Event() for name in _UNITS}
            loader = threading.Thread(
                target=_prepare_kernels,
                args=(_started, compiled),
                name="gpubw-kernels",
                daemon=True,
            )
            _loaders.append(loader)
            _compiled.append(compiled)
            loader.start()
            warm_nvml()
    return True


class _NvmlWarm:
    """NVML's session made ready (``nvmlInit``, every device's handle) on a helper thread
    beside the CUDA start: ~20 ms of the one-testcase run's critical path on an H100 (pynvml's
    import, the init, the handles); the facts themselves are read when the run asks, as the
    GPUs are then (not before their contexts exist)."""

    def __init__(self, module: Any = None) -> None:
        self.module = module
        self.session: Any = None
        self.thread = threading.Thread(target=self._run, name="gpubw-nvml-start", daemon=True)

    def _run(self) -> None:
        try:
            from gpubw.hw.nvml_read import Session

            session = Session(self.module)
            session.warm()
            self.session = session
        except Exception:  # the run's own session reports it
            pass


_nvml: list[_NvmlWarm] = []


def warm_nvml(module: Any = None) -> None:
    """Warm NVML's session on a helper thread (by :func:`prestart`, once a process);
    ``module`` replaces ``pynvml`` (tests)."""
    warm = _NvmlWarm(module)
    _nvml.append(warm)
    warm.thread.start()


def adopt_nvml() -> Any:
    """The NVML session the prestart made ready (a :class:`gpubw.hw.nvml_read.Session`),
    now the caller's to close; None when nothing was prestarted or it failed."""
    with _lock:
        warm = _nvml.pop() if _nvml else None
    if warm is None:
        return None
    warm.thread.join()
    return warm.session


#: gpubw's kernel modules the helper thread compiles, in this order (names of
#: :mod:`gpubw.kernels.modules`): the small protocol unit that the first measurement needs,
#: then the copy kernels, which the first kernel-copy testcase waits for
_UNITS = ("gpubw_protocol", "gpubw")


def _prepare_kernels(started: _Prestart, compiled: Mapping[str, threading.Event]) -> None:
    """What the run's kernel launches need, made beside the CUDA start: the NVRTC library
    loaded (every run reads its version, for the report and the kernel cache's key: ~50-65 ms
    of dlopen, on one GPU on the main thread's critical path), then each of gpubw's kernel
    units (:data:`_UNITS`) for every device's architecture in the kernel cache (compiled on a
    cache miss: NVRTC lets go of the GIL while it compiles; ``compiled[name]`` set when it is
    there), the protocol unit's (~0.15 s) before the copy kernels' (~0.5 s); the two
    verification patterns between them, as the first fill needs them. The backend waits for a
    unit (:func:`kernels_ready`) before it loads it, so nothing is compiled twice, and the
    copy-engine testcases, which need only the protocol unit, run while the copy kernels
    compile. A failure is left for the run's own calls to report."""
    try:
        from gpubw.backend.nvrtc import nvrtc_version

        nvrtc_version()
        started.probed.wait()
        for name in _UNITS:
            if not _compile_unit(started, name, compiled[name]):
                return
            if name == _UNITS[0]:
                _make_patterns()
    except Exception:  # the run's own calls report it
        pass
    finally:
        for event in compiled.values():
            event.set()


def _compile_unit(started: _Prestart, name: str, done: threading.Event) -> bool:
    """Compile gpubw's module ``name`` for every target into the kernel cache (``done`` set
    after, also on a failure); False when the command is ending without a run."""
    from gpubw.backend.cuda_support import registered_program
    from gpubw.backend.nvrtc import load_or_compile
    from gpubw.kernels.modules import own_module

    module = own_module(name)
    try:
        for cc in started.targets:
            if started.cancelled.is_set():
                return False
            load_or_compile(
                cc,
                started.driver_version,
                source_text=module.source,
                name=registered_program(module),
            )
    finally:
        done.set()
    return not started.cancelled.is_set()


def _make_patterns() -> None:
    """The two verification patterns (gpubw.kernels.patterns makes a second caller wait for
    the one computing)."""
    from gpubw.kernels.patterns import DST_SEED, SRC_SEED, pattern_bytes

    pattern_bytes(DST_SEED)
    pattern_bytes(SRC_SEED)


def kernels_ready(module: str | None = None) -> None:
    """Wait until :func:`_prepare_kernels` has the kernel module named ``module`` (every
    one it compiles: None) in the cache (at once when nothing was prestarted, or for a module
    it does not compile): the backend calls this before it loads a kernel module."""
    with _lock:
        events = [
            event
            for compiled in _compiled
            for name, event in compiled.items()
            if module is None or name == module
        ]
    for event in events:
        event.wait()


#: the kernel helper threads (:func:`_prepare_kernels`), joined by :func:`settle`, and the
#: events each sets once a module is compiled (waited for by :func:`kernels_ready`)
_loaders: list[threading.Thread] = []
_compiled: list[dict[str, threading.Event]] = []


def pending() -> bool:
    """Whether a prestart is running or waiting to be adopted."""
    with _lock:
        return _started is not None


def _driver_module() -> Any:
    """``cuda.bindings.driver``, or None where cuda-python is not installed."""
    try:
        return importlib.import_module("cuda.bindings.driver")
    except ImportError:
        return None


def adopt(driver: Any, count: int) -> dict[int, Any]:
    """Wait for the helper thread, then hand its retained primary contexts (ordinal ->
    context) of ordinals below ``count`` (the caller's device count) to the caller, who now
    owns them (must release each once); any other is released here (on a helper thread).
    Empty when nothing was prestarted, or it was started for another driver module; one
    caller gets them."""
    started = _take()
    if started is None:
        return {}
    if started.driver is not driver:  # started for another driver module: give them back
        _release(started)
        return {}
    extra = [started.handles[d] for d in sorted(started.contexts) if d >= count]
    if extra:  # devices the caller does not count are never used
        release_later(driver, extra)
    return {d: ctx for d, ctx in started.contexts.items() if d < count}


def release_later(driver: Any, handles: list[Any]) -> None:
    """Release the primary contexts of these device handles on a helper thread (a backend
    that adopted prestarted contexts hands them back here as it closes: ~65 ms of driver
    work per H200 that the command's last steps, writing the report, need not wait for);
    :func:`settle` waits for it and says what failed."""
    cu = driver
    errors: list[str] = []

    def run() -> None:
        for handle in handles:
            try:
                status = cu.cuDevicePrimaryCtxRelease(handle)[0]
                if status != cu.CUresult.CUDA_SUCCESS:
                    errors.append(f"cuDevicePrimaryCtxRelease failed: {status!r}")
            except Exception as exc:
                errors.append(f"cuDevicePrimaryCtxRelease failed: {exc}")

    job = _Release(threading.Thread(target=run, name="gpubw-cuda-release", daemon=True), errors)
    with _lock:
        _releases.append(job)
    job.thread.start()


def settle() -> list[str]:
    """Wait for a prestart that no backend adopted and release what it retained, and wait for
    the releases :func:`release_later` started (the command calls this as it ends, so no
    driver work is still running on a helper thread at exit and nothing it made outlives the
    command); an unadopted prestart still running makes no more contexts. Returns what
    failed, one line each."""
    started = _take(cancel=True)
    if started is not None:
        _release(started)
    session = adopt_nvml()  # made ready and never adopted (one per prestart): shut down
    while session is not None:
        with contextlib.suppress(Exception):
            session.close()
        session = adopt_nvml()
    with _lock:
        jobs = list(_releases)
        _releases.clear()
        loaders = list(_loaders)
        _loaders.clear()
        _compiled.clear()
    for loader in loaders:
        loader.join()
    errors: list[str] = []
    for job in jobs:
        job.thread.join()
        errors.extend(job.errors)
    return errors


class _Release:
    """A release thread and the failures it met."""

    def __init__(self, thread: threading.Thread, errors: list[str]) -> None:
        self.thread = thread
        self.errors = errors


_releases: list[_Release] = []


def _take(cancel: bool = False) -> _Prestart | None:
    """The prestart (its thread finished), now the caller's; None if there is none.
    ``cancel``: the caller only releases what it made, so it stops before the next context."""
    global _started
    with _lock:
        started, _started = _started, None
    if started is not None:
        if cancel:
            started.cancelled.set()
        started.thread.join()
    return started


def _release(started: _Prestart) -> None:
    cu = started.driver
    for ordinal in started.contexts:
        with contextlib.suppress(Exception):  # nothing to do about it at the end
            cu.cuDevicePrimaryCtxRelease(started.handles[ordinal])
    started.contexts.clear()
