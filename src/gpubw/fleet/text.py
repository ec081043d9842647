"""``gpubw fleet``'s text: what was judged, the worst findings first (each with its node,
GPU, UUID and PCI bus id, the worst figure, the fleet's median and the ratio), then per
fleet and testcase the fleet's statistics, then the nodes set apart. Only formats."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpubw.fleet.analysis import FleetReport
from gpubw.fleet.findings import Figure, Finding
from gpubw.fleet.reading import Device, Slot
from gpubw.fleet.stats import Fleet
from gpubw.model.console import printable_lines
from gpubw.model.sizes import format_size

#: findings the text lists (``-v``: all, with their figures)
TEXT_FINDINGS = 25


def where(slot: Slot) -> str:
    """The figure's place in words: ``GPU 3``, ``GPU 1 - GPU 5``."""
    if slot.column is None:
        return f"GPU {slot.row}"
    return f"GPU {slot.row} - GPU {slot.column}"


def size_text(size: int | None) -> str:
    return "-" if size is None else format_size(size)


def figure_text(f: Figure) -> str:
    """One figure: testcase, matrix, place, size, value, median, ratio, z."""
    s = f.slot
    matrix = "" if s.matrix == s.testcase else f" [{s.matrix}]"
    return (
        f"{s.testcase}{matrix} {where(s)} ({s.link}, {size_text(s.size)}): "
        f"{f.value:.4g} {s.unit}, fleet median {f.median:.4g} {s.unit}, "
        f"ratio {f.ratio:.3f}, z {f.z:.1f}"
    )


def device_text(gpu: int | None, dev: Device | None) -> str:
    if gpu is None or dev is None:
        return ""
    parts = [p for p in (dev.model, dev.uuid, dev.pci_bus_id) if p]
    return f"GPU {gpu}: " + ", ".join(parts or ["(not described by the report)"])


def finding_lines(n: int, f: Finding, verbose: bool) -> list[str]:
    """A finding: what is slow, how many of its figures are low, its devices, the worst
    figure (``verbose``: every figure)."""
    lines = [
        f"{n:>3}. {f.describe()}: {len(f.figures)} of {f.judged} figure(s) low, "
        f"worst ratio {f.worst.ratio:.3f} (z {f.worst.z:.1f})"
    ]
    for text in (device_text(f.gpu, f.device), device_text(f.peer, f.peer_device)):
        if text:
            lines.append(f"     {text}")
    shown = f.figures if verbose else f.figures[:1]
    lines += [f"     {'worst: ' if i == 0 else ''}{figure_text(x)}" for i, x in enumerate(shown)]
    lines.append(f"     report: {f.source}")
    return lines


def _testcase_lines(fleet: Fleet) -> list[str]:
    """Per testcase and matrix: figures per node, nodes, the median of the medians, the
    median spread (MAD / median), the lowest ratio and the low figures."""
    groups: dict[tuple[str, str, int | None, str], list[int]] = {}
    for j, s in enumerate(fleet.slots):
        groups.setdefault((s.testcase, s.matrix, s.size, s.unit), []).append(j)
    lines = [
        f"  {'matrix':<58} {'size':>8} {'figs':>4} {'nodes':>5} {'median':>10} {'MAD %':>6} "
        f"{'lowest':>6} {'low':>4}"
    ]
    with np.errstate(all="ignore"):
        for (_, matrix, size, unit), cols in groups.items():
            idx = np.asarray(cols)
            med = float(np.nanmedian(fleet.median[idx]))
            spread = float(np.nanmedian(fleet.mad[idx] / np.abs(fleet.median[idx]))) * 100
            ratios = fleet.ratio[:, idx][:, fleet.judged[idx]]
            lowest = (
                f"{float(np.nanmin(ratios)):6.3f}"
                if ratios.size and not np.all(np.isnan(ratios))
                else f"{'-':>6}"
            )
            nodes = int(np.max(fleet.count[idx]))
            low = int(fleet.low[:, idx].sum())
            lines.append(
                f"  {matrix:<58} {size_text(size):>8} {len(cols):>4} {nodes:>5} "
                f"{med:>10.4g} {spread:>6.2f} {lowest} {low:>4}  {unit}"
            )
    return lines


def text(report: FleetReport, verbose: bool = False) -> str:
    """The whole text of ``gpubw fleet``."""
    s = report.settings
    found = report.all_findings
    lines = [
        f"gpubw fleet: {report.nodes} node(s) judged in {len(report.fleets)} fleet(s), "
        f"from {report.files} report file(s); {len(report.apart)} set apart",
        f"a figure is low when more than {s.threshold * 100:g} % under the fleet median or "
        f"its robust z is below {s.z:g} (a finding needs two such figures unless one is "
        f"beyond {s.threshold * 100:g} %)",
    ]
    for fleet in report.fleets:
        lines.append(f"fleet {fleet.sku}: {len(fleet.entries)} node(s), {fleet.options.describe()}")
    named = [e.node for fleet in report.fleets for e in fleet.entries if e.key.node_from == "file"]
    if named:
        lines.append(
            f"note: {len(named)} node(s) named after their report file (nvbandwidth's JSON "
            f"names no host): {', '.join(named[:10])}{' ...' if len(named) > 10 else ''}"
        )
    lines += [
        "",
        f"{len(found)} finding(s)"
        + (", worst first:" if found else ": every node within its fleet"),
    ]
    limit = len(found) if verbose else TEXT_FINDINGS
    for n, f in enumerate(found[:limit], 1):
        lines += finding_lines(n, f, verbose)
    if len(found) > limit:
        lines.append(f"... and {len(found) - limit} more (-v or --format json lists every one)")
    for fleet in report.fleets:
        lines += ["", f"fleet {fleet.sku} ({len(fleet.entries)} nodes), per testcase:"]
        lines += _testcase_lines(fleet)
    lines += _apart_lines(report)
    # host names, paths, device and testcase names come from the files: a control
    # character in one (a CR LF, an ESC) is shown escaped and cannot start a line
    return "\n".join(printable_lines(lines)) + "\n"


def _apart_lines(report: FleetReport) -> list[str]:
    if not report.apart:
        return []
    lines = ["", f"{len(report.apart)} node(s) or report(s) set apart, not judged:"]
    lines += [f"  {a.node}: {a.reason} ({a.source})" for a in report.apart]
    return lines


__all__: Sequence[str] = ("figure_text", "text", "where")
