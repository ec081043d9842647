"""The simulated backend: a modelled GPU system in pure Python (CI, and ``gpubw --simulate``).

It implements the whole :class:`gpubw.backend.base.Backend` facade over a :class:`SimSystem`
model (devices, link bandwidths, latencies, memory sizes), so the measurement protocol, the
buffers and every testcase run unchanged without a GPU. Nothing here is measured: every
figure it produces comes from the model, and every report made with it says "simulated".

How it works:

* **Virtual time.** The host has a clock (``now``) that every facade call advances a little.
  Work enqueued on a stream is submitted at ``now``; the device side is a small discrete-event
  simulation that runs lazily, as far as the host could have observed: up to ``now`` on every
  call, and further while the host waits in :meth:`SimulatedBackend.synchronize`. Events get
  virtual timestamps, so :meth:`~SimulatedBackend.elapsed_seconds` is deterministic.
* **The spin gate.** ``gpubw_gate_wait`` holds its stream until the int at its flag address is
  non-zero (a :meth:`~SimulatedBackend.host_write` releases it at ``now``). Like the real
  kernel it gives up after ``timeout_ns`` and writes 1 to ``*status``.
* **Bandwidth sharing.** Copies are fluid flows over resources (each host link direction, each
  device's peer-link send and receive side, each device's memory, host memory). Flows that
  overlap on a resource share it equally, a link busy in both directions runs at its
  bidirectional factor, and rates are re-evaluated whenever a flow starts or ends.
* **Bytes.** Allocations up to ``real_bytes_limit`` hold real bytes (numpy), and the kernels of
  :mod:`gpubw.kernels` run on them in numpy. Larger allocations hold their content
  symbolically (segments of "pattern P", "zero", "these bytes", separately for the even and
  odd 32-element groups the split-warp kernels use), so fill, copy and verify stay exact,
  corruption included, at any size.
* **Faults.** :class:`Faults` injects allocation failures, corrupted copies, refused peer
  pairs, kernel errors, a gate that never opens and hanging streams; each surfaces the way it
  does on real hardware (a :class:`~gpubw.errors.CudaError` with a realistic call and
  CUresult name, a :class:`~gpubw.errors.VerificationError`, a
  :class:`~gpubw.errors.GateTimeoutError`, ``can_access_peer`` returning False).
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import random
import struct
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from gpubw.backend.base import Backend, DeviceInfo, KernelArg
from gpubw.errors import (
    CudaError,
    GateTimeoutError,
    GpubwError,
    PluginError,
    SimulationError,
    UsageError,
)
from gpubw.kernels import ELEMENT_BYTES, KERNELS, PATTERN_WORDS

MIB = 1 << 20
GIB = 1 << 30
#: Bytes of one verification pattern period.
PATTERN_BYTES = PATTERN_WORDS * 4
#: Bytes of one 32-element group of the split-warp kernels.
GROUP_BYTES = 32 * ELEMENT_BYTES
_MAX_GRID = (1 << 31) - 1
_U64_MAX = (1 << 64) - 1

# Address layout: host memory from 0x7f00_0000_0000, device d from (0x10 + d) << 40.
_HOST_BASE = 0x7F00_0000_0000
_DEVICE_STRIDE = 1 << 40
_DEVICE_BASE = 0x10 << 40
_ALIGN = 512


# =========================================================================================
# The model
# =========================================================================================
def _positive(instance: object, attribute: attrs.Attribute, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be positive, got {value!r}")


def _non_negative(instance: object, attribute: attrs.Attribute, value: float) -> None:
    if not value >= 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value!r}")


def _factor(instance: object, attribute: attrs.Attribute, value: float) -> None:
    if not 0 < value <= 1:
        raise ValueError(f"{attribute.name} must be in (0, 1], got {value!r}")


@attrs.frozen
class Rate:
    """Peak bytes/s of one path, when a copy engine (``ce``) or a copy kernel (``sm``) moves
    the bytes and nothing else uses the path."""

    ce: float = attrs.field(converter=float, validator=_positive)
    sm: float = attrs.field(converter=float, validator=_positive)

    def of(self, engine: str) -> float:
        return self.ce if engine == "ce" else self.sm


@attrs.frozen
class HostLink:
    """One device's link to host memory: each direction's peak, and the factor each direction
    runs at while the other direction is busy too."""

    h2d: Rate
    d2h: Rate
    bidirectional_factor: float = attrs.field(default=0.9, validator=_factor)


@attrs.frozen
class Latency:
    """Seconds per dependent access of the pointer-chase kernel, by where the memory is."""

    host: float = attrs.field(default=1.2e-6, validator=_positive)
    peer: float = attrs.field(default=0.83e-6, validator=_positive)
    local: float = attrs.field(default=0.6e-6, validator=_positive)


@attrs.frozen
class Overheads:
    """Fixed costs, in seconds: on the device per kernel launch and per CE copy, and on the
    host per facade call (the gap between two enqueues)."""

    kernel_launch: float = attrs.field(default=3e-6, validator=_non_negative)
    memcpy: float = attrs.field(default=1.5e-6, validator=_non_negative)
    host_call: float = attrs.field(default=1e-6, validator=_non_negative)
    gate_poll: float = attrs.field(default=0.5e-6, validator=_non_negative)


def _device_tuple(value: Iterable[DeviceInfo]) -> tuple[DeviceInfo, ...]:
    return tuple(value)


def _link_tuple(value: Iterable[HostLink]) -> tuple[HostLink, ...]:
    return tuple(value)


@attrs.frozen(eq=False)
class SimSystem:
    """A modelled system: what :class:`SimulatedBackend` pretends to be."""

    name: str
    devices: tuple[DeviceInfo, ...] = attrs.field(converter=_device_tuple)
    #: per device, in device order
    host_links: tuple[HostLink, ...] = attrs.field(converter=_link_tuple)
    #: ordered pairs (a, b) where a can access b's memory, with the bandwidth of a copy from
    #: a's memory to b's memory over that link
    peers: Mapping[tuple[int, int], Rate] = attrs.field(factory=dict)
    #: each direction of a device's peer link runs at this factor while the other is busy
    peer_bidirectional_factor: float = attrs.field(default=0.985, validator=_factor)
    #: a copy inside one device's memory (bytes counted once)
    local_copy: Rate = attrs.field(factory=lambda: Rate(2094e9, 2080e9))
    #: all host-memory traffic of all devices together (None: no shared limit)
    host_memory_bandwidth: float | None = None
    latency: Latency = attrs.field(factory=Latency)
    overheads: Overheads = attrs.field(factory=Overheads)
    #: each copy's rate is scaled by a factor drawn uniformly from [1 - jitter, 1 + jitter]
    jitter: float = attrs.field(default=0.005, validator=_non_negative)
    seed: int = 0
    #: device memory the primary context keeps for itself (not free for allocations)
    reserved_bytes: int = 512 * MIB
    host_memory_bytes: int = 2048 * GIB
    #: allocations up to this size hold real bytes; larger ones are symbolic
    real_bytes_limit: int = 8 * MIB
    driver_version: str = "580.159.04"
    cuda_driver: int = 13000
    #: faults to inject by default (a system file's ``"faults"``); the backend's own
    #: ``faults`` argument, when given, replaces them
    faults: Faults | None = None

    def __attrs_post_init__(self) -> None:
        n = len(self.devices)
        if n == 0:
            raise ValueError("a simulated system needs at least one device")
        for i, d in enumerate(self.devices):
            if d.ordinal != i:
                raise ValueError(f"device {i} has ordinal {d.ordinal}; ordinals must be 0..{n - 1}")
        if len(self.host_links) != n:
            raise ValueError(f"host_links has {len(self.host_links)} entries for {n} devices")
        for a, b in self.peers:
            if not (0 <= a < n and 0 <= b < n) or a == b:
                raise ValueError(f"peer pair ({a}, {b}) is not two distinct devices of 0..{n - 1}")
        if self.host_memory_bandwidth is not None and not self.host_memory_bandwidth > 0:
            raise ValueError("host_memory_bandwidth must be positive (or null for no limit)")

    def peer_rate(self, src: int, dst: int) -> Rate | None:
        """The link used by a copy from ``src``'s memory to ``dst``'s (either direction's
        entry), or None if the two devices have no peer link."""
        return self.peers.get((src, dst)) or self.peers.get((dst, src))


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


# =========================================================================================
# Memory content
# =========================================================================================
class _Zero:
    """All bytes zero."""

    periodic = True

    def values(self, lo: int, hi: int, patterns: dict[int, np.ndarray]) -> np.ndarray:
        return np.zeros(hi - lo, dtype=np.uint8)

    def shifted(self, s: int) -> _Zero:
        return self

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Zero)

    def __hash__(self) -> int:
        return 0


_ZERO = _Zero()


@attrs.frozen
class _Pattern:
    """Byte b (allocation offset) = pattern ``key``'s byte (b - shift) mod PATTERN_BYTES."""

    key: int
    shift: int
    periodic = True

    def values(self, lo: int, hi: int, patterns: dict[int, np.ndarray]) -> np.ndarray:
        idx = (np.arange(lo, hi, dtype=np.int64) - self.shift) % PATTERN_BYTES
        return patterns[self.key][idx]

    def shifted(self, s: int) -> _Pattern:
        return _Pattern(self.key, (self.shift + s) % PATTERN_BYTES)


@attrs.frozen(eq=False)
class _Data:
    """Byte b (allocation offset) = ``arr[b - shift]``: literal bytes."""

    arr: np.ndarray
    shift: int
    periodic = False

    def values(self, lo: int, hi: int, patterns: dict[int, np.ndarray]) -> np.ndarray:
        return np.asarray(self.arr[lo - self.shift : hi - self.shift])

    def shifted(self, s: int) -> _Data:
        return _Data(self.arr, self.shift + s)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Data) and other.arr is self.arr and other.shift == self.shift

    def __hash__(self) -> int:
        return id(self.arr) ^ self.shift


_Desc = _Zero | _Pattern | _Data
_Seg = tuple[int, int, _Desc]


class _Segments:
    """Sorted, non-overlapping (start, end, desc) covering [0, size)."""

    def __init__(self, size: int) -> None:
        self.segs: list[_Seg] = [(0, size, _ZERO)]

    def extract(self, lo: int, hi: int) -> list[_Seg]:
        return [(max(a, lo), min(b, hi), d) for a, b, d in self.segs if a < hi and b > lo]

    def assign(self, lo: int, hi: int, desc: _Desc) -> None:
        if hi <= lo:
            return
        out: list[_Seg] = []
        for a, b, d in self.segs:
            if b <= lo or a >= hi:
                out.append((a, b, d))
                continue
            if a < lo:
                out.append((a, lo, d))
            if b > hi:
                out.append((hi, b, d))
        out.append((lo, hi, desc))
        out.sort(key=lambda seg: seg[0])
        merged: list[_Seg] = []
        for a, b, d in out:
            if merged and merged[-1][1] == a and merged[-1][2] == d:
                merged[-1] = (merged[-1][0], b, d)
            else:
                merged.append((a, b, d))
        self.segs = merged


def _class_of(positions: np.ndarray) -> np.ndarray:
    """Group parity (0 even, 1 odd) of byte positions."""
    return (positions // GROUP_BYTES) & 1


class _Symbolic:
    """Content of a large allocation: one segment list per group parity (byte b belongs to
    parity (b // 512) & 1, offsets from the allocation's start)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.cls = (_Segments(size), _Segments(size))

    def materialize(self, lo: int, n: int, patterns: dict[int, np.ndarray]) -> np.ndarray:
        out = np.zeros(n, dtype=np.uint8)
        if n <= 0:
            return out
        parity = _class_of(np.arange(lo, lo + n, dtype=np.int64))
        for c in (0, 1):
            for a, b, d in self.cls[c].extract(lo, lo + n):
                vals = d.values(a, b, patterns)
                sel = parity[a - lo : b - lo] == c
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
                if isinstance(d, _Pattern) and d.key == key and (d.shift - lo) % PATTERN_BYTES == 0:
                    continue
                # Zero and pattern content repeat every PATTERN_BYTES, as does the expected
                # pattern and the parity classes: one period decides.
                hi = min(b, a + PATTERN_BYTES + 2 * GROUP_BYTES) if d.periodic else b
                pos = np.arange(a, hi, dtype=np.int64)
                actual = d.values(a, hi, patterns)
                expected = expected_all[(pos - lo) % PATTERN_BYTES]
                bad = np.flatnonzero((actual != expected) & (_class_of(pos) == c))
                if bad.size:
                    off = a + int(bad[0]) - lo
                    best = off if best is None else min(best, off)
        return best


@attrs.define(eq=False)
class _Alloc:
    base: int
    size: int
    device: int | None  # None: pinned host memory
    data: np.ndarray | None  # real bytes, or None for symbolic content
    sym: _Symbolic | None
    generation: int = 0
    freed: bool = False

    @property
    def where(self) -> str:
        return "host memory" if self.device is None else f"device {self.device} memory"


@functools.lru_cache(maxsize=16)
def _parity_mask(n: int, parity: int) -> np.ndarray:
    """Bytes of [0, n) (relative to a buffer pointer) in groups of the given parity."""
    mask = _class_of(np.arange(n, dtype=np.int64)) == parity
    mask.flags.writeable = False
    return mask


# =========================================================================================
# Streams, events, operations
# =========================================================================================
class _Stream:
    __slots__ = ("cur", "destroyed", "device", "error", "free_at", "gated", "id", "queue")

    def __init__(self, sid: int, device: int) -> None:
        self.id = sid
        self.device = device
        self.queue: deque[_Op] = deque()
        self.cur: _Op | None = None
        self.free_at = 0.0
        self.destroyed = False
        self.gated = False  # a gate was ever enqueued here (copies after it are "measured")
        self.error: GpubwError | None = None

    def idle(self) -> bool:
        return self.cur is None and not self.queue

    def __repr__(self) -> str:
        return f"<simulated stream {self.id} on device {self.device}>"


class _Event:
    __slots__ = ("destroyed", "device", "id", "last", "time")

    def __init__(self, eid: int, device: int) -> None:
        self.id = eid
        self.device = device
        self.last: _Op | None = None  # the most recent record op
        self.time: float | None = None  # timestamp of the last completed record
        self.destroyed = False

    def __repr__(self) -> str:
        return f"<simulated event {self.id} on device {self.device}>"


class _Flow:
    __slots__ = ("jitter", "peak", "remaining", "resources", "total")

    def __init__(
        self, resources: tuple[Any, ...], peak: float, nbytes: float, jitter: float = 1.0
    ) -> None:
        self.resources = resources
        self.jitter = jitter
        self.peak = peak * jitter
        self.remaining = float(nbytes)
        self.total = float(nbytes)


class _Op:
    """One unit of stream work. ``kind``: gate, record, wait, fixed, xfer."""

    __slots__ = (
        "deadline",
        "done",
        "duration",
        "effect",
        "end",
        "event",
        "flag",
        "flows",
        "kind",
        "name",
        "overhead",
        "phase_end",
        "prepare",
        "record",
        "status",
        "submit",
    )

    def __init__(self, kind: str, submit: float, name: str = "") -> None:
        self.kind = kind
        self.submit = submit
        self.name = name
        self.done = False
        self.end: float | None = None
        self.deadline = 0.0
        self.duration = 0.0
        self.overhead = 0.0
        self.phase_end = 0.0
        self.flows: list[_Flow] = []
        self.effect: Callable[[], None] | None = None
        self.prepare: Callable[[], float] | None = None
        self.event: _Event | None = None
        self.record: _Op | None = None
        self.flag = 0
        self.status = 0


_HOSTMEM = ("hostmem",)


def _reverse(resource: tuple[Any, ...]) -> tuple[Any, ...] | None:
    kind = resource[0]
    pairs = {"h2d": "d2h", "d2h": "h2d", "tx": "rx", "rx": "tx"}
    return (pairs[kind], resource[1]) if kind in pairs else None


# =========================================================================================
# The backend
# =========================================================================================
class SimulatedBackend(Backend):
    """The facade over a :class:`SimSystem` (see the module docstring)."""

    name = "simulated"
    simulated = True

    def __init__(self, system: SimSystem, faults: Faults | None = None) -> None:
        self.model = system
        self.faults = faults if faults is not None else (system.faults or Faults())
        self._rng = random.Random(system.seed)
        self._now = 0.0  # host clock
        self._t = 0.0  # device simulation has been run up to here
        self._allocs: dict[int, _Alloc] = {}
        self._bases: list[int] = []  # sorted bases of live allocations
        self._next_addr = {
            d.ordinal: _DEVICE_BASE + d.ordinal * _DEVICE_STRIDE for d in system.devices
        }
        self._next_host = _HOST_BASE
        self._used = dict.fromkeys(self._next_addr, 0)
        self._host_used = 0
        self._device_allocs_made = 0
        self._host_allocs_made = 0
        self._peer_enabled: set[tuple[int, int]] = set()
        self._loaded: set[int] = set()
        self._streams: list[_Stream] = []
        self._events: set[_Event] = set()
        self._ids = 0
        self._patterns: dict[int, np.ndarray] = {}
        self._pattern_keys: dict[bytes, int] = {}
        self._pattern_cache: dict[tuple[int, int, int], int] = {}
        self._chase_cache: dict[tuple[int, int, int, int], int] = {}
        self._measured_copies = 0
        self._rates: dict[int, float] = {}
        self.closed = False

    # -- conveniences for tests -------------------------------------------------------------
    @classmethod
    def from_preset(cls, name_or_path: str, faults: Faults | None = None) -> SimulatedBackend:
        from gpubw.backend.presets import load_system

        return cls(load_system(name_or_path), faults)

    def live_allocations(self) -> list[tuple[int, int, int | None]]:
        """(pointer, bytes, device or None for host) of every allocation not yet freed."""
        return [(a.base, a.size, a.device) for a in self._allocs.values()]

    def live_streams(self) -> int:
        return sum(1 for s in self._streams if not s.destroyed)

    def live_events(self) -> int:
        return len(self._events)

    @property
    def now(self) -> float:
        """The host's virtual clock, in seconds since the backend was created."""
        return self._now

    # -- system -----------------------------------------------------------------------------
    def versions(self) -> dict[str, Any]:
        return {
            "cuda_driver": self.model.cuda_driver,
            "driver": f"{self.model.driver_version} (simulated)",
            "simulated": True,
            "system": self.model.name,
        }

    def devices(self) -> Sequence[DeviceInfo]:
        return self.model.devices

    def _device(self, device: int, call: str = "cuDeviceGet") -> int:
        if not isinstance(device, int) or not 0 <= device < len(self.model.devices):
            raise UsageError(
                f"no device {device!r}; devices are 0..{len(self.model.devices) - 1} ({call})"
            )
        return device

    def can_access_peer(self, device: int, peer: int) -> bool:
        a, b = self._device(device), self._device(peer)
        if a == b or (a, b) in self.faults.refuse_peer:
            return False
        return (a, b) in self.model.peers

    def enable_peer_access(self, device: int, peer: int) -> None:
        self._tick()
        a, b = self._device(device), self._device(peer)
        if a == b:
            raise CudaError("cuCtxEnablePeerAccess", "CUDA_ERROR_INVALID_DEVICE")
        if not self.can_access_peer(a, b):
            raise CudaError("cuCtxEnablePeerAccess", "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED")
        self._peer_enabled.add((a, b))

    def memory_info(self, device: int) -> tuple[int, int]:
        d = self._device(device)
        total = self.model.devices[d].memory_bytes
        return max(0, total - self.model.reserved_bytes - self._used[d]), total

    def host_memory_bytes(self) -> int | None:
        return self.model.host_memory_bytes

    # -- memory -----------------------------------------------------------------------------
    def _new_alloc(self, base: int, nbytes: int, device: int | None) -> _Alloc:
        real = nbytes <= self.model.real_bytes_limit
        alloc = _Alloc(
            base=base,
            size=nbytes,
            device=device,
            data=np.zeros(nbytes, dtype=np.uint8) if real else None,
            sym=None if real else _Symbolic(nbytes),
        )
        self._allocs[base] = alloc
        bisect.insort(self._bases, base)
        return alloc

    @staticmethod
    def _rounded(nbytes: int) -> int:
        return -(-nbytes // _ALIGN) * _ALIGN

    def alloc_device(self, device: int, nbytes: int) -> int:
        self._tick()
        d = self._device(device)
        if nbytes <= 0:
            raise UsageError(f"device allocation size must be positive, got {nbytes}")
        f = self.faults
        if (f.alloc_fail_on_device == d) or (
            f.alloc_fail_after is not None and self._device_allocs_made >= f.alloc_fail_after
        ):
            raise CudaError("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY", "injected fault")
        free, _ = self.memory_info(d)
        size = self._rounded(nbytes)
        if size > free:
            raise CudaError("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY")
        base = self._next_addr[d]
        self._next_addr[d] += -(-size // (2 * MIB)) * 2 * MIB  # never reuse an address
        self._used[d] += size
        self._device_allocs_made += 1
        self._new_alloc(base, nbytes, d)
        return base

    def _pop_alloc(self, pointer: int, host: bool, call: str) -> _Alloc:
        alloc = self._allocs.get(pointer)
        if alloc is None or (alloc.device is None) != host:
            raise CudaError(call, "CUDA_ERROR_INVALID_VALUE", f"0x{pointer:x} is not allocated")
        self._advance(self._now)  # work already finished may still read it
        del self._allocs[pointer]
        self._bases.remove(pointer)
        alloc.freed = True
        return alloc

    def free_device(self, pointer: int) -> None:
        self._tick()
        alloc = self._pop_alloc(pointer, False, "cuMemFree")
        assert alloc.device is not None
        self._used[alloc.device] -= self._rounded(alloc.size)

    def alloc_host(self, nbytes: int, device: int | None) -> int:
        self._tick()
        if device is not None:
            self._device(device)
        if nbytes <= 0:
            raise UsageError(f"host allocation size must be positive, got {nbytes}")
        f = self.faults
        if (
            f.host_alloc_fail_after is not None
            and self._host_allocs_made >= f.host_alloc_fail_after
        ):
            raise CudaError("cuMemHostAlloc", "CUDA_ERROR_OUT_OF_MEMORY", "injected fault")
        size = self._rounded(nbytes)
        if self._host_used + size > self.model.host_memory_bytes:
            raise CudaError("cuMemHostAlloc", "CUDA_ERROR_OUT_OF_MEMORY")
        base = self._next_host
        self._next_host += -(-size // (2 * MIB)) * 2 * MIB
        self._host_used += size
        self._host_allocs_made += 1
        self._new_alloc(base, nbytes, None)
        return base

    def free_host(self, pointer: int) -> None:
        self._tick()
        alloc = self._pop_alloc(pointer, True, "cuMemFreeHost")
        self._host_used -= self._rounded(alloc.size)

    def _find(self, pointer: int, nbytes: int) -> tuple[_Alloc, int] | None:
        """The live allocation holding [pointer, pointer + nbytes), and the offset."""
        i = bisect.bisect_right(self._bases, pointer) - 1
        if i < 0:
            return None
        alloc = self._allocs[self._bases[i]]
        off = pointer - alloc.base
        if off + max(nbytes, 0) > alloc.size:
            return None
        return alloc, off

    def _host_range(self, pointer: int, nbytes: int, what: str) -> tuple[_Alloc, int]:
        found = self._find(pointer, nbytes)
        if found is None or found[0].device is not None:
            raise SimulationError(
                f"{what} of {nbytes} bytes at 0x{pointer:x}: not inside pinned host memory "
                "(on real hardware this would crash the process)"
            )
        return found

    def host_write(self, pointer: int, data: bytes) -> None:
        self._tick()
        self._advance(self._now)
        if not data:
            return
        alloc, off = self._host_range(pointer, len(data), "host_write")
        self._write(alloc, off, np.frombuffer(bytes(data), dtype=np.uint8))
        # A released flag lets waiting gates go.
        for s in self._streams:
            op = s.cur
            if op is not None and op.kind == "gate" and op.end is None and self._gate_open(op):
                op.end = self._t + self.model.overheads.gate_poll

    def host_read(self, pointer: int, nbytes: int) -> bytes:
        self._tick()
        self._advance(self._now)
        if nbytes <= 0:
            return b""
        alloc, off = self._host_range(pointer, nbytes, "host_read")
        return self._read(alloc, off, nbytes).tobytes()

    # -- content primitives ------------------------------------------------------------------
    def _read(self, alloc: _Alloc, off: int, n: int) -> np.ndarray:
        if alloc.data is not None:
            return alloc.data[off : off + n].copy()
        assert alloc.sym is not None
        return alloc.sym.materialize(off, n, self._patterns)

    def _write(
        self, alloc: _Alloc, off: int, values: np.ndarray, parity: int | None = None
    ) -> None:
        """Write ``values`` at ``off``; with ``parity``, only the bytes of that group parity
        (relative to ``off``)."""
        n = len(values)
        alloc.generation += 1
        if alloc.data is not None:
            if parity is None:
                alloc.data[off : off + n] = values
            else:
                mask = _parity_mask(n, parity)
                alloc.data[off : off + n][mask] = values[mask]
            return
        assert alloc.sym is not None
        desc = _Data(np.array(values, dtype=np.uint8), off)
        for c in self._classes(off, parity):
            alloc.sym.cls[c].assign(off, off + n, desc)

    @staticmethod
    def _classes(off: int, parity: int | None) -> tuple[int, ...]:
        """Allocation-relative parity classes touched by an op at ``off`` of ``parity``."""
        if parity is None:
            return (0, 1)
        if off % GROUP_BYTES:
            raise SimulationError(
                "the simulated backend models split-warp group parity on large buffers only "
                f"at offsets that are multiples of {GROUP_BYTES} bytes (got {off})"
            )
        return (parity ^ ((off // GROUP_BYTES) & 1),)

    def _copy(
        self, dst: _Alloc, doff: int, src: _Alloc, soff: int, n: int, parity: int | None = None
    ) -> None:
        if n <= 0:
            return
        if dst.sym is None or src.sym is None:
            if dst.sym is not None and src.data is not None:
                self._write(dst, doff, src.data[soff : soff + n].copy(), parity)
            else:
                self._write(dst, doff, self._read(src, soff, n), parity)
            return
        # symbolic -> symbolic: move segments
        dst.generation += 1
        s = doff - soff
        if parity is not None:
            pairs = [(self._classes(soff, parity)[0], self._classes(doff, parity)[0])]
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

    def _pattern_key(self, alloc: _Alloc, off: int) -> int:
        """Key of the PATTERN_BYTES pattern stored at ``alloc`` + ``off``."""
        cache_key = (alloc.base, alloc.generation, off)
        key = self._pattern_cache.get(cache_key)
        if key is None:
            values = self._read(alloc, off, PATTERN_BYTES)
            digest = hashlib.blake2b(values.tobytes(), digest_size=16).digest()
            key = self._pattern_keys.get(digest)
            if key is None:
                key = len(self._patterns)
                self._patterns[key] = values
                self._pattern_keys[digest] = key
            self._pattern_cache[cache_key] = key
        return key

    # -- streams and events -----------------------------------------------------------------
    def _next_id(self) -> int:
        self._ids += 1
        return self._ids

    def create_stream(self, device: int) -> _Stream:
        self._tick()
        s = _Stream(self._next_id(), self._device(device, "cuStreamCreate"))
        s.free_at = self._now
        self._streams.append(s)
        return s

    def _stream(self, stream: Any, call: str) -> _Stream:
        if not isinstance(stream, _Stream):
            raise UsageError(f"not a stream of the simulated backend: {stream!r}")
        if stream.destroyed:
            raise CudaError(call, "CUDA_ERROR_INVALID_HANDLE", "the stream was destroyed")
        return stream

    def _event(self, event: Any, call: str) -> _Event:
        if not isinstance(event, _Event):
            raise UsageError(f"not an event of the simulated backend: {event!r}")
        if event.destroyed:
            raise CudaError(call, "CUDA_ERROR_INVALID_HANDLE", "the event was destroyed")
        return event

    def destroy_stream(self, stream: Any) -> None:
        self._tick()
        if isinstance(stream, _Stream) and stream.destroyed:
            return
        s = self._stream(stream, "cuStreamDestroy")
        s.destroyed = True  # pending work still runs, as with the driver
        self._advance(self._now)

    def create_event(self, device: int) -> _Event:
        self._tick()
        e = _Event(self._next_id(), self._device(device, "cuEventCreate"))
        self._events.add(e)
        return e

    def destroy_event(self, event: Any) -> None:
        self._tick()
        if isinstance(event, _Event) and event.destroyed:
            return
        e = self._event(event, "cuEventDestroy")
        e.destroyed = True
        self._events.discard(e)

    def _enqueue(self, s: _Stream, op: _Op) -> None:
        s.queue.append(op)
        self._advance(self._now)

    def record_event(self, event: Any, stream: Any) -> None:
        self._tick()
        e = self._event(event, "cuEventRecord")
        s = self._stream(stream, "cuEventRecord")
        op = _Op("record", self._now, "record")
        op.event = e
        e.last = op
        self._enqueue(s, op)

    def wait_event(self, stream: Any, event: Any) -> None:
        self._tick()
        s = self._stream(stream, "cuStreamWaitEvent")
        e = self._event(event, "cuStreamWaitEvent")
        op = _Op("wait", self._now, "wait")
        op.record = e.last  # CUDA waits on the most recent record at the time of the call
        self._enqueue(s, op)

    def elapsed_seconds(self, start: Any, end: Any) -> float:
        self._tick()
        self._advance(self._now)
        a = self._event(start, "cuEventElapsedTime")
        b = self._event(end, "cuEventElapsedTime")
        for e in (a, b):
            if e.last is None:
                raise CudaError("cuEventElapsedTime", "CUDA_ERROR_INVALID_HANDLE", "never recorded")
            if not e.last.done:
                raise CudaError("cuEventElapsedTime", "CUDA_ERROR_NOT_READY")
        assert a.time is not None and b.time is not None
        return b.time - a.time

    def synchronize(self, stream: Any, timeout_s: float) -> None:
        self._tick()
        s = self._stream(stream, "cuStreamSynchronize")
        limit = self._now + timeout_s
        if not self._advance(limit, until=s.idle):
            self._now = max(self._now, limit)
            raise GateTimeoutError(
                f"a stream on device {s.device} did not finish within {timeout_s:g} s "
                "(a spin gate never released, or the copies are far slower than expected)"
                + (" [simulated hang]" if self.faults.sync_hang else "")
            )
        self._now = max(self._now, self._t)
        if s.error is not None:
            err, s.error = s.error, None
            raise err

    # -- work -------------------------------------------------------------------------------
    def _location(self, pointer: int, nbytes: int, call: str) -> tuple[_Alloc, int]:
        found = self._find(pointer, nbytes)
        if found is None:
            raise CudaError(
                call, "CUDA_ERROR_INVALID_VALUE", f"[0x{pointer:x}, +{nbytes}) is not allocated"
            )
        return found

    def memcpy_async(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        self._tick()
        s = self._stream(stream, "cuMemcpyAsync")
        if nbytes <= 0:
            return
        d_alloc, d_off = self._location(dst, nbytes, "cuMemcpyAsync")
        s_alloc, s_off = self._location(src, nbytes, "cuMemcpyAsync")
        op = _Op("xfer", self._now, "memcpy")
        op.overhead = self.model.overheads.memcpy
        jit = self._jitter()
        staged = False
        if d_alloc.device is not None and s_alloc.device is not None:
            a, b = s_alloc.device, d_alloc.device
            staged = a != b and not (
                self.model.peer_rate(a, b) is not None
                and ((a, b) in self._peer_enabled or (b, a) in self._peer_enabled)
            )
        op.flows = [
            _Flow(res, peak, nbytes, jit)
            for res, peak in [self._path(s_alloc.device, d_alloc.device, "ce", staged)]
        ]
        measured = s.gated and nbytes >= 4096

        def effect() -> None:
            self._check_live(d_alloc, s_alloc)
            self._copy(d_alloc, d_off, s_alloc, s_off, nbytes)
            if measured:
                self._maybe_corrupt(d_alloc, d_off, nbytes)

        op.effect = effect
        self._enqueue(s, op)

    def load_kernels(self, device: int) -> None:
        self._tick()
        self._loaded.add(self._device(device))

    def launch(
        self, kernel: str, grid: int, block: int, args: Sequence[KernelArg], stream: Any
    ) -> None:
        self._tick()
        spec = KERNELS.get(kernel)
        simulate: Callable[..., None] | None = None
        if spec is None:
            module, spec = _plugin_kernel(kernel)
            simulate = module.simulate.get(kernel)
            if simulate is None:
                raise SimulationError(
                    f"kernel {kernel!r} of module {module.name!r} has no simulation, so it "
                    "cannot run on the simulated backend"
                )
        if len(args) != len(spec.params) or any(
            not isinstance(a, KernelArg) or a.ctype != p for a, p in zip(args, spec.params)
        ):
            got = ", ".join(getattr(a, "ctype", type(a).__name__) for a in args)
            raise UsageError(f"{kernel} takes ({', '.join(spec.params)}), got ({got})")
        if not 1 <= int(grid) <= _MAX_GRID:
            raise UsageError(f"grid of {kernel} must be in 1..{_MAX_GRID}, got {grid}")
        if not 1 <= int(block) <= 1024:
            raise UsageError(f"block of {kernel} must be in 1..1024, got {block}")
        s = self._stream(stream, f"cuLaunchKernel({kernel})")
        if s.device not in self._loaded:
            raise UsageError(
                f"kernels are not loaded on device {s.device}; call load_kernels({s.device}) first"
            )
        values = [a.value for a in args]
        if simulate is not None:
            op = self._plugin_op(s, kernel, int(grid), int(block), simulate, values)
        else:
            build = getattr(self, "_k_" + kernel.removeprefix("gpubw_"))
            op = build(s, int(grid), int(block), *values)
        if self.faults.kernel_error == kernel:
            result = self.faults.kernel_error_result

            def failing() -> None:
                raise CudaError("cuStreamSynchronize", result, f"{kernel} failed (injected fault)")

            op.effect = failing
        self._enqueue(s, op)

    # -- kernel models ----------------------------------------------------------------------
    def _plugin_op(
        self,
        s: _Stream,
        kernel: str,
        grid: int,
        block: int,
        simulate: Callable[..., None],
        values: list[int],
    ) -> _Op:
        """A plugin kernel: its simulate function runs when the launch starts (reading and
        writing the memory the backend holds) and reports the launch's traffic, which sets
        its duration."""
        op = _Op("plugin", self._now, kernel)
        jit = self._jitter()

        def run() -> float:
            launch = _PluginLaunch(self, s, grid, block)
            try:
                simulate(launch, *values)
            except GpubwError:
                raise
            except Exception as exc:
                raise PluginError(f"the simulation of kernel {kernel!r} failed: {exc!r}") from exc
            return self.model.overheads.kernel_launch + launch.seconds() / jit

        op.effect = None
        op.prepare = run
        return op

    def _kernel_op(self, name: str, duration: float = 0.0) -> _Op:
        op = _Op("fixed", self._now, name)
        op.duration = self.model.overheads.kernel_launch + duration
        return op

    def _device_view(self, s: _Stream, pointer: int, nbytes: int) -> tuple[_Alloc, int]:
        """Kernel access to [pointer, +nbytes) from ``s``'s device; an address outside live
        memory, or peer memory without peer access, is CUDA_ERROR_ILLEGAL_ADDRESS."""
        found = self._find(pointer, nbytes)
        if found is None:
            raise CudaError(
                "cuStreamSynchronize",
                "CUDA_ERROR_ILLEGAL_ADDRESS",
                f"a kernel on device {s.device} accessed [0x{pointer:x}, +{nbytes}), "
                "which is not allocated",
            )
        alloc = found[0]
        if (
            alloc.device is not None
            and alloc.device != s.device
            and (s.device, alloc.device) not in self._peer_enabled
        ):
            raise CudaError(
                "cuStreamSynchronize",
                "CUDA_ERROR_ILLEGAL_ADDRESS",
                f"a kernel on device {s.device} accessed {alloc.where} without peer access",
            )
        return found

    def _loc(self, pointer: int) -> int | None:
        found = self._find(pointer, 1)
        return None if found is None else found[0].device

    def _k_gate_wait(
        self, s: _Stream, grid: int, block: int, flag: int, timeout_ns: int, status: int
    ) -> _Op:
        op = _Op("gate", self._now, "gpubw_gate_wait")
        op.flag = flag
        op.status = status
        op.duration = timeout_ns * 1e-9
        s.gated = True
        return op

    def _k_copy(
        self, s: _Stream, grid: int, block: int, dst: int, src: int, elements: int, loops: int
    ) -> _Op:
        return self._copy_kernel(s, dst, src, elements, loops, split=False)

    def _k_copy_split_warp(
        self, s: _Stream, grid: int, block: int, dst: int, src: int, elements: int, loops: int
    ) -> _Op:
        return self._copy_kernel(s, dst, src, elements, loops, split=True)

    def _copy_kernel(
        self, s: _Stream, dst: int, src: int, elements: int, loops: int, split: bool
    ) -> _Op:
        nbytes = elements * ELEMENT_BYTES
        op = _Op("xfer", self._now, "gpubw_copy_split_warp" if split else "gpubw_copy")
        op.overhead = self.model.overheads.kernel_launch
        src_loc, dst_loc = self._loc(src), self._loc(dst)
        jit = self._jitter()
        if split:
            odd_elems = (elements // 64) * 32 + max(0, elements % 64 - 32)
            even_elems = elements - odd_elems
            parts = [(src_loc, dst_loc, odd_elems), (dst_loc, src_loc, even_elems)]
        else:
            parts = [(src_loc, dst_loc, elements)]
        for a, b, count in parts:
            res, peak = self._path(a, b, "sm", False)
            op.flows.append(_Flow(res, peak, count * ELEMENT_BYTES * loops, jit))
        measured = s.gated and nbytes >= 4096

        def effect() -> None:
            if nbytes == 0 or loops == 0:
                return
            d_alloc, d_off = self._device_view(s, dst, nbytes)
            s_alloc, s_off = self._device_view(s, src, nbytes)
            if split:
                self._copy(d_alloc, d_off, s_alloc, s_off, nbytes, parity=1)
                self._copy(s_alloc, s_off, d_alloc, d_off, nbytes, parity=0)
            else:
                self._copy(d_alloc, d_off, s_alloc, s_off, nbytes)
            if measured:
                self._maybe_corrupt(d_alloc, d_off, nbytes)

        op.effect = effect
        return op

    def _k_fill(self, s: _Stream, grid: int, block: int, dst: int, pattern: int, words: int) -> _Op:
        nbytes = words * 4
        op = self._kernel_op("gpubw_fill", nbytes / self._single_rate(s.device, self._loc(dst)))

        def effect() -> None:
            if words == 0:
                return
            d_alloc, d_off = self._device_view(s, dst, nbytes)
            p_alloc, p_off = self._device_view(s, pattern, min(words, PATTERN_WORDS) * 4)
            if words < PATTERN_WORDS:
                self._write(d_alloc, d_off, self._read(p_alloc, p_off, nbytes))
                return
            key = self._pattern_key(p_alloc, p_off)
            if d_alloc.data is not None:
                d_alloc.generation += 1
                d_alloc.data[d_off : d_off + nbytes] = np.resize(self._patterns[key], nbytes)
            else:
                assert d_alloc.sym is not None
                d_alloc.generation += 1
                for c in (0, 1):
                    d_alloc.sym.cls[c].assign(d_off, d_off + nbytes, _Pattern(key, d_off))

        op.effect = effect
        return op

    def _k_verify(
        self, s: _Stream, grid: int, block: int, buf: int, pattern: int, words: int, first_bad: int
    ) -> _Op:
        nbytes = words * 4
        op = self._kernel_op("gpubw_verify", nbytes / self._single_rate(self._loc(buf), s.device))

        def effect() -> None:
            r_alloc, r_off = self._device_view(s, first_bad, 8)
            if words == 0:
                return
            b_alloc, b_off = self._device_view(s, buf, nbytes)
            p_alloc, p_off = self._device_view(s, pattern, min(words, PATTERN_WORDS) * 4)
            bad: int | None
            if words < PATTERN_WORDS or b_alloc.data is not None:
                expected = np.resize(
                    self._read(p_alloc, p_off, min(words, PATTERN_WORDS) * 4), nbytes
                )
                actual = self._read(b_alloc, b_off, nbytes)
                diff = np.flatnonzero(actual != expected)
                bad = int(diff[0]) if diff.size else None
            else:
                assert b_alloc.sym is not None
                key = self._pattern_key(p_alloc, p_off)
                bad = b_alloc.sym.first_mismatch(b_off, nbytes, key, self._patterns)
            if bad is None:
                return
            current = int.from_bytes(self._read(r_alloc, r_off, 8).tobytes(), "little")
            word = min(current, bad // 4)
            self._write(r_alloc, r_off, np.frombuffer(word.to_bytes(8, "little"), dtype=np.uint8))

        op.effect = effect
        return op

    def _k_clear_warp_parity(
        self, s: _Stream, grid: int, block: int, buf: int, elements: int, parity: int
    ) -> _Op:
        nbytes = elements * ELEMENT_BYTES
        op = self._kernel_op(
            "gpubw_clear_warp_parity", nbytes / 2 / self._single_rate(s.device, self._loc(buf))
        )

        def effect() -> None:
            if nbytes == 0:
                return
            alloc, off = self._device_view(s, buf, nbytes)
            if alloc.sym is not None:
                alloc.generation += 1
                for c in self._classes(off, parity & 1):
                    alloc.sym.cls[c].assign(off, off + nbytes, _ZERO)
            else:
                self._write(alloc, off, np.zeros(nbytes, dtype=np.uint8), parity=parity & 1)

        op.effect = effect
        return op

    def _k_pointer_chase(
        self, s: _Stream, grid: int, block: int, start: int, steps: int, target: int, sink: int
    ) -> _Op:
        active = target < grid
        loc = self._loc(start)
        lat = self.model.latency
        per_access = lat.host if loc is None else lat.local if loc == s.device else lat.peer
        op = self._kernel_op("gpubw_pointer_chase", steps * per_access if active else 0.0)

        def effect() -> None:
            if not active:
                return
            p = start
            if steps:
                p = self._chase(s, start, steps)
            alloc, off = self._device_view(s, sink, 8)
            self._write(alloc, off, np.frombuffer(p.to_bytes(8, "little"), dtype=np.uint8))

        op.effect = effect
        return op

    def _chase(self, s: _Stream, start: int, steps: int) -> int:
        alloc, _ = self._device_view(s, start, 8)
        key = (alloc.base, alloc.generation, start, steps)
        cached = self._chase_cache.get(key)
        if cached is not None:
            return cached
        p = start
        view: np.ndarray | None = None
        cur: _Alloc | None = None
        for _ in range(steps):
            if cur is None or not (cur.base <= p <= cur.base + cur.size - 8) or (p - cur.base) % 8:
                cur, off = self._device_view(s, p, 8)
                view = (
                    cur.data[: cur.size // 8 * 8].view(np.uint64) if cur.data is not None else None
                )
            off = p - cur.base
            if view is not None and off % 8 == 0:
                p = int(view[off // 8])
            else:
                p = int.from_bytes(self._read(cur, off, 8).tobytes(), "little")
        self._chase_cache[key] = p
        return p

    # -- paths and rates --------------------------------------------------------------------
    def _jitter(self) -> float:
        j = self.model.jitter
        return 1.0 + j * (2.0 * self._rng.random() - 1.0) if j else 1.0

    def _path(
        self, src: int | None, dst: int | None, engine: str, staged: bool
    ) -> tuple[tuple[tuple[Any, ...], ...], float]:
        """Resources and peak rate of moving bytes from ``src`` to ``dst`` (device ordinals,
        None for host memory)."""
        m = self.model
        if src is None and dst is None:
            return (_HOSTMEM,), m.host_links[0].d2h.of(engine)
        if src is None:
            assert dst is not None
            return (("h2d", dst), _HOSTMEM), m.host_links[dst].h2d.of(engine)
        if dst is None:
            return (("d2h", src), _HOSTMEM), m.host_links[src].d2h.of(engine)
        if src == dst:
            return (("mem", src),), m.local_copy.of(engine)
        rate = m.peer_rate(src, dst)
        if rate is None or staged:  # through host memory (CE only; kernels fault earlier)
            peak = min(m.host_links[src].d2h.ce, m.host_links[dst].h2d.ce)
            return (("d2h", src), ("h2d", dst), _HOSTMEM), peak
        return (("tx", src), ("rx", dst)), rate.of(engine)

    def _single_rate(self, src: int | None, dst: int | None) -> float:
        return self._path(src, dst, "sm", False)[1]

    # -- faults -------------------------------------------------------------------------------
    def _check_live(self, *allocs: _Alloc) -> None:
        for a in allocs:
            if a.freed:
                raise CudaError(
                    "cuStreamSynchronize",
                    "CUDA_ERROR_ILLEGAL_ADDRESS",
                    f"copy touched freed {a.where}",
                )

    def _maybe_corrupt(self, alloc: _Alloc, off: int, nbytes: int) -> None:
        f = self.faults
        if not f.corrupt_copy:
            return
        index = self._measured_copies
        self._measured_copies += 1
        if index < f.corrupt_after:
            return
        rel = f.corrupt_offset if f.corrupt_offset is not None else nbytes // 2
        rel = min(max(0, rel), nbytes - 4) // 4 * 4
        word = np.frombuffer(b"\xef\xbe\xad\xde", dtype=np.uint8)  # 0xdeadbeef
        if bytes(self._read(alloc, off + rel, 4)) == word.tobytes():
            word = word ^ np.uint8(0xFF)
        pos = off + rel
        if alloc.data is not None:
            self._write(alloc, pos, word)
        else:
            assert alloc.sym is not None
            alloc.generation += 1
            alloc.sym.cls[(pos // GROUP_BYTES) & 1].assign(pos, pos + 4, _Data(word, pos))

    # -- the device-side simulation -----------------------------------------------------------
    def _tick(self) -> None:
        self._now += self.model.overheads.host_call

    def _gate_open(self, op: _Op) -> bool:
        if self.faults.gate_never_opens:
            return False
        found = self._find(op.flag, 4)
        if found is None:
            return False
        return struct.unpack("<i", self._read(found[0], found[1], 4).tobytes())[0] != 0

    def _start(self, s: _Stream, op: _Op) -> None:
        t = self._t
        if op.kind == "gate":
            op.deadline = t + op.duration
            found = self._find(op.flag, 4)
            if found is None:
                op.end = t
                s.error = CudaError(
                    "cuStreamSynchronize", "CUDA_ERROR_ILLEGAL_ADDRESS", "gate flag not allocated"
                )
            elif self._gate_open(op):
                op.end = t + self.model.overheads.gate_poll
        elif op.kind in ("record", "wait"):
            op.end = t
        elif op.kind == "fixed":
            op.end = t + op.duration
        elif op.kind == "plugin":
            assert op.prepare is not None
            try:
                op.end = t + op.prepare()
            except GpubwError as exc:
                op.end = t
                self._fail(s, exc)
        else:
            op.phase_end = t + op.overhead

    def _op_end(self, op: _Op) -> float | None:
        """When ``op`` will end if nothing changes (flows at their current rate)."""
        if op.kind == "gate":
            return op.end if op.end is not None else op.deadline
        if op.kind != "xfer":
            return op.end
        if self._t < op.phase_end:
            return op.phase_end
        live = [f for f in op.flows if f.remaining > 0]
        if not live:
            return self._t
        return min(self._t + f.remaining / self._rates[id(f)] for f in live)

    def _compute_rates(self, active: list[_Flow]) -> None:
        count: dict[tuple[Any, ...], int] = {}
        for f in active:
            for r in f.resources:
                count[r] = count.get(r, 0) + 1
        rates: dict[int, float] = {}
        cap = self.model.host_memory_bandwidth
        for f in active:
            share = 1.0
            limit = float("inf")
            for r in f.resources:
                if r == _HOSTMEM:
                    if cap is not None:
                        limit = min(limit, cap * f.jitter / count[r])
                    continue
                factor = 1.0
                rev = _reverse(r)
                if rev is not None and count.get(rev, 0):
                    factor = (
                        self.model.host_links[r[1]].bidirectional_factor
                        if r[0] in ("h2d", "d2h")
                        else self.model.peer_bidirectional_factor
                    )
                share = min(share, factor / count[r])
            rates[id(f)] = min(f.peak * share, limit)
        self._rates = rates

    def _finish(self, s: _Stream, op: _Op) -> None:
        op.done = True
        s.cur = None
        s.free_at = self._t
        if op.kind == "gate" and (op.end is None or op.end > op.deadline):
            # Timed out: the kernel reports it through *status, like the real one.
            found = self._find(op.status, 4)
            if found is not None:
                self._write(found[0], found[1], np.frombuffer(struct.pack("<i", 1), np.uint8))
        elif op.kind == "record":
            assert op.event is not None
            if op.event.last is op:
                op.event.time = self._t
        if op.effect is not None:
            try:
                op.effect()
            except GpubwError as exc:
                self._fail(s, exc)

    @staticmethod
    def _fail(s: _Stream, exc: GpubwError) -> None:
        """Record an asynchronous failure; the stream's next synchronize raises it."""
        if s.error is None:
            s.error = exc

    def _advance(self, limit: float, until: Callable[[], bool] | None = None) -> bool:
        """Run the device side up to time ``limit``, or until ``until()`` holds (then stop
        there); returns whether ``until()`` holds at the end."""
        if self.faults.sync_hang:
            return until() if until is not None else False
        self._rates = {}
        self._streams = [s for s in self._streams if not (s.destroyed and s.idle())]
        stalls = 0
        while True:
            self._start_ready()
            if until is not None and until():
                return True
            active = [
                f
                for s in self._streams
                if s.cur is not None and s.cur.kind == "xfer" and self._t >= s.cur.phase_end
                for f in s.cur.flows
                if f.remaining > 0
            ]
            self._compute_rates(active)
            candidates: list[float] = []
            for s in self._streams:
                if s.cur is not None:
                    end = self._op_end(s.cur)
                    if end is not None:
                        candidates.append(end)
                elif s.queue:
                    head = s.queue[0]
                    if head.kind != "wait" or head.record is None or head.record.done:
                        candidates.append(max(s.free_at, head.submit))
            nxt = min(candidates) if candidates else None
            if nxt is None or nxt > limit:
                self._progress(active, max(0.0, limit - self._t))
                self._t = max(self._t, limit)
                return until() if until is not None else False
            if nxt <= self._t:
                stalls += 1
                if stalls > 10_000:  # pragma: no cover - a bug in the model, not in the user
                    raise SimulationError("the simulated device made no progress")
            else:
                stalls = 0
            nxt = max(nxt, self._t)
            self._progress(active, nxt - self._t)
            self._t = nxt
            for s in self._streams:
                op = s.cur
                if op is None:
                    continue
                if op.kind == "xfer":
                    if self._t >= op.phase_end and all(f.remaining <= 0 for f in op.flows):
                        self._finish(s, op)
                else:
                    end = self._op_end(op)
                    if end is not None and end <= self._t:
                        self._finish(s, op)
            self._streams = [s for s in self._streams if not (s.destroyed and s.idle())]

    def _progress(self, active: list[_Flow], dt: float) -> None:
        if dt <= 0:
            return
        for f in active:
            rate = self._rates[id(f)]
            f.remaining -= rate * dt
            # done when what is left is float noise (in bytes, or in time at this rate)
            if f.remaining <= 1e-9 * f.total + 1e-6 or f.remaining <= rate * 1e-11:
                f.remaining = 0.0

    def _start_ready(self) -> None:
        """Start every head op that can start at the current time (zero-length ops chain)."""
        progressed = True
        while progressed:
            progressed = False
            for s in self._streams:
                if s.cur is None and s.queue:
                    head = s.queue[0]
                    if max(s.free_at, head.submit) > self._t:
                        continue
                    if head.kind == "wait" and head.record is not None and not head.record.done:
                        continue
                    s.queue.popleft()
                    s.cur = head
                    self._start(s, head)
                    progressed = True
                op = s.cur
                if op is not None and self._finishes_now(op):
                    self._finish(s, op)
                    progressed = True

    def _finishes_now(self, op: _Op) -> bool:
        if op.kind in ("record", "wait"):
            return True
        if op.kind in ("fixed", "plugin"):
            return op.end is not None and op.end <= self._t
        if op.kind == "xfer":
            return self._t >= op.phase_end and all(f.remaining <= 0 for f in op.flows)
        return False

    # -- teardown ---------------------------------------------------------------------------
    def close(self) -> None:
        """Nothing to release; streams and memory left behind stay visible to
        :meth:`live_allocations` (System.close frees what it handed out)."""
        self.closed = True


def describe(system: SimSystem) -> str:
    """One line naming the modelled system (for reports and ``--simulate`` banners)."""
    devs = system.devices
    names = sorted({d.name for d in devs})
    return f"{system.name}: {len(devs)} x {', '.join(names)} (simulated)"


def iter_pairs(n: int) -> Iterable[tuple[int, int]]:
    """Every ordered pair of distinct devices of ``n``."""
    return ((a, b) for a in range(n) for b in range(n) if a != b)


def _plugin_kernel(kernel: str) -> tuple[Any, Any]:
    """The registered plugin module and spec of ``kernel`` (UsageError if none)."""
    try:
        from gpubw.kernels.modules import find_kernel
    except ImportError:  # pragma: no cover - core without plugin kernel modules
        raise UsageError(f"unknown kernel {kernel!r}") from None
    try:
        return find_kernel(kernel)
    except KeyError:
        raise UsageError(f"unknown kernel {kernel!r}") from None


class _PluginLaunch:
    """One launch of a plugin kernel, as its simulate function sees it
    (:class:`gpubw.kernels.modules.SimulatedLaunch`)."""

    def __init__(self, backend: SimulatedBackend, stream: _Stream, grid: int, block: int) -> None:
        self._backend = backend
        self._stream = stream
        self.device = stream.device
        self.grid = grid
        self.block = block
        self._traffic: dict[tuple[str, int | None], float] = {}

    def read(self, pointer: int, nbytes: int) -> bytes | None:
        alloc, off = self._backend._device_view(self._stream, pointer, nbytes)
        if alloc.data is None:
            return None
        return alloc.data[off : off + nbytes].tobytes()

    def holds(self, pointer: int, nbytes: int) -> bool:
        found = self._backend._find(pointer, nbytes)
        return found is not None and found[0].data is not None

    def write(self, pointer: int, data: bytes) -> None:
        alloc, off = self._backend._device_view(self._stream, pointer, len(data))
        if alloc.data is not None and data:
            self._backend._write(alloc, off, np.frombuffer(bytes(data), dtype=np.uint8))

    def traffic(self, pointer: int, *, read: int = 0, written: int = 0) -> None:
        alloc, _ = self._backend._device_view(self._stream, pointer, 1)
        where = alloc.device
        for direction, nbytes in (("read", read), ("written", written)):
            if nbytes:
                key = (direction, where)
                self._traffic[key] = self._traffic.get(key, 0.0) + nbytes

    def seconds(self) -> float:
        """How long the reported traffic takes: each path at its rate, paths in parallel;
        this device's memory serves reads and writes together at twice its copy rate."""
        model = self._backend.model
        d = self.device
        per_path: dict[Any, float] = {}
        for (direction, where), nbytes in self._traffic.items():
            if where == d:
                key: Any = ("mem", d)
                rate = 2 * model.local_copy.sm
            elif where is None:
                key = (direction, None)
                link = model.host_links[d]
                rate = link.h2d.sm if direction == "read" else link.d2h.sm
            else:
                key = (direction, where)
                src, dst = (where, d) if direction == "read" else (d, where)
                peer = model.peer_rate(src, dst)
                rate = peer.sm if peer is not None else model.host_links[d].h2d.sm
            per_path[key] = per_path.get(key, 0.0) + nbytes / rate
        return max(per_path.values(), default=0.0)
