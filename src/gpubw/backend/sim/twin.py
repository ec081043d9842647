"""A twin of a measured node: the :class:`SimSystem` a report describes (``--simulate
REPORT``, docs/simulate.md "A twin of a measured node").

A report (gpubw's JSON, or nvbandwidth's own JSON of v0.8 or v0.10, both read by
:mod:`gpubw.model.report_io`) names the devices and holds the figures the node measured.
:func:`first_guess` builds the model from them: the devices and their NVML facts from the
report's device and NVML sections, each host link direction from the host <-> device
figures, each peer link from the device-to-device figures, the local copy rates from the
device-local testcases, the latencies from the latency testcases; each rate is the measured
figure itself (the model's inverse where one copy runs alone), each both-ways factor the ratio
of a bidirectional figure to its one-way one. What the report did not measure is not invented:
without a peer testcase the twin has no peer access; :attr:`Twin.missing` says what it lacks,
and the run shows it as one warning line.

Where figures come from several copies at once (all-to-host, host-to-all, bidirectional),
the model is not simply inverted: :mod:`gpubw.backend.sim.twin_fit` names the parameter each
figure steers (a :class:`~gpubw.backend.sim.twin_fit.Knob`) and corrects it from a simulated
run of the report's testcases (the runner's :mod:`gpubw.runner.twin` runs them), a few times,
deterministically. Every device attribute a report lacks (nvbandwidth's JSON gives names and
PCI addresses only) comes from the preset device of the same name, else a generic one, and
:attr:`Twin.missing` says so.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from gpubw.backend.base import DeviceInfo
from gpubw.backend.sim.model import HostLink, Latency, Rate, SimSystem
from gpubw.model.errors import GpubwError, UsageError
from gpubw.model.results import KIND_BANDWIDTH, KIND_LATENCY, Report, Status

#: (testcase key, matrix key, row, column): one measured figure of a report
CellKey = tuple[str, str, int, int]

#: the top-level keys that make a JSON document a gpubw report (nvbandwidth's has
#: "nvbandwidth")
REPORT_KEYS = frozenset({"schema_version", "tool", "testcases"})


def classify(doc: Any, system_keys: frozenset[str] | set[str]) -> str | None:
    """What a JSON document is, by its content: ``"report"`` (gpubw's JSON report, or
    nvbandwidth's JSON), ``"system"`` (a simulated system file: an object with one of its
    keys at least; anything not an object too, which its checks refuse) or None (an object
    that is neither)."""
    if not isinstance(doc, Mapping):
        return "system"  # its own checks say a system is an object
    if isinstance(doc.get("nvbandwidth"), Mapping) or set(doc) >= REPORT_KEYS:
        return "report"
    if not doc or set(doc) & set(system_keys):
        return "system"  # its own checks name a key it does not know
    return None


def report_of(doc: Mapping[str, Any], source: str) -> tuple[Report, str]:
    """The Report a decoded document holds and the name of its format; UsageError naming
    ``source`` if it is not a valid one."""
    try:
        if "nvbandwidth" in doc:
            from gpubw.model.nvbandwidth_json import to_report

            report = to_report(doc)
            version = report.tool_version or doc["nvbandwidth"].get("git_version") or "?"
            return report, f"nvbandwidth {version} JSON"
        from gpubw.model.report_check import validate
        from gpubw.model.report_io import report_from_dict

        validate(doc, what=source, closed=False)
        return report_from_dict(doc), f"gpubw {doc.get('tool_version', '?')} JSON report"
    except UsageError as exc:
        raise UsageError(f"{source}: not a report gpubw can build a twin from: {exc}") from None
    except GpubwError as exc:
        first = str(exc).splitlines()[0]
        raise UsageError(f"{source}: not a valid gpubw report: {first}") from None


def measured_cells(report: Report) -> dict[CellKey, float]:
    """Every figure the report measured: the cells of its Passed testcases (bandwidths and
    latencies; N/A cells left out), the first of each testcase key (a sweep's first size)."""
    cells: dict[CellKey, float] = {}
    seen: set[str] = set()
    for t in report.testcases:
        if t.status is not Status.PASSED or t.key in seen:
            continue
        seen.add(t.key)
        for m in t.matrices:
            if m.kind not in (KIND_BANDWIDTH, KIND_LATENCY):
                continue
            for r, row in enumerate(m.values):
                for c, v in enumerate(row):
                    if v is not None and math.isfinite(v) and v > 0:
                        cells[(t.key, m.key, r, c)] = float(v)
    return cells


@attrs.frozen
class Fit:
    """How the fit ended: iterations run, the worst cell and its deviation (simulated /
    measured - 1) in the last simulated run."""

    iterations: int
    worst_cell: CellKey | None
    worst: float


@attrs.frozen(eq=False)
class Twin:
    """Where a twin's model came from: the report (``source``, its ``format``), the figures it
    measured (``cells``, the size of each testcase in ``sizes``), what the report lacks
    (``missing``: phrases of one warning line), what came from elsewhere (``assumed``), and
    the fit (None until :mod:`gpubw.runner.twin` ran it)."""

    source: str
    format: str
    cells: Mapping[CellKey, float]
    sizes: Mapping[str, int | None]
    missing: tuple[str, ...] = ()
    assumed: tuple[str, ...] = ()
    fit: Fit | None = None

    @property
    def testcases(self) -> tuple[str, ...]:
        """The testcases whose figures the report holds, in its order."""
        return tuple(dict.fromkeys(k[0] for k in self.cells))

    def warning(self) -> str | None:
        """The one warning line of what the report lacks (None: nothing)."""
        if not self.missing:
            return None
        return f"twin of {self.source}: the report has {'; '.join(self.missing)}"

    def summary(self, model: SimSystem) -> dict[str, Any]:
        """What was inferred, as plain JSON data (``gpubw info --simulate REPORT``)."""
        return inferred(self, model)


# -- building the first guess -------------------------------------------------------------
def _values(cells: Mapping[CellKey, float], key: str, where: Any = None) -> list[float]:
    """The figures of testcase ``key`` (every matrix), or those at (row, column) ``where``."""
    return [
        v for (t, _m, r, c), v in cells.items() if t == key and (where is None or (r, c) == where)
    ]


def _main(cells: Mapping[CellKey, float], key: str) -> list[float]:
    """The figures of testcase ``key``'s own matrix (the one named as the testcase)."""
    return [v for (t, m, _r, _c), v in cells.items() if t == m == key]


def _first(cells: Mapping[CellKey, float], key: str, where: tuple[int, int]) -> float | None:
    found = [v for (t, m, r, c), v in cells.items() if t == key and m == key and (r, c) == where]
    return found[0] if found else None


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _factor(both: float | None, one: float | None) -> float | None:
    if both is None or not one:
        return None
    return min(1.0, max(0.05, both / one))


#: makes the device a report's record starts from: (system name, ordinal) -> an H200
BaseDevice = Callable[[str, int], DeviceInfo]


def _device(
    record: Mapping[str, Any], i: int, name: str, base_device: BaseDevice, assumed: list[str]
) -> DeviceInfo:
    """Device ``i`` from its report record; attributes it lacks from the preset H200 (the
    presets hand it in: this module never imports them), said in ``assumed``."""
    base = base_device(name, i)
    if record.get("name") != base.name:
        base = attrs.evolve(base, name=str(record.get("name") or "GPU"), pci_device_id=None)
    known = {f.name for f in attrs.fields(DeviceInfo)}
    given = {k: record[k] for k in known if record.get(k) is not None}
    lacking = sorted(known - set(given) - {"ordinal", "numa_node", "pci_device_id"})
    if lacking and f"device attributes ({', '.join(lacking)})" not in " ".join(assumed):
        assumed.append(f"device attributes ({', '.join(lacking)}) of an H200")
    if "compute_capability" in given:
        given["compute_capability"] = tuple(given["compute_capability"])
    if "local_cpus" in given:
        given["local_cpus"] = tuple(given["local_cpus"])
    pci = str(given.get("pci_bus_id", base.pci_bus_id))
    if pci.count(":") == 2 and "." not in pci:  # nvbandwidth's domain:bus:device
        pci += ".0"
    given["pci_bus_id"] = pci.lower()
    given["uuid"] = str(given.get("uuid") or base.uuid)
    return attrs.evolve(base, **{**given, "ordinal": i})


def _host_link(cells: Mapping[CellKey, float], d: int, missing: list[str]) -> HostLink:
    """Device ``d``'s host link: each direction's measured figure, the factors from the
    bidirectional figures (the model's own where unmeasured)."""
    at = (0, d)
    h2d_ce = _first(cells, "host_to_device_memcpy_ce", at)
    d2h_ce = _first(cells, "device_to_host_memcpy_ce", at)
    h2d_sm = _first(cells, "host_to_device_memcpy_sm", at)
    d2h_sm = _first(cells, "device_to_host_memcpy_sm", at)
    if h2d_ce is None or d2h_ce is None:
        note = "no host <-> device copy engine testcase (its host links are the H200 preset's)"
        if note not in missing:
            missing.append(note)
        h2d_ce, d2h_ce = h2d_ce or 55.5e9, d2h_ce or 55.3e9
    if h2d_sm is None or d2h_sm is None:
        note = "no host <-> device SM testcase (SM host rates as the copy engine's)"
        if note not in missing:
            missing.append(note)
        h2d_sm, d2h_sm = h2d_sm or h2d_ce, d2h_sm or d2h_ce
    d2h_both = _factor(_first(cells, "device_to_host_bidirectional_memcpy_ce", at), d2h_ce)
    h2d_both = _factor(_first(cells, "host_to_device_bidirectional_memcpy_ce", at), h2d_ce)
    sm_both = _factor(
        _first(cells, "host_to_device_bidirectional_memcpy_sm", at), min(h2d_sm, d2h_sm)
    )
    return HostLink(
        h2d=Rate(h2d_ce, h2d_sm),
        d2h=Rate(d2h_ce, d2h_sm),
        bidirectional_factor=d2h_both or 0.9,
        h2d_bidirectional_factor=h2d_both,
        sm_load_factor=sm_both,
    )


_PEER_KEYS = ("device_to_device_memcpy_read", "device_to_device_memcpy_write")


def _peers(
    cells: Mapping[CellKey, float], n: int, missing: list[str]
) -> dict[tuple[int, int], Rate]:
    """Peer links where the report measured a device-to-device copy: read[b][a] and
    write[a][b] are both a copy from a's memory to b's."""
    peers: dict[tuple[int, int], Rate] = {}
    for a in range(n):
        for b in range(n):
            if a == b:
                continue
            rate = []
            for engine in ("ce", "sm"):
                read, write = (f"{k}_{engine}" for k in _PEER_KEYS)
                rate.append(_mean([*_values(cells, read, (b, a)), *_values(cells, write, (a, b))]))
            ce, sm = rate
            if ce is not None or sm is not None:
                peers[(a, b)] = Rate(ce or sm or 0.0, sm or ce or 0.0)
    if n > 1 and not peers:
        missing.append("no peer (device-to-device) testcase, so the twin has no peer access")
    return peers


def first_guess(doc: Mapping[str, Any], source: str, base_device: BaseDevice) -> SimSystem:
    """The twin's model before the fit: every figure taken as the parameter it measures
    directly; the model's ``origin`` is the :class:`Twin`. ``base_device`` gives the device
    attributes a report lacks."""
    report, fmt = report_of(doc, source)
    cells = measured_cells(report)
    if not report.devices:
        raise UsageError(f"{source}: the report lists no devices: no twin can be built from it")
    if not cells:
        raise UsageError(f"{source}: the report holds no measured figure: no twin can be built")
    name = f"twin:{os.path.basename(source)}"
    missing: list[str] = []
    assumed: list[str] = []
    devices = tuple(_device(r, i, name, base_device, assumed) for i, r in enumerate(report.devices))
    n = len(devices)
    links = tuple(_host_link(cells, d, missing) for d in range(n))
    peers = _peers(cells, n, missing)
    model = SimSystem(
        name=name,
        devices=devices,
        host_links=links,
        peers=peers,
        **_peer_factors(cells, peers),
        **_local(cells, missing),
        **host_memory(cells, links),
        **_versions(report),
        latency=_latency(cells),
        nvml=_nvml(report),
    )
    sizes: dict[str, int | None] = {}
    for t in report.testcases:  # the first size of each (a sweep's figures: its first size)
        if t.status is Status.PASSED:
            sizes.setdefault(t.key, t.size)
    origin = Twin(source, fmt, cells, sizes, tuple(missing), tuple(assumed))
    return attrs.evolve(model, origin=origin)


def _peer_factors(cells: Mapping[CellKey, float], peers: Mapping[Any, Rate]) -> dict[str, Any]:
    """The peer links' both-ways factors: a bidirectional copy's figures (each direction's,
    not the total) over the one-way ones: copy engines and SM stores, and SM loads (which
    cross the busy link: the load factor)."""
    if not peers:
        return {}

    def both(key: str) -> list[float]:
        return [v for (t, m, _r, _c), v in cells.items() if t == key and not m.endswith("_total")]

    prefix = "device_to_device_bidirectional_memcpy_"
    plain = _mean([*both(prefix + "read_ce"), *both(prefix + "write_ce")])
    loads = _mean(both(prefix + "read_sm"))
    out: dict[str, Any] = {}
    factor = _factor(plain, _mean([r.ce for r in peers.values()]))
    if factor is not None:
        out["peer_bidirectional_factor"] = factor
    factor = _factor(loads, _mean([r.sm for r in peers.values()]))
    if factor is not None:
        out["peer_sm_load_factor"] = factor
    return out


def _local(cells: Mapping[CellKey, float], missing: list[str]) -> dict[str, Any]:
    """The device-local rates: copies (CE, SM), TMA copies, one-way reads and writes."""
    ce = _mean(_main(cells, "device_local_copy"))
    sm = _mean(_main(cells, "device_local_copy_sm"))
    if ce is None and sm is None:
        missing.append("no device-local copy testcase (local copies as the H200's)")
        return {}
    if sm is None:
        missing.append("no SM device-local copy testcase (SM local copies as the CE's)")
    out: dict[str, Any] = {"local_copy": Rate(ce or sm or 0.0, sm or ce or 0.0)}
    for key, field in (
        ("device_local_copy_tma", "local_tma"),
        ("device_local_read_sm", "local_read"),
        ("device_local_write_sm", "local_write"),
    ):
        value = _mean(_main(cells, key))
        if value is not None:
            out[field] = value
    return out


def _sum(cells: Mapping[CellKey, float], key: str, n: int) -> float | None:
    """The sum over the devices of testcase ``key``'s own figures (None unless all)."""
    values = [_first(cells, key, (0, d)) for d in range(n)]
    return None if any(v is None for v in values) else sum(v or 0.0 for v in values)


def host_memory(cells: Mapping[CellKey, float], links: Sequence[HostLink]) -> dict[str, Any]:
    """Host memory's budgets, inverted from the figures where every GPU reads and writes host
    memory at once (nothing with one GPU: it cannot show a shared limit). With reads summing
    to A while writes sum to B (copy engines), a byte written costing x bytes of the reading
    budget R: R = A + x B; the SM figures (S_h reads, S_d writes, at their link rates) need
    S_h + x S_d <= R, and both one-way tests U_h <= R, x U_d <= R: x is the least that holds
    them (30 % over: the SM figures stay clear of the limit). Writes keep their link rates
    where memory binds: weight B / A (10 % over)."""
    n = len(links)
    a = _sum(cells, "host_to_all_bidirectional_memcpy_ce", n)
    b = _sum(cells, "all_to_host_bidirectional_memcpy_ce", n)
    if n < 2 or a is None or b is None:
        return {"host_memory_bandwidth": None}
    reads = sum(link.h2d.ce * (link.h2d_bidirectional_factor or link.bidirectional_factor)
                for link in links)  # fmt: skip
    if a >= 0.97 * reads:
        return {"host_memory_bandwidth": None}  # reads ran at their link rates: no limit seen
    s_h = _sum(cells, "host_to_all_bidirectional_memcpy_sm", n) or 0.0
    s_d = _sum(cells, "all_to_host_bidirectional_memcpy_sm", n) or 0.0
    u_h = _sum(cells, "host_to_all_memcpy_ce", n) or 0.0
    x = max(0.01, (u_h - a) / b, (s_h - a) / (b - s_d) if b > s_d else 0.0) * 1.3
    budget = a + x * b
    return {
        "host_memory_bandwidth": budget,
        "host_memory_write_bandwidth": budget / x,
        "host_memory_write_weight": min(1e3, max(1.0, 1.1 * b / a)),
    }


def _latency(cells: Mapping[CellKey, float]) -> Latency:
    base = Latency()
    host = _mean(_values(cells, "host_device_latency_sm"))
    peer = _mean(_values(cells, "device_to_device_latency_sm"))
    return attrs.evolve(base, host=host or base.host, peer=peer or base.peer)


def _versions(report: Report) -> dict[str, Any]:
    v = report.versions or {}
    out: dict[str, Any] = {}
    if v.get("driver"):
        out["driver_version"] = str(v["driver"])
    if isinstance(v.get("cuda_driver"), int):
        out["cuda_driver"] = v["cuda_driver"]
    return out


#: NVML facts a twin keeps from a report's device records (the rest describe the moment:
#: clocks, processes and counters of that run)
_FACTS = ("name", "uuid", "serial", "pci_bus_id", "vbios", "pcie", "nvlink", "ecc_enabled",
          "ecc_pending", "persistence_mode", "mig_enabled", "pci_device_id")  # fmt: skip
_NVLINK = ("links_active", "links_total", "speed_mbps", "versions")


def _nvml(report: Report) -> dict[str, Any]:
    """The model's ``nvml`` facts from the report's device records and NVML section: names,
    UUIDs, PCI bus ids, PCIe, NVLink, ECC, persistence, MIG, Confidential Computing."""
    devices: dict[str, Any] = {}
    for i, record in enumerate(report.devices):
        facts = record.get("nvml")
        if not isinstance(facts, Mapping):
            continue
        kept = {k: facts[k] for k in _FACTS if facts.get(k) is not None}
        if isinstance(kept.get("nvlink"), Mapping):
            kept["nvlink"] = {k: kept["nvlink"][k] for k in _NVLINK if k in kept["nvlink"]}
        if isinstance(kept.get("pcie"), Mapping):
            kept["pcie"] = {k: v for k, v in kept["pcie"].items() if v is not None}
        devices[str(i)] = kept
    out: dict[str, Any] = {"devices": devices} if devices else {}
    node = report.nvml if isinstance(report.nvml, Mapping) else {}
    if isinstance(node.get("confidential_compute"), bool):
        out["confidential_compute"] = node["confidential_compute"]
    return out


def cell_name(key: CellKey) -> str:
    """``testcase/matrix[row][column]`` (the matrix only where it differs)."""
    t, m, r, c = key
    return f"{t}{'' if m == t else '/' + m}[{r}][{c}]"


def inferred(twin: Twin, model: SimSystem) -> dict[str, Any]:
    """What a twin inferred from its report, as plain JSON data (bytes/s, seconds)."""
    fit = twin.fit
    return {
        "source": twin.source,
        "format": twin.format,
        "host_links": [
            {"device": d, "h2d_ce": link.h2d.ce, "h2d_sm": link.h2d.sm, "d2h_ce": link.d2h.ce,
             "d2h_sm": link.d2h.sm, "bidirectional_factor": link.bidirectional_factor,
             "h2d_bidirectional_factor": getattr(link, "h2d_bidirectional_factor", None),
             "sm_load_factor": getattr(link, "sm_load_factor", None)}
            for d, link in enumerate(model.host_links)
        ],
        "peers": [
            {"from": a, "to": b, "ce": rate.ce, "sm": rate.sm}
            for (a, b), rate in sorted(model.peers.items())
        ],
        "peer_bidirectional_factor": model.peer_bidirectional_factor if model.peers else None,
        "peer_sm_load_factor": getattr(model, "peer_sm_load_factor", None) if model.peers else None,
        "local_copy": {"ce": model.local_copy.ce, "sm": model.local_copy.sm,
                       "tma": model.local_tma, "read": model.local_read,
                       "write": model.local_write},
        "host_memory_bandwidth": model.host_memory_bandwidth,
        "host_memory_write_bandwidth": getattr(model, "host_memory_write_bandwidth", None),
        "latency": {"host": model.latency.host, "peer": model.latency.peer,
                    "local": model.latency.local},
        "measured_cells": len(twin.cells),
        "missing": list(twin.missing),
        "assumed": list(twin.assumed),
        "fit": None if fit is None else {
            "iterations": fit.iterations,
            "worst_cell": None if fit.worst_cell is None else cell_name(fit.worst_cell),
            "worst_deviation": fit.worst,
        },
    }  # fmt: skip
