"""Reading a simulated system from its JSON description (docs/simulate.md): the file as a
whole (its top-level keys, the ``base`` preset it starts from, the keys of multinode runs and
of the NVML-like facts) and the :class:`~gpubw.backend.sim.model.SimSystem` it makes.

Cut along the seam of reading a file: the checks of each value and of the objects a file
describes one by one (with their limits) are :mod:`gpubw.backend.sim.system_checks`'s.
:mod:`gpubw.backend.sim.presets` reads system files through :func:`build_system` (its
``system_from_dict`` passes the presets a file may name as its ``base``); this module never
imports the presets.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from gpubw.backend.base import DeviceInfo
from gpubw.backend.sim.faults import Faults
from gpubw.backend.sim.model import (
    MAX_DEVICE_MEMORY,
    MAX_DEVICES,
    MAX_HOST_MEMORY,
    MAX_JITTER,
    MAX_REAL_BYTES,
    HostLink,
    Latency,
    Overheads,
    Rate,
    SimSystem,
    Throttle,
    iter_pairs,
)
from gpubw.backend.sim.system_checks import (
    MAX_INT,
    PluginKernels,
    check_keys,
    check_number,
    check_unique_devices,
    factor_number,
    generated_pci_bus_id,
    rate_number,
    read_device,
    read_faults,
    read_host_link,
    read_latency,
    read_overheads,
    read_pair,
    read_rate,
    simulated_uuid,
)
from gpubw.model.errors import UsageError

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
    "host_memory_write_bandwidth",
    "host_memory_write_weight",
    "local_read",
    "local_write",
    "local_tma",
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
    "nvml",
    "other_processes",
    "huge_pages",
    "hosts",
    "nvlink_domains",
    "handle_kinds",
    "multicast_rate",
    "rank_faults",
    "nvml_end",
    "pageable_factor",
    "remote_numa_factor",
    "throttle",
}
#: a system file's top-level keys (a JSON document with none of them is no system file)
SYSTEM_KEYS = frozenset(_TOP_KEYS)


_PEER_KEYS = ("pairs", "ce", "sm", "symmetric", "bidirectional_factor", "sm_load_factor")


def _peers(
    where: str, obj: Any, n: int, base: Mapping[tuple[int, int], Rate]
) -> tuple[dict[tuple[int, int], Rate], dict[str, float]]:
    """The peer links a file's ``peers`` describes, and the factors it gives (by the
    model's field names)."""
    d = check_keys(where, obj, _PEER_KEYS)
    default: Rate | None = next(iter(base.values()), None)
    if "ce" in d or "sm" in d:
        default = read_rate(where, {k: d[k] for k in ("ce", "sm") if k in d}, default)
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
                e = check_keys(at, item, ("pair", "ce", "sm"))
                if "pair" not in e:
                    raise UsageError(f"{at} needs 'pair'")
                rate = (
                    read_rate(at, {x: e[x] for x in ("ce", "sm") if x in e}, default)
                    if ("ce" in e or "sm" in e)
                    else None
                )
                entries.append((read_pair(f"{at}.pair", e["pair"], n), rate))
            else:
                entries.append((read_pair(at, item, n), None))
    else:
        raise UsageError(f'{where}.pairs must be "all", "none" or a list of [a, b] pairs')
    for (a, b), rate in entries:
        r = rate or default
        if r is None:
            raise UsageError(f"{where} needs 'ce' and 'sm' bandwidths (bytes/s) for its pairs")
        out[(a, b)] = r
        if symmetric:
            out.setdefault((b, a), r)
    factors = {
        field: factor_number(f"{where}.{key}", d[key])
        for key, field in (
            ("bidirectional_factor", "peer_bidirectional_factor"),
            ("sm_load_factor", "peer_sm_load_factor"),
        )
        if d.get(key) is not None
    }
    return out, factors


def _nvml_keys(d: Mapping[str, Any], kw: dict[str, Any], n: int) -> None:
    """The NVML-like keys of a system file (gpubw.backend.sim.facts): ``nvml``,
    ``other_processes``, ``huge_pages``."""
    from gpubw.backend.sim.facts import check_spec

    if "nvml" in d or "other_processes" in d or "nvml_end" in d:
        try:
            check_spec(d.get("nvml", {}), d.get("other_processes", {}), n)
            check_spec(d.get("nvml_end", {}), {}, n, "nvml_end")
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    for key in ("nvml", "nvml_end"):
        if key in d:
            kw[key] = d[key]
    if "other_processes" in d:
        kw["other_processes"] = {
            k: v if isinstance(v, dict) else tuple(v) for k, v in d["other_processes"].items()
        }
    _node_model_keys(d, kw)
    if "huge_pages" in d:
        hp = check_keys("huge_pages", d["huge_pages"], ("page_bytes", "free"))
        free = check_number("huge_pages.free", hp.get("free", 0), integer=True, positive=False)
        if free < 0:
            raise UsageError(f"huge_pages.free must be >= 0 (a number of pages), got {free}")
        page = check_number("huge_pages.page_bytes", hp.get("page_bytes", 2 << 20), integer=True)
        kw["huge_pages"] = (page, free)


def _node_model_keys(d: Mapping[str, Any], kw: dict[str, Any]) -> None:
    """``pageable_factor``, ``remote_numa_factor`` and ``throttle`` (docs/simulate.md)."""
    for key in ("pageable_factor", "remote_numa_factor"):
        if key in d:
            kw[key] = factor_number(key, d[key])
    if "throttle" in d:
        t = check_keys("throttle", d["throttle"], ("after_s", "factor", "reason", "devices",
                                              "temperature_c"))  # fmt: skip
        if "after_s" not in t:
            raise UsageError("throttle needs after_s (virtual seconds into the run)")
        fields: dict[str, Any] = {
            "after_s": check_number(
                "throttle.after_s", t["after_s"], positive=False, low=0, high=1e9
            )
        }
        if "factor" in t:
            fields["factor"] = factor_number("throttle.factor", t["factor"])
        if "temperature_c" in t:
            fields["temperature_c"] = check_number("throttle.temperature_c", t["temperature_c"],
                                           integer=True, positive=False, high=200)  # fmt: skip
        if "devices" in t:
            devs = t["devices"]
            if devs is not None and not (isinstance(devs, list) and all(
                isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in devs
            )):  # fmt: skip
                raise UsageError("throttle.devices must be a list of device indexes or null")
            fields["devices"] = devs
        if "reason" in t:
            fields["reason"] = t["reason"]
        try:
            kw["throttle"] = Throttle(**fields)
        except (TypeError, ValueError) as exc:
            raise UsageError(str(exc)) from None


def _counts(d: Mapping[str, Any], kw: dict[str, Any], n: int, key: str, per: str) -> None:
    """``hosts`` or ``nvlink_domains``: device counts per ``per`` adding up to ``n`` (null:
    one holding every device); a base preset's that no longer fits the device count is
    dropped."""
    if key in d:
        counts = d[key]
        if counts is not None and (
            not isinstance(counts, list)
            or not counts
            or not all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in counts)
        ):
            raise UsageError(
                f"{key} must be a list of device counts per {per} (each >= 1) or null, got "
                f"{json.dumps(counts)}"
            )
        if counts is not None and sum(counts) != n:
            raise UsageError(f"{key} must add up to the {n} devices, got {counts} = {sum(counts)}")
        kw[key] = None if counts is None else tuple(counts)
    elif kw.get(key) is not None and sum(kw[key]) != n:
        kw[key] = None


def _ranks_keys(d: dict[str, Any], kw: dict[str, Any], n: int) -> None:
    """``hosts``, ``nvlink_domains``, ``handle_kinds`` and ``multicast_rate`` of a system file
    (multinode)."""
    _counts(d, kw, n, "hosts", "host")
    _counts(d, kw, n, "nvlink_domains", "NVLink domain")
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
        kw["multicast_rate"] = None if v is None else check_number("multicast_rate", v)
    if "rank_faults" in d:
        per_rank = d["rank_faults"]
        if not isinstance(per_rank, dict):
            raise UsageError('rank_faults must be an object: {"<rank>": {<faults>}, ...}')
        out: dict[int, Faults] = {}
        for key, value in per_rank.items():
            if not (isinstance(key, str) and key.isdecimal() and len(key) <= 9):
                raise UsageError(f"rank_faults keys must be rank numbers, got {key!r}")
            out[int(key)] = read_faults(f"rank_faults.{key}", value, n)
        kw["rank_faults"] = out


#: Upper bounds of the top-level whole numbers of a system file.
_TOP_INT_LIMITS: dict[str, int] = {
    "seed": MAX_INT,
    "reserved_bytes": MAX_DEVICE_MEMORY,
    "host_memory_bytes": MAX_HOST_MEMORY,
    "real_bytes_limit": MAX_REAL_BYTES,
    "cuda_driver": (1 << 31) - 1,
}


def build_system(
    doc: Any,
    presets: Mapping[str, Callable[[], SimSystem]],
    *,
    default_name: str = "custom",
    plugin_kernels: PluginKernels = None,
) -> SimSystem:
    """Build a :class:`SimSystem` from the JSON document format of docs/simulate.md.
    ``presets`` are the systems its ``base`` may name (by name: a function making each);
    ``plugin_kernels`` gives the names of plugin kernels a fault may name as well
    (:func:`~gpubw.backend.sim.system_checks.known_kernels`)."""
    d = check_keys("the system", doc, _TOP_KEYS)
    base = _base(d, presets)
    name = d.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise UsageError("name must be a non-empty string")
    devices = _devices(d, base, name)
    check_unique_devices(devices)
    n = len(devices)
    links = _host_links(d, base, n)
    base_peers = dict(base.peers) if base else {}
    peer_factors: dict[str, float] = {}
    if "peers" in d:
        peers, peer_factors = _peers("peers", d["peers"], n, base_peers)
    else:
        peers = {p: r for p, r in base_peers.items() if p[0] < n and p[1] < n}
    kw = _model_fields(d, base, n, plugin_kernels)
    if not isinstance(d.get("peers", {}).get("pairs"), list):  # "all" or the base's pairs
        peers = _within_domains(peers, kw.get("nvlink_domains"), n)
    kw.update(peer_factors)
    if "nvml" in kw:  # a downtrained PCIe link also slows that device's host link
        from gpubw.backend.sim.facts import scale_host_links

        links = scale_host_links(links, kw["nvml"])
    try:
        return SimSystem(name=name, devices=devices, host_links=links, peers=peers, **kw)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None


def _within_domains(
    peers: dict[tuple[int, int], Rate], domains: tuple[int, ...] | None, n: int
) -> dict[tuple[int, int], Rate]:
    """``peers`` without the pairs that cross NVLink domains (NVLink reaches only within a
    domain); a pair listed by hand that crosses them is the model's error instead."""
    if domains is None:
        return peers
    of = [d for d, size in enumerate(domains) for _ in range(size)]
    return {(a, b): r for (a, b), r in peers.items() if a < n and b < n and of[a] == of[b]}


def _base(d: Mapping[str, Any], presets: Mapping[str, Callable[[], SimSystem]]) -> SimSystem | None:
    """The preset the file starts from (``base``), if any."""
    if "base" not in d:
        return None
    if not isinstance(d["base"], str) or d["base"] not in presets:
        raise UsageError(f"base {d['base']!r} is not a preset; presets: {', '.join(presets)}")
    return presets[d["base"]]()


def _devices(d: Mapping[str, Any], base: SimSystem | None, name: str) -> tuple[DeviceInfo, ...]:
    """The devices: ``devices`` one by one, or ``count`` copies of ``device`` (or the
    base's)."""
    if "devices" in d and "count" in d:
        raise UsageError("give either 'count' (with 'device') or 'devices', not both")
    template = base.devices[0] if base else None
    if "device" in d:
        template = read_device("device", d["device"], template, name, 0)
    if "devices" in d:
        if not isinstance(d["devices"], list) or not d["devices"]:
            raise UsageError("devices must be a non-empty list of device objects")
        if len(d["devices"]) > MAX_DEVICES:
            raise UsageError(f"devices must list at most {MAX_DEVICES} devices")
        return tuple(
            read_device(
                f"devices[{i}]",
                item,
                (base.devices[i] if base and i < len(base.devices) else template),
                name,
                i,
            )
            for i, item in enumerate(d["devices"])
        )
    count = d.get("count", len(base.devices) if base else 1)
    if isinstance(count, int) and not isinstance(count, bool) and count > MAX_DEVICES:
        raise UsageError(f"count must be at most {MAX_DEVICES}, got {count}")
    count = check_number("count", count, integer=True)
    if template is None:
        raise UsageError("describe the devices: 'device' (with 'count') or 'devices'")
    return tuple(
        attrs.evolve(
            template, ordinal=i, uuid=simulated_uuid(name, i), pci_bus_id=generated_pci_bus_id(i)
        )
        if (base is None or i >= len(base.devices) or "device" in d)
        else base.devices[i]
        for i in range(count)
    )


def _host_links(d: Mapping[str, Any], base: SimSystem | None, n: int) -> tuple[HostLink, ...]:
    """Each device's host link: ``host_links``, one ``host_link`` for all, or the base's."""
    base_link = base.host_links[0] if base else None
    if "host_link" in d and "host_links" in d:
        raise UsageError("give either 'host_link' (all devices) or 'host_links', not both")
    if "host_links" in d:
        if not isinstance(d["host_links"], list) or len(d["host_links"]) != n:
            raise UsageError(f"host_links must be a list of {n} host link objects")
        return tuple(
            read_host_link(f"host_links[{i}]", item, base_link)
            for i, item in enumerate(d["host_links"])
        )
    if "host_link" in d:
        return (read_host_link("host_link", d["host_link"], base_link),) * n
    if base_link is not None:
        return (base_link,) * n
    raise UsageError("host_link is required (bytes/s per direction, ce and sm)")


#: rates inside one device besides ``local_copy`` (bytes/s; null: derived from it)
_LOCAL_RATES = ("local_read", "local_write", "local_tma")


def _model_fields(
    d: dict[str, Any], base: SimSystem | None, n: int, plugin_kernels: PluginKernels
) -> dict[str, Any]:
    """The model's other fields: the base's, with what the file says instead."""
    kw: dict[str, Any] = {}
    if base is not None:
        skip = ("name", "devices", "host_links", "peers")
        kw = {f.name: getattr(base, f.name) for f in attrs.fields(SimSystem) if f.name not in skip}
    if "local_copy" in d:
        kw["local_copy"] = read_rate("local_copy", d["local_copy"], kw.get("local_copy"))
    elif base is None:
        raise UsageError("local_copy is required (bytes/s of a copy inside one device)")
    for key in ("host_memory_bandwidth", "host_memory_write_bandwidth", *_LOCAL_RATES):
        if key in d:
            v = d[key]
            kw[key] = None if v is None else rate_number(key, v)
    if "host_memory_write_weight" in d:
        kw["host_memory_write_weight"] = check_number(
            "host_memory_write_weight", d["host_memory_write_weight"], low=1.0, high=1e3
        )
    if "latency" in d:
        kw["latency"] = read_latency(d["latency"], kw.get("latency", Latency()))
    if "overheads" in d:
        kw["overheads"] = read_overheads(d["overheads"], kw.get("overheads", Overheads()))
    if "jitter" in d:
        kw["jitter"] = check_number("jitter", d["jitter"], positive=False, low=0.0, high=MAX_JITTER)
    for key, high in _TOP_INT_LIMITS.items():
        if key in d:
            positive = key not in ("reserved_bytes", "seed", "real_bytes_limit")
            kw[key] = check_number(key, d[key], integer=True, positive=positive, low=0, high=high)
    if "faults" in d:
        kw["faults"] = read_faults("faults", d["faults"], n, plugin_kernels)
    _nvml_keys(d, kw, n)
    if "driver_version" in d:
        if not isinstance(d["driver_version"], str):
            raise UsageError("driver_version must be a string")
        kw["driver_version"] = d["driver_version"]
    _ranks_keys(d, kw, n)
    return kw
