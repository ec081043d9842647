"""Buffers and the pool that owns their memory for a run.

:class:`HostBuffer` and :class:`DeviceBuffer` follow cuda.core's manners: allocation happens in
classmethods, work takes an explicit ``stream=``, and every buffer is a context manager whose
exit gives what it took back to its :class:`BufferPool`, also on error and Ctrl-C.

The :class:`BufferPool` is run-scoped: it keeps closed buffers for reuse (a testcase allocates
the same sizes cell after cell; an idle pinned buffer up to twice a request's size serves it
as a view of its first bytes, since pinning is slow), knows which buffers are handed out (so
the runner can free what a failed testcase left), owns the run's scratch memory (verification
patterns, result words, staging, the spin gate's page) and frees all of it in
:meth:`BufferPool.close`.
Buffers depend on the backend and their pool only; :class:`gpubw.memory.system.System` holds a pool.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, TypeVar

from gpubw.backend.base import Backend, DeviceInfo, KernelArg, ptr, u32, u64
from gpubw.kernels import ELEMENT_BYTES, PATTERN_WORDS
from gpubw.kernels.patterns import pattern_bytes
from gpubw.memory.gate import Gate
from gpubw.model.errors import CudaError, UsageError, VerificationError
from gpubw.model.options import RunOptions

_BLOCK = 1024
_NONE = b"\xff" * 8
#: How many verifications can be queued before one synchronize.
MAX_VERIFY_SLOTS = 256
#: Bytes of each device's verification result words (u64 slots).
_VERIFY_BYTES = 4096
#: An idle pinned host buffer serves a smaller request of the same placement if it is at most
#: this many times the request's size (the CE bidirectional testcases' 2S interference buffers
#: serve later S requests; a 1 GiB buffer never serves a 64 KiB one).
HOST_FIT_WASTE = 2

_B = TypeVar("_B", bound="Buffer")


def _grid_for(n: int, block: int = _BLOCK, cap: int = 65_535 * 16) -> int:
    return max(1, min(cap, -(-n // block)))


class PeerAccess:
    """Peer access between devices: one-way probes (cached) and enabling (both ways, once)."""

    def __init__(self, backend: Backend, device_count: int) -> None:
        self._backend = backend
        self._device_count = device_count
        self._probed: dict[tuple[int, int], bool] = {}
        self._enabled: set[tuple[int, int]] = set()

    def can_access(self, device: int, peer: int) -> bool:
        """One-directional probe, cached (``device`` can read/write ``peer``'s memory)."""
        if device == peer:
            return False
        key = (device, peer)
        if key not in self._probed:
            self._probed[key] = self._backend.can_access_peer(device, peer)
        return self._probed[key]

    def pairs(self) -> list[tuple[int, int]]:
        """Every ordered pair (a, b), a != b, where a can access b."""
        n = self._device_count
        return [(a, b) for a in range(n) for b in range(n) if self.can_access(a, b)]

    def enable(self, a: int, b: int) -> None:
        """Enable access both ways between devices a and b (nvbandwidth probes one way and
        enables both). Idempotent."""
        for x, y in ((a, b), (b, a)):
            if (x, y) not in self._enabled:
                self._backend.enable_peer_access(x, y)
                self._enabled.add((x, y))


class BufferPool:
    """Run-scoped owner of buffer memory. Use :meth:`close` (the System does) to free it all."""

    def __init__(
        self,
        backend: Backend,
        devices: Sequence[DeviceInfo],
        options: RunOptions,
        *,
        home_device: int = 0,
    ) -> None:
        self.backend = backend
        self.devices = devices
        self.options = options
        #: the device whose context makes host memory that is near no device (the gate page,
        #: staging): one this process drives, so no other device gets a context for it
        self.home_device = home_device
        self.peers = PeerAccess(backend, len(devices))
        #: the spin gate; its page is pool scratch, allocated on first use
        self.gate = Gate(backend, lambda: self.host_scratch("gate", Gate.PAGE_BYTES).ptr)
        self._idle: dict[tuple[Any, ...], list[Buffer]] = {}
        self._live: set[Buffer] = set()
        self._scratch: dict[tuple[str, bool, int | None, int], Buffer] = {}
        #: --host-numa: device -> the NUMA node its host buffers are bound to (set by
        #: :meth:`check_host_numa`; empty: placed by affinity alone)
        self.host_nodes: dict[int, int] = {}
        self.closed = False

    # -- NUMA placement (--host-numa) -------------------------------------------------------
    def check_host_numa(self) -> None:
        """Where ``--host-numa`` puts each device's host buffers (:attr:`host_nodes`);
        UsageError when that node does not exist here (a remote node on a host of one node
        included)."""
        self.host_nodes = host_numa_nodes(self.options.host_numa, self.devices,
                                          self.backend.numa_nodes())  # fmt: skip

    def numa_node(self, buf: Buffer) -> int | None:
        """The NUMA node of a host buffer's memory (as the kernel or the model says)."""
        return self.backend.host_numa_node(buf.ptr) if buf.is_host else None

    # -- placement ------------------------------------------------------------------------
    def placement(self, device: int | None) -> frozenset[int] | None:
        """The CPUs a host buffer near ``device`` is allocated from (its pages land on their
        NUMA node), or None for "wherever": no device, affinity off (``-d``), CPUs unknown.
        Host buffers of one placement are interchangeable, so the pool keys them by it: on
        a host where every GPU has the same local CPUs, a buffer pinned for GPU 0 serves
        GPU 1 too (pinning 512 MiB took 0.2 s on 2 x H200, eight times in a suite)."""
        if device is None or not self.options.affinity or not hasattr(os, "sched_setaffinity"):
            return None
        allowed = frozenset(self.devices[device].local_cpus) & frozenset(range(os.cpu_count() or 1))
        return allowed or None

    @contextlib.contextmanager
    def near(self, device: int | None) -> Iterator[None]:
        """Run the body with the CPU affinity set to ``device``'s local CPUs (if known and not
        disabled with ``-d``), then restore the previous affinity. Pinned pages are first
        touched by this thread, so they land on the device's NUMA node."""
        allowed = self.placement(device)
        if allowed is None:
            yield
            return
        before = os.sched_getaffinity(0)
        try:
            os.sched_setaffinity(0, allowed)
            yield
        finally:
            os.sched_setaffinity(0, before)

    def _idle_key(
        self, host: bool, device: int | None, nbytes: int, pageable: bool = False
    ) -> tuple[Any, ...]:
        """Which idle buffers can serve a request: device memory by device, host memory by
        kind (pinned or pageable) and placement (:meth:`placement`, the bound node)."""
        if not host:
            return (False, device, nbytes)
        node = None if device is None else self.host_nodes.get(device)
        return (True, (pageable, self.placement(device), node), nbytes)

    def allocate_memory(
        self, host: bool, device: int | None, nbytes: int, *, pageable: bool = False
    ) -> int:
        """Allocate raw memory, retrying once after freeing the idle buffers on out-of-memory."""
        for attempt in (0, 1):
            try:
                if host:
                    with self.near(device):
                        owner = self.home_device if device is None else device
                        node = None if device is None else self.host_nodes.get(device)
                        placed = {} if node is None else {"numa_node": node}
                        if pageable:
                            return self.backend.alloc_pageable(nbytes, owner, **placed)
                        return self.backend.alloc_host(nbytes, owner, **placed)
                assert device is not None
                return self.backend.alloc_device(device, nbytes)
            except CudaError as exc:
                if attempt == 0 and exc.out_of_memory and self._idle:
                    self.release_idle()
                    continue
                raise
        raise AssertionError("unreachable")

    def check_request(self, host: bool, device: int | None, nbytes: int) -> None:
        """Refuse a buffer request that cannot be meant: a size that is not a positive int, a
        device that does not exist (None is allowed for host memory only)."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
            raise ValueError(f"buffer size must be a positive number of bytes, got {nbytes!r}")
        if device is None and host:
            return
        if isinstance(device, bool) or not isinstance(device, int):
            raise ValueError(f"device must be a device ordinal, got {device!r}")
        if not 0 <= device < len(self.devices):
            raise ValueError(
                f"no device {device}: devices are 0..{len(self.devices) - 1}"
                if self.devices
                else f"no device {device}: there are no devices"
            )

    # -- handed-out and idle buffers -------------------------------------------------------
    def take(self, kind: type[_B], device: int | None, nbytes: int) -> _B:
        """A handed-out buffer of ``kind``: an idle one of the same place and size, a view of
        ``nbytes`` at the start of a larger idle host buffer (:meth:`_fit`), or new."""
        self.check_request(kind.is_host, device, nbytes)
        backing = self._fit(kind.is_host, device, nbytes, kind.pageable)
        buf: Buffer
        if backing is None:
            memory = self.allocate_memory(kind.is_host, device, nbytes, pageable=kind.pageable)
            buf = kind(self, memory, nbytes, device)
        elif backing.nbytes == nbytes:
            buf = backing
        else:
            buf = kind(self, backing.ptr, nbytes, device, backing=backing)
        assert isinstance(buf, kind)
        self._live.add(buf)
        return buf

    def _fit(self, host: bool, device: int | None, nbytes: int, pageable: bool) -> Buffer | None:
        """Take the idle buffer that best serves a request, or None: one of exactly the size,
        else (host memory only) the smallest idle one of the same placement that is larger but
        at most :data:`HOST_FIT_WASTE` times the request. Pinning is slow (0.28 s for 512 MiB
        on 2 x H200) while device allocations are cheap and device memory is what large
        buffer sizes run short of, so device buffers are only reused at their exact size."""
        exact = self._idle.get(self._idle_key(host, device, nbytes, pageable))
        if exact:
            return exact.pop()
        if not host:
            return None
        placement = self._idle_key(host, device, nbytes, pageable)[1]
        sizes = [
            size
            for (is_host, where, size), idle in self._idle.items()
            if is_host and where == placement and idle and nbytes < size <= HOST_FIT_WASTE * nbytes
        ]
        return self._idle[(True, placement, min(sizes))].pop() if sizes else None

    def give_back(self, buf: Buffer) -> None:
        """Keep a handed-out buffer's memory for reuse (after the run: free it). A view's
        backing buffer becomes idle at its full size; the view itself is spent."""
        if self.closed:
            buf.free()
        elif buf in self._live:
            self._live.discard(buf)
            memory = buf.detach()
            key = self._idle_key(memory.is_host, memory.device, memory.nbytes, memory.pageable)
            self._idle.setdefault(key, []).append(memory)

    def forget(self, buf: Buffer) -> None:
        """``buf`` has been freed: it is no longer handed out."""
        self._live.discard(buf)

    def release_idle(self) -> None:
        """Really free every idle buffer (on out-of-memory, and after a testcase that failed,
        so that device and pinned memory are back where they were before it)."""
        idle = [buf for lst in self._idle.values() for buf in lst]
        self._idle.clear()
        _free_all(idle)

    def release_leaked(self) -> int:
        """Really free every buffer still handed out (the runner calls this after each
        testcase, so one that failed or leaked does not hold memory for the rest of the
        run); returns how many there were."""
        leaked = list(self._live)
        self._live.clear()
        _free_all(leaked)
        return len(leaked)

    @property
    def live_buffers(self) -> int:
        """Buffers handed out and not closed (idle buffers not counted)."""
        return len(self._live)

    # -- scratch owned by the pool ---------------------------------------------------------
    def host_scratch(self, purpose: str, nbytes: int) -> HostBuffer:
        """Pinned host memory of ``nbytes`` for ``purpose`` (staging, flags), made on first
        use and freed by :meth:`close`; the same purpose and size give the same buffer."""
        buf = self._scratch_buffer(HostBuffer, purpose, None, nbytes)
        assert isinstance(buf, HostBuffer)
        return buf

    def device_scratch(self, purpose: str, device: int, nbytes: int) -> DeviceBuffer:
        """Device memory of ``nbytes`` on ``device`` for ``purpose``, as :meth:`host_scratch`."""
        buf = self._scratch_buffer(DeviceBuffer, purpose, device, nbytes)
        assert isinstance(buf, DeviceBuffer)
        return buf

    def _scratch_buffer(
        self, kind: type[Buffer], purpose: str, device: int | None, nbytes: int
    ) -> Buffer:
        key = (purpose, kind.is_host, device, nbytes)
        if key not in self._scratch:
            self.check_request(kind.is_host, device, nbytes)
            pointer = self.allocate_memory(kind.is_host, device, nbytes)
            self._scratch[key] = kind(self, pointer, nbytes, device)
        return self._scratch[key]

    def verify_slots(self, device: int) -> int:
        """Device pointer to ``device``'s verification result words (u64 slots)."""
        return self.device_scratch("verify", device, _VERIFY_BYTES).ptr

    def pattern(self, device: int, seed: int) -> int:
        """Device pointer to the 2 MiB verification pattern of ``seed`` on ``device``."""
        purpose = f"pattern {seed:#010x}"
        key = (purpose, DeviceBuffer.is_host, device, PATTERN_WORDS * 4)
        if key not in self._scratch:
            nbytes = PATTERN_WORDS * 4
            self.check_request(False, device, nbytes)
            buf = DeviceBuffer(self, self.allocate_memory(False, device, nbytes), nbytes, device)
            try:
                staging = self.host_scratch("staging", PATTERN_WORDS * 4)
                self.backend.host_write(staging.ptr, pattern_bytes(seed))
                with self.backend.stream(device) as stream:
                    self.backend.memcpy_async(buf.ptr, staging.ptr, buf.nbytes, stream)
                    self.backend.synchronize(stream, self.options.sync_timeout_s)
            except BaseException:
                with contextlib.suppress(Exception):  # the first error is the one to report
                    buf.free()
                raise
            self._scratch[key] = buf
        return self._scratch[key].ptr

    # -- teardown -------------------------------------------------------------------------
    def close(self) -> None:
        """Free everything: handed-out, idle and scratch buffers (each tried; the first
        failure is raised after all were tried). Safe to call twice."""
        if self.closed:
            return
        self.closed = True
        buffers = [*self._scratch.values(), *self._live]
        buffers.extend(buf for lst in self._idle.values() for buf in lst)
        self._scratch.clear()
        self._live.clear()
        self._idle.clear()
        _free_all(buffers)


def _free_all(buffers: Sequence[Buffer]) -> None:
    """Free every buffer, also when some fail; then raise the first failure."""
    errors: list[BaseException] = []
    for buf in buffers:
        try:
            buf.free()
        except BaseException as exc:  # keep freeing the rest
            errors.append(exc)
    if errors:
        raise errors[0]


class HasPool(Protocol):
    """Anything that carries a run's pool (a :class:`gpubw.memory.system.System` does)."""

    @property
    def pool(self) -> BufferPool: ...


def _pool_of(owner: BufferPool | HasPool) -> BufferPool:
    return owner if isinstance(owner, BufferPool) else owner.pool


class Buffer:
    """Memory of ``nbytes`` at ``ptr``: on ``device`` (DeviceBuffer) or pinned host memory
    allocated near ``device`` (HostBuffer; ``device`` may be None). Made by the pool (or as a
    view of a pool-made buffer, such as a multinode testcase's part of a shared allocation,
    which owns nothing of its own).

    A host buffer may be a *view*: the first ``nbytes`` of a larger idle buffer of the pool
    (its backing), which it holds while handed out: closing the view makes the backing idle
    again, freeing it frees the backing. Fill, verify, read and write refuse to go past
    ``nbytes``, so a view's user never touches the rest of the backing memory."""

    is_host: bool = False
    #: plain (pageable) host memory, not pinned (:class:`PageableHostBuffer`)
    pageable: bool = False

    def __init__(
        self,
        pool: BufferPool,
        ptr: int,
        nbytes: int,
        device: int | None,
        *,
        backing: Buffer | None = None,
    ) -> None:
        self.pool = pool
        self.ptr = ptr
        self.nbytes = nbytes
        self.device = device
        #: the buffer that owns the memory (a larger one for a view, else this one)
        self._backing: Buffer = backing if backing is not None else self
        #: freed, or (a view) given back: it owns no memory any more
        self._freed = False

    @property
    def backend(self) -> Backend:
        return self.pool.backend

    # -- identity used by the measurement engine ------------------------------------------
    @property
    def context_device(self) -> int | None:
        """The device whose context owns this buffer (None for host memory)."""
        return None if self.is_host else self.device

    @property
    def label(self) -> str:
        """nvbandwidth's buffer name in verbose lines: ``Host`` or ``Device <i>``."""
        return "Host" if self.is_host else f"Device {self.device}"

    # -- lifetime -------------------------------------------------------------------------
    def close(self) -> None:
        """Give the memory back to the pool (which frees it at the end of the run)."""
        if not self._freed:
            self.pool.give_back(self)

    def detach(self) -> Buffer:
        """The buffer that owns this one's memory (itself, or a view's backing buffer); a view
        is spent by it: closing or freeing it afterwards does nothing (the pool calls this
        when a buffer is given back)."""
        if self._backing is not self:
            self._freed = True
        return self._backing

    def free(self) -> None:
        """Really free the memory now (the pool does this; a buffer is closed, not freed).
        A view frees its backing buffer (which frees the memory once, however asked)."""
        if self._freed:
            return
        self._freed = True
        self.pool.forget(self)
        if self._backing is not self:
            self._backing.free()
        elif self.pageable:
            self.backend.free_pageable(self.ptr)
        elif self.is_host:
            self.backend.free_host(self.ptr)
        else:
            self.backend.free_device(self.ptr)

    def check_span(self, nbytes: int, offset: int = 0) -> None:
        """Refuse to touch bytes outside this buffer: ``nbytes`` from ``offset`` must lie in
        ``[0, self.nbytes)`` (the memory of a view goes on past its end)."""
        if offset < 0 or nbytes < 0 or offset + nbytes > self.nbytes:
            raise ValueError(
                f"{nbytes} bytes at offset {offset} do not fit in {self!r} "
                f"(0 <= offset, offset + bytes <= {self.nbytes})"
            )

    def __enter__(self: _B) -> _B:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.label} {self.nbytes} bytes at 0x{self.ptr:x}>"

    # -- data -----------------------------------------------------------------------------
    def fill(self, seed: int, nbytes: int, *, stream: Any, exec_device: int) -> None:
        """Write the pattern of ``seed`` over the first ``nbytes`` (whole words) with a kernel
        on ``exec_device``'s ``stream``."""
        self.check_span(nbytes)
        words = nbytes // 4
        if words == 0:
            return
        pattern = self.pool.pattern(exec_device, seed)
        self.backend.launch(
            "gpubw_fill",
            _grid_for(words),
            _BLOCK,
            (ptr(self.ptr), ptr(pattern), u64(words)),
            stream,
        )

    def clear_warp_parity(self, nbytes: int, parity: int, *, stream: Any) -> None:
        """Zero the 16-byte elements of odd (parity 1) or even (0) 32-element groups."""
        self.check_span(nbytes)
        elements = nbytes // ELEMENT_BYTES
        if elements:
            self.backend.launch(
                "gpubw_clear_warp_parity",
                _grid_for(elements),
                _BLOCK,
                (ptr(self.ptr), u64(elements), u32(parity)),
                stream,
            )

    def verify(
        self, seed: int, nbytes: int, *, stream: Any, exec_device: int, slot: int = 0
    ) -> None:
        """Compare the first ``nbytes`` with the pattern of ``seed``; raise
        :class:`VerificationError` naming this buffer and the first bad byte offset.
        ``slot`` selects one of the gate page's result words so several verifies can be
        queued before one synchronize (see :meth:`check_verified`)."""
        self.enqueue_verify(seed, nbytes, stream=stream, exec_device=exec_device, slot=slot)
        self.backend.synchronize(stream, self.pool.options.sync_timeout_s)
        self.check_verified(slot)

    def enqueue_verify(
        self, seed: int, nbytes: int, *, stream: Any, exec_device: int, slot: int = 0
    ) -> None:
        """Queue the compare on ``stream``; its result lands in the gate page's ``slot``."""
        self.check_span(nbytes)
        words = nbytes // 4
        if not words:
            self.backend.host_write(self.pool.gate.slot(slot), _NONE)
            return
        pattern = self.pool.pattern(exec_device, seed)
        self.enqueue_check(
            "gpubw_verify",
            _grid_for(words),
            _BLOCK,
            (ptr(self.ptr), ptr(pattern), u64(words)),
            stream=stream,
            exec_device=exec_device,
            slot=slot,
        )

    def enqueue_check(
        self,
        kernel: str,
        grid: int,
        block: int,
        args: Sequence[KernelArg],
        *,
        stream: Any,
        exec_device: int,
        slot: int = 0,
    ) -> None:
        """Queue a check of this buffer by any registered kernel (a plugin's own compare).

        ``kernel`` is launched with ``args`` followed by one more pointer: a u64 on
        ``exec_device`` that holds ~0 when the kernel starts. The kernel leaves it so if the
        data is right, else stores the index of the first bad 32-bit word (e.g. with
        ``atomicMin``). The word lands in the gate page's ``slot``; after synchronizing
        ``stream``, :meth:`check_verified` raises :class:`VerificationError` naming this
        buffer if the kernel found a bad word."""
        backend = self.backend
        host_slot = self.pool.gate.slot(slot)
        dev_slot = self.pool.verify_slots(exec_device) + 8 * slot
        backend.host_write(host_slot, _NONE)
        backend.memcpy_async(dev_slot, host_slot, 8, stream)
        backend.launch(kernel, grid, block, (*args, ptr(dev_slot)), stream)
        backend.memcpy_async(host_slot, dev_slot, 8, stream)

    def check_verified(self, slot: int = 0) -> None:
        raw = self.backend.host_read(self.pool.gate.slot(slot), 8)
        first_bad = int.from_bytes(raw, "little")
        if first_bad != (1 << 64) - 1:
            raise VerificationError(self.label, first_bad * 4)


class HostBuffer(Buffer):
    """Pinned (page-locked, portable) host memory, placed near a device's CPUs."""

    is_host = True

    @classmethod
    def allocate(
        cls, owner: BufferPool | HasPool, near_device: int | None, nbytes: int
    ) -> HostBuffer:
        """Pinned memory of ``nbytes`` near ``near_device``'s CPUs (None: anywhere), reused
        from the pool where one is idle. ``owner`` is the pool or what holds it (a System)."""
        return _pool_of(owner).take(cls, near_device, nbytes)

    def write(self, data: bytes, offset: int = 0) -> None:
        self.check_span(len(data), offset)
        self.backend.host_write(self.ptr + offset, data)

    def read(self, nbytes: int, offset: int = 0) -> bytes:
        self.check_span(nbytes, offset)
        return self.backend.host_read(self.ptr + offset, nbytes)


class PageableHostBuffer(HostBuffer):
    """Plain (pageable) host memory: not pinned, not registered with the driver, as a
    program's ordinary ``malloc`` memory is. The copy engine copies it through the driver's
    staging buffers, synchronously with the host; kernels cannot reach it (no fill, verify or
    SM copy of it: :mod:`gpubw.measure.pageable` fills and checks it by copies)."""

    pageable = True

    @property
    def label(self) -> str:
        return "Host (pageable)"

    @classmethod
    def allocate(
        cls, owner: BufferPool | HasPool, near_device: int | None, nbytes: int
    ) -> PageableHostBuffer:
        """Pageable memory of ``nbytes``, touched near ``near_device``'s CPUs (or on its
        ``--host-numa`` node), reused from the pool where one is idle."""
        return _pool_of(owner).take(cls, near_device, nbytes)


def host_numa_nodes(
    spec: str | None, devices: Sequence[DeviceInfo], nodes: Sequence[int]
) -> dict[int, int]:
    """device -> NUMA node of its host buffers for ``--host-numa spec`` (``N``, ``local`` or
    ``remote``), on a host with ``nodes``; {} for None. UsageError naming the value and the
    nodes when the node does not exist (also: ``remote`` on a host of one node, a GPU whose
    own node is unknown)."""
    if spec is None:
        return {}
    have = ", ".join(map(str, nodes))
    where = f"this host's NUMA nodes: {have} (/sys/devices/system/node/)"
    if spec.isdecimal():
        if int(spec) not in nodes:
            raise UsageError(f"--host-numa {spec}: there is no NUMA node {spec}; {where}")
        return {d.ordinal: int(spec) for d in devices}
    out = {}
    for d in devices:
        own = d.numa_node if d.numa_node is not None else (nodes[0] if len(nodes) == 1 else None)
        if own is None:
            raise UsageError(
                f"--host-numa {spec}: the NUMA node of GPU {d.ordinal} ({d.pci_bus_id}) is "
                f"unknown (its sysfs numa_node is -1); give a node number; {where}"
            )
        others = [n for n in nodes if n != own]
        if spec == "local":
            out[d.ordinal] = own
        elif not others:
            raise UsageError(
                f"--host-numa remote: this host has one NUMA node ({have}), so no memory is "
                "remote to any GPU; run on a host of two or more nodes, or give local"
            )
        else:  # the next node after the GPU's own, round the list
            out[d.ordinal] = min(others, key=lambda n: (n < own, n))
    return out


class DeviceBuffer(Buffer):
    """Device memory on one device, in that device's primary context."""

    @classmethod
    def allocate(cls, owner: BufferPool | HasPool, device: int, nbytes: int) -> DeviceBuffer:
        """Device memory of ``nbytes`` on ``device``, reused from the pool where one is idle.
        ``owner`` is the pool or what holds it (a System)."""
        return _pool_of(owner).take(cls, device, nbytes)

    def enable_peer_access(self, other: Buffer) -> bool:
        """Enable access both ways between this buffer's device and ``other``'s, if this
        device can access the other (probed one way, as nvbandwidth). Returns whether the
        pair is usable; host buffers and same-device pairs are always usable."""
        if other.is_host or other.device == self.device:
            return True
        assert self.device is not None and other.device is not None
        peers = self.pool.peers
        if not peers.can_access(self.device, other.device):
            return False
        peers.enable(self.device, other.device)
        return True
