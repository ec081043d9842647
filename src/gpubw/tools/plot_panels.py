"""The panels of ``gpubw plot``: a sweep against buffer size, a heatmap of an N×N matrix
(or the ratio of two runs' N×N matrices), bar charts of 1×N results. Each function draws on
one matplotlib Axes given to it; :mod:`gpubw.tools.plot` lays the panels out in figures and writes
them. matplotlib is imported by the caller (:func:`gpubw.tools.plot._pyplot`), not here.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from typing import Any

from gpubw.model.report_io import display_scale, display_unit
from gpubw.model.results import (
    AXIS_GPU,
    AXIS_RANK,
    BOTH_WAYS,
    COLUMN_TO_ROW,
    COUNTED_READ_WRITE,
    KIND_BANDWIDTH,
    ROW_TO_COLUMN,
    Matrix,
    Report,
    TestcaseResult,
)
from gpubw.model.sizes import format_size_short

#: a matrix with more applicable cells than this is drawn as mean + min–max band
MAX_LINES = 8
#: a matrix's direction (Matrix.axes) between a row and a column label
_ARROW = {ROW_TO_COLUMN: "→", COLUMN_TO_ROW: "←", BOTH_WAYS: "↔"}
#: what a row or column label is a number of (Matrix.axes), where it is one
_NOUN = {AXIS_GPU: "GPU", AXIS_RANK: "rank"}


def is_device_memory(t: TestcaseResult) -> bool:
    """Whether ``t`` measures a device's own memory: some matrix of it counts bytes read +
    write, the way the memory's nominal bandwidth is counted."""
    return any(m.bytes_counting == COUNTED_READ_WRITE for m in t.matrices)


def _nominal(device: dict[str, Any]) -> float | None:
    """Nominal memory bandwidth of a device record, bytes/s."""
    v = device.get("nominal_memory_bandwidth")
    if isinstance(v, (int, float)) and v > 0:
        return float(v)
    width, clock = device.get("memory_bus_width_bits"), device.get("memory_clock_khz")
    if width and clock:
        return float(width) / 8 * float(clock) * 1e3 * 2
    return None


def _distinct(values: Sequence[float | None]) -> list[float]:
    out: list[float] = []
    for v in values:
        if v and all(abs(v - o) > 1e-6 * o for o in out):
            out.append(v)
    return out


def side_label(side: str, label: str) -> str:
    """A row or column label with what it numbers (an axis of Matrix.axes): ``GPU 3``,
    ``rank 5``; any other label as it is."""
    noun = _NOUN.get(side)
    return f"{noun} {label}" if noun and label.isdigit() else label


def axis_title(word: str, side: str) -> str:
    """``row`` or ``column`` with what its labels number: ``column (GPU)``."""
    noun = _NOUN.get(side)
    return f"{word} ({noun})" if noun else word


def _cell_label(m: Matrix, r: int, c: int) -> str:
    """A line's label: the column of a one-row matrix (``GPU 3``), else ``row→column`` with
    the matrix's arrow (``←`` and ``↔`` where its cells read so)."""
    axes = m.axes
    if len(m.row_labels) == 1:
        return side_label(axes.columns, m.column_labels[c])
    return f"{m.row_labels[r]}{_ARROW[axes.direction]}{m.column_labels[c]}"


def _series(
    per_size: list[tuple[int, Matrix]],
) -> list[tuple[str, list[float], list[float | None], tuple[list[float], list[float]] | None]]:
    """(label, sizes, values-in-display-units, optional (low, high) band) per line."""
    first = per_size[0][1]
    scale = display_scale(first.unit)
    nrows, ncols = len(first.row_labels), len(first.column_labels)

    def at(m: Matrix, r: int, c: int) -> float | None:
        if r < len(m.values) and c < len(m.values[r]) and m.values[r][c] is not None:
            v = m.values[r][c]
            return None if v is None else v * scale
        return None

    cells = [
        (r, c)
        for r in range(nrows)
        for c in range(ncols)
        if any(at(m, r, c) is not None for _, m in per_size)
    ]
    sizes = [float(s) for s, _ in per_size]
    if len(cells) <= MAX_LINES:
        return [
            (_cell_label(first, r, c), sizes, [at(m, r, c) for _, m in per_size], None)
            for r, c in cells
        ]
    means, lows, highs = [], [], []
    for _, m in per_size:
        vals = [v * scale for v in m.cells]
        means.append(sum(vals) / len(vals) if vals else None)
        lows.append(min(vals) if vals else math.nan)
        highs.append(max(vals) if vals else math.nan)
    return [(f"mean of {len(cells)} cells (band: min–max)", sizes, means, (lows, highs))]


def _size_axis(ax: Any, sizes: Sequence[float]) -> None:
    ax.set_xscale("log", base=2)
    ticks = sorted(set(sizes))
    step = max(1, math.ceil(len(ticks) / 10))
    shown = ticks[::step]
    ax.set_xticks(shown)
    ax.set_xticklabels([format_size_short(s) for s in shown], rotation=35, ha="right", fontsize=8)
    ax.minorticks_off()
    ax.set_xlabel("buffer size")


def _draw_sweep(
    ax: Any,
    key: str,
    mkey: str,
    per_size: list[tuple[int, Matrix]],
    report: Report,
    *,
    run: str = "",
    overlay: Sequence[tuple[str, list[tuple[int, Matrix]]]] = (),
) -> None:
    """One matrix of a sweep; ``overlay``: (run label, its per-size matrices) of other
    runs, dashed in the same colours as the first run's lines (``run``: the first's label)."""
    first = per_size[0][1]
    unit = display_unit(first.unit)
    all_sizes: list[float] = []
    colors: list[Any] = []
    for label, sizes, values, band in _series(per_size):
        xs = [x for x, v in zip(sizes, values) if v is not None]
        ys = [v for v in values if v is not None]
        all_sizes += sizes
        shown = f"{run}: {label}" if overlay else label
        (line,) = ax.plot(xs, ys, marker="o", markersize=4, linewidth=1.6, label=shown)
        colors.append(line.get_color())
        if band is not None:
            ax.fill_between(sizes, band[0], band[1], alpha=0.2, color=line.get_color())
    for other, other_sizes in overlay:
        for i, (label, sizes, values, band) in enumerate(_series(other_sizes)):
            xs = [x for x, v in zip(sizes, values) if v is not None]
            ys = [v for v in values if v is not None]
            all_sizes += sizes
            color = colors[i] if i < len(colors) else None
            ax.plot(xs, ys, marker="s", markersize=3, linewidth=1.3, linestyle="--",
                    color=color, label=f"{other}: {label}")  # fmt: skip
            if band is not None:
                ax.fill_between(sizes, band[0], band[1], alpha=0.1, color=color, hatch="//")
    results = [t for t in report.testcases if t.key == key]
    if results and is_device_memory(results[0]) and first.kind == KIND_BANDWIDTH:
        _draw_memory_lines(ax, per_size, report)
    _size_axis(ax, all_sizes)
    ax.set_ylabel(f"{first.kind} ({unit})")
    ax.set_ylim(0, ax.get_ylim()[1] * 1.18)  # headroom for the legend
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title(f"{mkey}\n{first.description}", fontsize=9)
    _caption(ax, per_size)
    title = f"row{_ARROW[first.axes.direction]}column" if len(first.row_labels) > 1 else None
    ax.legend(fontsize=7, loc="best", title=title)


def _caption(ax: Any, per_size: list[tuple[int, Matrix]]) -> None:
    """The statistic and how the bytes were counted, small, at the panel's foot."""
    first = per_size[0][1]
    counted = first.bytes_counted
    if counted and len(per_size) > 1:
        counted = f"at {format_size_short(per_size[0][0])}: {counted}"
    counting = first.statistic + (f"; {counted}" if counted else "")
    counting = textwrap.fill(counting, width=100)  # stays inside its own panel
    ax.text(0.01, 0.01, counting, transform=ax.transAxes, fontsize=6, color="dimgray", va="bottom")


def _draw_memory_lines(ax: Any, per_size: list[tuple[int, Matrix]], report: Report) -> None:
    """A device-memory sweep's reference lines: the nominal memory bandwidth (for a matrix
    counted read + write) and where the working set fills the L2 cache."""
    first = per_size[0][1]
    # The nominal figure is read + write: only a matrix counted that way is drawn against
    # it (not device_local_copy's counted-once matrix).
    comparable = first.bytes_counting == COUNTED_READ_WRITE
    nominals = _distinct([_nominal(dict(d)) for d in report.devices]) if comparable else []
    for i, nom in enumerate(nominals):
        ax.axhline(
            nom * display_scale(first.unit),
            color="crimson",
            linestyle="--",
            linewidth=1.2,
            label=f"nominal memory bandwidth {nom / 1e9:.0f} GB/s (read+write)" if i == 0 else None,
        )
    # The x axis is one buffer's size; a kernel's working set may be several buffers
    # (STREAM's copy: 2, triad: 3), so the L2 line goes where the working set fills L2.
    working = dict(first.notes).get("working_set_bytes")
    arrays = working / per_size[0][0] if working and per_size[0][0] else 1.0
    l2s = _distinct([d.get("l2_bytes") for d in report.devices])
    for i, l2 in enumerate(l2s):
        where = f" (working set {arrays:g} x buffer)" if arrays != 1 else ""
        ax.axvline(
            l2 / arrays,
            color="gray",
            linestyle=":",
            linewidth=1.4,
            label=f"L2 cache {format_size_short(l2)}{where}" if i == 0 else None,
        )


def _draw_heatmap(ax: Any, fig: Any, t: TestcaseResult, m: Matrix, swept: bool) -> None:
    import numpy as np

    scale = display_scale(m.unit)
    data = np.array(
        [[math.nan if v is None else v * scale for v in row] for row in m.values], dtype=float
    )
    masked = np.ma.masked_invalid(data)
    import matplotlib

    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="lightgray")
    finite = data[np.isfinite(data)]
    top = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    # colour from 0: equal-looking cells are equal within a few percent (the numbers say more)
    im = ax.imshow(masked, cmap=cmap, aspect="equal", vmin=0.0, vmax=top)
    n_r, n_c = data.shape
    mid = 0.6 * top
    fontsize = 9 if max(n_r, n_c) <= 4 else 7 if max(n_r, n_c) <= 8 else 5
    for r in range(n_r):
        for c in range(n_c):
            v = data[r, c]
            text = "N/A" if not math.isfinite(v) else f"{v:.1f}"
            color = "black" if not math.isfinite(v) or v >= mid else "white"
            ax.text(c, r, text, ha="center", va="center", fontsize=fontsize, color=color)
    ax.set_xticks(range(n_c))
    ax.set_xticklabels(m.column_labels)
    ax.set_yticks(range(n_r))
    ax.set_yticklabels(m.row_labels)
    ax.set_xlabel(axis_title("column", m.axes.columns))
    ax.set_ylabel(axis_title("row", m.axes.rows))
    size = f" @ {format_size_short(t.size)}" if swept and t.size else ""
    ax.set_title(f"{m.key}{size}\n{m.description}", fontsize=9)
    bar = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    bar.set_label(display_unit(m.unit))


def _draw_ratio_heatmap(ax: Any, fig: Any, m: Matrix, other: Matrix, runs: Sequence[str]) -> None:
    """An N×N matrix of two runs: the ratio first / second per cell (1.0: equal)."""
    import matplotlib
    import numpy as np

    def grid(x: Matrix) -> Any:
        return np.array([[math.nan if v is None else v for v in row] for row in x.values], float)

    a, b = grid(m), grid(other)
    if a.shape != b.shape:
        ax.text(0.5, 0.5, f"{m.key}: {a.shape} vs {b.shape} cells", ha="center", va="center")
        ax.set_axis_off()
        return
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(b > 0, a / b, math.nan)
    cmap = matplotlib.colormaps["RdBu"].with_extremes(bad="lightgray")
    im = ax.imshow(np.ma.masked_invalid(ratio), cmap=cmap, aspect="equal", vmin=0.8, vmax=1.2)
    n_r, n_c = ratio.shape
    fontsize = 9 if max(n_r, n_c) <= 4 else 7 if max(n_r, n_c) <= 8 else 5
    for r in range(n_r):
        for c in range(n_c):
            v = ratio[r, c]
            ax.text(c, r, "N/A" if not math.isfinite(v) else f"{v:.3f}", ha="center",
                    va="center", fontsize=fontsize)  # fmt: skip
    ax.set_xticks(range(n_c))
    ax.set_xticklabels(m.column_labels)
    ax.set_yticks(range(n_r))
    ax.set_yticklabels(m.row_labels)
    ax.set_xlabel(axis_title("column", m.axes.columns))
    ax.set_ylabel(axis_title("row", m.axes.rows))
    ax.set_title(f"{m.key}: {runs[0]} / {runs[1]}\n{m.description}", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04).set_label("ratio")


def _draw_bars(
    ax: Any,
    items: Sequence[tuple[str, Sequence[Matrix | None]]],
    kind: str,
    runs: Sequence[str] = ("",),
) -> None:
    """One bar per device for each (name, matrix of each run); a second run hatched."""
    import numpy as np

    first = next(m for _, ms in items for m in ms if m is not None)
    unit, side = first.unit, first.axes.columns
    scale = display_scale(unit)
    columns: list[str] = []
    for _, ms in items:
        for m in ms:
            for c in m.column_labels if m is not None else ():
                if c not in columns:
                    columns.append(c)
    slots = [(col, r) for col in columns for r in range(len(runs))]
    height = 0.8 / max(1, len(slots))
    y = np.arange(len(items))
    colors: dict[str, Any] = {}
    for j, (col, r) in enumerate(slots):
        vals = []
        for _, ms in items:
            m = ms[r] if r < len(ms) else None
            idx = (
                list(m.column_labels).index(col) if m is not None and col in m.column_labels else -1
            )
            v = m.values[0][idx] if m is not None and idx >= 0 else None
            vals.append(0.0 if v is None else v * scale)
        label = side_label(side, col)
        if len(runs) > 1:
            label = f"{runs[r]}: {label}"
        bars = ax.barh(y + (j - (len(slots) - 1) / 2) * height, vals, height, label=label,
                       color=colors.get(col), hatch="//" if r else None)  # fmt: skip
        colors.setdefault(col, bars.patches[0].get_facecolor() if bars.patches else None)
        if len(slots) <= 4:
            ax.bar_label(bars, fmt="%.1f", fontsize=6, padding=2)
    ax.set_yticks(y)
    ax.set_yticklabels([name for name, _ in items], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"{kind} ({display_unit(unit)})")
    shown = [
        v for _, ms in items for m in ms if m is not None for row in m.values for v in row if v
    ]
    if shown and max(shown) > 20 * min(shown):
        ax.set_xscale("log")  # PCIe (tens of GB/s) and HBM (thousands) in one readable chart
    ax.grid(True, axis="x", which="both", alpha=0.3)
    ax.set_title(f"1×N results ({display_unit(unit)}), one bar per device", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
