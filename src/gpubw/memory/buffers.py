"""Buffers: host and device memory a testcase copies between, fills and verifies.

:class:`HostBuffer` and :class:`DeviceBuffer` follow cuda.core's manners: allocation happens in
classmethods, work takes an explicit ``stream=``, and every buffer is a context manager whose
exit gives what it took back to the pool that owns its memory, also on error and Ctrl-C.

Cut along the seam the module's docstring named (buffers / the pool that owns their memory):
the pool is :mod:`gpubw.memory.pool`, which imports this module; a buffer knows its pool only
as a :class:`Pool` (what it asks of it: the pool's base class), so the two make no import
circle. Peer access between devices (:class:`PeerAccess`, held by the pool) is here, where a
device buffer enables it. Buffers depend on the backend and their pool only;
:class:`gpubw.memory.system.System` holds a pool.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from gpubw.backend.base import Backend, KernelArg, ptr, u32, u64
from gpubw.kernels import ELEMENT_BYTES
from gpubw.memory.gate import Gate
from gpubw.model.errors import VerificationError
from gpubw.model.options import RunOptions
from gpubw.model.trace import NO_TRACE, Tracer

_BLOCK = 1024
_NONE = b"\xff" * 8
#: How many verifications can be queued before one synchronize.
MAX_VERIFY_SLOTS = 256

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


class Pool(abc.ABC):
    """What a buffer asks of the pool that owns its memory: hand out, take back, forget a
    freed buffer, the run's patterns, verification words and gate page, and peer access.
    :class:`gpubw.memory.pool.BufferPool` is the one pool (this module never imports it)."""

    backend: Backend
    options: RunOptions
    gate: Gate
    peers: PeerAccess
    #: where the run's time goes (--trace); the System sets its own
    trace: Tracer = NO_TRACE

    @abc.abstractmethod
    def take(self, kind: type[_B], device: int | None, nbytes: int) -> _B: ...

    @abc.abstractmethod
    def give_back(self, buf: Buffer) -> None: ...

    @abc.abstractmethod
    def forget(self, buf: Buffer) -> None: ...

    @abc.abstractmethod
    def pattern(self, device: int, seed: int) -> int: ...

    @abc.abstractmethod
    def verify_slots(self, device: int) -> int: ...


class HasPool(Protocol):
    """Anything that carries a run's pool (a :class:`gpubw.memory.system.System` does)."""

    @property
    def pool(self) -> Pool: ...


def _pool_of(owner: Pool | HasPool) -> Pool:
    return owner if isinstance(owner, Pool) else owner.pool


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
        pool: Pool,
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
            return
        with self.pool.trace.span("teardown"):
            self._free_memory()

    def _free_memory(self) -> None:
        """Give this buffer's own memory back to the driver."""
        if self.pageable:
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
    def allocate(cls, owner: Pool | HasPool, near_device: int | None, nbytes: int) -> HostBuffer:
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
        cls, owner: Pool | HasPool, near_device: int | None, nbytes: int
    ) -> PageableHostBuffer:
        """Pageable memory of ``nbytes``, touched near ``near_device``'s CPUs (or on its
        ``--host-numa`` node), reused from the pool where one is idle."""
        return _pool_of(owner).take(cls, near_device, nbytes)


class DeviceBuffer(Buffer):
    """Device memory on one device, in that device's primary context."""

    @classmethod
    def allocate(cls, owner: Pool | HasPool, device: int, nbytes: int) -> DeviceBuffer:
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
