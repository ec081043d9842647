"""``gpubw fleet --format json``: every finding with its figures, every fleet's statistics
per figure, the nodes set apart (schemas/fleet-v1.schema.json). Only formats."""

from __future__ import annotations

import math
from typing import Any

from gpubw.fleet.analysis import FleetReport
from gpubw.fleet.findings import Figure, Finding
from gpubw.fleet.reading import Device, Slot
from gpubw.fleet.stats import Fleet
from gpubw.model import schemas


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None


def slot_doc(s: Slot) -> dict[str, Any]:
    """Where a figure sits, as the JSON output names it (findings and trends alike)."""
    return {
        "testcase": s.testcase,
        "matrix": s.matrix,
        "kind": s.kind,
        "unit": s.unit,
        "size_bytes": s.size,
        "link": s.link,
        "row": s.row,
        "column": s.column,
    }


def _figure(f: Figure) -> dict[str, Any]:
    return slot_doc(f.slot) | {
        "value": _num(f.value),
        "median": _num(f.median),
        "ratio": _num(f.ratio),
        "z": _num(f.z),
    }


def _device(gpu: int | None, dev: Device | None) -> dict[str, Any] | None:
    if gpu is None or dev is None:
        return None
    return {"index": gpu, "model": dev.model, "uuid": dev.uuid, "pci_bus_id": dev.pci_bus_id}


def _finding(f: Finding) -> dict[str, Any]:
    return {
        "scope": f.scope,
        "what": f.describe(),
        "node": f.node,
        "source": f.source,
        "fleet": f.fleet,
        "gpu": _device(f.gpu, f.device),
        "peer": _device(f.peer, f.peer_device),
        "judged": f.judged,
        "low": len(f.figures),
        "worst": _figure(f.worst),
        "figures": [_figure(x) for x in f.figures],
    }


def _fleet(fleet: Fleet) -> dict[str, Any]:
    o = fleet.options
    stats = [
        slot_doc(s)
        | {
            "nodes": int(fleet.count[j]),
            "judged": bool(fleet.judged[j]),
            "median": _num(float(fleet.median[j])),
            "mad": _num(float(fleet.mad[j])),
            "low": int(fleet.low[:, j].sum()),
        }
        for j, s in enumerate(fleet.slots)
    ]
    return {
        "sku": fleet.sku,
        "options": {
            "sizes": list(o.sizes),
            "loops": o.loops,
            "samples": o.samples,
            "statistic": o.statistic,
            "simulated": o.simulated,
            "tool": o.tool,
            "flavour": o.flavour,
            "version": o.version,
        },
        "nodes": [
            {
                "node": e.node,
                "source": e.key.source,
                "node_from": e.key.node_from,
                "time": e.key.time.isoformat(),
                "digest": e.key.digest,
            }
            for e in fleet.entries
        ],
        "statistics": stats,
    }


def json_doc(report: FleetReport) -> dict[str, Any]:
    """The JSON document of ``gpubw fleet``."""
    s = report.settings
    return {
        "schema_version": schemas.VERSIONS[schemas.FLEET],
        "tool": "gpubw fleet",
        "threshold": s.threshold,
        "z": s.z,
        "min_nodes": s.min_nodes,
        "files": report.files,
        "nodes": report.nodes,
        "exit_code": report.exit_code,
        "findings": [_finding(f) for f in report.all_findings],
        "fleets": [_fleet(f) for f in report.fleets],
        "apart": [{"node": a.node, "source": a.source, "reason": a.reason} for a in report.apart],
    }
