"""Fault injection for the simulated backend: what to inject (:class:`Faults`) and the
decisions that follow from it (:class:`FaultInjector`).

Each fault surfaces the way it does on real hardware: an allocation failure is a
:class:`~gpubw.model.errors.CudaError` from ``cuMemAlloc``/``cuMemHostAlloc`` with
``CUDA_ERROR_OUT_OF_MEMORY``, a corrupted copy is found by the verify kernel, a refused peer
pair makes ``can_access_peer`` False, a failing kernel raises at the stream's next
synchronize, a gate that never opens times out and reports it through its status word, and a
hanging device makes every synchronize of a busy stream time out.

This module depends on nothing else of the simulator; the engine, the memory and the kernel
emulations ask the injector, which applies no change itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import attrs

from gpubw.model.errors import CudaError

#: The word written over a corrupted copy (0xdeadbeef, little-endian).
CORRUPT_WORD = b"\xef\xbe\xad\xde"


def _pair_set(value: Iterable[tuple[int, int]]) -> frozenset[tuple[int, int]]:
    return frozenset((int(a), int(b)) for a, b in value)


@attrs.frozen
class Faults:
    """Faults to inject. Each surfaces as the real backend would show it."""

    #: device allocations after this many successful ones fail with OUT_OF_MEMORY
    alloc_fail_after: int | None = None
    #: every device allocation on this device fails with OUT_OF_MEMORY
    alloc_fail_on_device: int | None = None
    #: pinned host allocations after this many successful ones fail with OUT_OF_MEMORY
    host_alloc_fail_after: int | None = None
    #: corrupt one 32-bit word of copies that run behind the spin gate (>= 4 KiB) ...
    corrupt_copy: bool = False
    #: ... from the N-th such copy on (0 = every one)
    corrupt_after: int = 0
    #: byte offset of the corrupted word in the destination (None: the middle of the copy)
    corrupt_offset: int | None = None
    #: ordered pairs (a, b) for which can_access_peer(a, b) is False despite the model
    refuse_peer: frozenset[tuple[int, int]] = attrs.field(factory=frozenset, converter=_pair_set)
    #: this kernel fails when it runs; the stream's next synchronize raises
    kernel_error: str | None = None
    kernel_error_result: str = "CUDA_ERROR_LAUNCH_FAILED"
    #: gpubw_gate_wait never sees the flag released (it times out and reports it)
    gate_never_opens: bool = False
    #: the device stops executing work: every synchronize of a busy stream times out
    sync_hang: bool = False
    #: exporting shareable memory handles fails with CUDA_ERROR_NOT_PERMITTED (every kind,
    #: as a fabric export without an IMEX channel does)
    export_refused: bool = False


class FaultInjector:
    """The current :class:`Faults` (replaceable at any time: ``faults`` is read on every
    decision) and the state that injection needs (how many measured copies ran)."""

    def __init__(self, faults: Faults) -> None:
        self.faults = faults
        self.measured_copies = 0

    def check_device_alloc(self, device: int, made: int) -> None:
        """Raise the injected OUT_OF_MEMORY of a device allocation (``made`` succeeded so far)."""
        f = self.faults
        if (f.alloc_fail_on_device == device) or (
            f.alloc_fail_after is not None and made >= f.alloc_fail_after
        ):
            raise CudaError("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY", "injected fault")

    def check_host_alloc(self, made: int) -> None:
        """Raise the injected OUT_OF_MEMORY of a pinned host allocation."""
        f = self.faults
        if f.host_alloc_fail_after is not None and made >= f.host_alloc_fail_after:
            raise CudaError("cuMemHostAlloc", "CUDA_ERROR_OUT_OF_MEMORY", "injected fault")

    def refuses_peer(self, device: int, peer: int) -> bool:
        return (device, peer) in self.faults.refuse_peer

    @property
    def gate_never_opens(self) -> bool:
        return self.faults.gate_never_opens

    @property
    def sync_hang(self) -> bool:
        return self.faults.sync_hang

    def kernel_failure(self, kernel: str) -> Callable[[], None] | None:
        """The effect that replaces ``kernel``'s when it is to fail, else None."""
        if self.faults.kernel_error != kernel:
            return None
        result = self.faults.kernel_error_result

        def failing() -> None:
            raise CudaError("cuStreamSynchronize", result, f"{kernel} failed (injected fault)")

        return failing

    def corruption_offset(self, nbytes: int) -> int | None:
        """Called once per measured copy of ``nbytes``: the 4-aligned offset (from the copy's
        destination) of the word to corrupt, or None to leave this copy intact."""
        f = self.faults
        if not f.corrupt_copy:
            return None
        index = self.measured_copies
        self.measured_copies += 1
        if index < f.corrupt_after:
            return None
        rel = f.corrupt_offset if f.corrupt_offset is not None else nbytes // 2
        return min(max(0, rel), nbytes - 4) // 4 * 4


def corrupt_word(current: bytes) -> bytes:
    """The word to write over ``current`` so that it surely changes."""
    if current == CORRUPT_WORD:
        return bytes(b ^ 0xFF for b in CORRUPT_WORD)
    return CORRUPT_WORD
