"""Simulated memory: allocation, freeing, memory_info and host access (gpubw.backend.sim.memory)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpubw.backend.sim.backend import SimulatedBackend
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


def _naive_assign(segs: list, lo: int, hi: int, desc: object) -> list:
    """The segment list after one write, the simple way: cut every segment the write
    overlaps, insert it, sort, merge every run of equal neighbours."""
    if hi <= lo:
        return segs
    out: list = []
    for a, b, d in segs:
        if b <= lo or a >= hi:
            out.append((a, b, d))
            continue
        if a < lo:
            out.append((a, lo, d))
        if b > hi:
            out.append((hi, b, d))
    out.append((lo, hi, desc))
    out.sort(key=lambda seg: seg[0])
    merged: list = []
    for a, b, d in out:
        if merged and merged[-1][1] == a and merged[-1][2] == d:
            merged[-1] = (merged[-1][0], b, d)
        else:
            merged.append((a, b, d))
    return merged


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 64), st.integers(0, 64), st.sampled_from(["x", "y", "z"])),
        max_size=40,
    )
)
def test_segments_match_the_simple_algorithm(writes: list[tuple[int, int, str]]) -> None:
    """Any sequence of writes leaves the segments (and what any range extracts) as cutting,
    sorting and merging the whole list would: bisection changes only the cost."""
    from gpubw.backend.sim.content import ZERO, Segments

    segs = Segments(64)
    expected: list = [(0, 64, ZERO)]
    for lo, hi, d in writes:
        lo, hi = min(lo, hi), max(lo, hi)
        segs.assign(lo, hi, d)  # type: ignore[arg-type]
        expected = _naive_assign(expected, lo, hi, d)
        assert segs.segs == expected
        assert segs.starts == [a for a, _, _ in expected]
        assert segs.extract(lo, hi) == [
            (max(a, lo), min(b, hi), x) for a, b, x in expected if a < hi and b > lo
        ]


def test_patterns_with_the_same_bytes_share_a_key_and_others_do_not() -> None:
    """pattern_key: equal content anywhere gets one key; a byte changed between the sampled
    bytes still makes a new pattern (the sample only narrows the comparison)."""
    import numpy as np

    from gpubw.backend.sim.content import PATTERN_BYTES
    from gpubw.backend.sim.memory import Memory
    from gpubw.backend.sim.presets import load_system

    memory = Memory(load_system("h200x2"))
    content = np.random.default_rng(7).integers(0, 256, PATTERN_BYTES, dtype=np.uint8)
    allocs = [memory.location(memory.alloc_device(d, PATTERN_BYTES), 1, "t")[0] for d in (0, 1)]
    for a in allocs:
        memory.write(a, 0, content)
    first = memory.pattern_key(allocs[0], 0)
    assert memory.pattern_key(allocs[1], 0) == first
    changed = content.copy()
    changed[4097] ^= 0xFF  # not one of the sampled bytes (every 4096th)
    memory.write(allocs[1], 0, changed)
    second = memory.pattern_key(allocs[1], 0)
    assert second != first
    assert (memory.patterns[second] == changed).all()
    memory.write(allocs[0], 0, np.zeros(PATTERN_BYTES, dtype=np.uint8))
    assert (memory.patterns[first] == content).all()  # kept, not a view of the allocation
    memory.write(allocs[1], 0, content)
    assert memory.pattern_key(allocs[1], 0) == first


@pytest.mark.parametrize("size", [4096, 64 << 20])  # real bytes, and symbolic content
def test_a_repeated_copy_is_stored_once_and_redone_after_any_write(size: int) -> None:
    """A copy made again with neither side written since leaves the destination as it is
    (one store for a sample's copies); a write to either side, or a copy within one
    allocation, makes the next copy store again."""
    import numpy as np

    from gpubw.backend.sim.memory import Memory
    from gpubw.backend.sim.presets import load_system

    memory = Memory(load_system("h200x2"))
    src, dst = (memory.location(memory.alloc_device(d, size), 1, "t")[0] for d in (0, 1))
    one, two = np.full(4096, 1, dtype=np.uint8), np.full(4096, 2, dtype=np.uint8)
    memory.write(src, 0, one)
    memory.copy(dst, 0, src, 0, size)
    stored = dst.generation
    memory.copy(dst, 0, src, 0, size)
    assert dst.generation == stored  # the same bytes: not stored again
    memory.write(src, 0, two)
    memory.copy(dst, 0, src, 0, size)
    assert (memory.read(dst, 0, 4096) == two).all()  # the source changed: stored again
    memory.write(dst, 0, one)
    memory.copy(dst, 0, src, 0, size)
    assert (memory.read(dst, 0, 4096) == two).all()  # the destination changed: again
    memory.copy(dst, 0, src, 0, 4096)  # another range: stored, remembered in its place
    memory.write(src, 0, one)
    memory.copy(dst, 0, src, 0, 4096)
    assert (memory.read(dst, 0, 4096) == one).all()
    ramp = np.arange(4096, dtype=np.uint8)
    memory.write(src, 0, ramp)
    for _ in range(2):  # within one allocation, overlapping: each copy moves the bytes on
        memory.copy(src, 1, src, 0, 8)
    assert list(memory.read(src, 0, 10)) == [0, 0, 0, 1, 2, 3, 4, 5, 6, 9]


def test_a_foreign_allocation_is_copied_into_every_time() -> None:
    """Another process may have stored to a foreign allocation unseen: copies into it are
    never taken as made already."""
    import numpy as np

    from gpubw.backend.sim.memory import Memory
    from gpubw.backend.sim.presets import load_system

    memory = Memory(load_system("h200x2"))
    src, dst = (memory.location(memory.alloc_device(d, 4096), 1, "t")[0] for d in (0, 1))
    dst.foreign = True
    memory.write(src, 0, np.full(4096, 3, dtype=np.uint8))
    memory.copy(dst, 0, src, 0, 4096)
    stored = dst.generation
    memory.copy(dst, 0, src, 0, 4096)
    assert dst.generation == stored + 1
