"""The real CUDA backend: CPU checks of its plumbing, and `gpu` tests on a real device."""

from __future__ import annotations

import ctypes
import itertools
import os
import re
import struct
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cuda.bindings import driver as real_cu

from gpubw.backend import cuda as cuda_backend
from gpubw.backend import cuda_host
from gpubw.backend.base import i32, ptr, u32, u64
from gpubw.backend.cuda import CudaBackend, _check
from gpubw.backend.cuda_support import (
    driver_version_string,
    format_uuid,
    pack_kernel_args,
    parse_cpulist,
    read_numa,
)
from gpubw.model.errors import (
    CudaError,
    GateTimeoutError,
    GpubwError,
    NoDriverError,
    UsageError,
    VerificationError,
)

R = real_cu.CUresult
MIB = 1 << 20


# -- CPU: no driver needed -----------------------------------------------------------------


def test_no_driver_raises_no_driver_error() -> None:
    """Without libcuda, CudaBackend() raises NoDriverError pointing at --simulate."""
    try:
        backend = CudaBackend()
    except NoDriverError as exc:
        text = str(exc)
        assert "no NVIDIA driver was found" in text
        assert "--simulate h200x2" in text
        return
    backend.close()
    pytest.skip("an NVIDIA driver is present on this machine")


def test_check_turns_results_into_cuda_error() -> None:
    """_check returns outputs on success and raises CudaError naming call and result."""
    assert _check("cuInit", (R.CUDA_SUCCESS,)) is None
    assert _check("cuDeviceGetCount", (R.CUDA_SUCCESS, 2)) == 2
    assert _check("cuMemGetInfo", (R.CUDA_SUCCESS, 5, 9)) == (5, 9)
    with pytest.raises(CudaError) as info:
        _check("cuMemAlloc", (R.CUDA_ERROR_OUT_OF_MEMORY,))
    assert info.value.call == "cuMemAlloc"
    assert info.value.result == "CUDA_ERROR_OUT_OF_MEMORY"
    assert info.value.out_of_memory


def test_pack_kernel_args_checks_the_catalogue() -> None:
    """Launch arguments are checked against the KernelSpec and packed as C values."""
    values, array = pack_kernel_args("gpubw_copy", (ptr(0x1000), ptr(0x2000), u64(1 << 40), u32(7)))
    assert [type(v) for v in values] == [ctypes.c_uint64] * 3 + [ctypes.c_uint32]
    assert [v.value for v in values] == [0x1000, 0x2000, 1 << 40, 7]
    assert [array[k] for k in range(4)] == [ctypes.addressof(v) for v in values]
    with pytest.raises(UsageError, match="unknown kernel"):
        pack_kernel_args("nope", ())
    with pytest.raises(UsageError, match="takes 4 arguments"):
        pack_kernel_args("gpubw_copy", (ptr(1), ptr(2), u64(3)))
    with pytest.raises(UsageError, match="must be u32"):
        pack_kernel_args("gpubw_copy", (ptr(1), ptr(2), u64(3), i32(4)))
    with pytest.raises(UsageError, match="out of range"):
        pack_kernel_args("gpubw_copy", (ptr(1), ptr(2), u64(3), u32(1 << 32)))
    with pytest.raises(UsageError, match="out of range"):
        pack_kernel_args("gpubw_copy", (ptr(-1), ptr(2), u64(3), u32(4)))


def test_uuid_and_cpulist_formats() -> None:
    """UUIDs print as GPU-8-4-4-4-12 lowercase hex; Linux cpulists expand."""
    raw = bytes(range(0xA0, 0xB0))
    assert format_uuid(raw) == "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf"
    assert parse_cpulist("0-3,8,10-11\n") == (0, 1, 2, 3, 8, 10, 11)
    assert parse_cpulist("") == ()


def test_read_numa_from_sysfs(tmp_path: Path) -> None:
    """NUMA node and local CPUs come from sysfs; -1 or missing files give None / ()."""
    dev = tmp_path / "0000:1b:00.0"
    dev.mkdir()
    (dev / "numa_node").write_text("1\n")
    (dev / "local_cpulist").write_text("48-95,144-191\n")
    node, cpus = read_numa("0000:1b:00.0", tmp_path)
    assert node == 1 and cpus[0] == 48 and cpus[-1] == 191 and len(cpus) == 96
    (dev / "numa_node").write_text("-1\n")
    assert read_numa("0000:1b:00.0", tmp_path)[0] is None
    assert read_numa("0000:99:00.0", tmp_path) == (None, ())


def test_driver_version_from_proc(tmp_path: Path) -> None:
    """The kernel driver version is read from /proc/driver/nvidia/version (None if absent)."""
    proc = tmp_path / "version"
    proc.write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
        "(dvs-builder@U22)  Thu Jul 10 2025\nGCC version:  gcc version 12.3.0\n"
    )
    assert driver_version_string(proc) == "580.159.04"
    proc.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19\n")
    assert driver_version_string(proc) == "535.104.05"
    assert driver_version_string(tmp_path / "missing") is None


R_ATTR = real_cu.CUdevice_attribute


class FakeDriver:
    """Enough of cuda.bindings.driver to exercise the backend's bookkeeping on a CPU."""

    CUresult = real_cu.CUresult
    CUdevice_attribute = real_cu.CUdevice_attribute
    CUstream_flags = real_cu.CUstream_flags
    CUevent_flags = real_cu.CUevent_flags
    CUfunction_attribute = real_cu.CUfunction_attribute
    CU_MEMHOSTALLOC_PORTABLE = real_cu.CU_MEMHOSTALLOC_PORTABLE

    def __init__(self, devices: int = 2) -> None:
        self.devices = devices
        self.ids = itertools.count(1)
        self.retained: dict[int, int] = {}
        self._thread = threading.local()  # like the driver: a current context per thread
        self.live: dict[str, set[Any]] = {"stream": set(), "event": set(), "dev": set()}
        self.host: dict[int, ctypes.Array[ctypes.c_char]] = {}
        self.peer_enabled: set[tuple[Any, Any]] = set()
        self.stream_ready = True
        self.free_bytes = 100 * MIB

    def cuInit(self, flags: int) -> tuple[Any, ...]:
        return (R.CUDA_SUCCESS,)

    def cuDeviceGetCount(self) -> tuple[Any, ...]:
        return (R.CUDA_SUCCESS, self.devices)

    def cuDeviceGet(self, i: int) -> tuple[Any, ...]:
        return (R.CUDA_SUCCESS, i)

    def cuDriverGetVersion(self) -> tuple[Any, ...]:
        return (R.CUDA_SUCCESS, 13000)

    def cuGetErrorString(self, status: Any) -> tuple[Any, ...]:
        return (R.CUDA_SUCCESS, b"fake error text")

    def cuDevicePrimaryCtxRetain(self, dev: int) -> tuple[Any, ...]:
        self.retained[dev] = self.retained.get(dev, 0) + 1
        return (R.CUDA_SUCCESS, ("ctx", dev))

    def cuDevicePrimaryCtxRelease(self, dev: int) -> tuple[Any, ...]:
        self.retained[dev] -= 1
        return (R.CUDA_SUCCESS,)

    @property
    def current(self) -> Any:
        return getattr(self._thread, "ctx", None)

    def cuCtxSetCurrent(self, ctx: Any) -> tuple[Any, ...]:
        self._thread.ctx = ctx
        return (R.CUDA_SUCCESS,)

    def _dev(self) -> int:
        assert self.current is not None, "no current context"
        return int(self.current[1])

    def cuCtxEnablePeerAccess(self, peer_ctx: Any, flags: int) -> tuple[Any, ...]:
        key = (self.current, peer_ctx)
        if key in self.peer_enabled:
            return (R.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,)
        self.peer_enabled.add(key)
        return (R.CUDA_SUCCESS,)

    def cuMemGetInfo(self) -> tuple[Any, ...]:
        self._dev()
        return (R.CUDA_SUCCESS, self.free_bytes, 100 * MIB)

    def cuMemAlloc(self, nbytes: int) -> tuple[Any, ...]:
        self._dev()
        if nbytes > self.free_bytes:
            return (R.CUDA_ERROR_OUT_OF_MEMORY, None)
        p = 0x7000_0000_0000 + next(self.ids) * 0x1000_0000
        self.live["dev"].add(p)
        return (R.CUDA_SUCCESS, p)

    def cuMemFree(self, p: int) -> tuple[Any, ...]:
        self._dev()
        self.live["dev"].remove(p)
        return (R.CUDA_SUCCESS,)

    def cuMemHostAlloc(self, nbytes: int, flags: int) -> tuple[Any, ...]:
        self._dev()
        assert flags == real_cu.CU_MEMHOSTALLOC_PORTABLE
        buf = ctypes.create_string_buffer(nbytes)
        self.host[ctypes.addressof(buf)] = buf
        return (R.CUDA_SUCCESS, ctypes.addressof(buf))

    def cuMemFreeHost(self, p: int) -> tuple[Any, ...]:
        del self.host[p]
        return (R.CUDA_SUCCESS,)

    def cuStreamCreate(self, flags: Any) -> tuple[Any, ...]:
        assert flags == real_cu.CUstream_flags.CU_STREAM_NON_BLOCKING
        h = ("stream", self._dev(), next(self.ids))
        self.live["stream"].add(h)
        return (R.CUDA_SUCCESS, h)

    def cuStreamDestroy(self, h: Any) -> tuple[Any, ...]:
        self.live["stream"].remove(h)
        return (R.CUDA_SUCCESS,)

    def cuStreamQuery(self, h: Any) -> tuple[Any, ...]:
        return (R.CUDA_SUCCESS,) if self.stream_ready else (R.CUDA_ERROR_NOT_READY,)

    def cuEventCreate(self, flags: Any) -> tuple[Any, ...]:
        h = ("event", self._dev(), next(self.ids))
        self.live["event"].add(h)
        return (R.CUDA_SUCCESS, h)

    def cuEventDestroy(self, h: Any) -> tuple[Any, ...]:
        self.live["event"].remove(h)
        return (R.CUDA_SUCCESS,)

    def cuEventElapsedTime(self, a: Any, b: Any) -> tuple[Any, ...]:
        return (R.CUDA_SUCCESS, 2.5)


@pytest.fixture(autouse=True)
def _no_prestart_left() -> Iterator[None]:
    """Whatever a test leaves of the module-wide CUDA start is settled after it, so one
    failing prestart test cannot make the next ones fail."""
    yield
    from gpubw.backend import cuda_start

    cuda_start.settle()


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeDriver, CudaBackend]]:
    driver = FakeDriver()
    monkeypatch.setattr(cuda_backend, "cu", driver)
    backend = CudaBackend()
    yield driver, backend
    backend.close()


def test_contexts_retained_once_and_released(fake: tuple[FakeDriver, CudaBackend]) -> None:
    """Primary contexts are retained lazily, once per device, and released by close()."""
    driver, backend = fake
    assert driver.retained == {}
    backend.memory_info(1)
    backend.memory_info(1)
    backend.alloc_host(64, None)
    assert driver.retained == {0: 1, 1: 1}
    backend.close()
    backend.close()
    assert driver.retained == {0: 0, 1: 0}


def test_prestarted_contexts_are_adopted_and_released(monkeypatch: pytest.MonkeyPatch) -> None:
    """prestart() retains every primary context on a helper thread; the next backend owns
    them (no second retain) and releases each once; a later backend starts on its own."""
    from gpubw.backend import cuda_start

    driver = FakeDriver()
    monkeypatch.setattr(cuda_backend, "cu", driver)
    main = threading.get_ident()
    threads: set[int] = set()
    retain = driver.cuDevicePrimaryCtxRetain

    def recording(dev: int) -> tuple[Any, ...]:
        threads.add(threading.get_ident())
        return retain(dev)

    monkeypatch.setattr(driver, "cuDevicePrimaryCtxRetain", recording)
    assert cuda_start.prestart(driver)
    with CudaBackend() as backend:
        backend.memory_info(1)  # the first use waits for the helper and adopts its contexts
        assert driver.retained == {0: 1, 1: 1} and threads and main not in threads
        backend.memory_info(0)
        assert driver.retained == {0: 1, 1: 1}
    assert cuda_start.settle() == []  # the prestart's contexts are released on its thread
    assert driver.retained == {0: 0, 1: 0}
    with CudaBackend() as again:  # nothing left to adopt: retains lazily, in this thread
        again.memory_info(0)
        assert driver.retained == {0: 1, 1: 0} and main in threads
    assert driver.retained == {0: 0, 1: 0}  # its own context: released inline at close


def test_the_backend_s_nvml_session_is_the_one_warmed_beside_the_cuda_start(
    fake: tuple[FakeDriver, CudaBackend],
) -> None:
    """A session the prestart warmed is the backend's (its facts read through it), and the
    backend shuts it down as it closes; without one the backend makes its own."""
    from gpubw.backend import cuda_start

    _, backend = fake
    calls: list[str] = []
    module = types.SimpleNamespace(
        nvmlInit=lambda: calls.append("init"),
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetCount=lambda: 0,
        nvmlDeviceGetHandleByIndex=lambda i: i,
    )
    cuda_start.warm_nvml(module)
    assert backend.gpu_processes() == {}  # through the warmed module: no GPU listed
    assert backend.nvml is backend.nvml and calls == ["init"]  # no second nvmlInit
    backend.close()
    assert calls == ["init", "shutdown"]
    with CudaBackend() as other:  # nothing warmed: its own session (no NVML here)
        assert other.gpu_processes() is None and calls == ["init", "shutdown"]


def test_prestarted_contexts_adopted_at_first_use_or_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The backend takes the prestarted contexts when it first needs one; a backend that
    never needed one releases them at close."""
    from gpubw.backend import cuda_start

    driver = FakeDriver()
    monkeypatch.setattr(cuda_backend, "cu", driver)
    assert cuda_start.prestart(driver)
    backend = CudaBackend()
    assert cuda_start.pending()  # opening the backend does not wait for the contexts
    backend.close()
    assert not cuda_start.pending() and cuda_start.settle() == []
    assert driver.retained == {0: 0, 1: 0}


def test_prestarted_contexts_of_devices_the_backend_does_not_count_are_released(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A prestart that retained a context the backend has no device for (3 vs 2) hands it
    back for release; nothing stays retained after settle()."""
    from gpubw.backend import cuda_start

    driver = FakeDriver(devices=2)

    def count() -> tuple[Any, ...]:  # the helper thread sees one device more
        extra = threading.current_thread().name == "gpubw-cuda-start"
        return (R.CUDA_SUCCESS, 3 if extra else 2)

    monkeypatch.setattr(driver, "cuDeviceGetCount", count)
    monkeypatch.setattr(cuda_backend, "cu", driver)
    assert cuda_start.prestart(driver)
    backend = CudaBackend()
    backend.memory_info(0)
    assert (driver.retained[0], driver.retained[1]) == (1, 1)
    backend.close()
    assert cuda_start.settle() == []
    assert driver.retained == {0: 0, 1: 0, 2: 0}


def test_an_mpi_rank_that_is_not_its_hosts_first_prestarts_only_its_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under an MPI launch, local rank 1 of 2 GPUs prestarts device 1's context alone (the
    host's first rank makes every device's); local rank 0 makes both."""
    from gpubw.backend import cuda_start

    launch = {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}
    driver = FakeDriver()
    monkeypatch.setattr(cuda_backend, "cu", driver)
    assert cuda_start.prestart(driver, environ=launch)
    with CudaBackend() as backend:
        backend.memory_info(1)
        assert driver.retained == {1: 1}
    assert cuda_start.settle() == []
    assert driver.retained == {1: 0}
    assert cuda_start.prestart(driver, environ={**launch, "OMPI_COMM_WORLD_LOCAL_RANK": "0"})
    with CudaBackend() as backend:
        backend.memory_info(1)
        assert driver.retained == {0: 1, 1: 1}
    assert cuda_start.settle() == []


def test_a_failed_late_release_is_reported_by_settle(monkeypatch: pytest.MonkeyPatch) -> None:
    """A prestarted context whose release fails on the helper thread is named by settle()."""
    from gpubw.backend import cuda_start

    driver = FakeDriver()
    monkeypatch.setattr(cuda_backend, "cu", driver)
    monkeypatch.setattr(
        driver, "cuDevicePrimaryCtxRelease", lambda dev: (R.CUDA_ERROR_INVALID_CONTEXT,)
    )
    assert cuda_start.prestart(driver)
    with CudaBackend() as backend:
        backend.memory_info(0)
    problems = cuda_start.settle()
    assert len(problems) == 2 and "CUDA_ERROR_INVALID_CONTEXT" in problems[0]
    assert cuda_start.settle() == []


def test_failed_prestart_leaves_the_start_to_the_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """A prestart whose cuInit fails made nothing; the backend's own cuInit reports it, and
    the command's settle() at the end consumes the failed start."""
    from gpubw.backend import cuda_start

    driver = FakeDriver()
    monkeypatch.setattr(cuda_backend, "cu", driver)
    monkeypatch.setattr(driver, "cuInit", lambda flags: (R.CUDA_ERROR_NO_DEVICE,))
    assert cuda_start.prestart(driver)
    with pytest.raises(NoDriverError):
        CudaBackend()
    assert driver.retained == {}
    assert cuda_start.pending()  # left for the command's end
    assert cuda_start.settle() == []
    assert not cuda_start.pending() and driver.retained == {}


def test_settle_releases_a_prestart_nobody_adopted(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command that prestarted CUDA and then stopped on a usage error releases the
    contexts the helper thread retained before it exits (exit code 2 as before)."""
    from gpubw.backend import cuda_start
    from gpubw.cli import command as cli

    driver = FakeDriver()
    monkeypatch.setattr(cuda_start, "_driver_module", lambda: driver)
    started: list[bool] = []
    prestart = cuda_start.prestart
    monkeypatch.setattr(cuda_start, "prestart", lambda: started.append(prestart()) or True)
    code = cli.main(["-t", "0", "--expect", "/nonexistent/expectations.json"])
    assert code == 2 and started == [True]  # the command did prestart CUDA
    # every context the helper made is released (it stops before its next context once
    # the command gives up, so it may have made none)
    assert set(driver.retained.values()) <= {0}
    assert not cuda_start.pending()
    assert cuda_start.adopt(driver, 2) == {}


def test_settle_stops_an_unadopted_prestart_before_its_next_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """settle() on a prestart nobody adopted stops it before the next context (a command
    line refused after CUDA was started early waits for no more than the context under
    way), then releases the one it made."""
    from gpubw.backend import cuda_start

    driver = FakeDriver()
    monkeypatch.setattr(cuda_backend, "cu", driver)
    inside, go_on = threading.Event(), threading.Event()
    retain = driver.cuDevicePrimaryCtxRetain

    def slow(dev: int) -> tuple[Any, ...]:
        inside.set()
        assert go_on.wait(10)
        return retain(dev)

    monkeypatch.setattr(driver, "cuDevicePrimaryCtxRetain", slow)
    assert cuda_start.prestart(driver)
    assert inside.wait(10)  # the helper is making device 0's context
    threading.Timer(0.2, go_on.set).start()
    assert cuda_start.settle() == []
    assert driver.retained == {0: 0}  # device 1's context was never made


def test_the_real_prestart_prepares_kernels_beside_and_settle_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """prestart() for the real driver also, on a helper thread of its own: loads NVRTC,
    puts gpubw's protocol kernels for every device's architecture in the kernel cache (from
    the compute capabilities and driver version read right after cuInit), makes the two
    verification patterns, then compiles gpubw.cu; kernels_ready(name) waits for that unit
    only (the copy-engine testcases need only the protocol unit), settle() for everything, so
    nothing is left."""
    from gpubw.backend import cuda_start, nvrtc
    from gpubw.kernels import patterns
    from gpubw.kernels.modules import GPUBW, PROTOCOL
    from gpubw.kernels.patterns import DST_SEED, SRC_SEED

    driver = FakeDriver()
    capability = {
        R_ATTR.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: 9,
        R_ATTR.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: 0,
    }
    monkeypatch.setattr(
        driver,
        "cuDeviceGetAttribute",
        lambda a, dev: (R.CUDA_SUCCESS, capability[a]),
        raising=False,
    )
    monkeypatch.setattr(cuda_start, "_driver_module", lambda: driver)
    seen: list[tuple[str, Any]] = []

    def slow_version() -> tuple[int, int]:
        time.sleep(0.2)
        seen.append((threading.current_thread().name, "nvrtc"))
        return (13, 0)

    def compile_(cc: Any, version: Any, *, source_text: str, name: str) -> tuple[bytes, Any]:
        module = {"gpubw_protocol.cu": PROTOCOL, nvrtc.SOURCE_NAME: GPUBW}[name]
        assert source_text == module.source
        seen.append((threading.current_thread().name, (name, cc, version)))
        return b"cubin", None

    monkeypatch.setattr(nvrtc, "nvrtc_version", slow_version)
    monkeypatch.setattr(nvrtc, "load_or_compile", compile_)
    go_on = threading.Event()

    def slow_pattern(seed: int) -> None:
        assert go_on.wait(10)
        seen.append(("p", seed))

    monkeypatch.setattr(patterns, "pattern_bytes", slow_pattern)
    assert cuda_start.prestart()
    cuda_start.kernels_ready("gpubw_protocol")  # what the backend calls before it loads it
    compiled = [("gpubw-kernels", "nvrtc"), ("gpubw-kernels", ("gpubw_protocol.cu", (9, 0), 13000))]
    assert seen == compiled  # the protocol unit is ready; the patterns still under way
    cuda_start.kernels_ready("elsewhere")  # a plugin's module: nothing to wait for
    go_on.set()
    cuda_start.kernels_ready("gpubw")
    copies = ("gpubw-kernels", ("gpubw.cu", (9, 0), 13000))
    assert seen == [*compiled, ("p", DST_SEED), ("p", SRC_SEED), copies]
    assert cuda_start.settle() == []
    assert seen == [*compiled, ("p", DST_SEED), ("p", SRC_SEED), copies]
    assert not [
        t for t in threading.enumerate() if t.name.startswith(("gpubw-kernels", "gpubw-cuda"))
    ]
    assert driver.retained == {0: 0, 1: 0}


@pytest.mark.gpu
def test_a_cold_run_measures_copy_engine_copies_while_gpubw_cu_compiles(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """On a cold kernel cache the command's first testcase, a copy-engine one, has its kernels
    (the protocol unit) loaded before the compile of gpubw.cu is done (issue 36: cold costs
    no more than warm + 0.5 s); the SM testcase after it loads gpubw.cu at its own step."""
    try:
        CudaBackend().close()
    except NoDriverError:
        pytest.skip("no NVIDIA GPU/driver")
    from _node import json_run
    from gpubw.backend import nvrtc
    from gpubw.kernels import cache

    monkeypatch.setenv("GPUBW_CACHE_DIR", str(tmp_path / "cache"))  # cold
    monkeypatch.setattr(cache, "_unwritten", {})
    done: dict[str, float] = {}  # program -> time.monotonic() its compile ended (trace's clock)
    compile_source = nvrtc.compile_source

    def timed(text: str, target: Any, name: str = nvrtc.SOURCE_NAME) -> bytes:
        if name == "gpubw.cu":  # a slow compile, so the order below is not a race: the
            time.sleep(2.0)  # first testcase must not wait for it, however fast NVRTC is
        image = compile_source(text, target, name)
        done[name] = time.monotonic()
        return image

    monkeypatch.setattr(nvrtc, "compile_source", timed)
    keys = ("host_to_device_memcpy_ce", "host_to_device_memcpy_sm")
    code, doc, err = json_run(capsys, tmp_path, "-t", *keys, "-b", "64MiB", "-i", "3", "--trace")
    assert code == 0, err
    assert set(done) == {"gpubw_protocol.cu", "gpubw.cu"}, done
    loads = [e for e in doc["trace"]["events"] if e["category"] == "kernel_load"]
    first = [e["start_ns"] + e["duration_ns"] for e in loads if e["testcase"] == keys[0]]
    assert first and max(first) / 1e9 < done["gpubw.cu"], (first, done)
    assert [e for e in loads if e["testcase"] == keys[1]]  # gpubw.cu, loaded for the SM copy


def test_a_command_ending_without_a_run_compiles_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """settle() on a prestart nobody adopted (a refused command line) also stops the kernel
    helper before it compiles: the command does not wait for a compile it will not use."""
    from gpubw.backend import cuda_start, nvrtc
    from gpubw.kernels import patterns

    driver = FakeDriver()
    monkeypatch.setattr(
        driver, "cuDeviceGetAttribute", lambda a, dev: (R.CUDA_SUCCESS, 9), raising=False
    )
    monkeypatch.setattr(cuda_start, "_driver_module", lambda: driver)
    compiled: list[Any] = []
    monkeypatch.setattr(nvrtc, "nvrtc_version", lambda: time.sleep(0.3) or (13, 0))
    monkeypatch.setattr(nvrtc, "load_or_compile", lambda *a, **k: compiled.append(a))
    monkeypatch.setattr(patterns, "pattern_bytes", compiled.append)
    assert cuda_start.prestart()
    assert cuda_start.settle() == []
    assert compiled == []


def test_a_command_ending_during_the_compile_makes_no_patterns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """settle() while the kernel helper compiles: once that compile returns, the helper
    stops (no patterns, nothing more) and settle() returns."""
    from gpubw.backend import cuda_start, nvrtc
    from gpubw.kernels import patterns

    driver = FakeDriver()
    monkeypatch.setattr(
        driver, "cuDeviceGetAttribute", lambda a, dev: (R.CUDA_SUCCESS, 9), raising=False
    )
    monkeypatch.setattr(cuda_start, "_driver_module", lambda: driver)
    compiling, go_on = threading.Event(), threading.Event()
    made: list[Any] = []

    def compile_(*args: Any, **kwargs: Any) -> None:
        compiling.set()
        assert go_on.wait(10)
        made.append(args)

    monkeypatch.setattr(nvrtc, "nvrtc_version", lambda: (13, 0))
    monkeypatch.setattr(nvrtc, "load_or_compile", compile_)
    monkeypatch.setattr(patterns, "pattern_bytes", made.append)
    assert cuda_start.prestart()
    assert compiling.wait(10)
    ending = threading.Thread(target=cuda_start.settle)
    ending.start()
    time.sleep(0.1)  # settle() has cancelled the helper and waits for it
    go_on.set()
    ending.join(10)
    assert not ending.is_alive()
    assert made == [((9, 9), 13000)]  # the compile under way finished; no patterns after it


def test_the_command_names_a_failed_late_release(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What settle() reports at the command's end is printed as a warning on stderr."""
    from gpubw.backend import cuda_start
    from gpubw.cli import command as cli

    monkeypatch.setattr(cuda_start, "settle", lambda: ["cuDevicePrimaryCtxRelease failed: X"])
    assert cli.main(["--simulate", "h200x2", "-t", "0", "-b", "4MiB", "-q"]) == 0
    assert "warning: freeing CUDA at the end: cuDevicePrimaryCtxRelease failed: X" in (
        capsys.readouterr().err
    )


def test_one_nvml_session_per_backend(
    fake: tuple[FakeDriver, CudaBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Facts and process queries share one NVML session, which close() shuts down."""
    from tests.test_nvml import fake_pynvml

    from gpubw.backend import base
    from gpubw.hw import nvml_read

    _, backend = fake
    pynvml = fake_pynvml()
    monkeypatch.setattr(base, "Session", lambda: nvml_read.Session(pynvml))
    assert backend.node_facts().available
    for _ in range(4):
        assert backend.gpu_processes() is not None
    assert pynvml.calls == ["init"]
    backend.close()
    assert pynvml.calls == ["init", "shutdown"]


def test_work_runs_in_the_owning_context(fake: tuple[FakeDriver, CudaBackend]) -> None:
    """Memory is freed, and streams and events destroyed, in the context that made them."""
    driver, backend = fake
    p = backend.alloc_device(1, 4096)
    stream = backend.create_stream(1)
    event = backend.create_event(1)
    backend.memory_info(0)
    backend.free_device(p)
    assert driver.current == ("ctx", 1)
    backend.memory_info(0)
    backend.destroy_event(event)
    assert driver.current == ("ctx", 1)
    backend.destroy_stream(stream)
    assert driver.live == {"stream": set(), "event": set(), "dev": set()}


def test_close_frees_what_callers_left(fake: tuple[FakeDriver, CudaBackend]) -> None:
    """close() frees leftover memory, streams and events, so a run never leaks."""
    driver, backend = fake
    backend.alloc_device(0, 4096)
    backend.alloc_device(1, 4096)
    backend.alloc_host(4096, 1)
    backend.create_stream(0)
    backend.create_event(1)
    backend.close()
    assert driver.live == {"stream": set(), "event": set(), "dev": set()}
    assert driver.host == {}


def test_host_memory_round_trip(fake: tuple[FakeDriver, CudaBackend]) -> None:
    """host_write and host_read move bytes through the pinned pointer."""
    _, backend = fake
    p = backend.alloc_host(64, 0)
    backend.host_write(p + 8, b"gpubw!")
    assert backend.host_read(p + 6, 10) == b"\0\0gpubw!\0\0"
    backend.free_host(p)


def test_out_of_memory_is_a_cuda_error(fake: tuple[FakeDriver, CudaBackend]) -> None:
    """An allocation failure surfaces as CudaError(cuMemAlloc, CUDA_ERROR_OUT_OF_MEMORY)."""
    _, backend = fake
    with pytest.raises(CudaError) as info:
        backend.alloc_device(0, 1 << 40)
    assert info.value.out_of_memory and info.value.call == "cuMemAlloc"
    assert "fake error text" in str(info.value)


def test_peer_access_already_enabled_is_ignored(fake: tuple[FakeDriver, CudaBackend]) -> None:
    """Enabling peer access twice is not an error."""
    driver, backend = fake
    backend.enable_peer_access(0, 1)
    backend.enable_peer_access(0, 1)
    assert driver.peer_enabled == {(("ctx", 0), ("ctx", 1))}


def test_synchronize_times_out(fake: tuple[FakeDriver, CudaBackend]) -> None:
    """A stream that never finishes raises GateTimeoutError naming its device, promptly."""
    driver, backend = fake
    stream = backend.create_stream(1)
    driver.stream_ready = False
    t0 = time.monotonic()
    with pytest.raises(GateTimeoutError, match="device 1"):
        backend.synchronize(stream, 0.05)
    assert time.monotonic() - t0 < 30  # bounded by the 0.05 s (a loaded machine: slower)
    driver.stream_ready = True
    backend.synchronize(stream, 0.05)
    assert backend.elapsed_seconds(backend.create_event(1), backend.create_event(1)) == 0.0025


def test_stream_context_destroys_and_keeps_the_first_error(
    fake: tuple[FakeDriver, CudaBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    """backend.stream(d) is a stream of d's context, destroyed after the body; when the body
    fails and so does the destroy, the body's error is the one raised."""
    driver, backend = fake
    with backend.stream(1) as stream:
        assert driver.live["stream"] == {stream.handle}
    assert driver.live["stream"] == set()

    def failing_destroy(h: Any) -> tuple[Any, ...]:
        driver.live["stream"].remove(h)
        return (R.CUDA_ERROR_INVALID_HANDLE,)

    monkeypatch.setattr(driver, "cuStreamDestroy", failing_destroy, raising=False)
    with pytest.raises(ValueError, match="the body's"), backend.stream(0):
        raise ValueError("the body's")
    assert driver.live["stream"] == set()
    with pytest.raises(CudaError, match="cuStreamDestroy"), backend.stream(0):
        pass


def test_launch_rejects_bad_shapes_and_handles(fake: tuple[FakeDriver, CudaBackend]) -> None:
    """launch() refuses a zero grid, an oversized block and a foreign stream handle."""
    _, backend = fake
    stream = backend.create_stream(0)
    args = (ptr(1), ptr(2), u64(3), u32(1))
    with pytest.raises(UsageError, match="grid"):
        backend.launch("gpubw_copy", 0, 512, args, stream)
    with pytest.raises(UsageError, match="block"):
        backend.launch("gpubw_copy", 1, 2048, args, stream)
    with pytest.raises(UsageError, match="not a stream"):
        backend.launch("gpubw_copy", 1, 512, args, object())


# -- GPU: a real device and driver ---------------------------------------------------------


@pytest.fixture
def backend() -> Iterator[CudaBackend]:
    try:
        b = CudaBackend()
    except NoDriverError:
        pytest.skip("no NVIDIA GPU/driver")
    try:
        yield b
    finally:
        b.close()


def _system(backend: CudaBackend, **options: Any) -> Any:
    from gpubw.memory.system import System
    from gpubw.model.options import RunOptions

    return System(backend, RunOptions(**{"samples": 2, "loops": 2, **options}))


@pytest.mark.gpu
def test_device_info_is_sane(backend: CudaBackend) -> None:
    """Every device reports plausible identity, shape and memory figures."""
    devices = backend.devices()
    assert devices
    for i, d in enumerate(devices):
        assert d.ordinal == i and d.name
        assert re.fullmatch(
            r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", d.uuid
        )
        assert re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.0", d.pci_bus_id)
        assert d.compute_capability >= (7, 5)
        assert d.sm_count > 0 and d.l2_bytes > 0 and d.memory_bytes > 1 << 30
        assert d.memory_bus_width_bits > 0 and d.async_engines > 0
        assert d.numa_node is None or d.numa_node >= 0
        assert set(d.local_cpus) <= set(range(os.cpu_count() or 1)) or not d.local_cpus
    free, total = backend.memory_info(0)
    assert 0 < free <= total
    versions = backend.versions()
    assert versions["cuda_driver"] >= 12000


@pytest.mark.gpu
def test_alloc_and_free(backend: CudaBackend) -> None:
    """Device and pinned allocations succeed, round-trip data and free cleanly."""
    d = backend.alloc_device(0, 1 * MIB)
    h = backend.alloc_host(1 * MIB, 0)
    h2 = backend.alloc_host(1 * MIB, None)
    data = os.urandom(4096)
    backend.host_write(h, data)
    stream = backend.create_stream(0)
    backend.memcpy_async(d, h, len(data), stream)
    backend.memcpy_async(h2, d, len(data), stream)
    backend.synchronize(stream, 10)
    assert backend.host_read(h2, len(data)) == data
    backend.destroy_stream(stream)
    backend.free_device(d)
    backend.free_host(h)
    backend.free_host(h2)


@pytest.mark.gpu
def test_events_and_elapsed(backend: CudaBackend) -> None:
    """Events bracket work on a stream and give a small positive interval in seconds."""
    d = backend.alloc_device(0, 64 * MIB)
    h = backend.alloc_host(64 * MIB, 0)
    stream = backend.create_stream(0)
    start, end = backend.create_event(0), backend.create_event(0)
    backend.record_event(start, stream)
    backend.memcpy_async(d, h, 64 * MIB, stream)
    backend.record_event(end, stream)
    other = backend.create_stream(0)
    backend.wait_event(other, end)
    backend.synchronize(other, 30)
    backend.synchronize(stream, 30)
    seconds = backend.elapsed_seconds(start, end)
    assert 1e-6 < seconds < 10
    for e in (start, end):
        backend.destroy_event(e)
    backend.destroy_stream(stream)
    backend.destroy_stream(other)
    backend.free_device(d)
    backend.free_host(h)


@pytest.mark.gpu
def test_compile_load_and_launch(
    backend: CudaBackend, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Kernels compile once per cache (a second backend compiles nothing); a copy kernel copies."""
    from gpubw.backend import nvrtc

    monkeypatch.setenv("GPUBW_CACHE_DIR", str(tmp_path))
    compiles: list[str] = []
    real = nvrtc.compile_source

    def counting(text: str, target: Any, name: str = nvrtc.SOURCE_NAME) -> bytes:
        compiles.append(name)
        return real(text, target, name)

    monkeypatch.setattr(nvrtc, "compile_source", counting)
    backend.load_kernels(0)
    assert compiles
    first = len(compiles)
    second = CudaBackend()
    try:
        second.load_kernels(0)
    finally:
        second.close()
    assert len(compiles) == first, "a second run compiled again"

    n = 3 * MIB + 48
    h = backend.alloc_host(n, 0)
    src, dst = backend.alloc_device(0, n), backend.alloc_device(0, n)
    data = os.urandom(n)
    backend.host_write(h, data)
    stream = backend.create_stream(0)
    backend.memcpy_async(src, h, n, stream)
    backend.launch("gpubw_copy", 7, 512, (ptr(dst), ptr(src), u64(n // 16), u32(3)), stream)
    backend.host_write(h, bytes(n))
    backend.memcpy_async(h, dst, n, stream)
    backend.synchronize(stream, 30)
    assert backend.host_read(h, n) == data
    backend.destroy_stream(stream)
    for p in (src, dst):
        backend.free_device(p)
    backend.free_host(h)


@pytest.mark.gpu
def test_copy_kernels_fit_the_launch_shape(backend: CudaBackend) -> None:
    """The copy kernels do not spill and fit the blocks per SM and block sizes launches assume."""
    # COPY_BLOCKS_PER_SM blocks of 512 threads per SM, so copy_launch_shape's grid is one
    # wave; the split-warp kernel takes SPLIT_WARP_BLOCK threads.
    from gpubw.measure.initiators import COPY_BLOCK, COPY_BLOCKS_PER_SM, SPLIT_WARP_BLOCK

    backend.load_kernels(0)
    info = backend.kernel_attributes(0, "gpubw_copy")
    assert info["local_bytes"] == 0, info
    assert info["max_threads_per_block"] >= COPY_BLOCK
    assert info["blocks_per_sm_at_512"] >= COPY_BLOCKS_PER_SM, info
    info = backend.kernel_attributes(0, "gpubw_copy_split_warp")
    assert info["local_bytes"] == 0, info
    assert info["max_threads_per_block"] >= SPLIT_WARP_BLOCK, info


@pytest.mark.gpu
def test_fill_verify_detects_corruption(backend: CudaBackend) -> None:
    """gpubw_fill then gpubw_verify passes, and a planted bad word is found at its offset."""
    from gpubw.kernels.patterns import SRC_SEED
    from gpubw.memory.buffers import DeviceBuffer

    with _system(backend) as system:
        system.load_kernels()
        n = 5 * MIB + 12
        with backend.stream(0) as stream, DeviceBuffer.allocate(system, 0, n) as buf:
            buf.fill(SRC_SEED, n, stream=stream, exec_device=0)
            buf.verify(SRC_SEED, n, stream=stream, exec_device=0)
            junk = system.pool.host_scratch("test junk", 4096)
            junk.write(b"\x13\x37\x13\x37")
            backend.memcpy_async(buf.ptr + 4 * 777_777, junk.ptr, 4, stream)
            with pytest.raises(VerificationError) as info:
                buf.verify(SRC_SEED, n, stream=stream, exec_device=0)
            assert info.value.offset == 4 * 777_777


@pytest.mark.gpu
@pytest.mark.parametrize("initiator", ["CE", "SM", "SPLIT_WARP"])
@pytest.mark.parametrize("nbytes", [8 * MIB + 48, 64 * MIB + 4096])
def test_copies_verify_through_memcpy_operation(
    backend: CudaBackend, initiator: str, nbytes: int
) -> None:
    """Host->device and device-local copies by each initiator measure and verify."""
    from gpubw.measure import initiators
    from gpubw.measure.measurement import Copy, Kind, MemcpyOperation
    from gpubw.memory.buffers import DeviceBuffer, HostBuffer

    with _system(backend) as system:
        op = MemcpyOperation(system, getattr(initiators, initiator), loops=system.options.loops)
        with (
            HostBuffer.allocate(system, 0, nbytes) as h,
            DeviceBuffer.allocate(system, 0, nbytes) as a,
            DeviceBuffer.allocate(system, 0, nbytes) as b,
        ):
            for copy in (Copy(h, a), Copy(a, b), Copy(a, h)):
                result = op.measure([copy])
                assert result.value(Kind.FIRST) > 1e8  # bytes/s


@pytest.mark.gpu
def test_gate_never_released_times_out(backend: CudaBackend) -> None:
    """An unreleased spin gate raises GateTimeoutError; the kernel's own timeout sets the status."""
    # Nothing hangs.
    backend.load_kernels(0)
    gate = backend.alloc_host(4096, 0)
    backend.host_write(gate, bytes(8))
    stream = backend.create_stream(0)
    try:
        args = (ptr(gate), u64(30 * 10**9), ptr(gate + 4))
        backend.launch("gpubw_gate_wait", 1, 1, args, stream)
        with pytest.raises(GateTimeoutError, match="device 0"):
            backend.synchronize(stream, 0.2)
        backend.host_write(gate, struct.pack("<i", 1))  # release
        backend.synchronize(stream, 10)
        assert struct.unpack("<i", backend.host_read(gate + 4, 4))[0] == 0

        backend.host_write(gate, bytes(8))
        args = (ptr(gate), u64(20 * 10**6), ptr(gate + 4))  # 20 ms, never released
        backend.launch("gpubw_gate_wait", 1, 1, args, stream)
        backend.synchronize(stream, 10)
        assert struct.unpack("<i", backend.host_read(gate + 4, 4))[0] == 1
    finally:
        backend.host_write(gate, struct.pack("<i", 1))
        backend.synchronize(stream, 60)
        backend.destroy_stream(stream)
        backend.free_host(gate)


@pytest.mark.gpu
def test_gate_object_holds_times_out_and_releases(backend: CudaBackend) -> None:
    """gpubw's Gate on its pool page: close holds a stream, open releases it, a wait that is
    never released times out on the device and timed_out() says so; close clears it."""
    with _system(backend) as system:
        system.load_kernels()
        gate = system.gate
        with backend.stream(0) as stream:
            try:
                gate.close()
                gate.enqueue_wait(stream, 30.0)
                with pytest.raises(GateTimeoutError, match="device 0"):
                    backend.synchronize(stream, 0.2)
                gate.open()
                backend.synchronize(stream, 10)
                assert not gate.timed_out()
                gate.close()
                gate.enqueue_wait(stream, 0.02)  # never released
                backend.synchronize(stream, 10)
                assert gate.timed_out()
                gate.close()
                assert not gate.timed_out()
            finally:
                gate.open()
                backend.synchronize(stream, 60)


@pytest.mark.gpu
def test_gate_relay_sets_the_device_flag_on_release_and_on_timeout(backend: CudaBackend) -> None:
    """The cross-rank gate's kernels on one GPU: a stream waiting on a device flag stays held
    after the host gate opens, until the relay (held by the host gate) sets the flag; a relay
    never released times out, says so in its status and still sets the flag."""
    with _system(backend) as system:
        system.load_kernels()
        gate = system.gate
        flag = backend.alloc_device(0, 4)
        words = backend.alloc_host(8, 0)
        backend.host_write(words, struct.pack("<ii", 0, 1))
        with backend.stream(0) as relay, backend.stream(0) as waiting:
            try:
                for timeout_s in (30.0, 0.02):
                    backend.memcpy_async(flag, words, 4, relay)  # device flag = 0
                    backend.synchronize(relay, 10)
                    gate.close()
                    gate.enqueue_wait(waiting, 30.0, flag=flag)
                    if timeout_s > 1:  # the host gate alone does not release the waiter
                        gate.open()
                        with pytest.raises(GateTimeoutError, match="device 0"):
                            backend.synchronize(waiting, 0.2)
                        gate.close()
                    gate.enqueue_relay(relay, flag, timeout_s)
                    if timeout_s > 1:
                        with pytest.raises(GateTimeoutError, match="device 0"):
                            backend.synchronize(waiting, 0.2)
                        gate.open()
                    backend.synchronize(relay, 10)
                    backend.synchronize(waiting, 10)
                    assert gate.timed_out() is (timeout_s < 1)
            finally:
                gate.open()
                backend.memcpy_async(flag, words + 4, 4, relay)  # flag = 1: nothing held
                backend.synchronize(relay, 60)
                backend.synchronize(waiting, 60)
                backend.free_device(flag)
                backend.free_host(words)


@pytest.mark.gpu
def test_pointer_chase_follows_the_chain(backend: CudaBackend) -> None:
    """Only the target block chases, and the final pointer is stored to the sink."""
    backend.load_kernels(0)
    nodes, stride = 1024, 128
    chain = backend.alloc_host(nodes * stride, 0)
    for k in range(nodes):
        backend.host_write(
            chain + k * stride, struct.pack("<Q", chain + ((k + 1) % nodes) * stride)
        )
    sink = backend.alloc_device(0, 8)
    out = backend.alloc_host(8, 0)
    stream = backend.create_stream(0)
    sms = backend.devices()[0].sm_count
    try:
        steps = 1000
        backend.launch(
            "gpubw_pointer_chase", sms, 1, (ptr(chain), u64(steps), u32(3), ptr(sink)), stream
        )
        backend.memcpy_async(out, sink, 8, stream)
        backend.synchronize(stream, 30)
        final = struct.unpack("<Q", backend.host_read(out, 8))[0]
        assert final == chain + (steps % nodes) * stride
    finally:
        backend.destroy_stream(stream)
        backend.free_device(sink)
        backend.free_host(out)
        backend.free_host(chain)


@pytest.mark.gpu
def test_peer_access_and_peer_copy(backend: CudaBackend) -> None:
    """Two peer GPUs enable access both ways (twice is fine); an SM copy between them verifies."""
    if len(backend.devices()) < 2:
        pytest.skip("needs 2 GPUs")
    if not backend.can_access_peer(0, 1):
        pytest.skip("GPU 0 cannot access GPU 1 (no peer access)")
    from gpubw.measure.initiators import SM
    from gpubw.measure.measurement import Copy, Kind, MemcpyOperation
    from gpubw.memory.buffers import DeviceBuffer

    backend.enable_peer_access(0, 1)
    backend.enable_peer_access(1, 0)
    backend.enable_peer_access(0, 1)
    with (
        _system(backend) as system,
        DeviceBuffer.allocate(system, 0, 32 * MIB) as a,
        DeviceBuffer.allocate(system, 1, 32 * MIB) as b,
    ):
        system.enable_peer_access(0, 1)
        for copy in (Copy(a, b), Copy(b, a)):
            op = MemcpyOperation(system, SM, loops=system.options.loops)
            assert op.measure([copy]).value(Kind.FIRST) > 1e9


@pytest.mark.gpu
def test_system_close_leaks_nothing(backend: CudaBackend) -> None:
    """Free device memory is the same before and after a System with buffers is closed."""
    from gpubw.measure.initiators import SM
    from gpubw.measure.measurement import Copy, MemcpyOperation
    from gpubw.memory.buffers import DeviceBuffer, HostBuffer

    def one_run() -> None:
        with (
            _system(CudaBackend()) as system,
            HostBuffer.allocate(system, 0, 64 * MIB) as h,
        ):
            big = DeviceBuffer.allocate(system, 0, 256 * MIB)
            left_open = DeviceBuffer.allocate(system, 0, 64 * MIB)  # never closed
            MemcpyOperation(system, SM, loops=2).measure([Copy(h, left_open)])
            big.close()  # back to the run's pool, freed by System.close

    # `backend` holds the primary context, so free memory is comparable across the runs.
    backend.memory_info(0)
    one_run()  # first run: the context's one-time allocations
    before = backend.memory_info(0)[0]
    one_run()
    after = backend.memory_info(0)[0]
    assert abs(before - after) <= 8 * MIB, (before, after)


class HugePageDriver(FakeDriver):
    """FakeDriver plus cuMemHostRegister / cuMemHostUnregister (huge-page host buffers)."""

    CU_MEMHOSTREGISTER_PORTABLE = real_cu.CU_MEMHOSTREGISTER_PORTABLE

    def __init__(self) -> None:
        super().__init__()
        self.registered: dict[int, int] = {}

    def cuMemHostRegister(self, p: int, nbytes: int, flags: int) -> tuple[Any, ...]:
        assert flags == real_cu.CU_MEMHOSTREGISTER_PORTABLE
        self.registered[p] = nbytes
        return (R.CUDA_SUCCESS,)

    def cuMemHostUnregister(self, p: int) -> tuple[Any, ...]:
        del self.registered[p]
        return (R.CUDA_SUCCESS,)


def test_huge_page_host_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    """--host-huge-pages: host buffers are mapped in whole pages, registered with the driver,
    usable, and unregistered and unmapped by free_host and by close(). (MAP_HUGETLB is
    dropped here: this machine need not have huge pages; the flags are the only difference.)"""
    driver = HugePageDriver()
    monkeypatch.setattr(cuda_backend, "cu", driver)
    monkeypatch.setattr(cuda_host, "HUGE_MMAP_FLAGS", 0x02 | 0x20)
    backend = CudaBackend()
    monkeypatch.setattr(backend, "huge_pages", lambda: (2 << 20, 8))
    backend.enable_host_huge_pages(3 << 20)
    p = backend.alloc_host(3 << 20, 0)
    assert driver.registered == {p: 4 << 20} and driver.host == {}
    backend.host_write(p + (3 << 20) - 4, b"last")
    assert backend.host_read(p + (3 << 20) - 4, 4) == b"last"
    backend.free_host(p)
    assert driver.registered == {}
    backend.alloc_host(1, 1)
    backend.close()
    assert driver.registered == {}


def test_huge_pages_failing_mmap_and_none_free(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failing mmap is a GpubwError naming MAP_HUGETLB; too few free pages a UsageError."""
    driver = HugePageDriver()
    monkeypatch.setattr(cuda_backend, "cu", driver)
    backend = CudaBackend()
    monkeypatch.setattr(backend, "huge_pages", lambda: (1 << 40, 1))  # absurd page: ENOMEM
    backend.enable_host_huge_pages(4096)
    with pytest.raises(GpubwError, match="MAP_HUGETLB"):
        backend.alloc_host(4096, 0)
    monkeypatch.setattr(backend, "huge_pages", lambda: (2 << 20, 0))
    with pytest.raises(UsageError, match="HugePages_Free"):
        backend.enable_host_huge_pages(4096)
    backend.close()


# -- the driver line (issue 22 item 1) -------------------------------------------------------


@pytest.mark.parametrize(
    ("driver", "bindings", "said"),
    [
        (12080, "13.0.1", "install the CUDA 12 line, pip install 'gpubw[cu12]'"),
        (12020, "13.5.0", "newer than this NVIDIA driver's CUDA 12.2"),
        (11080, "12.9.0", "pip install 'gpubw[cu11]'"),
        (13000, "13.0.1", None),
        (13010, "12.9.4", None),  # an older line runs on a newer driver
        (12080, None, None),
        (12080, "unknown", None),
    ],
)
def test_driver_line_problem(driver: int, bindings: str | None, said: str | None) -> None:
    """Bindings for a newer CUDA major than the driver's: one line naming the extra."""
    from gpubw.backend.cuda_support import driver_line_problem

    problem = driver_line_problem(driver, bindings)
    if said is None:
        assert problem is None
    else:
        assert problem is not None and said in problem and "\n" not in problem


def test_bindings_newer_than_the_driver_stop_before_cuinit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A CUDA 12.8 driver under cuda-bindings 13 (a fake driver): CudaBackend raises one
    line naming gpubw[cu12] before cuInit; the command prints it and exits 1."""
    from gpubw.backend import cuda_support
    from gpubw.cli import command as cli

    driver = FakeDriver()
    calls: list[str] = []
    monkeypatch.setattr(driver, "cuDriverGetVersion", lambda: (R.CUDA_SUCCESS, 12080))
    monkeypatch.setattr(driver, "cuInit", lambda flags: calls.append("cuInit") or (R.CUDA_SUCCESS,))
    monkeypatch.setattr(cuda_backend, "cu", driver)
    monkeypatch.setattr(cuda_backend, "bindings_version", lambda: "13.0.1")
    with pytest.raises(GpubwError, match=r"pip install 'gpubw\[cu12\]'"):
        CudaBackend()
    assert calls == []
    assert cli.main(["info"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cuda-bindings 13.0.1 is for CUDA 13" in err
    assert cuda_support.bindings_version() == real_cu_version()


def real_cu_version() -> str:
    from importlib import metadata

    return metadata.version("cuda-bindings")
