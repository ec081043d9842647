"""The model of a simulated system: devices, host links, peer links, latencies, overheads
(:class:`SimSystem`), and the paths bytes take through it (:func:`path`).

A model is plain data (frozen attrs); :mod:`gpubw.backend.presets` builds the built-in ones and
reads JSON system files into it. Nothing here has state or a clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from gpubw.backend.base import DeviceInfo
from gpubw.backend.sim.faults import Faults

MIB = 1 << 20
GIB = 1 << 30


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


def _hosts_tuple(value: Iterable[int] | None) -> tuple[int, ...] | None:
    return None if value is None else tuple(int(v) for v in value)


def _kinds(value: Iterable[str]) -> frozenset[str]:
    return frozenset(value)


#: Handle kinds a model may offer (gpubw.backend.base.HANDLE_KINDS).
_HANDLE_KINDS = ("fabric", "posix-fd", "ipc")


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
    #: devices per host, in device order (None: every device on one host); ranks of a
    #: simulated multinode run see their host's devices only, with host-local ordinals
    hosts: tuple[int, ...] | None = attrs.field(default=None, converter=_hosts_tuple)
    #: the kinds of shareable memory handle that work here ("fabric" needs IMEX)
    handle_kinds: frozenset[str] = attrs.field(
        default=frozenset({"posix-fd", "ipc"}), converter=_kinds
    )
    #: bytes/s of stores to an NVLink multicast object from one device (None: the SM rate
    #: of that device's peer link)
    multicast_rate: float | None = None
    #: faults of single simulated ranks, by rank (a system file's ``"rank_faults"``); a rank
    #: not listed gets ``faults``
    rank_faults: Mapping[int, Faults] = attrs.field(factory=dict)

    def faults_of_rank(self, rank: int | None) -> Faults | None:
        """The faults simulated rank ``rank`` runs with (None: none given)."""
        if rank is not None and rank in self.rank_faults:
            return self.rank_faults[rank]
        return self.faults

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
        if self.hosts is not None and (
            not self.hosts or any(h < 1 for h in self.hosts) or sum(self.hosts) != n
        ):
            raise ValueError(
                f"hosts must be device counts >= 1 per host adding up to {n}, got "
                f"{list(self.hosts)}"
            )
        unknown = sorted(set(self.handle_kinds) - set(_HANDLE_KINDS))
        if unknown:
            raise ValueError(
                f"unknown handle kind {unknown[0]!r}; kinds are {', '.join(_HANDLE_KINDS)}"
            )
        if self.multicast_rate is not None and not self.multicast_rate > 0:
            raise ValueError("multicast_rate must be positive (or null for the peer rate)")

    @property
    def host_sizes(self) -> tuple[int, ...]:
        """Devices per host (one host holding every device unless ``hosts`` says more)."""
        return self.hosts if self.hosts is not None else (len(self.devices),)

    def host_devices(self, host: int) -> tuple[int, ...]:
        """The (global) ordinals of host ``host``'s devices; ValueError for no such host."""
        sizes = self.host_sizes
        if isinstance(host, bool) or not isinstance(host, int) or not 0 <= host < len(sizes):
            raise ValueError(f"no host {host!r}; hosts are 0..{len(sizes) - 1}")
        start = sum(sizes[:host])
        return tuple(range(start, start + sizes[host]))

    def host_of(self, device: int) -> int:
        """The host holding (global) device ``device``."""
        start = 0
        for host, size in enumerate(self.host_sizes):
            if device < start + size:
                return host
            start += size
        raise ValueError(f"no device {device}; devices are 0..{len(self.devices) - 1}")

    def peer_rate(self, src: int, dst: int) -> Rate | None:
        """The link used by a copy from ``src``'s memory to ``dst``'s (either direction's
        entry), or None if the two devices have no peer link."""
        return self.peers.get((src, dst)) or self.peers.get((dst, src))


def iter_pairs(n: int) -> Iterable[tuple[int, int]]:
    """Every ordered pair of distinct devices of ``n``."""
    return ((a, b) for a in range(n) for b in range(n) if a != b)


# -- paths ----------------------------------------------------------------------------------
#: A resource that flows share: ("h2d"|"d2h", device) one direction of a host link,
#: ("tx"|"rx", device) one side of a device's peer links, ("mem", device) a device's memory,
#: HOSTMEM all host memory.
Resource = tuple[Any, ...]
HOSTMEM: Resource = ("hostmem",)
_REVERSE = {"h2d": "d2h", "d2h": "h2d", "tx": "rx", "rx": "tx"}


def reverse(resource: Resource) -> Resource | None:
    """The other direction of a link resource (None for memories)."""
    kind = resource[0]
    return (_REVERSE[kind], resource[1]) if kind in _REVERSE else None


def path(
    model: SimSystem, src: int | None, dst: int | None, engine: str, staged: bool
) -> tuple[tuple[Resource, ...], float]:
    """Resources and peak rate of moving bytes from ``src`` to ``dst`` (device ordinals,
    None for host memory) with ``engine`` ("ce" or "sm"); ``staged``: a device-to-device copy
    goes through host memory even where a peer link exists."""
    m = model
    if src is None and dst is None:
        return (HOSTMEM,), m.host_links[0].d2h.of(engine)
    if src is None:
        assert dst is not None
        return (("h2d", dst), HOSTMEM), m.host_links[dst].h2d.of(engine)
    if dst is None:
        return (("d2h", src), HOSTMEM), m.host_links[src].d2h.of(engine)
    if src == dst:
        return (("mem", src),), m.local_copy.of(engine)
    rate = m.peer_rate(src, dst)
    if rate is None or staged:  # through host memory (CE only; kernels fault earlier)
        peak = min(m.host_links[src].d2h.ce, m.host_links[dst].h2d.ce)
        return (("d2h", src), ("h2d", dst), HOSTMEM), peak
    return (("tx", src), ("rx", dst)), rate.of(engine)


def single_rate(model: SimSystem, src: int | None, dst: int | None) -> float:
    """Peak rate of a kernel moving bytes from ``src`` to ``dst`` alone on its path."""
    return path(model, src, dst, "sm", False)[1]
