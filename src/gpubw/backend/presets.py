"""Built-in simulated systems, and loading a system from a JSON file (docs/simulate.md).

:func:`load_system` gives the model (:class:`gpubw.backend.sim.model.SimSystem`),
:func:`from_preset` a :class:`gpubw.backend.sim.SimulatedBackend` on it. This module builds on
:mod:`gpubw.backend.sim`, never the other way round.

Presets (figures from docs/simulate.md; the H200 ones follow the measured reference system):

* ``h200x1`` - one NVIDIA H200 (SXM, 141 GB), PCIe Gen5 host link.
* ``h200x2`` - two H200 joined by NV18 (18 NVLink4 links), both ways peer-accessible.
* ``h200x8`` - eight H200 on NVSwitch: every ordered pair peer-accessible, two NUMA nodes.
* ``pcie4`` - four L40S-like PCIe Gen4 cards; peer access only 0<->1 and 2<->3.
* ``gb200nvl72`` - a GB200 NVL72 rack: 72 GPUs on 18 hosts of 4, every GPU reaching every
  other through NVLink 5 switches, Grace NVLink-C2C host links, fabric handles (IMEX). A
  single process sees host 0's four GPUs; simulated ranks see their own host's.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from gpubw.backend.base import DeviceInfo
from gpubw.backend.sim import SimulatedBackend
from gpubw.backend.sim.faults import Faults
from gpubw.backend.sim.model import HostLink, Latency, Overheads, Rate, SimSystem, iter_pairs
from gpubw.errors import UsageError

MIB = 1 << 20

#: What a JSON device entry may set (everything of DeviceInfo but ``ordinal``).
DEVICE_FIELDS = tuple(f.name for f in attrs.fields(DeviceInfo) if f.name != "ordinal")


def _uuid(system: str, ordinal: int) -> str:
    h = hashlib.sha1(f"gpubw-simulated:{system}:{ordinal}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


#: PCI bus numbers of the presets' devices (an H200 host's, as in the reference system).
_BUSES = (0x1B, 0x43, 0x52, 0x61, 0x9D, 0xC3, 0xD1, 0xDF)


def h200_device(
    system: str,
    ordinal: int,
    *,
    numa_node: int | None = 0,
    local_cpus: tuple[int, ...] = tuple(range(32)),
    multicast: bool = False,
) -> DeviceInfo:
    """An NVIDIA H200 (SXM, 141 GB HBM3e) with the reference system's attributes."""
    return DeviceInfo(
        ordinal=ordinal,
        name="NVIDIA H200",
        uuid=_uuid(system, ordinal),
        pci_bus_id=f"0000:{_BUSES[ordinal % len(_BUSES)]:02x}:00.0",
        compute_capability=(9, 0),
        sm_count=132,
        l2_bytes=60 * MIB,
        memory_bytes=143_771 * MIB,  # what the driver reports for a 141 GB H200
        memory_bus_width_bits=6016,
        memory_clock_khz=3_201_000,
        clock_khz=1_980_000,
        async_engines=3,
        numa_node=numa_node,
        local_cpus=local_cpus,
        multicast_supported=multicast,
    )


#: H200 host link (PCIe Gen5 x16) as nvbandwidth measured it on the reference system.
H200_HOST_LINK = HostLink(
    h2d=Rate(ce=55.5e9, sm=51.4e9),
    d2h=Rate(ce=55.3e9, sm=52.6e9),
    bidirectional_factor=0.9,
)
#: One NV18 NVLink4 connection (or an NVSwitch port), per direction.
H200_NVLINK = Rate(ce=394.5e9, sm=373.0e9)
#: device_local_copy: bytes counted once.
H200_LOCAL = Rate(ce=2094e9, sm=2080e9)
H200_LATENCY = Latency(host=1.2e-6, peer=0.83e-6, local=0.6e-6)


def h200x1() -> SimSystem:
    """One H200."""
    return SimSystem(
        name="h200x1",
        devices=(h200_device("h200x1", 0),),
        host_links=(H200_HOST_LINK,),
        local_copy=H200_LOCAL,
        host_memory_bandwidth=160e9,
        latency=H200_LATENCY,
    )


def h200x2() -> SimSystem:
    """Two H200 joined by NV18, like the reference system."""
    return SimSystem(
        name="h200x2",
        devices=tuple(h200_device("h200x2", i) for i in range(2)),
        host_links=(H200_HOST_LINK,) * 2,
        peers={pair: H200_NVLINK for pair in iter_pairs(2)},
        peer_bidirectional_factor=0.985,
        local_copy=H200_LOCAL,
        host_memory_bandwidth=160e9,
        latency=H200_LATENCY,
    )


def h200x8() -> SimSystem:
    """Eight H200 on NVSwitch (every pair peer-accessible; a device's NVLink bandwidth is
    shared by all its peers), two CPU sockets."""
    return SimSystem(
        name="h200x8",
        devices=tuple(
            h200_device(
                "h200x8",
                i,
                numa_node=i // 4,
                local_cpus=tuple(range(56 * (i // 4), 56 * (i // 4 + 1))),
                multicast=True,
            )
            for i in range(8)
        ),
        host_links=(H200_HOST_LINK,) * 8,
        peers={pair: H200_NVLINK for pair in iter_pairs(8)},
        peer_bidirectional_factor=0.985,
        local_copy=H200_LOCAL,
        host_memory_bandwidth=400e9,
        latency=H200_LATENCY,
    )


def pcie4() -> SimSystem:
    """Four L40S-like PCIe Gen4 cards; peer access only between 0<->1 and 2<->3."""
    devices = tuple(
        DeviceInfo(
            ordinal=i,
            name="NVIDIA L40S",
            uuid=_uuid("pcie4", i),
            pci_bus_id=f"0000:{(0x17, 0x31, 0xB1, 0xCA)[i]:02x}:00.0",
            compute_capability=(8, 9),
            sm_count=142,
            l2_bytes=96 * MIB,
            memory_bytes=46_068 * MIB,  # a 48 GB card
            memory_bus_width_bits=384,
            memory_clock_khz=9_001_000,
            clock_khz=2_520_000,
            async_engines=2,
            numa_node=i // 2,
            local_cpus=tuple(range(32 * (i // 2), 32 * (i // 2 + 1))),
            multicast_supported=False,
        )
        for i in range(4)
    )
    link = HostLink(h2d=Rate(ce=26.2e9, sm=24.6e9), d2h=Rate(ce=26.4e9, sm=25.1e9))
    pcie_peer = Rate(ce=25.0e9, sm=23.5e9)
    return SimSystem(
        name="pcie4",
        devices=devices,
        host_links=(link,) * 4,
        peers={pair: pcie_peer for pair in ((0, 1), (1, 0), (2, 3), (3, 2))},
        peer_bidirectional_factor=0.85,
        local_copy=Rate(ce=365e9, sm=372e9),
        host_memory_bandwidth=120e9,
        latency=Latency(host=1.3e-6, peer=1.6e-6, local=0.55e-6),
    )


#: GB200 NVL72 figures (docs/simulate.md says where each comes from). Peak link figures are
#: NVIDIA's public ones; the achieved rates apply the H200 reference system's measured
#: efficiency (NVLink 4: 394.5/450 CE, 373/450 SM; PCIe 5: ~0.87 CE, ~0.81 SM) to them.
GB200_NVLINK = Rate(ce=900e9 * 394.5 / 450, sm=900e9 * 373.0 / 450)
GB200_HOST_LINK = HostLink(
    h2d=Rate(ce=450e9 * 55.5 / 64, sm=450e9 * 51.4 / 64),
    d2h=Rate(ce=450e9 * 55.3 / 64, sm=450e9 * 52.6 / 64),
    bidirectional_factor=0.9,
)
#: 8 TB/s HBM3e, bytes counted once, at the share of its nominal figure that the H200's
#: device_local_copy reaches of its own (2094 GB/s of 6016 / 8 x 3.201 GHz x 2 = 4.81 TB/s)
_H200_NOMINAL = 6016 / 8 * 3_201_000e3 * 2
GB200_LOCAL = Rate(ce=8e12 * 2094e9 / _H200_NOMINAL, sm=8e12 * 2080e9 / _H200_NOMINAL)
GB200_HOSTS = 18
GB200_PER_HOST = 4
#: PCI domains of a GB200 compute tray's four GPUs
_GB200_DOMAINS = (0x0008, 0x0009, 0x0018, 0x0019)


def gb200_device(system: str, ordinal: int) -> DeviceInfo:
    """A Blackwell GPU of a GB200 superchip (186 GB HBM3e, 148 SMs), ``ordinal`` counted
    over the whole rack; two GPUs per Grace CPU (NUMA node)."""
    local = ordinal % GB200_PER_HOST
    socket = local // 2
    return DeviceInfo(
        ordinal=ordinal,
        name="NVIDIA GB200",
        uuid=_uuid(system, ordinal),
        pci_bus_id=f"{_GB200_DOMAINS[local]:04x}:{ordinal // GB200_PER_HOST + 1:02x}:00.0",
        compute_capability=(10, 0),
        sm_count=148,
        l2_bytes=126 * MIB,
        memory_bytes=186_000 * 1000 * 1000 // MIB * MIB,
        memory_bus_width_bits=8192,
        memory_clock_khz=3_906_000,  # 8192 / 8 x 3.906 GHz x 2 = 8.0 TB/s
        clock_khz=1_965_000,
        async_engines=4,
        numa_node=socket,
        local_cpus=tuple(range(72 * socket, 72 * (socket + 1))),
        multicast_supported=True,
    )


def gb200nvl72() -> SimSystem:
    """A GB200 NVL72 rack: 18 hosts of 4 GPUs, one NVLink domain, IMEX present."""
    n = GB200_HOSTS * GB200_PER_HOST
    return SimSystem(
        name="gb200nvl72",
        devices=tuple(gb200_device("gb200nvl72", i) for i in range(n)),
        host_links=(GB200_HOST_LINK,) * n,
        peers={pair: GB200_NVLINK for pair in iter_pairs(n)},
        peer_bidirectional_factor=0.985,
        local_copy=GB200_LOCAL,
        host_memory_bandwidth=None,
        latency=Latency(host=0.9e-6, peer=0.95e-6, local=0.6e-6),
        hosts=(GB200_PER_HOST,) * GB200_HOSTS,
        handle_kinds=frozenset({"fabric", "posix-fd", "ipc"}),
    )


#: The built-in systems, by name.
PRESETS: dict[str, Callable[[], SimSystem]] = {
    "h200x1": h200x1,
    "h200x2": h200x2,
    "h200x8": h200x8,
    "pcie4": pcie4,
    "gb200nvl72": gb200nvl72,
}


def names() -> list[str]:
    """The preset names."""
    return list(PRESETS)


def from_preset(
    name_or_path: str | os.PathLike[str], faults: Faults | None = None
) -> SimulatedBackend:
    """A simulated backend on a preset or a JSON system file (see :func:`load_system`), with
    ``faults`` injected (None: the system's own ``faults``, if any)."""
    return SimulatedBackend(load_system(name_or_path), faults)


def load_system(name_or_path: str | os.PathLike[str]) -> SimSystem:
    """A preset by name, or a system described by a JSON file (docs/simulate.md).

    Raises :class:`UsageError` for an unknown name, a missing or unreadable file, bad JSON or
    a description that does not make a valid system; the message names the file and what is
    wrong."""
    text = os.fspath(name_or_path)
    if text in PRESETS:
        return PRESETS[text]()
    path = Path(text)
    looks_like_file = path.suffix.lower() == ".json" or os.sep in text or path.exists()
    if not looks_like_file:
        raise UsageError(
            f"unknown simulated system {text!r}; presets: {', '.join(PRESETS)} "
            "(or the path of a JSON system file)"
        )
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(
            f"cannot read simulated system file {text}: {exc.strerror or exc}"
        ) from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{text}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{text}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        raise UsageError(f"{text}: not valid JSON: nested too deeply") from None
    try:
        return system_from_dict(doc, default_name=path.stem)
    except UsageError as exc:
        raise UsageError(f"{text}: {exc}") from None


# -- JSON -> SimSystem ----------------------------------------------------------------------
_TOP_KEYS = {
    "name",
    "base",
    "count",
    "device",
    "devices",
    "host_link",
    "host_links",
    "peers",
    "local_copy",
    "host_memory_bandwidth",
    "latency",
    "overheads",
    "jitter",
    "seed",
    "reserved_bytes",
    "host_memory_bytes",
    "real_bytes_limit",
    "driver_version",
    "cuda_driver",
    "faults",
    "hosts",
    "handle_kinds",
    "multicast_rate",
    "rank_faults",
}
#: Most devices a system file may describe.
MAX_DEVICES = 1024


def _keys(where: str, obj: Any, allowed: set[str] | tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise UsageError(f"{where} must be an object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - set(allowed))
    if unknown:
        raise UsageError(
            f"unknown key {unknown[0]!r} in {where}; allowed: {', '.join(sorted(allowed))}"
        )
    return obj


def _num(where: str, value: Any, *, integer: bool = False, positive: bool = True) -> Any:
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type:
        kind = "an integer" if integer else "a number"
        raise UsageError(f"{where} must be {kind}, got {json.dumps(value)}")
    if positive and not value > 0:
        raise UsageError(f"{where} must be positive, got {value}")
    return value


def _rate(where: str, obj: Any, base: Rate | None) -> Rate:
    d = _keys(where, obj, ("ce", "sm"))
    if base is None and not {"ce", "sm"} <= set(d):
        raise UsageError(f"{where} needs both 'ce' and 'sm' (bytes/s)")
    ce = _num(f"{where}.ce", d["ce"]) if "ce" in d else base.ce  # type: ignore[union-attr]
    sm = _num(f"{where}.sm", d["sm"]) if "sm" in d else base.sm  # type: ignore[union-attr]
    return Rate(ce, sm)


def _host_link(where: str, obj: Any, base: HostLink | None) -> HostLink:
    d = _keys(where, obj, ("h2d", "d2h", "bidirectional_factor"))
    if base is None and not {"h2d", "d2h"} <= set(d):
        raise UsageError(f"{where} needs 'h2d' and 'd2h'")
    h2d = _rate(f"{where}.h2d", d["h2d"], base.h2d if base else None) if "h2d" in d else None
    d2h = _rate(f"{where}.d2h", d["d2h"], base.d2h if base else None) if "d2h" in d else None
    factor = d.get("bidirectional_factor", base.bidirectional_factor if base else 0.9)
    _num(f"{where}.bidirectional_factor", factor)
    if factor > 1:
        raise UsageError(f"{where}.bidirectional_factor must be at most 1, got {factor}")
    return HostLink(
        h2d=h2d or base.h2d,  # type: ignore[union-attr]
        d2h=d2h or base.d2h,  # type: ignore[union-attr]
        bidirectional_factor=factor,
    )


def _device(where: str, obj: Any, base: DeviceInfo | None, system: str, i: int) -> DeviceInfo:
    d = _keys(where, obj, DEVICE_FIELDS)
    values: dict[str, Any] = attrs.asdict(base, recurse=False) if base else {}
    values["ordinal"] = i
    if base is None or "uuid" not in d:
        values["uuid"] = _uuid(system, i)
    if base is None or "pci_bus_id" not in d:
        values["pci_bus_id"] = f"0000:{_BUSES[i % len(_BUSES)] + i // len(_BUSES):02x}:00.0"
    for key, value in d.items():
        field = f"{where}.{key}"
        if key in ("name", "uuid", "pci_bus_id"):
            if not isinstance(value, str) or not value:
                raise UsageError(f"{field} must be a non-empty string")
        elif key == "compute_capability":
            if (
                not isinstance(value, list)
                or len(value) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
            ):
                raise UsageError(f"{field} must be [major, minor], got {json.dumps(value)}")
            value = tuple(value)
        elif key == "numa_node":
            if value is not None:
                _num(field, value, integer=True, positive=False)
        elif key == "local_cpus":
            if not isinstance(value, list) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
            ):
                raise UsageError(f"{field} must be a list of CPU numbers")
            value = tuple(value)
        elif key == "multicast_supported":
            if not isinstance(value, bool):
                raise UsageError(f"{field} must be true or false")
        else:
            _num(field, value, integer=True)
        values[key] = value
    if "name" not in values:
        raise UsageError(f"{where} needs a 'name' (and the other device fields) without a 'base'")
    missing = [f for f in DEVICE_FIELDS if f not in values and f not in _OPTIONAL_DEVICE]
    if missing:
        raise UsageError(f"{where} lacks {', '.join(missing)} (or give a 'base' preset)")
    pci = str(values["pci_bus_id"]).split(":")
    if len(pci) != 3 or "." not in pci[2]:
        raise UsageError(f"{where}.pci_bus_id must look like 0000:1b:00.0")
    return DeviceInfo(**values)


_OPTIONAL_DEVICE = {"numa_node", "local_cpus", "multicast_supported"}


def _pair(where: str, value: Any, n: int) -> tuple[int, int]:
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise UsageError(f"{where} must be a pair [a, b] of device numbers")
    a, b = value
    if not (0 <= a < n and 0 <= b < n) or a == b:
        raise UsageError(f"{where} = [{a}, {b}] is not two distinct devices of 0..{n - 1}")
    return a, b


def _peers(
    where: str, obj: Any, n: int, base: Mapping[tuple[int, int], Rate]
) -> tuple[dict[tuple[int, int], Rate], float | None]:
    d = _keys(where, obj, ("pairs", "ce", "sm", "symmetric", "bidirectional_factor"))
    default: Rate | None = next(iter(base.values()), None)
    if "ce" in d or "sm" in d:
        default = _rate(where, {k: d[k] for k in ("ce", "sm") if k in d}, default)
    symmetric = d.get("symmetric", True)
    if not isinstance(symmetric, bool):
        raise UsageError(f"{where}.symmetric must be true or false")
    pairs = d.get("pairs", "all" if base else "none")
    out: dict[tuple[int, int], Rate] = {}
    if pairs == "all" or pairs == "none":
        chosen = list(iter_pairs(n)) if pairs == "all" else []
        entries: list[tuple[tuple[int, int], Rate | None]] = [(p, None) for p in chosen]
    elif isinstance(pairs, list):
        entries = []
        for k, item in enumerate(pairs):
            at = f"{where}.pairs[{k}]"
            if isinstance(item, dict):
                e = _keys(at, item, ("pair", "ce", "sm"))
                if "pair" not in e:
                    raise UsageError(f"{at} needs 'pair'")
                rate = (
                    _rate(at, {x: e[x] for x in ("ce", "sm") if x in e}, default)
                    if ("ce" in e or "sm" in e)
                    else None
                )
                entries.append((_pair(f"{at}.pair", e["pair"], n), rate))
            else:
                entries.append((_pair(at, item, n), None))
    else:
        raise UsageError(f'{where}.pairs must be "all", "none" or a list of [a, b] pairs')
    for (a, b), rate in entries:
        r = rate or default
        if r is None:
            raise UsageError(f"{where} needs 'ce' and 'sm' bandwidths (bytes/s) for its pairs")
        out[(a, b)] = r
        if symmetric:
            out.setdefault((b, a), r)
    factor = d.get("bidirectional_factor")
    if factor is not None:
        _num(f"{where}.bidirectional_factor", factor)
        if factor > 1:
            raise UsageError(f"{where}.bidirectional_factor must be at most 1, got {factor}")
    return out, factor


def _faults(where: str, obj: Any, n: int) -> Faults:
    """The ``"faults"`` object: any field of :class:`Faults` (docs/simulate.md)."""
    fields = {f.name for f in attrs.fields(Faults)}
    d = _keys(where, obj, fields)
    kw: dict[str, Any] = {}
    for key, value in d.items():
        at = f"{where}.{key}"
        if key in ("corrupt_copy", "gate_never_opens", "sync_hang", "export_refused"):
            if not isinstance(value, bool):
                raise UsageError(f"{at} must be true or false, got {json.dumps(value)}")
        elif key in ("kernel_error", "kernel_error_result"):
            if not (isinstance(value, str) and value) and not (
                key == "kernel_error" and value is None
            ):
                raise UsageError(f"{at} must be a kernel or CUresult name, got {json.dumps(value)}")
        elif key == "refuse_peer":
            if not isinstance(value, list):
                raise UsageError(f"{at} must be a list of [a, b] device pairs")
            value = [_pair(f"{at}[{k}]", v, n) for k, v in enumerate(value)]
        elif key == "alloc_fail_on_device":
            if value is not None:
                _num(at, value, integer=True, positive=False)
                if not 0 <= value < n:
                    raise UsageError(f"{at} must be a device of 0..{n - 1}, got {value}")
        elif value is not None or key == "corrupt_after":
            _num(at, value, integer=True, positive=False)
            if value < 0:
                raise UsageError(f"{at} must not be negative, got {value}")
        kw[key] = value
    return Faults(**kw)


def _ranks_keys(d: dict[str, Any], kw: dict[str, Any], n: int) -> None:
    """``hosts``, ``handle_kinds`` and ``multicast_rate`` of a system file (multinode)."""
    if "hosts" in d:
        hosts = d["hosts"]
        if hosts is not None and (
            not isinstance(hosts, list)
            or not hosts
            or not all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in hosts)
        ):
            raise UsageError(f"hosts must be a list of device counts per host, got {hosts!r}")
        if hosts is not None and sum(hosts) != n:
            raise UsageError(f"hosts must add up to the {n} devices, got {hosts} = {sum(hosts)}")
        kw["hosts"] = None if hosts is None else tuple(hosts)
    elif kw.get("hosts") is not None and sum(kw["hosts"]) != n:
        kw["hosts"] = None  # a base preset's layout that no longer fits the device count
    if "handle_kinds" in d:
        kinds = d["handle_kinds"]
        allowed = ("fabric", "posix-fd", "ipc")
        if not isinstance(kinds, list) or not all(k in allowed for k in kinds):
            raise UsageError(
                f"handle_kinds must be a list of {', '.join(allowed)}, got {json.dumps(kinds)}"
            )
        kw["handle_kinds"] = frozenset(kinds)
    if "multicast_rate" in d:
        v = d["multicast_rate"]
        kw["multicast_rate"] = None if v is None else _num("multicast_rate", v)
    if "rank_faults" in d:
        per_rank = d["rank_faults"]
        if not isinstance(per_rank, dict):
            raise UsageError('rank_faults must be an object: {"<rank>": {<faults>}, ...}')
        out: dict[int, Faults] = {}
        for key, value in per_rank.items():
            if not (isinstance(key, str) and key.isdigit()):
                raise UsageError(f"rank_faults keys must be rank numbers, got {key!r}")
            out[int(key)] = _faults(f"rank_faults.{key}", value, n)
        kw["rank_faults"] = out


def system_from_dict(doc: Any, default_name: str = "custom") -> SimSystem:
    """Build a :class:`SimSystem` from the JSON document format of docs/simulate.md."""
    d = _keys("the system", doc, _TOP_KEYS)
    base: SimSystem | None = None
    if "base" in d:
        if not isinstance(d["base"], str) or d["base"] not in PRESETS:
            raise UsageError(f"base {d['base']!r} is not a preset; presets: {', '.join(PRESETS)}")
        base = PRESETS[d["base"]]()
    name = d.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise UsageError("name must be a non-empty string")

    # devices
    if "devices" in d and "count" in d:
        raise UsageError("give either 'count' (with 'device') or 'devices', not both")
    template = base.devices[0] if base else None
    if "device" in d:
        template = _device("device", d["device"], template, name, 0)
    if "devices" in d:
        if not isinstance(d["devices"], list) or not d["devices"]:
            raise UsageError("devices must be a non-empty list of device objects")
        if len(d["devices"]) > MAX_DEVICES:
            raise UsageError(f"devices must list at most {MAX_DEVICES} devices")
        devices = tuple(
            _device(
                f"devices[{i}]",
                item,
                (base.devices[i] if base and i < len(base.devices) else template),
                name,
                i,
            )
            for i, item in enumerate(d["devices"])
        )
    else:
        count = _num("count", d.get("count", len(base.devices) if base else 1), integer=True)
        if count > MAX_DEVICES:
            raise UsageError(f"count must be at most {MAX_DEVICES}, got {count}")
        if template is None:
            raise UsageError("describe the devices: 'device' (with 'count') or 'devices'")
        devices = tuple(
            attrs.evolve(
                template,
                ordinal=i,
                uuid=_uuid(name, i),
                pci_bus_id=f"0000:{_BUSES[i % len(_BUSES)] + i // len(_BUSES):02x}:00.0",
            )
            if (base is None or i >= len(base.devices) or "device" in d)
            else base.devices[i]
            for i in range(count)
        )
    n = len(devices)

    # host links
    base_link = base.host_links[0] if base else None
    if "host_link" in d and "host_links" in d:
        raise UsageError("give either 'host_link' (all devices) or 'host_links', not both")
    if "host_links" in d:
        if not isinstance(d["host_links"], list) or len(d["host_links"]) != n:
            raise UsageError(f"host_links must be a list of {n} host link objects")
        links = tuple(
            _host_link(f"host_links[{i}]", item, base_link)
            for i, item in enumerate(d["host_links"])
        )
    elif "host_link" in d:
        links = (_host_link("host_link", d["host_link"], base_link),) * n
    elif base_link is not None:
        links = (base_link,) * n
    else:
        raise UsageError("host_link is required (bytes/s per direction, ce and sm)")

    # peers
    base_peers = dict(base.peers) if base else {}
    peer_factor: float | None = None
    if "peers" in d:
        peers, peer_factor = _peers("peers", d["peers"], n, base_peers)
    else:
        peers = {p: r for p, r in base_peers.items() if p[0] < n and p[1] < n}

    kw: dict[str, Any] = {}
    if base is not None:
        kw = {
            f.name: getattr(base, f.name)
            for f in attrs.fields(SimSystem)
            if f.name not in ("name", "devices", "host_links", "peers")
        }
    if peer_factor is not None:
        kw["peer_bidirectional_factor"] = peer_factor
    if "local_copy" in d:
        kw["local_copy"] = _rate("local_copy", d["local_copy"], kw.get("local_copy"))
    elif base is None:
        raise UsageError("local_copy is required (bytes/s of a copy inside one device)")
    if "host_memory_bandwidth" in d:
        v = d["host_memory_bandwidth"]
        kw["host_memory_bandwidth"] = None if v is None else _num("host_memory_bandwidth", v)
    if "latency" in d:
        lat = _keys("latency", d["latency"], ("host", "peer", "local"))
        cur = kw.get("latency", Latency())
        kw["latency"] = Latency(
            **{
                k: _num(f"latency.{k}", lat[k]) if k in lat else getattr(cur, k)
                for k in ("host", "peer", "local")
            }
        )
    if "overheads" in d:
        keys = ("kernel_launch", "memcpy", "host_call", "gate_poll")
        ov = _keys("overheads", d["overheads"], keys)
        cur_ov = kw.get("overheads", Overheads())
        kw["overheads"] = Overheads(
            **{
                k: _num(f"overheads.{k}", ov[k], positive=False) if k in ov else getattr(cur_ov, k)
                for k in keys
            }
        )
        if any(v < 0 for v in attrs.asdict(kw["overheads"]).values()):
            raise UsageError("overheads must not be negative")
    if "jitter" in d:
        j = _num("jitter", d["jitter"], positive=False)
        if not 0 <= j < 1:
            raise UsageError(f"jitter must be in [0, 1), got {j}")
        kw["jitter"] = j
    if "seed" in d:
        kw["seed"] = _num("seed", d["seed"], integer=True, positive=False)
    for key in ("reserved_bytes", "host_memory_bytes", "real_bytes_limit", "cuda_driver"):
        if key in d:
            kw[key] = _num(key, d[key], integer=True, positive=key != "reserved_bytes")
    if "faults" in d:
        kw["faults"] = _faults("faults", d["faults"], n)
    if "driver_version" in d:
        if not isinstance(d["driver_version"], str):
            raise UsageError("driver_version must be a string")
        kw["driver_version"] = d["driver_version"]
    _ranks_keys(d, kw, n)
    try:
        return SimSystem(name=name, devices=devices, host_links=links, peers=peers, **kw)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None
