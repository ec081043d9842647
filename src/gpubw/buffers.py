"""HostBuffer and DeviceBuffer: owned memory, freed on close, with fill and verify helpers.

Buffers follow cuda.core's manners: allocation happens in classmethods, work takes an explicit
``stream=``, and every buffer is a context manager whose exit frees (or returns to the run's
pool) what it took, also on error and Ctrl-C.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpubw.backend.base import KernelArg, ptr, u32, u64
from gpubw.errors import VerificationError
from gpubw.kernels import ELEMENT_BYTES
from gpubw.system import System

_BLOCK = 1024
#: Offset of the verification result slots (u64 each) in the System's gate page.
_RESULTS = 64
_NONE = b"\xff" * 8
#: How many verifications can be queued before one synchronize.
MAX_VERIFY_SLOTS = 256


def _grid_for(n: int, block: int = _BLOCK, cap: int = 65_535 * 16) -> int:
    return max(1, min(cap, -(-n // block)))


class Buffer:
    """Memory of ``nbytes`` at ``ptr``: on ``device`` (DeviceBuffer) or pinned host memory
    allocated near ``device`` (HostBuffer; ``device`` may be None)."""

    is_host: bool = False

    def __init__(
        self, system: System, ptr: int, nbytes: int, device: int | None, pooled: bool
    ) -> None:
        self.system = system
        self.ptr = ptr
        self.nbytes = nbytes
        self.device = device
        self._pooled = pooled
        self._freed = False
        if pooled:
            system._register(self)

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
        """Give the memory back (to the run's pool, which frees it at the end of the run)."""
        if self._freed:
            return
        if self._pooled and not self.system.closed:
            self.system._unregister(self)
            self.system._release_to_pool(self)
        else:
            self._really_free()

    def _really_free(self) -> None:
        if self._freed:
            return
        self._freed = True
        self.system._unregister(self)
        if self.is_host:
            self.system.backend.free_host(self.ptr)
        else:
            self.system.backend.free_device(self.ptr)

    def __enter__(self) -> Buffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.label} {self.nbytes} bytes at 0x{self.ptr:x}>"

    # -- data -----------------------------------------------------------------------------
    def fill(self, seed: int, nbytes: int, *, stream: Any, exec_device: int) -> None:
        """Write the pattern of ``seed`` over the first ``nbytes`` (whole words) with a kernel
        on ``exec_device``'s ``stream``."""
        words = nbytes // 4
        if words == 0:
            return
        pattern = self.system.pattern(exec_device, seed)
        self.system.backend.launch(
            "gpubw_fill",
            _grid_for(words),
            _BLOCK,
            (ptr(self.ptr), ptr(pattern), u64(words)),
            stream,
        )

    def clear_warp_parity(self, nbytes: int, parity: int, *, stream: Any) -> None:
        """Zero the 16-byte elements of odd (parity 1) or even (0) 32-element groups."""
        elements = nbytes // ELEMENT_BYTES
        if elements:
            self.system.backend.launch(
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
        self.system.backend.synchronize(stream, self.system.options.sync_timeout_s)
        self.check_verified(slot)

    def enqueue_verify(
        self, seed: int, nbytes: int, *, stream: Any, exec_device: int, slot: int = 0
    ) -> None:
        """Queue the compare on ``stream``; its result lands in the gate page's ``slot``."""
        words = nbytes // 4
        if not words:
            self.system.backend.host_write(self.system.gate.ptr + _RESULTS + 8 * slot, _NONE)
            return
        pattern = self.system.pattern(exec_device, seed)
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
        system = self.system
        backend = system.backend
        host_slot = system.gate.ptr + _RESULTS + 8 * slot
        dev_slot = system.verify_scratch(exec_device) + 8 * slot
        backend.host_write(host_slot, _NONE)
        backend.memcpy_async(dev_slot, host_slot, 8, stream)
        backend.launch(kernel, grid, block, (*args, ptr(dev_slot)), stream)
        backend.memcpy_async(host_slot, dev_slot, 8, stream)

    def check_verified(self, slot: int = 0) -> None:
        raw = self.system.backend.host_read(self.system.gate.ptr + _RESULTS + 8 * slot, 8)
        first_bad = int.from_bytes(raw, "little")
        if first_bad != (1 << 64) - 1:
            raise VerificationError(self.label, first_bad * 4)


class HostBuffer(Buffer):
    """Pinned (page-locked, portable) host memory, placed near a device's CPUs."""

    is_host = True

    @classmethod
    def allocate(cls, system: System, nbytes: int, near_device: int | None = None) -> HostBuffer:
        """Pinned memory of ``nbytes``, reused from the run's pool where one is idle."""
        reused = system._take_free(True, near_device, nbytes)
        if reused is not None:
            system._register(reused)
            assert isinstance(reused, HostBuffer)
            return reused
        pointer = system.allocate(True, near_device, nbytes)
        return cls(system, pointer, nbytes, near_device, pooled=True)

    @classmethod
    def _allocate_unpooled(cls, system: System, nbytes: int, near_device: int | None) -> HostBuffer:
        pointer = system.allocate(True, near_device, nbytes)
        return cls(system, pointer, nbytes, near_device, pooled=False)

    def write(self, data: bytes, offset: int = 0) -> None:
        self.system.backend.host_write(self.ptr + offset, data)

    def read(self, nbytes: int, offset: int = 0) -> bytes:
        return self.system.backend.host_read(self.ptr + offset, nbytes)


class DeviceBuffer(Buffer):
    """Device memory on one device, in that device's primary context."""

    @classmethod
    def allocate(cls, system: System, device: int, nbytes: int) -> DeviceBuffer:
        """Device memory of ``nbytes``, reused from the run's pool where one is idle."""
        reused = system._take_free(False, device, nbytes)
        if reused is not None:
            system._register(reused)
            assert isinstance(reused, DeviceBuffer)
            return reused
        pointer = system.allocate(False, device, nbytes)
        return cls(system, pointer, nbytes, device, pooled=True)

    @classmethod
    def _allocate_unpooled(cls, system: System, device: int, nbytes: int) -> DeviceBuffer:
        pointer = system.allocate(False, device, nbytes)
        return cls(system, pointer, nbytes, device, pooled=False)

    def enable_peer_access(self, other: Buffer) -> bool:
        """Enable access both ways between this buffer's device and ``other``'s, if this
        device can access the other (probed one way, as nvbandwidth). Returns whether the
        pair is usable; host buffers and same-device pairs are always usable."""
        if other.is_host or other.device == self.device:
            return True
        assert self.device is not None and other.device is not None
        if not self.system.can_access_peer(self.device, other.device):
            return False
        self.system.enable_peer_access(self.device, other.device)
        return True
