"""``gpubw fleet --format openmetrics``: gauges for Prometheus, per node and GPU the ratio
of its worst figure to the fleet median, and the findings per node.

Series (OpenMetrics text, with ``# TYPE``, ``# UNIT``, ``# HELP`` and ``# EOF``; names and
label escaping as :mod:`gpubw.writers.openmetrics`: no ``host`` label, no empty label):

* ``gpubw_fleet_gpu_ratio{fleet, node, gpu, uuid, pci_bus_id}``: the lowest ratio to the
  fleet median among the GPU's judged figures (below 1 is slower; latency turned so);
* ``gpubw_fleet_node_ratio{fleet, node, stat="min"|"median"}``: the node's lowest and
  median ratio over its judged figures;
* ``gpubw_fleet_findings{node, scope}``: findings per node and scope;
* ``gpubw_fleet_nodes{fleet}``, ``gpubw_fleet_nodes_apart``, ``gpubw_fleet_exit_code``.

Written here rather than through prometheus-client (the report writer's optional extra):
a fleet's exposition is a few gauges a line each, and ``gpubw fleet`` needs no extra.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator

import numpy as np

from gpubw.fleet.analysis import FleetReport
from gpubw.fleet.stats import Fleet


def escape(value: str) -> str:
    """A label value as OpenMetrics writes it: backslash, double quote and newline
    escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _series(name: str, labels: dict[str, str], value: float) -> str:
    text = ",".join(f'{k}="{escape(v)}"' for k, v in labels.items() if v != "")
    return f"{name}{{{text}}} {value!r}" if text else f"{name} {value!r}"


def _family(name: str, help_text: str, unit: str = "") -> list[str]:
    lines = [f"# TYPE {name} gauge"]
    if unit:
        lines.append(f"# UNIT {name} {unit}")
    return [*lines, f"# HELP {name} {help_text}"]


def _gpu_ratios(fleet: Fleet) -> Iterator[tuple[int, int, float]]:
    """(node index, GPU, its lowest judged ratio)."""
    rows = np.array([s.row for s in fleet.slots], np.int64)
    cols = np.array([-1 if s.column is None else s.column for s in fleet.slots], np.int64)
    ratio = np.where(fleet.judged, fleet.ratio, np.nan)
    for gpu in sorted(set(rows.tolist())):
        mask = (rows == gpu) | (cols == gpu)
        with np.errstate(all="ignore"):
            part = ratio[:, mask]
            ok = ~np.all(np.isnan(part), axis=1)
            lowest = np.full(part.shape[0], np.nan)
            lowest[ok] = np.nanmin(part[ok], axis=1)
        for i in np.flatnonzero(ok):
            yield int(i), gpu, float(lowest[i])


def openmetrics(report: FleetReport) -> str:
    """The exposition of a fleet report (ends with ``# EOF``)."""
    gpu = _family(
        "gpubw_fleet_gpu_ratio",
        "Lowest ratio of a GPU's figures to the fleet median (below 1: slower)",
        "ratio",
    )
    node = _family(
        "gpubw_fleet_node_ratio",
        "Lowest and median ratio of a node's figures to the fleet median",
        "ratio",
    )
    nodes = _family("gpubw_fleet_nodes", "Nodes judged in the fleet")
    for fleet in report.fleets:
        nodes.append(_series("gpubw_fleet_nodes", {"fleet": fleet.sku}, float(len(fleet.entries))))
        for i, g, value in _gpu_ratios(fleet):
            e = fleet.entries[i]
            dev = e.table.device(g)
            labels = {
                "fleet": fleet.sku,
                "node": e.node,
                "gpu": str(g),
                "uuid": dev.uuid,
                "pci_bus_id": dev.pci_bus_id,
            }
            gpu.append(_series("gpubw_fleet_gpu_ratio", labels, value))
        ratio = np.where(fleet.judged, fleet.ratio, np.nan)
        with np.errstate(all="ignore"):
            for i, e in enumerate(fleet.entries):
                row = ratio[i][~np.isnan(ratio[i])]
                if row.size:
                    for stat, value in (("min", row.min()), ("median", np.median(row))):
                        node.append(
                            _series(
                                "gpubw_fleet_node_ratio",
                                {"fleet": fleet.sku, "node": e.node, "stat": stat},
                                float(value),
                            )
                        )
    counts = Counter((f.node, f.scope) for f in report.all_findings)
    found = _family("gpubw_fleet_findings", "Findings of a node, by scope")
    found += [
        _series("gpubw_fleet_findings", {"node": n, "scope": s}, float(c))
        for (n, s), c in sorted(counts.items())
    ]
    lines = gpu + node + found + nodes
    lines += _family("gpubw_fleet_nodes_apart", "Nodes or reports set apart, not judged")
    lines.append(_series("gpubw_fleet_nodes_apart", {}, float(len(report.apart))))
    lines += _family("gpubw_fleet_exit_code", "gpubw fleet's exit status: 0 within, 3 findings")
    lines.append(_series("gpubw_fleet_exit_code", {}, float(report.exit_code)))
    return "\n".join(x for x in lines if not _nan_line(x)) + "\n# EOF\n"


def _nan_line(line: str) -> bool:
    return not line.startswith("#") and not math.isfinite(float(line.rsplit(" ", 1)[1]))
