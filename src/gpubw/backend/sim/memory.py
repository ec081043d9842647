"""Memory of the simulated system: the allocator (addresses, sizes, what is free) and the
content of every allocation.

Allocations up to the model's ``real_bytes_limit`` hold real bytes (numpy; a whole-allocation
store of immutable bytes shares them copy-on-write: :mod:`gpubw.backend.sim.content`). Larger
ones hold their content symbolically: segments of "pattern P", "zero", "these bytes", kept
separately for the even and odd 32-element groups the split-warp kernels use, so fill, copy
and verify stay exact, corruption included, at any size.

Address layout: host memory from 0x7f00_0000_0000 up to 1 PiB, device d in its own 1 PiB range
from (d + 1) << 50, so no two ranges meet for any device count a model may have
(:data:`gpubw.backend.sim.model.MAX_DEVICES`, each device's memory at most a quarter of its
range). An address is never reused; a range whose addresses are used up (after petabytes of
allocations) makes the next allocation fail like the driver does.
"""

from __future__ import annotations

import bisect

import attrs
import numpy as np

from gpubw.backend.sim.content import (
    GROUP_BYTES,
    PATTERN_BYTES,
    Data,
    Symbolic,
    immutable,
    owned,
    parity_mask,
    zeros,
)
from gpubw.backend.sim.model import MIB, SimSystem
from gpubw.model.errors import CudaError, SimulationError

#: Every how many bytes a pattern is sampled to tell it from the others (512 bytes of 2 MiB)
_PROBE_STRIDE = 4096

_HOST_BASE = 0x7F00_0000_0000
_DEVICE_STRIDE = 1 << 50
_DEVICE_BASE = _DEVICE_STRIDE
_HOST_END = _DEVICE_BASE
_ALIGN = 512


@attrs.define(eq=False)
class Alloc:
    base: int
    size: int
    device: int | None  # None: pinned host memory
    data: np.ndarray | None  # real bytes, or None for symbolic content
    sym: Symbolic | None
    generation: int = 0
    freed: bool = False
    #: devices given access by a mapping (an imported or multicast mapping's cuMemSetAccess)
    mapped_by: set[int] = attrs.Factory(set)
    #: a multicast object's mapping: the members' physical memory (stores land in all)
    members: list[Alloc] | None = None
    #: whether the allocation counts against its device's memory (a multicast mapping's
    #: address range does not: its members do)
    counted: bool = True
    #: memory another process may store to, unseen here: a shadow import, or an export of a
    #: process's own engine (a real MPI run of simulated ranks; rank views share one engine)
    foreign: bool = False
    #: host memory: pageable (not pinned), and the NUMA node its pages are on (None: unknown)
    pageable: bool = False
    numa_node: int | None = None
    #: the last copy into this allocation and the generation it left: (dst offset, source,
    #: the source's generation, source offset, bytes, parity, generation after it)
    last_copy: tuple[int, Alloc, int, int, int, int | None, int] | None = None

    @property
    def where(self) -> str:
        return "host memory" if self.device is None else f"device {self.device} memory"


# -- the allocator and content primitives ---------------------------------------------------
class Memory:
    """Every live allocation of the modelled system (device and pinned host memory), which
    device may access which peer's memory, and the content primitives the kernels use."""

    def __init__(self, model: SimSystem) -> None:
        self.model = model
        self.allocs: dict[int, Alloc] = {}
        self._bases: list[int] = []  # sorted bases of live allocations
        self._next_addr = {
            d.ordinal: _DEVICE_BASE + d.ordinal * _DEVICE_STRIDE for d in model.devices
        }
        self._next_host = _HOST_BASE
        self.used = dict.fromkeys(self._next_addr, 0)
        self.host_used = 0
        #: ordered pairs (a, b): device a's kernels may access device b's memory
        self.peer_enabled: set[tuple[int, int]] = set()
        #: verification patterns seen so far, by key (symbolic content refers to them)
        self.patterns: dict[int, np.ndarray] = {}
        self._pattern_keys: dict[bytes, list[int]] = {}
        self._pattern_cache: dict[tuple[int, int, int], int] = {}
        self._chase_cache: dict[tuple[int, int, int, int], int] = {}

    # -- allocation -------------------------------------------------------------------------
    @staticmethod
    def rounded(nbytes: int) -> int:
        return -(-nbytes // _ALIGN) * _ALIGN

    def free_bytes(self, device: int) -> int:
        total = self.model.devices[device].memory_bytes
        return max(0, total - self.model.reserved_bytes - self.used[device])

    def _new_alloc(self, base: int, nbytes: int, device: int | None) -> Alloc:
        real = nbytes <= self.model.real_bytes_limit
        alloc = Alloc(
            base=base,
            size=nbytes,
            device=device,
            data=zeros(nbytes) if real else None,
            sym=None if real else Symbolic(nbytes),
        )
        self.allocs[base] = alloc
        bisect.insort(self._bases, base)
        return alloc

    def alloc_device(self, device: int, nbytes: int) -> int:
        """A new allocation of ``nbytes`` (> 0) on ``device``; OUT_OF_MEMORY if it does not fit."""
        size = self.rounded(nbytes)
        if size > self.free_bytes(device):
            raise CudaError("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY")
        base = self._next_addr[device]
        step = -(-size // (2 * MIB)) * 2 * MIB
        if base + step > _DEVICE_BASE + (device + 1) * _DEVICE_STRIDE:
            raise CudaError("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY", "address range used up")
        self._next_addr[device] += step  # never reuse an address
        self.used[device] += size
        self._new_alloc(base, nbytes, device)
        return base

    def alloc_host(self, nbytes: int) -> int:
        """A new pinned host allocation of ``nbytes`` (> 0)."""
        size = self.rounded(nbytes)
        if self.host_used + size > self.model.host_memory_bytes:
            raise CudaError("cuMemHostAlloc", "CUDA_ERROR_OUT_OF_MEMORY")
        base = self._next_host
        step = -(-size // (2 * MIB)) * 2 * MIB
        if base + step > _HOST_END:
            raise CudaError("cuMemHostAlloc", "CUDA_ERROR_OUT_OF_MEMORY", "address range used up")
        self._next_host += step
        self.host_used += size
        self._new_alloc(base, nbytes, None)
        return base

    def alloc_multicast(self, device: int, nbytes: int) -> Alloc:
        """The address range of a multicast object's mapping (in ``device``'s range): no
        memory of its own; stores to it go to its ``members``."""
        size = self.rounded(nbytes)
        base = self._next_addr[device]
        self._next_addr[device] += -(-size // (2 * MIB)) * 2 * MIB
        alloc = self._new_alloc(base, nbytes, device)
        alloc.members = []
        alloc.counted = False
        return alloc

    def lookup(self, pointer: int, host: bool, call: str) -> Alloc:
        """The allocation starting at ``pointer`` (host or device, as ``host`` says), for
        freeing it; CUDA_ERROR_INVALID_VALUE from ``call`` if there is none."""
        alloc = self.allocs.get(pointer)
        if alloc is None or (alloc.device is None) != host:
            raise CudaError(call, "CUDA_ERROR_INVALID_VALUE", f"0x{pointer:x} is not allocated")
        return alloc

    def remove(self, alloc: Alloc) -> None:
        """Free ``alloc`` (found by :meth:`lookup`)."""
        del self.allocs[alloc.base]
        self._bases.remove(alloc.base)
        alloc.freed = True
        if not alloc.counted:
            return
        if alloc.device is None:
            self.host_used -= self.rounded(alloc.size)
        else:
            self.used[alloc.device] -= self.rounded(alloc.size)

    # -- finding memory ---------------------------------------------------------------------
    def find(self, pointer: int, nbytes: int) -> tuple[Alloc, int] | None:
        """The live allocation holding [pointer, pointer + nbytes), and the offset."""
        i = bisect.bisect_right(self._bases, pointer) - 1
        if i < 0:
            return None
        alloc = self.allocs[self._bases[i]]
        off = pointer - alloc.base
        if off + max(nbytes, 0) > alloc.size:
            return None
        return alloc, off

    def host_range(self, pointer: int, nbytes: int, what: str) -> tuple[Alloc, int]:
        """[pointer, +nbytes) in pinned host memory, for the host's own access."""
        found = self.find(pointer, nbytes)
        if found is None or found[0].device is not None:
            raise SimulationError(
                f"{what} of {nbytes} bytes at 0x{pointer:x}: not inside pinned host memory "
                "(on real hardware this would crash the process)"
            )
        return found

    def location(self, pointer: int, nbytes: int, call: str) -> tuple[Alloc, int]:
        """[pointer, +nbytes) for a copy; CUDA_ERROR_INVALID_VALUE if not allocated."""
        found = self.find(pointer, nbytes)
        if found is None:
            raise CudaError(
                call, "CUDA_ERROR_INVALID_VALUE", f"[0x{pointer:x}, +{nbytes}) is not allocated"
            )
        return found

    def device_view(self, device: int, pointer: int, nbytes: int) -> tuple[Alloc, int]:
        """Kernel access to [pointer, +nbytes) from ``device``; an address outside live
        memory, or peer memory without peer access (or a mapping made for ``device``), is
        CUDA_ERROR_ILLEGAL_ADDRESS."""
        found = self.find(pointer, nbytes)
        if found is None:
            raise CudaError(
                "cuStreamSynchronize",
                "CUDA_ERROR_ILLEGAL_ADDRESS",
                f"a kernel on device {device} accessed [0x{pointer:x}, +{nbytes}), "
                "which is not allocated",
            )
        alloc = found[0]
        if (
            alloc.device is not None
            and alloc.device != device
            and (device, alloc.device) not in self.peer_enabled
            and device not in alloc.mapped_by
        ):
            raise CudaError(
                "cuStreamSynchronize",
                "CUDA_ERROR_ILLEGAL_ADDRESS",
                f"a kernel on device {device} accessed {alloc.where} without peer access",
            )
        return found

    def loc(self, pointer: int) -> int | None:
        """The device whose memory holds ``pointer`` (None: host memory, or nothing)."""
        found = self.find(pointer, 1)
        return None if found is None else found[0].device

    @staticmethod
    def check_live(*allocs: Alloc) -> None:
        """A copy that runs after one of its buffers was freed is an illegal address."""
        for a in allocs:
            if a.freed:
                raise CudaError(
                    "cuStreamSynchronize",
                    "CUDA_ERROR_ILLEGAL_ADDRESS",
                    f"copy touched freed {a.where}",
                )

    # -- content ----------------------------------------------------------------------------
    def read(self, alloc: Alloc, off: int, n: int) -> np.ndarray:
        if alloc.data is not None:
            content: np.ndarray = alloc.data[off : off + n].copy()
            return content
        assert alloc.sym is not None
        return alloc.sym.materialize(off, n, self.patterns)

    def write(self, alloc: Alloc, off: int, values: np.ndarray, parity: int | None = None) -> None:
        """Write ``values`` at ``off``; with ``parity``, only the bytes of that group parity
        (relative to ``off``)."""
        n = len(values)
        alloc.generation += 1
        if alloc.data is not None:
            if parity is None and off == 0 and n == alloc.size and immutable(values):
                alloc.data = values  # shared, copied on the next partial store
            elif parity is None:
                owned(alloc)[off : off + n] = values
            else:
                mask = parity_mask(n, parity)
                owned(alloc)[off : off + n][mask] = values[mask]
            return
        assert alloc.sym is not None
        desc = Data(np.array(values, dtype=np.uint8), off)
        for c in self.classes(off, parity):
            alloc.sym.cls[c].assign(off, off + n, desc)

    def poke_word(self, alloc: Alloc, pos: int, word: bytes) -> None:
        """Overwrite the 4-byte word at allocation offset ``pos`` (a multiple of 4)."""
        values = np.frombuffer(word, dtype=np.uint8)
        if alloc.data is not None:
            self.write(alloc, pos, values)
        else:
            assert alloc.sym is not None
            alloc.generation += 1
            alloc.sym.cls[(pos // GROUP_BYTES) & 1].assign(pos, pos + 4, Data(values, pos))

    @staticmethod
    def classes(off: int, parity: int | None) -> tuple[int, ...]:
        """Allocation-relative parity classes touched by an op at ``off`` of ``parity``."""
        if parity is None:
            return (0, 1)
        if off % GROUP_BYTES:
            raise SimulationError(
                "the simulated backend models split-warp group parity on large buffers only "
                f"at offsets that are multiples of {GROUP_BYTES} bytes (got {off})"
            )
        return (parity ^ ((off // GROUP_BYTES) & 1),)

    def copy(
        self, dst: Alloc, doff: int, src: Alloc, soff: int, n: int, parity: int | None = None
    ) -> None:
        if n <= 0:
            return
        if self._copied_already(dst, doff, src, soff, n, parity):
            return
        self._copy(dst, doff, src, soff, n, parity)
        if src is not dst and not (dst.foreign or src.foreign):  # (within one: it may overlap)
            dst.last_copy = (doff, src, src.generation, soff, n, parity, dst.generation)

    @staticmethod
    def _copied_already(
        dst: Alloc, doff: int, src: Alloc, soff: int, n: int, parity: int | None
    ) -> bool:
        """Whether this copy is the last one made into ``dst``, with neither allocation
        written since (so ``dst`` holds its result already: a sample's 16 copies of the
        same bytes store them once; another process's stores are unseen, so a foreign
        allocation never counts as unchanged)."""
        last = dst.last_copy
        return (
            last is not None
            and last[1] is src
            and last[6] == dst.generation
            and last[2] == src.generation
            and last[0] == doff
            and last[3] == soff
            and last[4] == n
            and last[5] == parity
            and not (dst.foreign or src.foreign)
        )

    def _copy(
        self, dst: Alloc, doff: int, src: Alloc, soff: int, n: int, parity: int | None
    ) -> None:
        if dst.sym is None or src.sym is None:
            if parity is None and dst.data is not None and src.data is not None:
                values = src.data[soff : soff + n]  # real -> real: one copy, not two
                if doff == 0 and len(values) == dst.size and immutable(values):
                    dst.generation += 1
                    dst.data = values  # shared, as the source shares it
                    return
                dst.generation += 1
                owned(dst)[doff : doff + len(values)] = values  # numpy handles an overlap
            elif dst.sym is not None and src.data is not None:
                self.write(dst, doff, src.data[soff : soff + n].copy(), parity)
            else:
                self.write(dst, doff, self.read(src, soff, n), parity)
            return
        # symbolic -> symbolic: move segments
        dst.generation += 1
        s = doff - soff
        if parity is not None:
            pairs = [(self.classes(soff, parity)[0], self.classes(doff, parity)[0])]
        elif s % (2 * GROUP_BYTES) == 0:
            pairs = [(0, 0), (1, 1)]
        elif s % (2 * GROUP_BYTES) == GROUP_BYTES:
            pairs = [(0, 1), (1, 0)]
        elif src.sym.cls[0].extract(soff, soff + n) == src.sym.cls[1].extract(soff, soff + n):
            pairs = [(0, 0), (0, 1)]
        else:
            raise SimulationError(
                "the simulated backend cannot copy split-warp content between large buffers "
                f"at offsets {soff} and {doff} that differ by a part of a {GROUP_BYTES}-byte group"
            )
        moved = [(cd, src.sym.cls[cs].extract(soff, soff + n)) for cs, cd in pairs]
        for cd, segs in moved:
            for a, b, d in segs:
                dst.sym.cls[cd].assign(a + s, b + s, d.shifted(s))

    def pattern_key(self, alloc: Alloc, off: int) -> int:
        """Key of the PATTERN_BYTES pattern stored at ``alloc`` + ``off``."""
        cache_key = (alloc.base, alloc.generation, off)
        key = self._pattern_cache.get(cache_key)
        if key is None:
            if alloc.data is not None:  # compared in place: copied only when new
                values = alloc.data[off : off + PATTERN_BYTES]
            else:
                values = self.read(alloc, off, PATTERN_BYTES)
            key = self._pattern_cache[cache_key] = self._intern(values)
        return key

    def constant_key(self, word: int) -> int:
        """Key of the pattern whose every 32-bit word is ``word`` (what gpubw_write stores)."""
        one = int(word & 0xFFFFFFFF).to_bytes(4, "little")
        return self._intern(np.frombuffer(one * (PATTERN_BYTES // 4), dtype=np.uint8))

    def _intern(self, values: np.ndarray) -> int:
        """The key of the pattern with the bytes of ``values``: the one seen before, else the
        next key. Patterns are told apart by a sample of their bytes, then compared whole
        (every rank of a simulated rack fills from its own copy of the same pattern: a hash
        of all 2 MiB each time cost more than the rest of a small testcase)."""
        probe = values[::_PROBE_STRIDE].tobytes()
        for key in self._pattern_keys.get(probe, ()):
            if _same_memory(self.patterns[key], values) or np.array_equal(
                self.patterns[key], values
            ):
                return key
        key = len(self.patterns)
        self.patterns[key] = values if immutable(values) else values.copy()
        self._pattern_keys.setdefault(probe, []).append(key)
        return key

    def chase(self, device: int, start: int, steps: int) -> int:
        """Where ``steps`` dependent 8-byte loads from ``start`` end (the pointer-chase kernel
        on ``device``)."""
        alloc, _ = self.device_view(device, start, 8)
        key = (alloc.base, alloc.generation, start, steps)
        cached = self._chase_cache.get(key)
        if cached is not None:
            return cached
        p = start
        view: np.ndarray | None = None
        cur: Alloc | None = None
        for _ in range(steps):
            if cur is None or not (cur.base <= p <= cur.base + cur.size - 8) or (p - cur.base) % 8:
                cur, off = self.device_view(device, p, 8)
                view = (
                    cur.data[: cur.size // 8 * 8].view(np.uint64) if cur.data is not None else None
                )
            off = p - cur.base
            if view is not None and off % 8 == 0:
                p = int(view[off // 8])
            else:
                p = int.from_bytes(self.read(cur, off, 8).tobytes(), "little")
        self._chase_cache[key] = p
        return p


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two byte arrays are the very same bytes (one shared pattern: equal unseen)."""
    return (
        a.shape == b.shape
        and a.strides == b.strides
        and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    )
