"""NVML-like facts of a simulated system (:class:`gpubw.hw.nvml.NodeFacts`), and host huge pages.

Every simulated device gets facts a healthy node of its kind would show, by device name
(:data:`DEFAULTS_BY_NAME`; other names: PCIe Gen4 x16, no NVLink), plus what the model knows
(name, UUID, PCI bus id, clocks from the device's attributes, NVLink peers from the model's
peer links). A system file changes them (docs/simulate.md):

* ``"nvml": {"device": {...}, "devices": {"3": {...}}}`` -- facts for every device, then for
  one device by index, in :func:`gpubw.hw.nvml.facts_from_dict`'s keys (``"pcie": "gen4 x8 of
  gen5 x16"``, ``"clocks": {"reasons": ["sw_power_cap"]}``, ``"nvlink": {...}``, ...);
* ``"nvml": {"confidential_compute": true}`` -- the node runs in Confidential Computing mode
  (host <-> device copies through encrypted bounce buffers: nvbandwidth v0.10's CC filter
  waives some testcases); absent: off;
* ``"other_processes": {"0": [1234]}`` -- compute processes of other programs on a GPU (at the
  start and the end of every testcase, as NVML would list them);
* ``"huge_pages": {"page_bytes": 2097152, "free": 0}`` -- the host's free huge pages
  (default: 2 MiB pages, enough for 128 GiB).

**A downtrained link is modelled, not only reported**: where a device's ``pcie`` is below its
maximum, :func:`scale_host_links` multiplies that device's host link (both directions, CE and
SM) by the ratio of lanes x per-lane rate (Gen1 2.5, Gen2 5, Gen3 8, Gen4 16, Gen5 32, Gen6 64
GT/s), so ``"gen4 x8 of gen5 x16"`` runs that GPU's host copies at a quarter of the others'.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from gpubw.hw.counters import NVLINK_KINDS
from gpubw.hw.nvml import NodeFacts, facts_from_dict, parse_pcie

#: GT/s per lane, by PCIe generation
LANE_RATE = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
#: the facts a healthy device of this name shows (before a system file's "nvml")
DEFAULTS_BY_NAME: dict[str, dict[str, Any]] = {
    "NVIDIA H200": {
        "pcie": "gen5 x16",
        "nvlink": {"links_active": 18, "links_total": 18, "speed_mbps": 26562,
                   "versions": [4] * 18},
        "vbios": "96.00.A5.00.01 (simulated)",
    },
}  # fmt: skip
OTHER_DEFAULTS: dict[str, Any] = {"pcie": "gen4 x16", "vbios": "95.02.00.00.01 (simulated)"}
#: a healthy device's counters (what sysfs and NVML show for a GPU without errors)
HEALTHY_COUNTERS: dict[str, int] = {
    "pcie_replay": 0, "aer_correctable": 0, "aer_nonfatal": 0, "aer_fatal": 0,
    "remapped_rows_correctable": 0, "remapped_rows_uncorrectable": 0, "remap_pending": 0,
    "remap_failed": 0,
}  # fmt: skip
#: the host's huge pages when a system file does not say: 2 MiB pages, 128 GiB free
DEFAULT_HUGE_PAGES = (2 << 20, 65536)


def _serial(uuid: str) -> str:
    return str(int(hashlib.sha1(uuid.encode()).hexdigest()[:10], 16)).zfill(13)[:13]


def device_specs(model: Any, *, later: bool = False, now: float = 0.0) -> list[dict[str, Any]]:
    """Per device, the facts spec (:func:`gpubw.hw.nvml.facts_from_dict`'s device keys):
    ``later`` (every reading after a backend's first: the end of a run, between soak
    repetitions) with the model's ``nvml_end`` over ``nvml``; at virtual time ``now`` (the
    model's throttle, once it holds, and the processes of that moment)."""
    layers: list[Mapping[str, Any]] = [getattr(model, "nvml", None) or {}]
    if later:
        layers.append(getattr(model, "nvml_end", None) or {})
    out = []
    for d in model.devices:
        i = d.ordinal
        s = _healthy(model, d)
        for spec in layers:
            for part in (spec.get("device", {}), spec.get("devices", {}).get(str(i), {})):
                counters = {**s.get("counters", {}), **part.get("counters", {})}
                s.update(part)
                s["counters"] = counters
        if isinstance(s.get("nvlink"), Mapping) and "peers" not in s["nvlink"]:
            peers = sorted({b for a, b in model.peers if a == i} | {a for a, b in model.peers
                                                                     if b == i})  # fmt: skip
            s["nvlink"] = {**s["nvlink"], "peers": peers}
        _link_rows(s)
        pids = processes_at(model, i, now)
        if pids:
            s["processes"] = [*s.get("processes", ()), *pids]
        _throttled(model, i, now, s)
        out.append(s)
    return out


def processes_at(model: Any, device: int, now: float) -> list[int]:
    """The other programs' compute processes on ``device`` at virtual time ``now``: a
    system file's ``other_processes`` entry is a list of pids (there all the time) or
    ``{"pids": [...], "from_s": 0, "until_s": 2.5}`` (there in that span of the run)."""
    entry = (getattr(model, "other_processes", None) or {}).get(str(device))
    if entry is None:
        return []
    if isinstance(entry, Mapping):
        lo, hi = entry.get("from_s", 0.0), entry.get("until_s", float("inf"))
        return list(entry["pids"]) if lo <= now < hi else []
    return list(entry)


def _link_rows(s: dict[str, Any]) -> None:
    """An NVLink of n active links gets n rows of error counts (zeros unless given) and the
    totals in ``counters`` (``nvlink_replay``, ...)."""
    nv = s.get("nvlink")
    if not isinstance(nv, Mapping):
        return
    rows = [list(r) for r in nv.get("errors", ())] or [[0, 0, 0, 0]] * int(
        nv.get("links_active", 0)
    )
    s["nvlink"] = {**nv, "errors": rows}
    counters = s.setdefault("counters", {})
    for k, kind in enumerate(NVLINK_KINDS):
        name = f"nvlink_{kind}"
        if name not in counters:
            counters[name] = sum(r[k] for r in rows)


def _throttled(model: Any, device: int, now: float, s: dict[str, Any]) -> None:
    """The model's throttle, once it holds: clocks at its factor, its reason, hot."""
    t = getattr(model, "throttle", None)
    if t is None or not t.holds(device, now):
        return
    clocks = dict(s.get("clocks", {}))
    if clocks.get("sm_mhz") is not None:
        clocks["sm_mhz"] = int(clocks["sm_mhz"] * t.factor)
    clocks["reasons"] = sorted({*clocks.get("reasons", ()), t.reason})
    clocks["temperature_c"] = t.temperature_c
    s["clocks"] = clocks


def _healthy(model: Any, d: Any) -> dict[str, Any]:
    """The facts of a healthy device of ``d``'s kind (before a system file's ``nvml``)."""
    s: dict[str, Any] = {
        "name": d.name,
        "uuid": d.uuid,
        "serial": _serial(d.uuid),
        "pci_bus_id": d.pci_bus_id,
        "ecc_enabled": True,
        "ecc_pending": True,
        "ecc_volatile_corrected": 0,
        "ecc_volatile_uncorrected": 0,
        "persistence_mode": True,
        "mig_enabled": False,
        "clocks": {
            "sm_mhz": d.clock_khz // 1000,
            "sm_max_mhz": d.clock_khz // 1000,
            "memory_mhz": d.memory_clock_khz // 1000,
            "memory_max_mhz": d.memory_clock_khz // 1000,
            "reasons": [],
            "temperature_c": 38,
            "power_w": 120.0,
            "power_limit_w": 700.0,
        },
        "pci_device_id": d.pci_device_id,
        "counters": dict(HEALTHY_COUNTERS),
    }
    s.update(DEFAULTS_BY_NAME.get(d.name, OTHER_DEFAULTS))
    return s


def node_facts(model: Any, *, later: bool = False, now: float = 0.0) -> NodeFacts:
    """The simulated node's facts (``simulated=True``); see :func:`device_specs`."""
    return facts_from_dict(
        {
            "driver_version": f"{model.driver_version} (simulated)",
            "nvml_version": "13.580 (simulated)",
            "cuda_driver_version": model.cuda_driver,
            "devices": device_specs(model, later=later, now=now),
            "confidential_compute": confidential_compute(model),
        }
    )


def confidential_compute(model: Any) -> bool:
    """The model's Confidential Computing state: its ``nvml``'s ``confidential_compute``
    (not said: off, as on a node that never enabled it)."""
    return (getattr(model, "nvml", None) or {}).get("confidential_compute") is True


def _is_index(key: str, n: int) -> bool:
    """Whether the object key ``key`` is a device index below ``n`` (in decimal digits, never
    so long that Python refuses to read it)."""
    return key.isdecimal() and len(key) <= 9 and int(key) < n


def check_spec(nvml: Any, other_processes: Any, n: int, key: str = "nvml") -> None:
    """Validate a system file's ``nvml`` (or ``nvml_end``: ``key``) and ``other_processes``;
    ValueError naming the key."""
    node_keys = {"confidential_compute"} if key == "nvml" else set()
    if not isinstance(nvml, Mapping) or set(nvml) - {"device", "devices", *node_keys}:
        also = ", and 'confidential_compute' (true/false)" if node_keys else ""
        raise ValueError(
            f"{key} must be an object with 'device' (every device) and/or 'devices'{also}"
        )
    cc = nvml.get("confidential_compute", False)
    if not isinstance(cc, bool):
        raise ValueError(f"{key}.confidential_compute must be true or false, got {cc!r}")
    per = nvml.get("devices", {})
    if not isinstance(per, Mapping) or not all(_is_index(k, n) for k in per):
        raise ValueError(f"{key}.devices must map device indexes '0'..'{n - 1}' to facts")
    specs = [nvml.get("device", {}), *per.values()]
    try:
        facts_from_dict({"devices": specs})
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{key}: {exc}") from None
    if not isinstance(other_processes, Mapping):
        raise ValueError("other_processes must map device indexes to lists of process ids")
    for k, entry in other_processes.items():
        if not _is_index(k, n):
            raise ValueError(f"other_processes: {k[:40]!r} is not a device index '0'..'{n - 1}'")
        _check_processes(f"other_processes[{k!r}]", entry)


def _pids(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(p, int) and not isinstance(p, bool) and p > 0 for p in value
    )


def _check_processes(where: str, entry: Any) -> None:
    """A list of pids, or ``{"pids": [...], "from_s": a, "until_s": b}`` (a span of the
    run's virtual time)."""
    if isinstance(entry, Mapping):
        if set(entry) - {"pids", "from_s", "until_s"} or not _pids(entry.get("pids")):
            raise ValueError(
                f'{where} must be a list of process ids (> 0) or {{"pids": [...], "from_s": '
                'seconds, "until_s": seconds}'
            )
        for bound in ("from_s", "until_s"):
            v = entry.get(bound, 0.0)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1e9:
                raise ValueError(f"{where}.{bound} must be seconds in [0, 1e9], got {v!r}")
        return
    if not _pids(entry):
        raise ValueError(f"{where} must be a list of process ids (> 0)")


def link_factor(pcie: Any) -> float:
    """How fast a link trained as ``pcie`` runs against its maximum (1.0 when at it)."""
    link = parse_pcie(pcie)
    if None in (link.gen, link.width, link.max_gen, link.max_width):
        return 1.0
    now = LANE_RATE.get(link.gen or 0, 0.0) * (link.width or 0)
    most = LANE_RATE.get(link.max_gen or 0, 0.0) * (link.max_width or 0)
    return min(1.0, now / most) if now > 0 and most > 0 else 1.0


def scale_host_links(links: Sequence[Any], nvml: Mapping[str, Any]) -> tuple[Any, ...]:
    """``links`` (one HostLink per device) with each downtrained device's link scaled by
    :func:`link_factor` (see the module docstring)."""
    common = nvml.get("device", {})
    per = nvml.get("devices", {})
    out = []
    for i, link in enumerate(links):
        pcie = per.get(str(i), {}).get("pcie", common.get("pcie"))
        f = 1.0 if pcie is None else link_factor(pcie)
        if f < 1.0:

            def scaled(rate: Any, f: float = f) -> Any:
                return attrs.evolve(rate, ce=rate.ce * f, sm=rate.sm * f)

            link = attrs.evolve(link, h2d=scaled(link.h2d), d2h=scaled(link.d2h))
        out.append(link)
    return tuple(out)


def huge_pages(model: Any) -> tuple[int, int]:
    """(page bytes, free pages) of the simulated host."""
    hp = getattr(model, "huge_pages", None)
    return DEFAULT_HUGE_PAGES if hp is None else (int(hp[0]), int(hp[1]))
