"""HostBuffer and DeviceBuffer on the simulated backend: lifetime, pool, fill, verify, peers."""

from __future__ import annotations

import pytest

from conftest import MIB, SimSystemFactory
from gpubw.backend.sim import Faults, SimulatedBackend
from gpubw.buffers import DeviceBuffer, HostBuffer
from gpubw.errors import CudaError, VerificationError
from gpubw.system import DST_SEED, SRC_SEED, pattern_bytes


def _backend(system: object) -> SimulatedBackend:
    backend = system.backend  # type: ignore[attr-defined]
    assert isinstance(backend, SimulatedBackend)
    return backend


def test_context_manager_returns_to_pool(sim_system: SimSystemFactory) -> None:
    """Closing a buffer returns it to the pool; the next allocation of that shape reuses it."""
    system = sim_system("h200x1")
    with DeviceBuffer.allocate(system, 0, 4 * MIB) as buf:
        first = buf.ptr
        assert system.live_buffers == 1
    assert system.live_buffers == 0
    again = DeviceBuffer.allocate(system, 0, 4 * MIB)
    assert again.ptr == first
    other = DeviceBuffer.allocate(system, 0, 4 * MIB)
    assert other.ptr != first
    h1 = HostBuffer.allocate(system, MIB, 0)
    h1.close()
    assert HostBuffer.allocate(system, MIB, 0).ptr == h1.ptr
    assert HostBuffer.allocate(system, MIB, None).ptr != h1.ptr  # near another device: new


def test_pool_not_reused_across_shapes(sim_system: SimSystemFactory) -> None:
    """A pooled buffer is only reused for the same host/device, device and size."""
    system = sim_system("h200x2")
    a = DeviceBuffer.allocate(system, 0, MIB)
    a.close()
    assert DeviceBuffer.allocate(system, 1, MIB).ptr != a.ptr
    assert DeviceBuffer.allocate(system, 0, 2 * MIB).ptr != a.ptr


def test_pool_dropped_on_out_of_memory(sim_system: SimSystemFactory) -> None:
    """Out of memory with idle pooled buffers: the pool is freed and the allocation retried."""
    system = sim_system("h200x1")
    backend = _backend(system)
    free, _ = backend.memory_info(0)
    big = DeviceBuffer.allocate(system, 0, free // 2 + MIB)
    big.close()  # idle in the pool, still allocated
    second = DeviceBuffer.allocate(system, 0, free // 2 + 2 * MIB)
    assert second.ptr != big.ptr
    assert len(backend.live_allocations()) == 1


def test_close_twice_is_harmless(sim_system: SimSystemFactory) -> None:
    """close() is idempotent."""
    system = sim_system("h200x1")
    buf = HostBuffer.allocate(system, MIB, 0)
    buf.close()
    buf.close()
    assert system.live_buffers == 0


def test_host_buffer_read_write(sim_system: SimSystemFactory) -> None:
    """HostBuffer.write/read go through host memory."""
    system = sim_system("h200x1")
    buf = HostBuffer.allocate(system, 4096, 0)
    buf.write(b"abc", offset=100)
    assert buf.read(5, offset=99) == b"\0abc\0"


@pytest.mark.parametrize("size", [2 * MIB, 3 * MIB + 512, 40 * MIB])
def test_fill_then_verify(sim_system: SimSystemFactory, size: int) -> None:
    """fill with a seed and verify against it pass, at real and symbolic sizes."""
    system = sim_system("h200x1")
    system.load_kernels()
    stream = system.backend.create_stream(0)
    try:
        for buf in (DeviceBuffer.allocate(system, 0, size), HostBuffer.allocate(system, size, 0)):
            buf.fill(SRC_SEED, size, stream=stream, exec_device=0)
            buf.verify(SRC_SEED, size, stream=stream, exec_device=0)
            with pytest.raises(VerificationError) as info:
                buf.verify(DST_SEED, size, stream=stream, exec_device=0)
            assert info.value.offset == 0 and info.value.where == buf.label
    finally:
        system.backend.destroy_stream(stream)


def test_fill_writes_the_pattern(sim_system: SimSystemFactory) -> None:
    """A filled host buffer holds nvbandwidth's xorshift pattern, repeated."""
    system = sim_system("h200x1")
    system.load_kernels()
    stream = system.backend.create_stream(0)
    buf = HostBuffer.allocate(system, 5 * MIB, 0)
    buf.fill(DST_SEED, 5 * MIB, stream=stream, exec_device=0)
    system.backend.synchronize(stream, 1.0)
    pattern = pattern_bytes(DST_SEED)
    assert buf.read(2 * MIB) == pattern
    assert buf.read(MIB, offset=4 * MIB) == pattern[: 1 * MIB]
    system.backend.destroy_stream(stream)


def test_verify_reports_offset_of_corruption(sim_system: SimSystemFactory) -> None:
    """verify names the buffer and the byte offset of the first wrong word."""
    system = sim_system("h200x1")
    system.load_kernels()
    stream = system.backend.create_stream(0)
    buf = HostBuffer.allocate(system, 4 * MIB, 0)
    buf.fill(SRC_SEED, 4 * MIB, stream=stream, exec_device=0)
    system.backend.synchronize(stream, 1.0)
    buf.write(b"\0\0\0\0", offset=12344)
    with pytest.raises(VerificationError) as info:
        buf.verify(SRC_SEED, 4 * MIB, stream=stream, exec_device=0)
    assert (info.value.where, info.value.offset) == ("Host", 12344)
    system.backend.destroy_stream(stream)


def test_peer_access_enable(sim_system: SimSystemFactory) -> None:
    """enable_peer_access: usable pairs are enabled both ways; pcie4 0-2 is not usable."""
    system = sim_system("pcie4")
    d0, d1, d2 = (DeviceBuffer.allocate(system, i, MIB) for i in range(3))
    assert d0.enable_peer_access(d1)
    assert {(0, 1), (1, 0)} <= _backend(system).peer_access_enabled()
    assert not d0.enable_peer_access(d2)
    assert d0.enable_peer_access(HostBuffer.allocate(system, MIB, 0))


def test_refused_peer_is_not_usable(sim_system: SimSystemFactory) -> None:
    """A refused pair (fault) is reported not usable, as nvbandwidth's N/A cells."""
    system = sim_system("h200x2", faults=Faults(refuse_peer={(0, 1), (1, 0)}))
    d0, d1 = DeviceBuffer.allocate(system, 0, MIB), DeviceBuffer.allocate(system, 1, MIB)
    assert not d0.enable_peer_access(d1)
    assert not d1.enable_peer_access(d0)


def test_one_way_refusal_fails_enabling(sim_system: SimSystemFactory) -> None:
    """A one-way peer refusal makes enabling fail with PEER_ACCESS_UNSUPPORTED, as in the driver."""
    # Probing the other direction succeeds.
    system = sim_system("h200x2", faults=Faults(refuse_peer={(0, 1)}))
    d0, d1 = DeviceBuffer.allocate(system, 0, MIB), DeviceBuffer.allocate(system, 1, MIB)
    with pytest.raises(CudaError, match="PEER_ACCESS_UNSUPPORTED"):
        d1.enable_peer_access(d0)


def test_allocation_failure_raises_cuda_error(sim_system: SimSystemFactory) -> None:
    """An allocation that fails raises the backend's CudaError and registers nothing."""
    system = sim_system("h200x1", faults=Faults(alloc_fail_after=1))
    DeviceBuffer.allocate(system, 0, MIB)
    with pytest.raises(CudaError, match="OUT_OF_MEMORY"):
        DeviceBuffer.allocate(system, 0, MIB)
    assert system.live_buffers == 1


def test_labels(sim_system: SimSystemFactory) -> None:
    """Buffer labels are nvbandwidth's: Host and Device <i>."""
    system = sim_system("h200x2")
    assert HostBuffer.allocate(system, MIB, 1).label == "Host"
    assert DeviceBuffer.allocate(system, 1, MIB).label == "Device 1"
