"""The GPUs' trends (``gpubw fleet --db FILE --since SPAN``) as text and as the JSON
output's ``history`` member (schemas/fleet-v1.schema.json). Only formats: the trends are
:mod:`gpubw.fleet.trends`'."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

from gpubw.fleet.document import slot_doc
from gpubw.fleet.history import StoredGpu
from gpubw.fleet.trends import MIN_EARLIER, Change, GpuTrend

#: GPUs the text lists that did not fall (``-v``: every one)
TEXT_STEADY = 10


def _when(t: datetime.datetime) -> str:
    return t.isoformat(timespec="seconds")


def change_text(c: Change) -> str:
    """One figure against its own past, in words."""
    s = c.slot
    place = f"GPU {s.row}" if s.column is None else f"GPU {s.row} - GPU {s.column}"
    matrix = "" if s.matrix == s.testcase else f" [{s.matrix}]"
    return (
        f"{s.testcase}{matrix} {place} ({s.link}): {c.latest:.4g} {s.unit} on "
        f"{_when(c.when)}, its median {c.median:.4g} {s.unit} over {c.earlier} earlier "
        f"report(s), ratio {c.ratio:.3f}"
    )


def _gpu_line(t: GpuTrend) -> str:
    g = t.gpu
    trend = "no trend yet" if t.ratio is None else f"trend {t.ratio:.3f}"
    mark = "FELL " if t.fell else ""
    return (
        f"  {mark}{g.node} GPU {g.ordinal} ({g.device.uuid or 'no UUID'}): {t.reports} "
        f"report(s) {_when(t.first)} .. {_when(t.last)}, {trend}"
    )


def trend_lines(trends: Sequence[GpuTrend], threshold: float, verbose: bool) -> list[str]:
    """The text: a line per GPU that fell (with its figures that fell: ``verbose``, all),
    then the steadiest others (``verbose``: every GPU)."""
    fell = [t for t in trends if t.fell]
    lines = [
        "",
        f"history: {len(trends)} GPU(s), {len(fell)} fell more than {threshold * 100:g} % "
        f"under their own median (the latest figure against the earlier ones in the "
        f"window; a figure needs {MIN_EARLIER} earlier reports)",
    ]
    for t in fell:
        lines.append(_gpu_line(t))
        shown = t.fell if verbose else t.fell[:3]
        lines += [f"     {change_text(c)}" for c in shown]
        if len(t.fell) > len(shown):
            lines.append(f"     ... and {len(t.fell) - len(shown)} more figure(s) (-v)")
    steady = [t for t in trends if not t.fell]
    listed = steady if verbose else steady[:TEXT_STEADY]
    lines += [_gpu_line(t) for t in listed]
    if len(steady) > len(listed):
        lines.append(f"  ... and {len(steady) - len(listed)} more GPU(s) within their past (-v)")
    return lines


def _gpu(g: StoredGpu | None) -> dict[str, Any] | None:
    if g is None:
        return None
    d = g.device
    return {
        "node": g.node,
        "index": g.ordinal,
        "model": d.model,
        "uuid": d.uuid,
        "pci_bus_id": d.pci_bus_id,
    }


def _change(c: Change | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {
        **slot_doc(c.slot),
        "peer": _gpu(c.peer),
        "latest": c.latest,
        "time": _when(c.when),
        "median": c.median,
        "earlier": c.earlier,
        "ratio": c.ratio,
    }


def trend_doc(trends: Sequence[GpuTrend]) -> dict[str, Any]:
    """The JSON output's ``history`` member: every GPU's trend, those that fell first."""
    return {
        "min_earlier": MIN_EARLIER,
        "fell": sum(1 for t in trends if t.fell),
        "gpus": [
            {
                "gpu": _gpu(t.gpu),
                "reports": t.reports,
                "first": _when(t.first),
                "last": _when(t.last),
                "trend": t.ratio,
                "worst": _change(t.worst),
                "fell": [_change(c) for c in t.fell],
            }
            for t in trends
        ],
    }
