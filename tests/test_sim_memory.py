"""Simulated memory: allocation, freeing, memory_info and host access (gpubw.backend.sim.memory)."""

from __future__ import annotations

import pytest

from gpubw.backend.sim import SimulatedBackend
from gpubw.model.errors import CudaError, SimulationError, UsageError

MIB = 1 << 20


def test_alloc_free_and_memory_info(backend: SimulatedBackend) -> None:
    """Allocations are tracked, counted in memory_info, and disjoint per device and host."""
    free0, total = backend.memory_info(0)
    a = backend.alloc_device(0, 64 * MIB)
    b = backend.alloc_device(1, 64 * MIB)
    h = backend.alloc_host(4 * MIB, 0)
    assert len({a >> 40, b >> 40, h >> 40}) == 3
    assert backend.memory_info(0) == (free0 - 64 * MIB, total)
    assert sorted(x[2] is None for x in backend.live_allocations()) == [False, False, True]
    backend.free_device(a)
    backend.free_device(b)
    backend.free_host(h)
    assert backend.live_allocations() == []
    assert backend.memory_info(0) == (free0, total)


def test_out_of_memory(backend: SimulatedBackend) -> None:
    """Allocating more than is free raises cuMemAlloc CUDA_ERROR_OUT_OF_MEMORY."""
    free, _ = backend.memory_info(0)
    with pytest.raises(CudaError) as info:
        backend.alloc_device(0, free + 1)
    assert (info.value.call, info.value.result) == ("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY")
    assert info.value.out_of_memory
    big = backend.alloc_device(0, free - 4096)
    with pytest.raises(CudaError, match="OUT_OF_MEMORY"):
        backend.alloc_device(0, 1 * MIB)
    backend.free_device(big)


def test_free_unknown_or_twice(backend: SimulatedBackend) -> None:
    """Freeing an unknown or already freed pointer raises cuMemFree CUDA_ERROR_INVALID_VALUE."""
    p = backend.alloc_device(0, 4096)
    backend.free_device(p)
    for bad in (p, 12345):
        with pytest.raises(CudaError) as info:
            backend.free_device(bad)
        assert (info.value.call, info.value.result) == ("cuMemFree", "CUDA_ERROR_INVALID_VALUE")
    h = backend.alloc_host(4096, None)
    with pytest.raises(CudaError, match="cuMemFree"):
        backend.free_device(h)  # a host pointer is not device memory
    backend.free_host(h)


def test_host_read_write(backend: SimulatedBackend) -> None:
    """host_write/host_read round-trip on pinned memory; device memory is refused."""
    h = backend.alloc_host(4096, None)
    backend.host_write(h + 10, b"hello")
    assert backend.host_read(h + 8, 9) == b"\0\0hello\0\0"
    d = backend.alloc_device(0, 4096)
    with pytest.raises(SimulationError):
        backend.host_read(d, 4)


def test_zero_size_allocation_is_a_usage_error(backend: SimulatedBackend) -> None:
    """A zero-byte allocation is refused like the real backend does."""
    with pytest.raises(UsageError):
        backend.alloc_device(0, 0)
