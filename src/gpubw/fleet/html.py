"""``gpubw fleet --format html``: one self-contained page for people (no web server, no
external URL: its images are PNGs inlined as base64 ``data:`` URLs, its style inline).

The page holds, per fleet, a heatmap of nodes x testcases coloured by each node's ratio to
the fleet median (the testcase's worst figure: one slow pair shows), then the findings as
a table, then each finding's matrix (the testcase and matrix of its worst figure) beside
the fleet's median matrix of the same cells, and with ``--db --since`` each GPU's trend.
Every name a report brought (host names, testcases, GPU models, UUIDs, paths) is escaped
with :func:`html.escape`. Only formats: the statistics are the
:class:`~gpubw.fleet.analysis.FleetReport`'s.

matplotlib (an optional dependency, ``pip install 'gpubw[plot]'``) draws the images with
its Agg backend; without it :func:`require_matplotlib` is a one-line UsageError (exit 2).
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from typing import Any

import numpy as np

from gpubw.fleet.analysis import FleetReport
from gpubw.fleet.findings import Finding
from gpubw.fleet.reading import Slot
from gpubw.fleet.stats import Fleet
from gpubw.fleet.trends import GpuTrend
from gpubw.model.errors import UsageError

#: what ``--format html`` says when matplotlib is missing
HINT = "gpubw fleet --format html needs matplotlib: pip install 'gpubw[plot]'"
#: the heatmap's rows at most (the lowest nodes first; the page says how many are left out)
HEATMAP_NODES = 100
#: the findings drawn at most (worst first; the table lists every one)
DRAWN_FINDINGS = 50
#: the resolution of the images
DPI = 80

_STYLE = (
    "body{font-family:sans-serif;margin:1.5em;color:#222}"
    "table{border-collapse:collapse;margin:.5em 0}"
    "td,th{border:1px solid #bbb;padding:.2em .5em;text-align:left;font-size:90%}"
    "th{background:#eee}.low{color:#b00;font-weight:bold}img{max-width:100%}"
)


def require_matplotlib() -> Any:
    """matplotlib's pyplot on the Agg backend; UsageError (:data:`HINT`) without it."""
    try:
        import matplotlib
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] == "matplotlib":
            raise UsageError(HINT) from None
        raise
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(plt: Any, fig: Any) -> str:
    """The figure as an ``<img>`` of a base64 PNG; the figure is closed."""
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=DPI)
    finally:
        plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="" src="data:image/png;base64,{data}">'


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _table(head: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A table; every cell escaped."""
    out = ["<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    out += ["<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows]
    return "\n".join(out) + "</table>"


# -- the heatmap -------------------------------------------------------------------------


def node_ratios(fleet: Fleet) -> tuple[list[str], Any]:
    """The testcases of a fleet and its nodes x testcases matrix of ratios to the fleet
    median (each the testcase's lowest judged figure; NaN where a node has none)."""
    testcases = list(dict.fromkeys(s.testcase for s in fleet.slots))
    out = np.full((len(fleet.entries), len(testcases)), np.nan)
    with np.errstate(all="ignore"):
        for t, name in enumerate(testcases):
            cols = [j for j, s in enumerate(fleet.slots) if s.testcase == name and fleet.judged[j]]
            if cols:
                block = fleet.ratio[:, cols]
                has = ~np.all(np.isnan(block), axis=1)
                out[has, t] = np.nanmin(block[has], axis=1)
    return testcases, out


def _norm(plt: Any, threshold: float) -> Any:
    from matplotlib.colors import TwoSlopeNorm

    return TwoSlopeNorm(vmin=1.0 - 2 * threshold, vcenter=1.0, vmax=1.0 + threshold)


def heatmap(plt: Any, fleet: Fleet, threshold: float) -> tuple[str, int]:
    """The fleet's heatmap as an ``<img>``, and how many nodes it shows (the lowest
    :data:`HEATMAP_NODES`)."""
    testcases, ratios = node_ratios(fleet)
    worst = np.where(
        np.all(np.isnan(ratios), axis=1), np.inf, np.nanmin(ratios, axis=1, initial=np.inf)
    )
    order = np.argsort(worst, kind="stable")[:HEATMAP_NODES]
    shown = ratios[order]
    fig, ax = plt.subplots(figsize=(2.5 + 0.32 * len(testcases), 2.5 + 0.2 * len(order)))
    cmap = plt.get_cmap("RdYlGn").with_extremes(bad="#dddddd")
    image = ax.imshow(
        np.ma.masked_invalid(shown), cmap=cmap, norm=_norm(plt, threshold), aspect="auto"
    )
    ax.set_xticks(range(len(testcases)), testcases, rotation=90, fontsize=7)
    ax.set_yticks(range(len(order)), [fleet.entries[i].node for i in order], fontsize=7)
    ax.set_title(
        f"{fleet.sku}: ratio to the fleet median (the testcase's lowest figure)", fontsize=9
    )
    fig.colorbar(image, ax=ax, fraction=0.02, pad=0.01, label="ratio")
    fig.tight_layout()
    return _png(plt, fig), len(order)


# -- an outlier's matrix beside the fleet's ------------------------------------------------


class _Grid:
    """The cells of one matrix as a grid: a GPU pair's matrix has row and column GPUs; a
    matrix of one figure per GPU is one row, a column per GPU."""

    def __init__(self, slots: Sequence[Slot]) -> None:
        self.slots = list(slots)
        self.pairs = any(s.column is not None for s in slots)
        self.rows = sorted({s.row for s in slots}) if self.pairs else [0]
        on = (
            {s.column for s in slots if s.column is not None}
            if self.pairs
            else {s.row for s in slots}
        )
        self.columns = sorted(c for c in on if c is not None)

    def place(self, s: Slot) -> tuple[int, int]:
        """(row, column) of a cell in the grid."""
        if self.pairs and s.column is not None:
            return self.rows.index(s.row), self.columns.index(s.column)
        return 0, self.columns.index(s.row)

    def fill(self, values: Sequence[float]) -> Any:
        """The grid of ``values`` (one per slot), NaN where there is no cell."""
        grid = np.full((len(self.rows), len(self.columns)), np.nan)
        for s, v in zip(self.slots, values, strict=True):
            grid[self.place(s)] = v
        return grid


def _panel(ax: Any, grid: Any, title: str, layout: _Grid, scale: tuple[float, float]) -> None:
    """One matrix panel: the grid in colour, its values written in (at most 16 x 16)."""
    ax.imshow(
        np.ma.masked_invalid(grid), cmap="viridis", vmin=scale[0], vmax=scale[1], aspect="auto"
    )
    ax.set_title(title, fontsize=8)
    ax.set_xticks(
        range(len(layout.columns)), [f"GPU {c}" for c in layout.columns], fontsize=7, rotation=90
    )
    rows = [f"GPU {r}" for r in layout.rows] if layout.pairs else [layout.slots[0].unit]
    ax.set_yticks(range(len(layout.rows)), rows, fontsize=7)
    if grid.size <= 256:
        for (r, c), v in np.ndenumerate(grid):
            if not np.isnan(v):
                ax.text(c, r, f"{v:.3g}", ha="center", va="center", fontsize=6, color="w")


def outlier(plt: Any, fleet: Fleet, finding: Finding) -> str:
    """The matrix of ``finding``'s worst figure on its node beside the fleet's median of
    the same cells, on one colour scale, the finding's low cells framed in red."""
    w = finding.worst.slot
    same = (w.testcase, w.matrix, w.size)
    cols = [j for j, s in enumerate(fleet.slots) if (s.testcase, s.matrix, s.size) == same]
    layout = _Grid([fleet.slots[j] for j in cols])
    i = fleet.nodes.index(finding.node)
    node = layout.fill([float(fleet.values[i, j]) for j in cols])
    median = layout.fill([float(fleet.median[j]) for j in cols])
    both = np.concatenate([node.ravel(), median.ravel()])
    scale = (
        (float(np.nanmin(both)), float(np.nanmax(both))) if np.any(~np.isnan(both)) else (0.0, 1.0)
    )
    size = (2.0 + 1.4 * len(layout.columns), 1.6 + 0.45 * len(layout.rows))
    fig, axes = plt.subplots(1, 2, figsize=size)
    _panel(axes[0], node, f"node {finding.node}", layout, scale)
    _panel(axes[1], median, "fleet median", layout, scale)
    low = {f.slot for f in finding.figures}
    for s in layout.slots:
        if s in low:
            r, c = layout.place(s)
            box = plt.Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2)
            axes[0].add_patch(box)
    fig.suptitle(f"{w.testcase}: {w.matrix} ({w.unit})", fontsize=9)
    fig.tight_layout()
    return _png(plt, fig)


# -- the page ---------------------------------------------------------------------------------


def _where(slot: Slot) -> str:
    place = f"GPU {slot.row}" if slot.column is None else f"GPU {slot.row} - GPU {slot.column}"
    matrix = "" if slot.matrix == slot.testcase else f" [{slot.matrix}]"
    return f"{slot.testcase}{matrix} {place} ({slot.link})"


def _findings_table(found: Sequence[Finding]) -> str:
    rows = []
    for n, f in enumerate(found, 1):
        dev = f.device
        w = f.worst
        rows.append(
            (
                n,
                f.describe(),
                f"{len(f.figures)} of {f.judged}",
                "" if dev is None else dev.uuid,
                "" if dev is None else dev.pci_bus_id,
                _where(w.slot),
                f"{w.value:.4g} {w.slot.unit}",
                f"{w.median:.4g} {w.slot.unit}",
                f"{w.ratio:.3f}",
                f"{w.z:.1f}",
                f.source,
            )
        )
    head = ("#", "what", "low figures", "GPU UUID", "PCI bus id", "worst figure", "value",
            "fleet median", "ratio", "z", "report")  # fmt: skip
    return _table(head, rows)


def _trends_table(trends: Sequence[GpuTrend]) -> str:
    rows = []
    for t in trends:
        w = t.worst
        rows.append(
            (
                "fell" if t.fell else "",
                t.gpu.node,
                t.gpu.ordinal,
                t.gpu.device.uuid,
                t.reports,
                t.first.isoformat(timespec="seconds"),
                t.last.isoformat(timespec="seconds"),
                "-" if t.ratio is None else f"{t.ratio:.3f}",
                "-" if w is None else _where(w.slot),
                "-" if w is None else f"{w.latest:.4g} {w.slot.unit}",
                "-" if w is None else f"{w.median:.4g} {w.slot.unit}",
                "-" if w is None else f"{w.ratio:.3f}",
            )
        )
    head = ("", "node", "GPU", "UUID", "reports", "first", "last", "trend (median ratio)",
            "worst figure", "latest", "own median", "ratio")  # fmt: skip
    return _table(head, rows)


def _fleet_section(
    plt: Any, report: FleetReport, fleet: Fleet, found: Sequence[Finding]
) -> list[str]:
    image, shown = heatmap(plt, fleet, report.settings.threshold)
    nodes = len(fleet.entries)
    note = "" if shown == nodes else f" (the {shown} lowest of {nodes} nodes)"
    return [
        f"<h2>Fleet {_e(fleet.sku)}: {nodes} node(s)</h2>",
        f"<p>{_e(fleet.options.describe())}</p>",
        f"<h3>Nodes x testcases{_e(note)}</h3>",
        image,
        f"<h3>{len(found)} finding(s)</h3>",
        _findings_table(found) if found else "<p>Every node is within its fleet.</p>",
    ]


def page(report: FleetReport, trends: Sequence[GpuTrend] | None = None) -> str:
    """The whole page: per fleet its heatmap and findings, each drawn finding's matrix
    beside the fleet's (the :data:`DRAWN_FINDINGS` worst), each GPU's trend (``trends``,
    from the history) and the nodes set apart."""
    plt = require_matplotlib()
    with plt.rc_context({"text.parse_math": False}):  # a name's $ is a character, no TeX
        return _page(plt, report, trends)


def _page(plt: Any, report: FleetReport, trends: Sequence[GpuTrend] | None) -> str:
    s = report.settings
    parts = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        f"<title>gpubw fleet</title><style>{_STYLE}</style></head><body>",
        "<h1>gpubw fleet</h1>",
        f"<p>{report.nodes} node(s) judged in {len(report.fleets)} fleet(s), from "
        f"{report.files} report file(s); {len(report.apart)} set apart. A figure is low when "
        f"more than {s.threshold * 100:g} % under the fleet median or its robust z is below "
        f"{s.z:g}.</p>",
    ]
    owner: list[tuple[Fleet, Finding]] = []
    for fleet, found in zip(report.fleets, report.findings, strict=True):
        parts += _fleet_section(plt, report, fleet, found)
        owner += [(fleet, f) for f in found]
    owner.sort(key=lambda p: (p[1].worst.ratio, p[1].worst.z, p[1].node))
    if owner:
        drawn = owner[:DRAWN_FINDINGS]
        more = "" if len(drawn) == len(owner) else f" (the {len(drawn)} worst of {len(owner)})"
        parts.append(f"<h2>Each finding beside its fleet{_e(more)}</h2>")
        for n, (fleet, f) in enumerate(drawn, 1):
            parts += [f'<h3 class="low">{n}. {_e(f.describe())}</h3>', outlier(plt, fleet, f)]
    if trends is not None:
        fell = sum(1 for t in trends if t.fell)
        parts += [
            f"<h2>History: {len(trends)} GPU(s), {fell} fell against their own past</h2>",
            _trends_table(trends),
        ]
    if report.apart:
        parts += [
            f"<h2>{len(report.apart)} node(s) or report(s) set apart</h2>",
            _table(("node", "why", "report"), [(a.node, a.reason, a.source) for a in report.apart]),
        ]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
