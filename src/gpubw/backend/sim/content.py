"""The content of a simulated allocation: real bytes shared copy-on-write, and symbolic
segments.

Real bytes (allocations up to the model's ``real_bytes_limit``) are a numpy array. An array
whose ``writeable`` flag is off is *frozen*: it may be shared by several allocations and
pattern tables (a 2 MiB verification pattern written by every rank of a simulated rack is
one array), so every store goes through :func:`owned`, which copies a frozen array first.
:func:`immutable` says whether an array may be shared: frozen all the way down to memory
nobody can store to (a ``bytes`` object, or an array frozen since it was made).

Larger allocations hold their content symbolically: segments of "pattern P", "zero", "these
bytes", kept separately for the even and odd 32-element groups the split-warp kernels use.
"""

from __future__ import annotations

import bisect
import functools

import attrs
import numpy as np

from gpubw.kernels import ELEMENT_BYTES, PATTERN_WORDS

#: Bytes of one verification pattern period.
PATTERN_BYTES = PATTERN_WORDS * 4
#: Bytes of one 32-element group of the split-warp kernels.
GROUP_BYTES = 32 * ELEMENT_BYTES


def immutable(values: np.ndarray) -> bool:
    """Whether no one can store to the memory of ``values``: it and every array it views are
    frozen, down to an array that owns its (frozen) data or a ``bytes`` object."""
    a: object = values
    while isinstance(a, np.ndarray):
        if a.flags.writeable:
            return False
        if a.base is None:
            return True
        a = a.base
    return isinstance(a, bytes)


#: the largest allocation whose zeros are shared (the sizes kept are few: a rack's patterns,
#: staging buffers and flag pages; a model may make real allocations of up to 256 MiB)
SHARED_ZEROS_MAX = 8 << 20


def zeros(n: int) -> np.ndarray:
    """A new allocation's ``n`` zero bytes: up to :data:`SHARED_ZEROS_MAX` one frozen array
    per size, shared until the allocation's first store (an allocation made and freed again,
    or stored over whole, costs no zeroing of its memory); larger, its own array."""
    if n > SHARED_ZEROS_MAX:
        return np.zeros(n, dtype=np.uint8)
    return _frozen_zeros(n)


@functools.lru_cache(maxsize=16)
def _frozen_zeros(n: int) -> np.ndarray:
    data = np.zeros(n, dtype=np.uint8)
    data.flags.writeable = False
    return data


def owned(holder: object) -> np.ndarray:
    """``holder.data``, copied first if it is frozen (shared): the array to store into."""
    data: np.ndarray = holder.data  # type: ignore[attr-defined]
    if not data.flags.writeable:
        data = holder.data = data.copy()  # type: ignore[attr-defined]
    return data


# -- symbolic content ------------------------------------------------------------------------
def cyclic(period: np.ndarray, start: int, n: int) -> np.ndarray:
    """``n`` values of ``period`` read cyclically from index ``start`` on (what indexing
    with ``(start + arange(n)) % len(period)`` gives, without an index array)."""
    start %= len(period)
    return np.resize(np.concatenate((period[start:], period[:start])), n)


#: the byte parity classes of one period of two groups: [c] is True where class c
_PARITY = tuple(np.repeat(np.array([c == 0, c == 1]), GROUP_BYTES) for c in (0, 1))


class Zero:
    """All bytes zero."""

    periodic = True

    def values(self, lo: int, hi: int, patterns: dict[int, np.ndarray]) -> np.ndarray:
        return np.zeros(hi - lo, dtype=np.uint8)

    def shifted(self, s: int) -> Zero:
        return self

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Zero)

    def __hash__(self) -> int:
        return 0


ZERO = Zero()


@attrs.frozen
class Pattern:
    """Byte b (allocation offset) = pattern ``key``'s byte (b - shift) mod PATTERN_BYTES."""

    key: int
    shift: int
    periodic = True

    def values(self, lo: int, hi: int, patterns: dict[int, np.ndarray]) -> np.ndarray:
        return cyclic(patterns[self.key], lo - self.shift, hi - lo)

    def shifted(self, s: int) -> Pattern:
        return Pattern(self.key, (self.shift + s) % PATTERN_BYTES)


@attrs.frozen(eq=False)
class Data:
    """Byte b (allocation offset) = ``arr[b - shift]``: literal bytes."""

    arr: np.ndarray
    shift: int
    periodic = False

    def values(self, lo: int, hi: int, patterns: dict[int, np.ndarray]) -> np.ndarray:
        return np.asarray(self.arr[lo - self.shift : hi - self.shift])

    def shifted(self, s: int) -> Data:
        return Data(self.arr, self.shift + s)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Data) and other.arr is self.arr and other.shift == self.shift

    def __hash__(self) -> int:
        return id(self.arr) ^ self.shift


Desc = Zero | Pattern | Data
Seg = tuple[int, int, Desc]


class Segments:
    """Sorted, non-overlapping (start, end, desc) covering [0, size), adjacent segments of
    equal desc merged; ``starts`` holds each segment's start (found by bisection, so that an
    allocation written in many parts, as an all-to-one column's, costs O(log n) a lookup)."""

    def __init__(self, size: int) -> None:
        self.segs: list[Seg] = [(0, size, ZERO)]
        self.starts: list[int] = [0]

    def _index(self, offset: int) -> int:
        """The index of the segment holding ``offset`` (within [0, size))."""
        return bisect.bisect_right(self.starts, offset) - 1

    def extract(self, lo: int, hi: int) -> list[Seg]:
        if hi <= lo or lo < 0:  # degenerate ranges: as the whole-list scan always gave
            return [(max(a, lo), min(b, hi), d) for a, b, d in self.segs if a < hi and b > lo]
        i, j = self._index(lo), self._index(hi - 1)
        return [(max(a, lo), min(b, hi), d) for a, b, d in self.segs[i : j + 1]]

    def assign(self, lo: int, hi: int, desc: Desc) -> None:
        if hi <= lo:
            return
        segs = self.segs
        i, j = self._index(lo), self._index(hi - 1)
        a, _, left = segs[i]
        _, b, right = segs[j]
        new: list[Seg] = []
        if a < lo:
            new.append((a, lo, left))
        new.append((lo, hi, desc))
        if b > hi:
            new.append((hi, b, right))
        # merge with the neighbours on either side (the rest is merged already)
        if i > 0 and segs[i - 1][2] == new[0][2]:
            i -= 1
            new[0] = (segs[i][0], new[0][1], new[0][2])
        if j + 1 < len(segs) and segs[j + 1][2] == new[-1][2]:
            j += 1
            new[-1] = (new[-1][0], segs[j][1], new[-1][2])
        merged: list[Seg] = [new[0]]
        for seg in new[1:]:
            if merged[-1][2] == seg[2]:
                merged[-1] = (merged[-1][0], seg[1], seg[2])
            else:
                merged.append(seg)
        segs[i : j + 1] = merged
        self.starts[i : j + 1] = [seg[0] for seg in merged]


def class_of(positions: np.ndarray) -> np.ndarray:
    """Group parity (0 even, 1 odd) of byte positions."""
    return (positions // GROUP_BYTES) & 1


class Symbolic:
    """Content of a large allocation: one segment list per group parity (byte b belongs to
    parity (b // 512) & 1, offsets from the allocation's start)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.cls = (Segments(size), Segments(size))

    def materialize(self, lo: int, n: int, patterns: dict[int, np.ndarray]) -> np.ndarray:
        out = np.zeros(n, dtype=np.uint8)
        if n <= 0:
            return out
        for c in (0, 1):
            for a, b, d in self.cls[c].extract(lo, lo + n):
                vals = d.values(a, b, patterns)
                sel = cyclic(_PARITY[c], a, b - a)
                out[a - lo : b - lo][sel] = vals[sel]
        return out

    def first_mismatch(
        self, lo: int, n: int, key: int, patterns: dict[int, np.ndarray]
    ) -> int | None:
        """First byte offset (from ``lo``) in [lo, lo + n) that differs from pattern ``key``
        laid from ``lo`` on, or None."""
        best: int | None = None
        expected_all = patterns[key]
        for c in (0, 1):
            for a, b, d in self.cls[c].extract(lo, lo + n):
                if isinstance(d, Pattern) and d.key == key and (d.shift - lo) % PATTERN_BYTES == 0:
                    continue
                # Zero and pattern content repeat every PATTERN_BYTES, as does the expected
                # pattern and the parity classes: one period decides.
                hi = min(b, a + PATTERN_BYTES + 2 * GROUP_BYTES) if d.periodic else b
                actual = d.values(a, hi, patterns)
                expected = cyclic(expected_all, a - lo, hi - a)
                mine = cyclic(_PARITY[c], a, hi - a)
                bad = np.flatnonzero((actual != expected) & mine)
                if bad.size:
                    off = a + int(bad[0]) - lo
                    best = off if best is None else min(best, off)
        return best


@functools.lru_cache(maxsize=16)
def parity_mask(n: int, parity: int) -> np.ndarray:
    """Bytes of [0, n) (relative to a buffer pointer) in groups of the given parity."""
    mask: np.ndarray = class_of(np.arange(n, dtype=np.int64)) == parity
    mask.flags.writeable = False
    return mask
