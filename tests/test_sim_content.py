"""Simulated allocation content: frozen arrays shared copy-on-write (gpubw.backend.sim.content)."""

from __future__ import annotations

import numpy as np
import pytest

from gpubw.backend.sim.content import PATTERN_BYTES, immutable, zeros
from gpubw.backend.sim.memory import Alloc, Memory
from gpubw.backend.sim.presets import load_system


def _allocs(memory: Memory, n: int, size: int) -> list[Alloc]:
    return [memory.location(memory.alloc_device(i % 2, size), 1, "t")[0] for i in range(n)]


def test_immutable_holds_only_for_memory_nobody_can_store_to() -> None:
    """bytes and arrays frozen since they were made are immutable; a frozen view of a
    writeable array is not (its base may still change)."""
    assert immutable(np.frombuffer(b"abcd", dtype=np.uint8))
    assert immutable(zeros(64)[8:16])
    assert not immutable(np.zeros(4, dtype=np.uint8))
    view = np.zeros(4, dtype=np.uint8)[:2]
    view.flags.writeable = False
    assert not immutable(view)
    assert not immutable(np.frombuffer(bytearray(4), dtype=np.uint8))


def test_new_allocations_read_zero_and_a_store_into_one_leaves_the_others() -> None:
    """Every new real allocation starts as the shared frozen zeros; a store copies first, so
    neither its neighbours nor later allocations see it."""
    memory = Memory(load_system("h200x2"))
    a, b = _allocs(memory, 2, 4096)
    memory.write(a, 100, np.full(8, 7, dtype=np.uint8))
    memory.copy(b, 0, a, 96, 16)
    (c,) = _allocs(memory, 1, 4096)
    assert list(memory.read(a, 98, 12)) == [0, 0] + [7] * 8 + [0, 0]
    assert list(memory.read(b, 0, 16)) == [0] * 4 + [7] * 8 + [0] * 4
    assert not memory.read(c, 0, 4096).any()
    assert not zeros(4096).any()


def test_a_whole_store_of_immutable_bytes_is_shared_until_a_partial_store() -> None:
    """The same bytes stored over whole allocations (every rank's pattern) are one array; a
    partial store, a whole copy, and a store of a writeable array each keep every other
    allocation's bytes as they were."""
    memory = Memory(load_system("h200x2"))
    data = bytes(range(256)) * 16
    a, b, c, d = _allocs(memory, 4, 4096)
    for alloc in (a, b):
        memory.write(alloc, 0, np.frombuffer(data, dtype=np.uint8))
    assert a.data is not None and b.data is not None
    assert np.shares_memory(a.data, b.data)
    memory.copy(c, 0, a, 0, 4096)
    assert c.data is not None and np.shares_memory(c.data, a.data)
    memory.write(a, 1, np.full(2, 0xEE, dtype=np.uint8))
    assert list(memory.read(a, 0, 4)) == [0, 0xEE, 0xEE, 3]
    for other in (b, c):
        assert memory.read(other, 0, 4096).tobytes() == data
    mine = np.frombuffer(data, dtype=np.uint8).copy()
    memory.write(d, 0, mine)
    mine[:] = 0  # the caller's array stays the caller's
    assert memory.read(d, 0, 4096).tobytes() == data


def test_a_pattern_shared_by_many_allocations_is_interned_without_comparing_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ranks that each store the same pattern bytes get one key with no whole-pattern
    comparison (the bytes are the same memory), and the pattern table holds those bytes."""
    memory = Memory(load_system("h200x2"))
    data = np.random.default_rng(3).integers(0, 256, PATTERN_BYTES, dtype=np.uint8).tobytes()
    allocs = _allocs(memory, 6, PATTERN_BYTES)
    compared: list[int] = []
    real = np.array_equal

    def counting(x: np.ndarray, y: np.ndarray) -> bool:
        compared.append(1)
        return bool(real(x, y))

    monkeypatch.setattr(np, "array_equal", counting)
    for alloc in allocs:
        memory.write(alloc, 0, np.frombuffer(data, dtype=np.uint8))
    keys = {memory.pattern_key(alloc, 0) for alloc in allocs}
    assert len(keys) == 1
    assert compared == []
    assert memory.patterns[keys.pop()].tobytes() == data


def test_only_small_allocations_share_their_zeros() -> None:
    """Up to SHARED_ZEROS_MAX a new allocation's zeros are one frozen array per size; a
    larger one gets its own (the shared arrays stay few and small)."""
    from gpubw.backend.sim.content import SHARED_ZEROS_MAX

    assert zeros(4096) is zeros(4096) and not zeros(4096).flags.writeable
    big = zeros(SHARED_ZEROS_MAX + 512)
    assert big.flags.writeable and big is not zeros(SHARED_ZEROS_MAX + 512)
