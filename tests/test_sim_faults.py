"""Injected faults surface as on real hardware (gpubw.backend.sim.faults)."""

from __future__ import annotations

import struct

import pytest

from gpubw.backend.base import ptr, u32, u64
from gpubw.backend.sim.backend import SimulatedBackend
from gpubw.backend.sim.faults import Faults
from gpubw.backend.sim.presets import load_system
from gpubw.model.errors import CudaError, GateTimeoutError

MIB = 1 << 20
GATE_NS = 10_000_000_000


def _gate(be: SimulatedBackend, stream: object, flag: int, timeout_ns: int = GATE_NS) -> None:
    be.launch("gpubw_gate_wait", 1, 1, (ptr(flag), u64(timeout_ns), ptr(flag + 4)), stream)


def _u32(be: SimulatedBackend, pointer: int) -> int:
    return struct.unpack("<i", be.host_read(pointer, 4))[0]


def test_fault_alloc_fail_after() -> None:
    """alloc_fail_after=N lets N device allocations succeed, then OUT_OF_MEMORY."""
    be = SimulatedBackend(load_system("h200x1"), Faults(alloc_fail_after=2))
    be.alloc_device(0, 4096)
    be.alloc_device(0, 4096)
    with pytest.raises(CudaError) as info:
        be.alloc_device(0, 4096)
    assert (info.value.call, info.value.result) == ("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY")


def test_fault_alloc_fail_on_device() -> None:
    """alloc_fail_on_device=d fails every allocation on d only."""
    be = SimulatedBackend(load_system("h200x2"), Faults(alloc_fail_on_device=1))
    be.alloc_device(0, 4096)
    with pytest.raises(CudaError, match="OUT_OF_MEMORY"):
        be.alloc_device(1, 4096)


def test_fault_host_alloc() -> None:
    """host_alloc_fail_after=0 fails pinned allocations with cuMemHostAlloc."""
    be = SimulatedBackend(load_system("h200x1"), Faults(host_alloc_fail_after=0))
    with pytest.raises(CudaError) as info:
        be.alloc_host(4096, 0)
    assert info.value.call == "cuMemHostAlloc"


def test_fault_refuse_peer() -> None:
    """refuse_peer makes can_access_peer False and enabling it PEER_ACCESS_UNSUPPORTED."""
    be = SimulatedBackend(load_system("h200x2"), Faults(refuse_peer={(0, 1)}))
    assert not be.can_access_peer(0, 1) and be.can_access_peer(1, 0)
    with pytest.raises(CudaError) as info:
        be.enable_peer_access(0, 1)
    assert info.value.result == "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"


def test_fault_kernel_error() -> None:
    """kernel_error makes that kernel fail; the next synchronize of its stream raises."""
    be = SimulatedBackend(load_system("h200x1"), Faults(kernel_error="gpubw_copy"))
    be.load_kernels(0)
    d = be.alloc_device(0, MIB)
    s = be.create_stream(0)
    be.launch("gpubw_copy", 1, 512, (ptr(d), ptr(d), u64(16), u32(1)), s)
    with pytest.raises(CudaError) as info:
        be.synchronize(s, 1.0)
    assert (info.value.call, info.value.result) == (
        "cuStreamSynchronize",
        "CUDA_ERROR_LAUNCH_FAILED",
    )
    be.synchronize(s, 1.0)  # reported once


def test_fault_gate_never_opens() -> None:
    """gate_never_opens: the release is ignored; the gate times out and reports status 1."""
    be = SimulatedBackend(load_system("h200x1"), Faults(gate_never_opens=True))
    be.load_kernels(0)
    flag = be.alloc_host(4096, None)
    s = be.create_stream(0)
    _gate(be, s, flag, timeout_ns=1_000_000)
    be.host_write(flag, struct.pack("<i", 1))
    be.synchronize(s, 1.0)
    assert _u32(be, flag + 4) == 1


def test_fault_sync_hang() -> None:
    """sync_hang: a busy stream never finishes; synchronize raises GateTimeoutError."""
    be = SimulatedBackend(load_system("h200x1"), Faults(sync_hang=True))
    h, d = be.alloc_host(MIB, 0), be.alloc_device(0, MIB)
    s = be.create_stream(0)
    be.synchronize(s, 1.0)  # idle: fine
    be.memcpy_async(d, h, MIB, s)
    before = be.now
    with pytest.raises(GateTimeoutError, match="simulated hang"):
        be.synchronize(s, 3.0)
    assert be.now - before >= 3.0
