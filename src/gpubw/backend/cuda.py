"""The real backend: a thin, checked facade over the CUDA driver API (``cuda.bindings.driver``).

Every driver call goes through :func:`_check`, which turns a CUresult other than
CUDA_SUCCESS into :class:`gpubw.model.errors.CudaError` carrying the call's name and the error's
name. Work runs in each device's primary context, retained on first use and released by
:meth:`CudaBackend.close`, which also frees whatever a caller left behind (streams, events,
memory, modules), so a run never leaks. Kernels are compiled by NVRTC for each device's
exact architecture (see :mod:`gpubw.backend.nvrtc`) and loaded up front.

The facade is cut along its sections into modules of their own: host memory (pinned, huge
pages, NUMA-bound, pageable) is :mod:`gpubw.backend.cuda_host`; memory shared across
processes (fabric, POSIX-fd and IPC handles, multicast objects) is
:mod:`gpubw.backend.cuda_sharing`, and multicast objects are never created where the
environment disables them (:func:`gpubw.backend.base.multicast_disabled`). The helpers that
need no driver (kernel argument packing, UUIDs, sysfs/proc facts) are in
:mod:`gpubw.backend.cuda_support`. This module keeps the contexts, devices, device memory,
streams and events, kernels and the teardown.
"""

from __future__ import annotations

import ctypes
import functools
import time
from collections.abc import Sequence
from typing import Any

import attrs

from gpubw.backend import cuda_start
from gpubw.backend.base import DeviceInfo, KernelArg, check_launch_geometry
from gpubw.backend.cuda_host import CudaHostMemory
from gpubw.backend.cuda_sharing import CudaSharingMixin
from gpubw.backend.cuda_support import (
    NO_DEVICE_MESSAGE,
    NO_DRIVER_MESSAGE,
    bindings_version,
    driver_line_problem,
    driver_version_string,
    format_uuid,
    pack_kernel_args,
    read_numa,
    read_pci_device_id,
    register_builtin,
    registered_modules,
    result_name,
    unmap,
)
from gpubw.hw.nvml_read import Session
from gpubw.model.errors import (
    CudaError,
    GateTimeoutError,
    GpubwError,
    KernelCompileError,
    NoDriverError,
    UsageError,
)

try:  # the bindings import without a driver; only calls need libcuda
    from cuda.bindings import driver as cu
except ImportError:  # pragma: no cover - cuda-bindings is a hard dependency
    cu = None


def _check(call: str, result: tuple[Any, ...]) -> Any:
    """Raise CudaError unless ``result[0]`` is CUDA_SUCCESS; return the call's outputs: None,
    the single value, or a tuple of values."""
    status = result[0]
    if status != cu.CUresult.CUDA_SUCCESS:
        detail = ""
        try:
            err, text = cu.cuGetErrorString(status)
            if err == cu.CUresult.CUDA_SUCCESS and text:
                detail = text.decode(errors="replace") if isinstance(text, bytes) else str(text)
        except Exception:  # no driver to ask: the name alone is enough
            detail = ""
        raise CudaError(call, result_name(status), detail)
    if len(result) == 1:
        return None
    if len(result) == 2:
        return result[1]
    return result[1:]


def _check_driver_line() -> None:
    """GpubwError (one line naming the extra to install) when cuda-bindings is for a newer
    CUDA major than the driver; nothing when they fit or the driver cannot say (no libcuda:
    cuInit reports that)."""
    try:
        status, version = cu.cuDriverGetVersion()  # needs no cuInit
    except Exception:
        return
    if status == cu.CUresult.CUDA_SUCCESS:
        problem = driver_line_problem(int(version), bindings_version())
        if problem:
            raise GpubwError(problem)


@attrs.define(eq=False)
class _Stream:
    handle: Any
    device: int


@attrs.define(eq=False)
class _Event:
    handle: Any
    device: int


#: The longest pause between two cuStreamQuery polls of :meth:`CudaBackend.synchronize`
#: (pauses start at 10 us and double). A wait overshoots its stream's end by half of it on
#: average: with 1 ms that was ~0.5 s of the default suite's ~1,600 waits on 2 x H200.
#: nvbandwidth's cuStreamSynchronize spins a core; this sleeps between polls.
SYNC_POLL_MAX_S = 1e-4


class CudaBackend(CudaSharingMixin, CudaHostMemory):
    """The CUDA driver, through ``cuda.bindings.driver``."""

    name = "cuda"
    simulated = False

    def __init__(self) -> None:
        if cu is None:  # pragma: no cover
            raise NoDriverError(NO_DRIVER_MESSAGE)
        _check_driver_line()
        try:
            result = cu.cuInit(0)
        except (RuntimeError, OSError) as exc:  # dlopen of libcuda failed
            raise NoDriverError(f"{NO_DRIVER_MESSAGE} [{exc}]") from None
        if result[0] == cu.CUresult.CUDA_ERROR_NO_DEVICE:
            raise NoDriverError(NO_DEVICE_MESSAGE)
        _check("cuInit", result)
        count = int(_check("cuDeviceGetCount", cu.cuDeviceGetCount()))
        if count == 0:
            raise NoDriverError(NO_DEVICE_MESSAGE)
        self._handles = [_check("cuDeviceGet", cu.cuDeviceGet(i)) for i in range(count)]
        self._driver_version = int(_check("cuDriverGetVersion", cu.cuDriverGetVersion()))
        self._devices: tuple[DeviceInfo, ...] | None = None
        self._contexts: dict[int, Any] = {}
        # primary contexts cuda_start.prestart() is retaining on a helper thread become ours
        # at their first use (meanwhile the caller reads devices, NVML facts, ...)
        self._prestarted = cuda_start.pending()
        #: devices whose context came from the prestart: released on cuda_start's helper
        #: thread at close (the command waits for it as it ends, cuda_start.settle)
        self._release_later: set[int] = set()
        self._modules: dict[int, dict[str, Any]] = {}  # device -> module name -> CUmodule
        self._functions: dict[int, dict[str, Any]] = {}  # device -> kernel -> CUfunction
        self._images: dict[tuple[str, str, tuple[int, int]], bytes] = {}
        self._streams: set[_Stream] = set()
        self._events: set[_Event] = set()
        self._device_memory: dict[int, int] = {}  # pointer -> device
        self._init_host_memory()
        self._init_sharing()
        self._closed = False

    # -- helpers --------------------------------------------------------------------------
    def _cu(self) -> Any:
        """The driver module (tests replace this module's ``cu``)."""
        return cu

    def _call(self, call: str, result: tuple[Any, ...]) -> Any:
        return _check(call, result)

    def _device_index(self, device: int) -> int:
        if not isinstance(device, int) or not 0 <= device < len(self._handles):
            raise UsageError(f"no device {device!r}; devices are 0..{len(self._handles) - 1}")
        return device

    def _adopt_prestarted(self) -> None:
        """Take over the primary contexts a prestart retained (waiting for it to finish)."""
        if self._prestarted:
            self._prestarted = False
            adopted = cuda_start.adopt(cu, len(self._handles))
            self._contexts.update(adopted)
            self._release_later.update(adopted)

    def _new_nvml_session(self) -> Session:
        """The NVML session a prestart made ready beside the CUDA start
        (:func:`gpubw.backend.cuda_start.adopt_nvml`), else a new one."""
        warmed: Session | None = cuda_start.adopt_nvml()
        return warmed if warmed is not None else super()._new_nvml_session()

    def _context(self, device: int) -> Any:
        """Device's primary context, retained on first use."""
        self._adopt_prestarted()
        ctx = self._contexts.get(device)
        if ctx is None:
            handle = self._handles[self._device_index(device)]
            ctx = _check("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(handle))
            self._contexts[device] = ctx
            self._closed = False
        return ctx

    def _use(self, device: int) -> None:
        """Make ``device``'s primary context current on this thread."""
        _check("cuCtxSetCurrent", cu.cuCtxSetCurrent(self._context(device)))

    def _attr(self, device: int, name: str, default: int | None = None) -> int:
        attr = getattr(cu.CUdevice_attribute, name, None)
        try:
            if attr is None:
                raise CudaError("cuDeviceGetAttribute", "CUDA_ERROR_INVALID_VALUE", name)
            return int(
                _check("cuDeviceGetAttribute", cu.cuDeviceGetAttribute(attr, self._handles[device]))
            )
        except CudaError:
            if default is None:
                raise
            return default

    # -- system ---------------------------------------------------------------------------
    def versions(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "cuda_driver": self._driver_version,
            "driver": driver_version_string(),
        }
        try:
            from gpubw.backend.nvrtc import nvrtc_version

            out["nvrtc"] = "{}.{}".format(*nvrtc_version())
        except KernelCompileError:
            out["nvrtc"] = None
        try:
            import cuda.bindings

            out["cuda_bindings"] = cuda.bindings.__version__
        except Exception:  # pragma: no cover
            pass
        return out

    def devices(self) -> Sequence[DeviceInfo]:
        if self._devices is None:
            self._devices = tuple(self._read_device(i) for i in range(len(self._handles)))
        return self._devices

    def _read_device(self, ordinal: int) -> DeviceInfo:
        handle = self._handles[ordinal]
        raw_name = _check("cuDeviceGetName", cu.cuDeviceGetName(256, handle))
        name = bytes(raw_name).split(b"\0", 1)[0].decode(errors="replace").strip()
        uuid = _check("cuDeviceGetUuid", cu.cuDeviceGetUuid(handle))
        domain = self._attr(ordinal, "CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID")
        bus = self._attr(ordinal, "CU_DEVICE_ATTRIBUTE_PCI_BUS_ID")
        dev = self._attr(ordinal, "CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID")
        bdf = f"{domain:04x}:{bus:02x}:{dev:02x}.0"
        numa_node, local_cpus = read_numa(bdf)
        return DeviceInfo(
            ordinal=ordinal,
            name=name,
            uuid=format_uuid(uuid.bytes),
            pci_bus_id=bdf,
            compute_capability=(
                self._attr(ordinal, "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"),
                self._attr(ordinal, "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR"),
            ),
            sm_count=self._attr(ordinal, "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
            l2_bytes=self._attr(ordinal, "CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE", 0),
            memory_bytes=int(_check("cuDeviceTotalMem", cu.cuDeviceTotalMem(handle))),
            memory_bus_width_bits=self._attr(
                ordinal, "CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH", 0
            ),
            # deprecated in CUDA 13 but still answered; 0 where a driver drops them
            memory_clock_khz=self._attr(ordinal, "CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE", 0),
            clock_khz=self._attr(ordinal, "CU_DEVICE_ATTRIBUTE_CLOCK_RATE", 0),
            async_engines=self._attr(ordinal, "CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT", 0),
            pci_device_id=read_pci_device_id(bdf),
            numa_node=numa_node,
            local_cpus=local_cpus,
            multicast_supported=bool(
                self._attr(ordinal, "CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED", 0)
            ),
        )

    def can_access_peer(self, device: int, peer: int) -> bool:
        a, b = self._device_index(device), self._device_index(peer)
        if a == b:
            return False
        ok = _check(
            "cuDeviceCanAccessPeer", cu.cuDeviceCanAccessPeer(self._handles[a], self._handles[b])
        )
        return bool(ok)

    def enable_peer_access(self, device: int, peer: int) -> None:
        peer_ctx = self._context(self._device_index(peer))
        self._use(device)
        result = cu.cuCtxEnablePeerAccess(peer_ctx, 0)
        if result[0] == cu.CUresult.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED:
            return
        _check("cuCtxEnablePeerAccess", result)

    def memory_info(self, device: int) -> tuple[int, int]:
        self._use(device)
        free, total = _check("cuMemGetInfo", cu.cuMemGetInfo())
        return int(free), int(total)

    # -- memory ---------------------------------------------------------------------------
    def alloc_device(self, device: int, nbytes: int) -> int:
        if nbytes <= 0:
            raise UsageError(f"device allocation size must be positive, got {nbytes}")
        self._use(device)
        pointer = int(_check("cuMemAlloc", cu.cuMemAlloc(nbytes)))
        self._device_memory[pointer] = device
        return pointer

    def free_device(self, pointer: int) -> None:
        device = self._device_memory.pop(pointer, None)
        if device is None:
            raise UsageError(f"0x{pointer:x} is not device memory allocated by this backend")
        self._use(device)
        _check("cuMemFree", cu.cuMemFree(pointer))

    # -- streams and events ---------------------------------------------------------------
    def create_stream(self, device: int) -> _Stream:
        self._use(device)
        handle = _check(
            "cuStreamCreate", cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING)
        )
        stream = _Stream(handle, device)
        self._streams.add(stream)
        return stream

    def destroy_stream(self, stream: Any) -> None:
        s = self._stream(stream)
        if s not in self._streams:
            return
        self._streams.discard(s)
        self._use(s.device)
        _check("cuStreamDestroy", cu.cuStreamDestroy(s.handle))

    def create_event(self, device: int) -> _Event:
        self._use(device)
        handle = _check("cuEventCreate", cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DEFAULT))
        event = _Event(handle, device)
        self._events.add(event)
        return event

    def destroy_event(self, event: Any) -> None:
        e = self._event(event)
        if e not in self._events:
            return
        self._events.discard(e)
        self._use(e.device)
        _check("cuEventDestroy", cu.cuEventDestroy(e.handle))

    def record_event(self, event: Any, stream: Any) -> None:
        e, s = self._event(event), self._stream(stream)
        self._use(s.device)
        _check("cuEventRecord", cu.cuEventRecord(e.handle, s.handle))

    def wait_event(self, stream: Any, event: Any) -> None:
        s, e = self._stream(stream), self._event(event)
        self._use(s.device)
        _check("cuStreamWaitEvent", cu.cuStreamWaitEvent(s.handle, e.handle, 0))

    def elapsed_seconds(self, start: Any, end: Any) -> float:
        a, b = self._event(start), self._event(end)
        self._use(a.device)
        ms = _check("cuEventElapsedTime", cu.cuEventElapsedTime(a.handle, b.handle))
        return float(ms) / 1e3

    def synchronize(self, stream: Any, timeout_s: float) -> None:
        s = self._stream(stream)
        self._use(s.device)
        deadline = time.monotonic() + timeout_s
        pause = 0.0
        while True:
            result = cu.cuStreamQuery(s.handle)
            if result[0] != cu.CUresult.CUDA_ERROR_NOT_READY:
                _check("cuStreamQuery", result)
                return
            if time.monotonic() >= deadline:
                raise GateTimeoutError(
                    f"a stream on device {s.device} did not finish within {timeout_s:g} s "
                    "(a spin gate never released, or the copies are far slower than expected)"
                )
            time.sleep(pause)
            pause = min(SYNC_POLL_MAX_S, pause * 2 if pause else 1e-5)

    @staticmethod
    def _stream(stream: Any) -> _Stream:
        if not isinstance(stream, _Stream):
            raise UsageError(f"not a stream of the CUDA backend: {stream!r}")
        return stream

    @staticmethod
    def _event(event: Any) -> _Event:
        if not isinstance(event, _Event):
            raise UsageError(f"not an event of the CUDA backend: {event!r}")
        return event

    # -- work -----------------------------------------------------------------------------
    def memcpy_async(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        s = self._stream(stream)
        self._use(s.device)
        _check("cuMemcpyAsync", cu.cuMemcpyAsync(dst, src, nbytes, s.handle))

    def load_kernels(self, device: int) -> None:
        """Load every registered kernel module (gpubw's own, then plugins') on ``device`` that
        is not loaded there yet; each function is forced to load now, so no module load
        happens later while a stream is held by the spin gate."""
        device = self._device_index(device)
        loaded = self._modules.setdefault(device, {})
        functions = self._functions.setdefault(device, {})
        for name, program, text, specs in registered_modules():
            if name in loaded:
                continue
            image = self._image(name, program, text, self.devices()[device].compute_capability)
            self._use(device)
            module = _check(f"cuModuleLoadData({program})", cu.cuModuleLoadData(image))
            loaded[name] = module
            for spec in specs:
                func = _check(
                    f"cuModuleGetFunction({spec.name})",
                    cu.cuModuleGetFunction(module, spec.name.encode()),
                )
                if hasattr(cu, "cuFuncLoad"):
                    _check("cuFuncLoad", cu.cuFuncLoad(func))
                # Querying an attribute also forces the load (as nvbandwidth does).
                _check(
                    "cuFuncGetAttribute",
                    cu.cuFuncGetAttribute(
                        cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, func
                    ),
                )
                functions[spec.name] = func

    def _image(self, name: str, program: str, text: str, cc: tuple[int, int]) -> bytes:
        """The compiled image of one module for one architecture (compiled once per run)."""
        from gpubw.backend.nvrtc import load_or_compile

        key = (name, text, cc)
        image = self._images.get(key)
        if image is None:
            cuda_start.kernels_ready(name)  # a command's start may be compiling it already
            image, _ = load_or_compile(cc, self._driver_version, source_text=text, name=program)
            self._images[key] = image
        return image

    def kernel_attributes(self, device: int, kernel: str) -> dict[str, int]:
        """Registers, local (spill) bytes and the largest block of a loaded kernel, and how
        many 512-thread blocks of it fit on one SM (for tuning the copy launch shape)."""
        func = self._function(device, kernel)
        attrs_ = cu.CUfunction_attribute
        out = {
            key: int(_check("cuFuncGetAttribute", cu.cuFuncGetAttribute(attr, func)))
            for key, attr in (
                ("num_regs", attrs_.CU_FUNC_ATTRIBUTE_NUM_REGS),
                ("local_bytes", attrs_.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES),
                ("max_threads_per_block", attrs_.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
            )
        }
        if out["max_threads_per_block"] >= 512:
            self._use(device)
            out["blocks_per_sm_at_512"] = int(
                _check(
                    "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                    cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(func, 512, 0),
                )
            )
        return out

    def _function(self, device: int, kernel: str) -> Any:
        functions = self._functions.get(device, {})
        func = functions.get(kernel)
        if func is None:
            # A module registered after the up-front load (a plugin's, or gpubw's copy kernels
            # where nothing declared them): load it now.
            register_builtin(kernel)
            self.load_kernels(device)
            func = self._functions[device].get(kernel)
        if func is None:
            raise UsageError(f"kernel {kernel!r} is not in any loaded kernel module")
        return func

    def launch(
        self, kernel: str, grid: int, block: int, args: Sequence[KernelArg], stream: Any
    ) -> None:
        values, array = pack_kernel_args(kernel, args)
        check_launch_geometry(kernel, grid, block)
        s = self._stream(stream)
        func = self._function(s.device, kernel)
        self._use(s.device)
        _check(
            f"cuLaunchKernel({kernel})",
            cu.cuLaunchKernel(
                func, int(grid), 1, 1, int(block), 1, 1, 0, s.handle, ctypes.addressof(array), 0
            ),
        )
        del values  # the driver copied the parameters during the call

    # -- teardown -------------------------------------------------------------------------
    def close(self) -> None:
        """Free what callers left behind, unload modules, release primary contexts. Safe to
        call twice; the first error is raised after everything was attempted."""
        super().close()  # the NVML session
        self._adopt_prestarted()  # a prestart never used: its contexts are released below
        if self._closed and not self._contexts:
            return
        self._closed = True
        errors: list[BaseException] = []
        self._free_everything(errors)
        self._release_contexts(errors)
        if errors:
            raise errors[0]

    def _attempt(
        self, errors: list[BaseException], device: int, call: str, fn: Any, *args: Any
    ) -> None:
        """``fn(*args)`` in ``device``'s context; a failure is kept in ``errors``."""
        try:
            self._use(device)
            _check(call, fn(*args))
        except BaseException as exc:
            errors.append(exc)

    def _free_everything(self, errors: list[BaseException]) -> None:
        """Streams, events, shared memory, device and host memory, modules: each freed in
        its own device's context, in that order."""
        attempt = functools.partial(self._attempt, errors)
        # A stream with pending work is destroyed at once; the driver frees it when its work
        # is done (never block here: a leaked stream may sit behind a spin gate).
        for s in list(self._streams):
            attempt(s.device, "cuStreamDestroy", cu.cuStreamDestroy, s.handle)
        self._streams.clear()
        for e in list(self._events):
            attempt(e.device, "cuEventDestroy", cu.cuEventDestroy, e.handle)
        self._events.clear()
        errors.extend(self._release_sharing())  # mappings of other ranks' memory, exports
        for pointer, device in list(self._device_memory.items()):
            attempt(device, "cuMemFree", cu.cuMemFree, pointer)
        self._device_memory.clear()
        for pointer, device in list(self._host_memory.items()):
            if pointer in self._huge:
                try:
                    self._use(device)
                    self._free_huge(pointer)
                except BaseException as exc:
                    errors.append(exc)
                continue
            attempt(device, "cuMemFreeHost", cu.cuMemFreeHost, pointer)
        self._host_memory.clear()
        for pointer, size in list(self._pageable.items()):
            unmap(pointer, size)
        self._pageable.clear()
        for device, modules in list(self._modules.items()):
            for module in modules.values():
                attempt(device, "cuModuleUnload", cu.cuModuleUnload, module)
        self._modules.clear()
        self._functions.clear()

    def _release_contexts(self, errors: list[BaseException]) -> None:
        """Every primary context released (those the prestart made: given back to it)."""
        later = [self._handles[d] for d in self._contexts if d in self._release_later]
        for device in list(self._contexts):
            try:
                _check("cuCtxSetCurrent", cu.cuCtxSetCurrent(None))
            except BaseException as exc:
                errors.append(exc)
            if device in self._release_later:
                continue
            try:
                _check(
                    "cuDevicePrimaryCtxRelease",
                    cu.cuDevicePrimaryCtxRelease(self._handles[device]),
                )
            except BaseException as exc:
                errors.append(exc)
        if later:  # made by the prestart: given back to it (the command settles it)
            cuda_start.release_later(cu, later)
        self._release_later.clear()
        self._contexts.clear()

    def __enter__(self) -> CudaBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
