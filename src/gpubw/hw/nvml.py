"""Facts about the node from NVML: the first things to check when a GPU or a link is slow.

Per device: PCIe generation and width (current and maximum: a link trained at Gen4 x8 in a
Gen5 x16 slot halves or quarters host bandwidth), NVLink links active and their speed, the
GPUs reachable over NVLink, ECC mode and volatile error counts, persistence mode, MIG mode,
clocks, power and the reasons the clocks are held down, VBIOS version, serial and UUID, the
compute processes on the GPU (another job on "your" GPU halves your figures), the PCI device
(product) id, and the health counters (:mod:`gpubw.hw.counters`: PCIe replays and AER, NVLink
CRC/replay/recovery errors per link, remapped rows, retired pages). Per node: the driver and
NVML versions, and whether Confidential Computing is on (host <-> device copies then go
through encrypted bounce buffers; :data:`CC_BOUNCE_BUFFERS`).

Read through ``nvidia-ml-py`` (module ``pynvml``, the maintained binding; a dependency of
gpubw) by :mod:`gpubw.hw.nvml_read` (one :class:`gpubw.hw.nvml_read.Session` per run),
which imports it only when it first queries, so ``gpubw -l`` never loads it. Nothing raises
for a missing library, a missing driver or a query a GPU does not support:
:class:`NodeFacts` says ``available=False`` with the reason, and each :class:`DeviceFacts`
lists the queries that failed in ``unavailable``.

A caveat worth knowing: an idle GPU drops its PCIe link to a low generation to save power, so
``pcie.gen`` below ``pcie.max_gen`` means little unless it was read while copies ran; a width
below the maximum is a real fault (a card not seated well, a riser, a slot wired x8).

NVML numbers GPUs in PCI bus order, which need not be CUDA's order (CUDA_DEVICE_ORDER,
CUDA_VISIBLE_DEVICES): :func:`match_devices` pairs them by PCI bus id.

The simulated backend builds the same facts from a dict (:func:`facts_from_dict`), which can
describe a fault such as a downtrained link.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from gpubw.hw.counters import WORDS, rise_words, risen_links, rises

#: NVML's clock event ("throttle") reason bits, by name
THROTTLE_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)
#: reasons that lower a busy GPU's clocks (idle and sync boost are not faults)
SLOWDOWN_REASONS = frozenset(
    {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
     "hw_power_brake_slowdown"}
)  # fmt: skip
INSTALL_HINT = (
    "it is a dependency of gpubw: install it with pip install nvidia-ml-py (or reinstall gpubw)"
)


def _counter_dict(value: Mapping[str, int]) -> dict[str, int]:
    """A copy of the counters (the facts never share a caller's dict)."""
    return dict(value)


def _below(now: int | None, most: int | None) -> bool:
    return now is not None and most is not None and now < most


@attrs.frozen
class PcieLink:
    gen: int | None
    width: int | None
    max_gen: int | None
    max_width: int | None

    @property
    def width_degraded(self) -> bool:
        """Fewer lanes than the link can have: a real fault, whatever the load."""
        return _below(self.width, self.max_width)

    @property
    def gen_below_max(self) -> bool:
        """A lower generation than possible (normal at idle, a fault under load)."""
        return _below(self.gen, self.max_gen)

    @property
    def downtrained(self) -> bool:
        return self.width_degraded or self.gen_below_max

    def __str__(self) -> str:
        def part(gen: int | None, width: int | None) -> str:
            return f"Gen{gen if gen is not None else '?'} x{width if width is not None else '?'}"

        now = f"PCIe {part(self.gen, self.width)}"
        if self.downtrained:
            return f"{now}, max {part(self.max_gen, self.max_width)}"
        return now


@attrs.frozen
class NvLinkState:
    links_active: int
    links_total: int  # links the GPU has (those NVML answered for)
    speed_mbps: int | None = None  # per link, as NVML reports it (MB/s)
    versions: tuple[int, ...] = ()  # NVLink version of each active link
    peers: tuple[int, ...] = ()  # NVML indexes of the GPUs reachable over NVLink
    #: per link: its error counts (gpubw.hw.counters.NVLINK_KINDS: CRC flit, CRC data,
    #: replay, recovery; None where NVML cannot say); () when not read
    errors: tuple[tuple[int | None, ...], ...] = ()

    def __str__(self) -> str:
        speed = f" at {self.speed_mbps / 1000:g} GB/s" if self.speed_mbps else ""
        return f"NVLink {self.links_active}/{self.links_total} links active{speed}"


@attrs.frozen
class Clocks:
    sm_mhz: int | None = None
    memory_mhz: int | None = None
    sm_max_mhz: int | None = None
    memory_max_mhz: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: int | None = None
    reasons: tuple[str, ...] = ()  # THROTTLE_REASONS names active now

    @property
    def slowed(self) -> tuple[str, ...]:
        """The active reasons that lower a busy GPU's clocks (power cap, thermal, ...)."""
        return tuple(r for r in self.reasons if r in SLOWDOWN_REASONS)


@attrs.frozen
class GpuProcess:
    pid: int
    used_bytes: int | None = None


@attrs.frozen
class DeviceFacts:
    index: int  # NVML index (PCI order), not necessarily the CUDA ordinal
    name: str = ""
    uuid: str = ""
    serial: str = ""
    pci_bus_id: str = ""  # normalised: "0000:1b:00.0"
    vbios: str = ""
    pcie: PcieLink | None = None
    nvlink: NvLinkState | None = None
    ecc_enabled: bool | None = None
    ecc_pending: bool | None = None  # mode after the next reset
    ecc_volatile_corrected: int | None = None
    ecc_volatile_uncorrected: int | None = None
    persistence_mode: bool | None = None
    mig_enabled: bool | None = None
    clocks: Clocks | None = None
    processes: tuple[GpuProcess, ...] = ()
    #: the PCI device id (product) of the GPU, e.g. 0x2335 for an H200 SXM; None: unknown
    pci_device_id: int | None = None
    #: health counters (gpubw.hw.counters): name -> count; only those that could be read
    counters: dict[str, int] = attrs.field(factory=dict, converter=_counter_dict, hash=False)
    #: (fact, why) for each query that failed (not supported, no permission, ...)
    unavailable: tuple[tuple[str, str], ...] = ()

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(p.pid for p in self.processes)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON data (e.g. for a device record's ``nvml`` entry)."""
        d = attrs.asdict(self, recurse=True)
        d["unavailable"] = {k: v for k, v in self.unavailable}
        return d


#: what nvbandwidth v0.10 prints when it finds Confidential Computing on
CC_BOUNCE_BUFFERS = "Detected platform using encrypted bounce buffers for CPU<->GPU traffic."


@attrs.frozen
class NodeFacts:
    available: bool
    reason: str = ""  # why not, when not available
    simulated: bool = False
    driver_version: str = ""
    nvml_version: str = ""
    cuda_driver_version: int | None = None
    devices: tuple[DeviceFacts, ...] = ()
    #: Confidential Computing on (NVML's CC feature enabled: CPU <-> GPU traffic goes
    #: through encrypted bounce buffers); None: unknown (an old driver or module, no NVML)
    confidential_compute: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        d = attrs.asdict(self, recurse=False)
        d["devices"] = [x.as_dict() for x in self.devices]
        return d


def normalise_bus_id(bus_id: str | bytes) -> str:
    """``00000000:1B:00.0`` (NVML) or ``0000:1b:00.0`` (CUDA) -> ``0000:1b:00.0``."""
    text = bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)
    text = text.strip().lower()
    parts = text.split(":")
    if len(parts) == 3:
        try:
            return f"{int(parts[0], 16):04x}:{parts[1]}:{parts[2]}"
        except ValueError:
            return text
    return text


# -- the simulated counterpart --------------------------------------------------------------


def facts_from_dict(spec: Mapping[str, Any]) -> NodeFacts:
    """Facts of a modelled node, for the simulated backend. ``spec``::

        {"driver_version": "580.00 (simulated)",
         "confidential_compute": true,     # optional; absent: unknown
         "devices": [                      # one per GPU, in order; every key optional
            {"name": "NVIDIA H200", "uuid": "GPU-...", "pci_bus_id": "0000:18:00.0",
             "pcie": {"gen": 5, "width": 16, "max_gen": 5, "max_width": 16},
             "pcie": "gen4 x8 of gen5 x16",   # the same as a string: a downtrained link
             "nvlink": {"links_active": 18, "links_total": 18, "speed_mbps": 26562,
                        "peers": [1, 2]},
             "ecc_enabled": true, "ecc_volatile_corrected": 0, "ecc_volatile_uncorrected": 0,
             "persistence_mode": true, "mig_enabled": false,
             "clocks": {"sm_mhz": 1980, "reasons": ["sw_power_cap"]},
             "processes": [4242]}]}

    Unknown keys are a ValueError naming them (a typo in a model must not pass silently)."""
    devices = []
    for i, d in enumerate(spec.get("devices", ())):
        d = dict(d)
        fields = {f.name for f in attrs.fields(DeviceFacts)} - {"index", "unavailable"}
        unknown = set(d) - fields
        if unknown:
            raise ValueError(
                f"device {i}: unknown fact(s) {sorted(unknown)}; allowed: {sorted(fields)}"
            )
        pcie = d.pop("pcie", None)
        nvlink = d.pop("nvlink", None)
        clocks = d.pop("clocks", None)
        procs = d.pop("processes", ())
        counters = _counters_from(d.pop("counters", {}))
        devices.append(
            DeviceFacts(
                index=i,
                counters=counters,
                pcie=parse_pcie(pcie) if pcie is not None else None,
                nvlink=None if nvlink is None else _nvlink_from(nvlink),
                clocks=None if clocks is None else _clocks_from(clocks),
                processes=tuple(
                    GpuProcess(p) if isinstance(p, int) else GpuProcess(**p) for p in procs
                ),
                **_plain(d),
            )
        )
    return NodeFacts(
        available=True,
        simulated=True,
        driver_version=str(spec.get("driver_version", "")),
        nvml_version=str(spec.get("nvml_version", "")),
        cuda_driver_version=spec.get("cuda_driver_version"),
        devices=tuple(devices),
        confidential_compute=spec.get("confidential_compute"),
    )


def _counters_from(d: Any) -> dict[str, int]:
    """Health counters from a dict: known names (gpubw.hw.counters), whole numbers >= 0."""
    if not isinstance(d, Mapping):
        raise ValueError(f"counters must be an object of counter names and counts, got {d!r}")
    unknown = sorted(set(d) - set(WORDS))
    if unknown:
        raise ValueError(f"unknown counter(s) {unknown}; allowed: {sorted(WORDS)}")
    for name, value in d.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"counters.{name} must be a whole number >= 0, got {value!r}")
    return dict(d)


def _plain(d: dict[str, Any]) -> dict[str, Any]:
    if "pci_bus_id" in d:
        d["pci_bus_id"] = normalise_bus_id(str(d["pci_bus_id"]))
    return d


def _nvlink_from(d: Mapping[str, Any]) -> NvLinkState:
    d = dict(d)
    d["versions"] = tuple(d.get("versions", ()))
    d["peers"] = tuple(d.get("peers", ()))
    d["errors"] = tuple(tuple(row) for row in d.get("errors", ()))
    d.setdefault("links_total", d.get("links_active", 0))
    return NvLinkState(**d)


def _clocks_from(d: Mapping[str, Any]) -> Clocks:
    d = dict(d)
    reasons = tuple(d.get("reasons", ()))
    known = {name for _, name in THROTTLE_REASONS}
    if set(reasons) - known:
        raise ValueError(f"unknown clock reason(s) {sorted(set(reasons) - known)}: {sorted(known)}")
    d["reasons"] = reasons
    return Clocks(**d)


def parse_pcie(value: Mapping[str, Any] | str) -> PcieLink:
    """A PCIe link from a dict or from words: ``"gen5 x16"`` (at its maximum) or ``"gen4 x8
    of gen5 x16"`` (trained below its maximum)."""
    if isinstance(value, Mapping):
        return PcieLink(value.get("gen"), value.get("width"), value.get("max_gen"),
                        value.get("max_width"))  # fmt: skip
    words = str(value).lower().replace(",", " ").split()
    try:
        if len(words) == 2:
            now = mx = words
        elif len(words) == 5 and words[2] in ("of", "max"):
            now, mx = words[:2], words[3:]
        else:
            raise ValueError
        gen, width = int(now[0].removeprefix("gen")), int(now[1].removeprefix("x"))
        max_gen, max_width = int(mx[0].removeprefix("gen")), int(mx[1].removeprefix("x"))
    except ValueError:
        raise ValueError(
            f"PCIe link {value!r}: expected 'genG xW' or 'genG xW of genG xW' "
            "(e.g. 'gen4 x8 of gen5 x16')"
        ) from None
    return PcieLink(gen, width, max_gen, max_width)


def device_facts(record: Mapping[str, Any], key: str = "nvml") -> DeviceFacts | None:
    """The facts kept in a report's device record (``nvml``: at the start of the run,
    ``nvml_end``: at its end; :meth:`DeviceFacts.as_dict`'s form) as DeviceFacts; None when
    the record has none (or they do not parse)."""
    d = record.get(key)
    if not isinstance(d, Mapping):
        return None
    spec = {k: v for k, v in d.items() if k not in ("index", "unavailable")}
    try:
        f = facts_from_dict({"devices": [spec]}).devices[0]
    except (TypeError, ValueError):
        return None
    gone = d.get("unavailable") or {}
    return attrs.evolve(
        f,
        index=int(d.get("index", 0)),
        unavailable=tuple((str(k), str(v)) for k, v in gone.items()),
    )


# -- using the facts ------------------------------------------------------------------------


def match_devices(facts: NodeFacts, devices: Sequence[Mapping[str, Any]]) -> dict[int, DeviceFacts]:
    """CUDA ordinal -> its NVML facts, paired by PCI bus id (then UUID); a device NVML does not
    know is left out."""
    by_bus = {f.pci_bus_id: f for f in facts.devices if f.pci_bus_id}
    by_uuid = {f.uuid: f for f in facts.devices if f.uuid}
    out = {}
    for pos, d in enumerate(devices):
        ordinal = int(d.get("ordinal", pos))
        f = by_bus.get(normalise_bus_id(str(d.get("pci_bus_id", "")))) or by_uuid.get(
            str(d.get("uuid", ""))
        )
        if f is not None:
            out[ordinal] = f
    return out


def peer_link_types(
    facts: NodeFacts, devices: Sequence[Mapping[str, Any]] | None = None
) -> dict[tuple[int, int], str]:
    """(i, j) -> "nvlink" or "pcie" for every ordered pair of distinct GPUs, from NVML's NVLink
    peer status; indexes are CUDA ordinals when ``devices`` (the report's device records) is
    given, else NVML indexes. Feeds :func:`gpubw.acceptance.expect.evaluate`'s ``peer_links``."""
    if devices is None:
        ordinal_of = {f.index: f.index for f in facts.devices}
    else:
        ordinal_of = {f.index: o for o, f in match_devices(facts, devices).items()}
    by_index = {f.index: f for f in facts.devices}
    out = {}
    for a, oa in ordinal_of.items():
        for b, ob in ordinal_of.items():
            if a == b:
                continue
            nv = by_index[a].nvlink
            out[(oa, ob)] = "nvlink" if nv is not None and b in nv.peers else "pcie"
    return out


def suspects(
    device: DeviceFacts, link: str | None = None, own_pid: int | None = None
) -> tuple[str, ...]:
    """Facts that can explain a slow figure on ``device``, in words, most telling first, for a
    verdict on a cell of link type ``link`` (gpubw.acceptance.expect's "host", "peer",
    "device", ...;
    None: every fact). E.g. ``("PCIe Gen4 x8, max Gen5 x16", "clocks held down: sw_power_cap")``.
    ``own_pid``: gpubw's process, not counted among the other processes."""
    out = []
    pcie = device.pcie
    if pcie is not None and pcie.downtrained and link in (None, "host", "peer"):
        out.append(str(pcie))
    nv = device.nvlink
    if nv is not None and nv.links_active < nv.links_total and link in (None, "peer", "device"):
        out.append(str(nv))
    if device.clocks is not None and device.clocks.slowed:
        out.append(f"clocks held down: {', '.join(device.clocks.slowed)}")
    if device.mig_enabled:
        out.append("MIG mode is on")
    others = [p for p in device.pids if p != own_pid]
    if others:
        out.append(f"other processes on the GPU: pid {', '.join(map(str, others))}")
    if device.persistence_mode is False:
        out.append("persistence mode is off")
    if device.ecc_volatile_uncorrected:
        out.append(f"{device.ecc_volatile_uncorrected} volatile uncorrected ECC errors")
    for name in ("remap_pending", "remap_failed", "retired_pages_pending"):
        if device.counters.get(name):
            out.append(WORDS[name])
    return tuple(out)


def counter_suspects(start: DeviceFacts, end: DeviceFacts) -> tuple[str, ...]:
    """The health counters that rose between two readings of one device, in words (the
    NVLink links whose counts rose named too), e.g. ``("NVLink replays rose from 0 to 14
    during the run (links 2, 5)",)``."""
    out = []
    links: tuple[int, ...] = ()
    if start.nvlink is not None and end.nvlink is not None:
        links = tuple(risen_links(start.nvlink.errors, end.nvlink.errors))
    for name, before, after in rises(start.counters, end.counters):
        text = rise_words(name, before, after)
        if name.startswith("nvlink_") and links:
            text += f" (link{'s' if len(links) > 1 else ''} {', '.join(map(str, links))})"
        out.append(text)
    return tuple(out)
