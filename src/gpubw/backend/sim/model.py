"""The model of a simulated system: devices, host links, peer links, latencies, overheads
(:class:`SimSystem`), and the paths bytes take through it (:func:`path`).

A model is plain data (frozen attrs); :mod:`gpubw.backend.sim.presets` builds the built-in ones and
reads JSON system files into it. Nothing here has state or a clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from gpubw.backend.base import DeviceInfo
from gpubw.backend.sim.faults import Faults

MIB = 1 << 20
GIB = 1 << 30
TIB = 1 << 40

# -- the ranges a model's figures must lie in (docs/simulate.md, "Limits") -----------------
# Past them the virtual clock would stall (a copy shorter than the clock's resolution), a
# copy would outlast every timeout, or simulated address ranges would overlap. NaN and
# infinity are outside every range.
#: bytes/s of any link, copy or memory
MIN_RATE, MAX_RATE = 1e6, 1e15
#: seconds per pointer-chase access
MIN_LATENCY, MAX_LATENCY = 1e-9, 1e-3
#: seconds of a fixed cost
MAX_OVERHEAD = 1e-3
#: a bidirectional factor
MIN_FACTOR = 0.01
#: the rate jitter (a fraction)
MAX_JITTER = 0.5
#: devices of one system
MAX_DEVICES = 1024
#: bytes of one device's memory (each device has its own 1 PiB address range, see
#: :mod:`gpubw.backend.sim.memory`)
MAX_DEVICE_MEMORY = 256 * TIB
#: bytes of pinned host memory
MAX_HOST_MEMORY = 256 * TIB
#: largest allocation held as real bytes
MAX_REAL_BYTES = 256 * MIB


def _finite(value: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _positive(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not (_finite(value) and value > 0):
        raise ValueError(f"{attribute.name} must be a positive finite number, got {value!r}")


def _factor(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not (_finite(value) and MIN_FACTOR <= value <= 1):
        raise ValueError(f"{attribute.name} must be in [{MIN_FACTOR:g}, 1], got {value!r}")


def _in_range(low: float, high: float) -> Any:
    """An attrs validator: a finite number in [low, high]."""

    def check(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
        if not (_finite(value) and low <= value <= high):
            raise ValueError(f"{attribute.name} must be in [{low:g}, {high:g}], got {value!r}")

    return check


_rate = _in_range(MIN_RATE, MAX_RATE)
_latency = _in_range(MIN_LATENCY, MAX_LATENCY)
_overhead = _in_range(0.0, MAX_OVERHEAD)


@attrs.frozen
class Rate:
    """Peak bytes/s of one path, when a copy engine (``ce``) or a copy kernel (``sm``) moves
    the bytes and nothing else uses the path."""

    ce: float = attrs.field(converter=float, validator=_rate)
    sm: float = attrs.field(converter=float, validator=_rate)

    def of(self, engine: str) -> float:
        return self.ce if engine == "ce" else self.sm


def _factor_or_none(instance: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None:
        _factor(instance, attribute, value)


@attrs.frozen
class HostLink:
    """One device's link to host memory: each direction's peak, and the factors the
    directions run at while the other direction is busy too.

    ``bidirectional_factor`` is the device to host direction's (the GPU writing host memory)
    and, unless ``h2d_bidirectional_factor`` says otherwise, the host to device direction's:
    a GPU reading host memory sends its read requests the other way, behind the writes, and
    loses more. ``sm_load_factor`` (None: the direction's own factor) is both directions'
    while an SM kernel loads across the busy link: its loads are few and small, so the
    queued traffic lengthens every round trip (:func:`both_ways_factor`)."""

    h2d: Rate
    d2h: Rate
    bidirectional_factor: float = attrs.field(default=0.9, validator=_factor)
    h2d_bidirectional_factor: float | None = attrs.field(default=None, validator=_factor_or_none)
    sm_load_factor: float | None = attrs.field(default=None, validator=_factor_or_none)
    #: where host memory is the bottleneck, this device's copies get this many times the
    #: share of another's (1: even; a twin fits it where a node's GPUs fared unevenly)
    host_memory_weight: float = attrs.field(default=1.0, validator=_in_range(1e-3, 1e3))


@attrs.frozen
class Latency:
    """Seconds per dependent access of the pointer-chase kernel, by where the memory is."""

    host: float = attrs.field(default=1.2e-6, validator=_latency)
    peer: float = attrs.field(default=0.83e-6, validator=_latency)
    local: float = attrs.field(default=0.6e-6, validator=_latency)


@attrs.frozen
class Overheads:
    """Fixed costs, in seconds: on the device per kernel launch and per CE copy, and on the
    host per facade call (the gap between two enqueues)."""

    kernel_launch: float = attrs.field(default=3e-6, validator=_overhead)
    memcpy: float = attrs.field(default=1.5e-6, validator=_overhead)
    host_call: float = attrs.field(default=1e-6, validator=_overhead)
    gate_poll: float = attrs.field(default=0.5e-6, validator=_overhead)


def _reason(instance: object, attribute: attrs.Attribute[Any], value: str) -> None:
    from gpubw.hw.nvml import THROTTLE_REASONS

    known = [name for _, name in THROTTLE_REASONS]
    if value not in known:
        raise ValueError(f"throttle.reason must be one of {', '.join(known)}, got {value!r}")


def _devices_or_none(value: Iterable[int] | None) -> tuple[int, ...] | None:
    return None if value is None else tuple(int(v) for v in value)


@attrs.frozen
class Throttle:
    """A GPU held down from a moment on (a soak's heat or power cap, modelled): once the
    host's virtual clock passes ``after_s``, copies that involve one of ``devices`` (None:
    every device) run at ``factor``, and the NVML facts show its clocks at ``factor``, the
    ``reason`` active and ``temperature_c``."""

    after_s: float = attrs.field(validator=_in_range(0.0, 1e9))
    factor: float = attrs.field(default=0.7, validator=_factor)
    reason: str = attrs.field(default="hw_thermal_slowdown", validator=_reason)
    devices: tuple[int, ...] | None = attrs.field(default=None, converter=_devices_or_none)
    temperature_c: int = 87

    def holds(self, device: int, now: float) -> bool:
        """Whether ``device`` is held down at virtual time ``now``."""
        return now >= self.after_s and (self.devices is None or device in self.devices)

    def factor_for(self, resources: Iterable[Resource], now: float) -> float:
        """The rate factor of a copy over ``resources`` started at ``now``."""
        held = any(r != HOSTMEM and self.holds(r[1], now) for r in resources)
        return self.factor if held else 1.0


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
    #: ... and at this one while an SM kernel loads across it too (None: the factor above);
    #: see :class:`HostLink`
    peer_sm_load_factor: float | None = attrs.field(default=None, validator=_factor_or_none)
    #: a copy inside one device's memory (bytes counted once)
    local_copy: Rate = attrs.field(factory=lambda: Rate(2094e9, 2080e9))
    #: bytes/s host memory serves to all devices together, reading (None: no shared limit)
    host_memory_bandwidth: float | None = None
    #: ... writing (None: as reading); a mix of both takes its share of each
    host_memory_write_bandwidth: float | None = None
    #: where host memory is the bottleneck, a copy writing it gets this many times the share
    #: of one reading it (posted writes win the memory's arbitration)
    host_memory_write_weight: float = attrs.field(default=1.0, validator=_in_range(1.0, 1e3))
    latency: Latency = attrs.field(factory=Latency)
    overheads: Overheads = attrs.field(factory=Overheads)
    #: each copy's rate is scaled by a factor drawn uniformly from [1 - jitter, 1 + jitter]
    jitter: float = attrs.field(default=0.005, validator=_in_range(0.0, MAX_JITTER))
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
    #: NVML-like facts beyond each device's defaults: {"device": {...}, "devices": {"3":
    #: {...}}} (see :mod:`gpubw.backend.sim.facts`)
    nvml: Mapping[str, Any] = attrs.field(factory=dict)
    #: device index (a string) -> pids of other programs' compute processes on it
    other_processes: Mapping[str, tuple[int, ...]] = attrs.field(factory=dict)
    #: the host's huge pages: (page bytes, free pages); None: the default (facts.py)
    huge_pages: tuple[int, int] | None = None
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
    #: a copy engine copy from or to pageable host memory runs at this share of the pinned rate
    pageable_factor: float = attrs.field(default=0.45, validator=_factor)
    #: a copy between a GPU and host memory on another NUMA node runs at this share
    remote_numa_factor: float = attrs.field(default=0.8, validator=_factor)
    #: GPUs held down from a moment on (None: never): a system file's ``"throttle"``
    throttle: Throttle | None = None
    #: NVML-like facts read after the first reading (the end of a run, between soak
    #: repetitions): {"device": {...}, "devices": {"3": {...}}} over ``nvml``
    nvml_end: Mapping[str, Any] = attrs.field(factory=dict)
    #: devices per NVLink domain, in device order (None: every device in one domain): NVLink,
    #: fabric handles and multicast objects reach only within a domain (GB200 NVL72 racks
    #: joined by InfiniBand); each host lies in one domain
    nvlink_domains: tuple[int, ...] | None = attrs.field(default=None, converter=_hosts_tuple)
    #: a TMA copy inside one device, bytes/s counted once (None: the SM copy's rate)
    local_tma: float | None = attrs.field(default=None, validator=attrs.validators.optional(_rate))
    #: a read-only / write-only kernel over its device's own memory, bytes/s (None: twice the
    #: SM copy's rate, as a copy reads and writes each byte)
    local_read: float | None = attrs.field(default=None, validator=attrs.validators.optional(_rate))
    local_write: float | None = attrs.field(
        default=None, validator=attrs.validators.optional(_rate)
    )
    #: the report a twin was built from (a :class:`gpubw.backend.sim.twin.Twin`); None for a
    #: preset or a system file
    origin: Any = None

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
        if n > MAX_DEVICES:
            raise ValueError(f"a simulated system has at most {MAX_DEVICES} devices, got {n}")
        for key in ("host_memory_bandwidth", "host_memory_write_bandwidth"):
            hmb = getattr(self, key)
            if hmb is not None and not (_finite(hmb) and MIN_RATE <= hmb <= MAX_RATE):
                raise ValueError(
                    f"{key} must be in [{MIN_RATE:g}, {MAX_RATE:g}] bytes/s "
                    f"(or null for no limit), got {hmb!r}"
                )
        smallest = min(d.memory_bytes for d in self.devices)
        for d in self.devices:
            if not 0 < d.memory_bytes <= MAX_DEVICE_MEMORY:
                raise ValueError(
                    f"device {d.ordinal}: memory_bytes must be in 1..{MAX_DEVICE_MEMORY}, "
                    f"got {d.memory_bytes}"
                )
        if not 0 <= self.reserved_bytes < smallest:
            raise ValueError(
                f"reserved_bytes must be at least 0 and less than the smallest device's "
                f"memory ({smallest} bytes), got {self.reserved_bytes}"
            )
        if not 0 < self.host_memory_bytes <= MAX_HOST_MEMORY:
            raise ValueError(
                f"host_memory_bytes must be in 1..{MAX_HOST_MEMORY}, got {self.host_memory_bytes}"
            )
        if not 0 <= self.real_bytes_limit <= MAX_REAL_BYTES:
            raise ValueError(
                f"real_bytes_limit must be in 0..{MAX_REAL_BYTES}, got {self.real_bytes_limit}"
            )
        if self.hosts is not None and (
            not self.hosts or any(h < 1 for h in self.hosts) or sum(self.hosts) != n
        ):
            raise ValueError(
                f"hosts must be device counts >= 1 per host adding up to {n}, got "
                f"{list(self.hosts)}"
            )
        self._check_domains()
        unknown = sorted(set(self.handle_kinds) - set(_HANDLE_KINDS))
        if unknown:
            raise ValueError(
                f"unknown handle kind {unknown[0]!r}; kinds are {', '.join(_HANDLE_KINDS)}"
            )
        if self.multicast_rate is not None and not self.multicast_rate > 0:
            raise ValueError("multicast_rate must be positive (or null for the peer rate)")

    def _check_domains(self) -> None:
        """ValueError unless ``nvlink_domains`` splits the devices into whole hosts and no
        peer link crosses two domains."""
        n, sizes = len(self.devices), self.nvlink_domains
        if sizes is None:
            return
        if not sizes or any(s < 1 for s in sizes) or sum(sizes) != n:
            raise ValueError(
                f"nvlink_domains must be device counts >= 1 per domain adding up to {n}, got "
                f"{list(sizes)}"
            )
        for host in range(len(self.host_sizes)):
            devices = self.host_devices(host)
            if len({self.domain_of(d) for d in devices}) > 1:
                raise ValueError(
                    f"host {host} (devices {devices[0]}-{devices[-1]}) spans several NVLink "
                    "domains; a domain holds whole hosts"
                )
        for a, b in self.peers:
            if self.domain_of(a) != self.domain_of(b):
                raise ValueError(
                    f"peer pair ({a}, {b}) crosses NVLink domains {self.domain_of(a)} and "
                    f"{self.domain_of(b)}; NVLink reaches only within a domain"
                )

    @property
    def domain_sizes(self) -> tuple[int, ...]:
        """Devices per NVLink domain (one domain holding every device unless
        ``nvlink_domains`` says more)."""
        return self.nvlink_domains if self.nvlink_domains is not None else (len(self.devices),)

    def domain_of(self, device: int) -> int:
        """The NVLink domain (an index) of (global) device ``device``."""
        return _index_of(self.domain_sizes, device, len(self.devices))

    def domain_name(self, device: int) -> str:
        """The name of (global) device ``device``'s NVLink domain, as a backend reports it:
        ``nvl<index>``."""
        return f"nvl{self.domain_of(device)}"

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
        return _index_of(self.host_sizes, device, len(self.devices))

    def peer_rate(self, src: int, dst: int) -> Rate | None:
        """The link used by a copy from ``src``'s memory to ``dst``'s (either direction's
        entry), or None if the two devices have no peer link."""
        return self.peers.get((src, dst)) or self.peers.get((dst, src))


def _index_of(sizes: Iterable[int], device: int, n: int) -> int:
    """The group (host, domain) of ``sizes`` consecutive devices that holds ``device``."""
    start = 0
    for index, size in enumerate(sizes):
        if 0 <= device < start + size:
            return index
        start += size
    raise ValueError(f"no device {device}; devices are 0..{n - 1}")


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


def both_ways_factor(model: SimSystem, resource: Resource, loads: bool) -> float:
    """The factor link direction ``resource`` runs at while its other direction is busy too;
    ``loads``: an SM kernel loads across the link (either direction)."""
    kind, device = resource[0], resource[1]
    if kind in ("h2d", "d2h"):
        link = model.host_links[device]
        own = link.bidirectional_factor
        if kind == "h2d" and link.h2d_bidirectional_factor is not None:
            own = link.h2d_bidirectional_factor
        return link.sm_load_factor if loads and link.sm_load_factor is not None else own
    if loads and model.peer_sm_load_factor is not None:
        return model.peer_sm_load_factor
    return model.peer_bidirectional_factor


def local_seconds(model: SimSystem, read: float, written: float) -> float:
    """How long a device's memory takes to serve ``read`` and ``written`` bytes to one of
    its kernels. Reads alone run at ``local_read``, writes alone at ``local_write`` (both:
    twice the SM copy's rate where None); mixed, the bus turns round between them, which
    costs each byte of the smaller part the time that makes an even mix (a copy, which
    reads and writes each byte) run at ``local_copy.sm``."""
    mixed = 1.0 / model.local_copy.sm
    to_read = 1.0 / (model.local_read or 2 * model.local_copy.sm)
    to_write = 1.0 / (model.local_write or 2 * model.local_copy.sm)
    turn = max(0.0, (mixed - to_read - to_write) / 2)
    return read * to_read + written * to_write + 2 * min(read, written) * turn


def host_memory_cost(model: SimSystem, resources: Iterable[Resource]) -> float:
    """Bytes of host memory's reading budget (``host_memory_bandwidth``) one byte of a flow
    over ``resources`` takes: 1 for a read (host to device), the ratio of the reading to the
    writing bandwidth for a write (device to host), both for a copy staged through host
    memory or from host memory to host memory."""
    kinds = {r[0] for r in resources}
    cap, write = model.host_memory_bandwidth, model.host_memory_write_bandwidth
    write_cost = 1.0 if cap is None or write is None else cap / write
    writes = "d2h" in kinds or "h2d" not in kinds
    reads = "h2d" in kinds or "d2h" not in kinds
    return (write_cost if writes else 0.0) + (1.0 if reads else 0.0)


def link_weight(model: SimSystem, resources: Iterable[Resource]) -> float:
    """The host-memory weight of the device whose host link a flow over ``resources`` uses
    (:attr:`HostLink.host_memory_weight`; 1 for none)."""
    for kind, *rest in resources:
        if kind in ("h2d", "d2h"):
            return model.host_links[rest[0]].host_memory_weight
    return 1.0


def writes_host(resources: Iterable[Resource]) -> bool:
    """Whether a flow over ``resources`` writes host memory (device to host, staged, host to
    host): it gets the write weight where host memory is the bottleneck."""
    kinds = {r[0] for r in resources}
    return HOSTMEM[0] in kinds and ("d2h" in kinds or "h2d" not in kinds)


def path(
    model: SimSystem, src: int | None, dst: int | None, engine: str, staged: bool
) -> tuple[tuple[Resource, ...], float]:
    """Resources and peak rate of moving bytes from ``src`` to ``dst`` (device ordinals,
    None for host memory) with ``engine`` ("ce", "sm", or "tma": the SM rates but inside one
    device ``local_tma`` where set); ``staged``: a device-to-device copy goes through host
    memory even where a peer link exists."""
    m = model
    if src is None and dst is None:
        return (HOSTMEM,), m.host_links[0].d2h.of(engine)
    if src is None:
        assert dst is not None
        return (("h2d", dst), HOSTMEM), m.host_links[dst].h2d.of(engine)
    if dst is None:
        return (("d2h", src), HOSTMEM), m.host_links[src].d2h.of(engine)
    if src == dst:
        return (("mem", src),), (engine == "tma" and m.local_tma) or m.local_copy.of(engine)
    rate = m.peer_rate(src, dst)
    if rate is None or staged:  # through host memory (CE only; kernels fault earlier)
        peak = min(m.host_links[src].d2h.ce, m.host_links[dst].h2d.ce)
        return (("d2h", src), ("h2d", dst), HOSTMEM), peak
    return (("tx", src), ("rx", dst)), rate.of(engine)


def single_rate(model: SimSystem, src: int | None, dst: int | None) -> float:
    """Peak rate of a kernel moving bytes from ``src`` to ``dst`` alone on its path."""
    return path(model, src, dst, "sm", False)[1]
