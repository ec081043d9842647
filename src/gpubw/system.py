"""The run-scoped owner of CUDA state: backend, devices, peer access, patterns, buffer pool.

A :class:`System` is created once per run (by the runner) and handed to every testcase. It
owns everything that outlives one measurement, and :meth:`System.close` frees all of it,
including buffers a failed testcase left behind, so a run never leaks device or pinned memory.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from gpubw.backend.base import Backend, DeviceInfo
from gpubw.errors import CudaError
from gpubw.kernels import PATTERN_WORDS
from gpubw.kernels.modules import GPUBW, KernelModule, generation, register_kernel_module
from gpubw.options import RunOptions

if TYPE_CHECKING:
    from gpubw.buffers import Buffer

#: Seeds of the verification patterns (nvbandwidth's): destination, then source/expected.
DST_SEED = 0xCAFEBABE
SRC_SEED = 0xBAADF00D


@functools.lru_cache(maxsize=4)
def pattern_bytes(seed: int) -> bytes:
    """PATTERN_WORDS 32-bit words of xorshift32 from ``seed`` (first word = one step)."""
    import numpy as np

    out = np.empty(PATTERN_WORDS, dtype=np.uint32)
    x = seed & 0xFFFFFFFF
    m = 0xFFFFFFFF
    for k in range(PATTERN_WORDS):
        x ^= (x << 13) & m
        x ^= x >> 17
        x ^= (x << 5) & m
        out[k] = x
    return out.tobytes()


class System:
    """Backend + devices + per-run caches. Use as a context manager or call :meth:`close`."""

    def __init__(self, backend: Backend, options: RunOptions | None = None) -> None:
        self.backend = backend
        self.options = options or RunOptions()
        self.devices: Sequence[DeviceInfo] = tuple(backend.devices())
        self._peer: dict[tuple[int, int], bool] = {}
        self._peer_enabled: set[tuple[int, int]] = set()
        self._patterns: dict[tuple[int, int], Buffer] = {}
        self._free: dict[tuple[bool, int | None, int], list[Buffer]] = {}
        self._live: set[Buffer] = set()
        #: kernel-module registry generation the devices were loaded at (None: not yet)
        self._kernels_loaded: int | None = None
        self._gate: Buffer | None = None
        self._verify: dict[int, Buffer] = {}
        self._ids = itertools.count()
        self.closed = False

    # -- devices and peers ----------------------------------------------------------------
    @property
    def device_count(self) -> int:
        return len(self.devices)

    def can_access_peer(self, device: int, peer: int) -> bool:
        """One-directional probe, cached (``device`` can read/write ``peer``'s memory)."""
        if device == peer:
            return False
        key = (device, peer)
        if key not in self._peer:
            self._peer[key] = self.backend.can_access_peer(device, peer)
        return self._peer[key]

    def peer_pairs(self) -> list[tuple[int, int]]:
        """Every ordered pair (a, b), a != b, where a can access b."""
        n = self.device_count
        return [(a, b) for a in range(n) for b in range(n) if self.can_access_peer(a, b)]

    def enable_peer_access(self, a: int, b: int) -> None:
        """Enable access both ways between devices a and b (nvbandwidth probes one way and
        enables both). Idempotent."""
        for x, y in ((a, b), (b, a)):
            if (x, y) not in self._peer_enabled:
                self.backend.enable_peer_access(x, y)
                self._peer_enabled.add((x, y))

    def load_kernel_modules(self, modules: Iterable[KernelModule]) -> None:
        """Make the kernels of ``modules`` (what a testcase declares in ``kernel_modules``)
        launchable on every device, before anything is gated: each is registered
        (:func:`gpubw.kernels.modules.register_kernel_module`; PluginError on a clash) and
        the backend loads, once per device, whatever it has not loaded yet."""
        for module in modules:
            register_kernel_module(module)
        current = generation()
        if self._kernels_loaded != current:
            for dev in self.devices:
                self.backend.load_kernels(dev.ordinal)
            self._kernels_loaded = current

    def load_kernels(self) -> None:
        """Load gpubw's own kernels (the spin gate, fill, verify: every measurement needs
        them) and whatever else is registered, once per device."""
        self.load_kernel_modules((GPUBW,))

    # -- affinity ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def near(self, device: int | None) -> Iterator[None]:
        """Run the body with the CPU affinity set to ``device``'s local CPUs (if known and not
        disabled with ``-d``), then restore the previous affinity. Pinned pages are first
        touched by this thread, so they land on the device's NUMA node."""
        cpus: tuple[int, ...] = ()
        if device is not None and self.options.affinity and hasattr(os, "sched_setaffinity"):
            cpus = self.devices[device].local_cpus
        if not cpus:
            yield
            return
        before = os.sched_getaffinity(0)
        allowed = set(cpus) & set(range(os.cpu_count() or 1))
        try:
            if allowed:
                os.sched_setaffinity(0, allowed)
            yield
        finally:
            os.sched_setaffinity(0, before)

    # -- buffer pool ----------------------------------------------------------------------
    def _take_free(self, host: bool, device: int | None, nbytes: int) -> Buffer | None:
        lst = self._free.get((host, device, nbytes))
        return lst.pop() if lst else None

    def _release_to_pool(self, buf: Buffer) -> None:
        self._free.setdefault((buf.is_host, buf.device, buf.nbytes), []).append(buf)

    def _drop_pool(self) -> None:
        """Really free every pooled (idle) buffer; used on out-of-memory and at close."""
        for lst in self._free.values():
            for buf in lst:
                buf._really_free()
        self._free.clear()

    def allocate(self, host: bool, device: int | None, nbytes: int) -> int:
        """Allocate raw memory, retrying once after emptying the pool on out-of-memory."""
        for attempt in (0, 1):
            try:
                if host:
                    with self.near(device):
                        return self.backend.alloc_host(nbytes, device)
                assert device is not None
                return self.backend.alloc_device(device, nbytes)
            except CudaError as exc:
                if attempt == 0 and exc.out_of_memory and self._free:
                    self._drop_pool()
                    continue
                raise
        raise AssertionError("unreachable")

    def _register(self, buf: Buffer) -> None:
        self._live.add(buf)

    def _unregister(self, buf: Buffer) -> None:
        self._live.discard(buf)

    def release_leaked(self) -> int:
        """Really free every buffer still handed out (the runner calls this after each
        testcase, so one that failed or leaked does not hold memory for the rest of the
        run); returns how many there were."""
        leaked = list(self._live)
        errors: list[BaseException] = []
        for buf in leaked:
            try:
                buf._really_free()
            except Exception as exc:  # keep freeing the rest
                errors.append(exc)
            self._live.discard(buf)
        if errors:
            raise errors[0]
        return len(leaked)

    def release_pool(self) -> None:
        """Really free every idle pooled buffer (the runner calls this after a testcase that
        failed, so that device and pinned memory are back where they were before it)."""
        self._drop_pool()

    @property
    def live_buffers(self) -> int:
        """Buffers handed out and not closed (idle pooled buffers not counted)."""
        return len(self._live)

    # -- patterns and gate ----------------------------------------------------------------
    def pattern(self, device: int, seed: int) -> int:
        """Device pointer to the 2 MiB verification pattern of ``seed`` on ``device``."""
        from gpubw.buffers import DeviceBuffer

        key = (device, seed)
        if key not in self._patterns:
            buf = DeviceBuffer._allocate_unpooled(self, device, PATTERN_WORDS * 4)
            try:
                staging = self.host_scratch(PATTERN_WORDS * 4)
                self.backend.host_write(staging.ptr, pattern_bytes(seed))
                stream = self.backend.create_stream(device)
                try:
                    self.backend.memcpy_async(buf.ptr, staging.ptr, buf.nbytes, stream)
                    self.backend.synchronize(stream, self.options.sync_timeout_s)
                finally:
                    self.backend.destroy_stream(stream)
            except BaseException:
                buf.close()
                raise
            self._patterns[key] = buf
        return self._patterns[key].ptr

    def host_scratch(self, nbytes: int) -> Buffer:
        """A small pinned host buffer owned by the System (for staging and flags)."""
        from gpubw.buffers import HostBuffer

        attr = f"_scratch_{nbytes}"
        buf = getattr(self, attr, None)
        if buf is None:
            buf = HostBuffer._allocate_unpooled(self, nbytes, None)
            setattr(self, attr, buf)
            self._scratch_names = [*getattr(self, "_scratch_names", []), attr]
        return buf

    def verify_scratch(self, device: int) -> int:
        """Device pointer to ``device``'s verification result words (u64 slots)."""
        from gpubw.buffers import DeviceBuffer

        if device not in self._verify:
            self._verify[device] = DeviceBuffer._allocate_unpooled(self, device, 4096)
        return self._verify[device].ptr

    @property
    def gate(self) -> Buffer:
        """Pinned host memory for the spin gate: int32 flag at 0, int32 timeout status at 4,
        u64 verification result slots from offset 64 on (4096 bytes in all)."""
        if self._gate is None:
            from gpubw.buffers import HostBuffer

            self._gate = HostBuffer._allocate_unpooled(self, 4096, None)
        return self._gate

    # -- teardown -------------------------------------------------------------------------
    def close(self) -> None:
        """Free everything: pooled and leaked buffers, patterns, gate, scratch; then the
        backend's own resources. Safe to call twice."""
        if self.closed:
            return
        self.closed = True
        errors: list[BaseException] = []
        buffers: list[Buffer] = [*self._patterns.values(), *self._verify.values(), *self._live]
        self._verify.clear()
        if self._gate is not None:
            buffers.append(self._gate)
        for name in getattr(self, "_scratch_names", []):
            buffers.append(getattr(self, name))
        for lst in self._free.values():
            buffers.extend(lst)
        self._free.clear()
        self._patterns.clear()
        for buf in buffers:
            try:
                buf._really_free()
            except BaseException as exc:  # keep freeing the rest
                errors.append(exc)
        self._live.clear()
        try:
            self.backend.close()
        except BaseException as exc:
            errors.append(exc)
        if errors:
            raise errors[0]

    def __enter__(self) -> System:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
