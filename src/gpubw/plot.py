"""``gpubw plot REPORT.json -o FILE.png``: draw a gpubw JSON report.

What is drawn, one panel each:

* every testcase run at several buffer sizes (a sweep): bandwidth (GB/s) or latency (ns)
  against size on a log2 axis, one line per cell (or the mean with a min–max band when a
  matrix has more than 8 cells); for device-memory testcases (those with a matrix whose
  bytes are counted read + write, ``Matrix.bytes_counting``) a vertical line at each
  device's L2 size, and on the read + write matrices a horizontal line at each device's
  nominal memory bandwidth;
* every N×N matrix (peer tests): a heatmap with the values written in the cells;
* the 1×N results that are not part of a sweep: one bar chart per unit, a bar per device.

A simulated report says so in the title, in red. matplotlib is an optional dependency
(``pip install 'gpubw[plot]'``), imported only here, with the Agg backend.
"""

from __future__ import annotations

import argparse
import math
import textwrap
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from gpubw.argtypes import MAX_DPI, dpi_int
from gpubw.errors import UsageError
from gpubw.outfile import OutputTarget
from gpubw.report_io import display_scale, display_unit
from gpubw.results import (
    COUNTED_READ_WRITE,
    KIND_BANDWIDTH,
    KIND_LATENCY,
    Matrix,
    Report,
    Status,
    TestcaseResult,
)
from gpubw.sizes import format_size_short
from gpubw.writers import sweeps

#: a matrix with more applicable cells than this is drawn as mean + min–max band
MAX_LINES = 8


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"gpubw plot: {message}")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gpubw plot", description="Draw a gpubw JSON report as a PNG (or SVG, PDF).")
    p.add_argument("report", help="a gpubw JSON report (gpubw -j -o FILE)")
    p.add_argument("-o", "--output", required=True, help="the image to write, e.g. plot.png")
    p.add_argument(
        "-t",
        "--testcase",
        action="append",
        default=[],
        metavar="PREFIX",
        help="only testcases whose key starts with PREFIX (repeatable)",
    )
    p.add_argument(
        "--dpi", type=dpi_int, default=120, help=f"resolution, 1..{MAX_DPI} (default 120)"
    )
    return p


def check_output(plt: Any, output: str) -> None:
    """UsageError if matplotlib cannot write the format ``output``'s suffix names (no suffix:
    PNG)."""
    suffix = output.rpartition(".")[2].lower() if "." in output.rpartition("/")[2] else ""
    fig = plt.figure()
    try:
        allowed = sorted(fig.canvas.get_supported_filetypes())
    finally:
        plt.close(fig)
    if suffix and suffix not in allowed:
        raise UsageError(
            f"gpubw plot: -o {output!r}: the format {suffix!r} is not supported; "
            f"allowed: {', '.join(allowed)}"
        )
    OutputTarget(output, label="gpubw plot: -o").check()


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise UsageError("matplotlib is not installed; pip install 'gpubw[plot]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# -- what to draw -----------------------------------------------------------------------


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


def _cell_label(m: Matrix, r: int, c: int) -> str:
    if len(m.row_labels) == 1:
        col = m.column_labels[c]
        return f"GPU {col}" if col.isdigit() else col
    return f"{m.row_labels[r]}→{m.column_labels[c]}"


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
    ax: Any, key: str, mkey: str, per_size: list[tuple[int, Matrix]], report: Report
) -> None:
    first = per_size[0][1]
    unit = display_unit(first.unit)
    all_sizes: list[float] = []
    for label, sizes, values, band in _series(per_size):
        xs = [x for x, v in zip(sizes, values) if v is not None]
        ys = [v for v in values if v is not None]
        all_sizes += sizes
        (line,) = ax.plot(xs, ys, marker="o", markersize=4, linewidth=1.6, label=label)
        if band is not None:
            ax.fill_between(sizes, band[0], band[1], alpha=0.2, color=line.get_color())
    results = [t for t in report.testcases if t.key == key]
    if results and is_device_memory(results[0]) and first.kind == KIND_BANDWIDTH:
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
                label=f"nominal memory bandwidth {nom / 1e9:.0f} GB/s (read+write)"
                if i == 0
                else None,
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
    _size_axis(ax, all_sizes)
    ax.set_ylabel(f"{first.kind} ({unit})")
    ax.set_ylim(0, ax.get_ylim()[1] * 1.18)  # headroom for the legend
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title(f"{mkey}\n{first.description}", fontsize=9)
    counted = first.bytes_counted
    if counted and len(per_size) > 1:
        counted = f"at {format_size_short(per_size[0][0])}: {counted}"
    counting = first.statistic + (f"; {counted}" if counted else "")
    counting = textwrap.fill(counting, width=100)  # stays inside its own panel
    ax.text(0.01, 0.01, counting, transform=ax.transAxes, fontsize=6, color="dimgray", va="bottom")
    ax.legend(fontsize=7, loc="best", title="row→column" if len(first.row_labels) > 1 else None)


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
    ax.set_xlabel("column (GPU)")
    ax.set_ylabel("row")
    size = f" @ {format_size_short(t.size)}" if swept and t.size else ""
    ax.set_title(f"{m.key}{size}\n{m.description}", fontsize=9)
    bar = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    bar.set_label(display_unit(m.unit))


def _draw_bars(ax: Any, items: list[tuple[str, Matrix]], kind: str) -> None:
    import numpy as np

    unit = items[0][1].unit
    scale = display_scale(unit)
    columns: list[str] = []
    for _, m in items:
        for c in m.column_labels:
            if c not in columns:
                columns.append(c)
    height = 0.8 / max(1, len(columns))
    y = np.arange(len(items))
    for j, col in enumerate(columns):
        vals = []
        for _, m in items:
            idx = list(m.column_labels).index(col) if col in m.column_labels else -1
            v = m.values[0][idx] if idx >= 0 else None
            vals.append(0.0 if v is None else v * scale)
        label = f"GPU {col}" if col.isdigit() else col
        bars = ax.barh(y + (j - (len(columns) - 1) / 2) * height, vals, height, label=label)
        if len(columns) <= 4:
            ax.bar_label(bars, fmt="%.1f", fontsize=6, padding=2)
    ax.set_yticks(y)
    ax.set_yticklabels([name for name, _ in items], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"{kind} ({display_unit(unit)})")
    shown = [v for _, m in items for row in m.values for v in row if v]
    if shown and max(shown) > 20 * min(shown):
        ax.set_xscale("log")  # PCIe (tens of GB/s) and HBM (thousands) in one readable chart
    ax.grid(True, axis="x", which="both", alpha=0.3)
    ax.set_title(f"1×N results ({display_unit(unit)}), one bar per device", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")


# -- layout -----------------------------------------------------------------------------

Panel = tuple[bool, float, Callable[[Any, Any], None]]  # (full width, height, draw(ax, fig))


def _panels(report: Report) -> list[Panel]:
    panels: list[Panel] = []
    swept = sweeps(report)
    for key, results in swept.items():
        mkeys: list[str] = []
        for t in results:
            mkeys += [m.key for m in t.matrices if m.key not in mkeys]
        for mkey in mkeys:
            per_size = [(t.size or 0, m) for t in results for m in t.matrices if m.key == mkey]

            def draw(ax: Any, fig: Any, k: str = key, mk: str = mkey, ps: Any = per_size) -> None:
                _draw_sweep(ax, k, mk, ps, report)

            panels.append((False, 4.6, draw))
    seen: set[str] = set()
    bars: dict[str, list[tuple[str, Matrix]]] = {KIND_BANDWIDTH: [], KIND_LATENCY: []}
    for t in report.testcases:
        if t.status is not Status.PASSED:
            continue
        if t.key in swept and t is not swept[t.key][-1]:
            continue  # heatmaps of a sweep: the largest size only
        for m in t.matrices:
            nxn = len(m.row_labels) == len(m.column_labels) >= 2
            if nxn and m.key not in seen:
                seen.add(m.key)

                def draw_h(ax: Any, fig: Any, tt: TestcaseResult = t, mm: Matrix = m) -> None:
                    _draw_heatmap(ax, fig, tt, mm, tt.key in swept)

                panels.append((False, 4.6, draw_h))
            elif len(m.row_labels) == 1 and t.key not in swept and m.kind in bars:
                bars[m.kind].append((m.key, m))
    for kind, items in bars.items():
        if items:
            ncols = max(len(m.column_labels) for _, m in items)
            height = max(2.0, 0.9 + len(items) * 0.25 * ncols)

            def draw_b(ax: Any, fig: Any, it: Any = items, k: str = kind) -> None:
                _draw_bars(ax, it, k)

            panels.append((True, height, draw_b))
    return panels


def _title(report: Report) -> tuple[str, str | None]:
    head = f"{report.tool} {report.tool_version} · {report.host or 'unknown host'}"
    names = sorted({str(d.get("name", "?")) for d in report.devices})
    if report.devices:
        head += f" · {len(report.devices)} × {', '.join(names)}"
    sim = None
    if report.simulated:
        sim = f"SIMULATED SYSTEM {report.system_name or 'model'}: modelled, not measured"
    return head, sim


def render(report: Report, output: str, dpi: int = 120) -> int:
    """Draw ``report`` into ``output``; returns the number of panels drawn."""
    plt = _pyplot()
    panels = _panels(report)
    if not panels:
        raise UsageError(
            "nothing to plot: the report has no Passed testcase with results "
            "(no size sweep, no N×N matrix, no 1×N matrix)"
        )
    # rows: a full-width panel is a row; half-width panels pair up
    rows: list[list[Panel]] = []
    for p in panels:
        if p[0] or not rows or rows[-1][0][0] or len(rows[-1]) == 2:
            rows.append([p])
        else:
            rows[-1].append(p)
    ncols = 1 if len(panels) == 1 else 2
    heights = [max(p[1] for p in row) for row in rows]
    width = 7.0 * ncols
    fig = plt.figure(figsize=(width, sum(heights) + 0.9), layout="constrained")
    grid = fig.add_gridspec(len(rows), ncols, height_ratios=heights)
    for i, row in enumerate(rows):
        for j, (full, _, draw) in enumerate(row):
            spec = grid[i, :] if full or ncols == 1 else grid[i, j]
            draw(fig.add_subplot(spec), fig)
    head, sim = _title(report)
    if sim:
        fig.suptitle(f"{sim}\n{head}", color="red", fontsize=12, fontweight="bold")
    else:
        fig.suptitle(head, fontsize=12)
    try:
        with warnings.catch_warnings():
            # matplotlib warns when constrained layout gives up on a very tall figure; the
            # figure is still written, and a library must not print to stderr.
            warnings.simplefilter("ignore", UserWarning)
            suffix = output.rpartition(".")[2].lower() if "." in output.rpartition("/")[2] else ""
            with OutputTarget(output, label="gpubw plot: -o").open("wb") as f:
                fig.savefig(f, dpi=dpi, format=suffix or "png")
    except OSError as exc:
        raise UsageError(f"cannot write {output}: {exc.strerror or exc}") from exc
    finally:
        plt.close(fig)
    return len(panels)


def _select(report: Report, prefixes: Sequence[str]) -> Report:
    if not prefixes:
        return report
    import attrs

    kept = [t for t in report.testcases if t.key.startswith(tuple(prefixes))]
    if not kept:
        raise UsageError(f"no testcase in the report starts with {', '.join(prefixes)}")
    return attrs.evolve(report, testcases=kept)


def load(path: str) -> Report:
    """The Report in ``path``; any file that is not a readable gpubw report (not JSON, nested
    too deeply, the wrong shape, values no Report can hold) is a one-line UsageError."""
    from gpubw.errors import GpubwError
    from gpubw.report_io import load_report, report_from_dict

    try:
        doc = load_report(path)
    except UsageError as exc:
        raise UsageError(f"gpubw plot: {exc}") from None
    except RecursionError:
        raise UsageError(f"gpubw plot: cannot read report {path}: JSON nested too deeply") from None
    except GpubwError as exc:  # schema mismatch: its first problem, on one line
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        first = " ".join(lines[:2]).replace(":: ", ": ")
        raise UsageError(f"gpubw plot: {path} is not a gpubw report ({first[:300]})") from None
    try:
        return report_from_dict(doc)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError) as exc:
        raise UsageError(
            f"gpubw plot: {path} is not a gpubw report this version can read: "
            f"{type(exc).__name__}: {str(exc)[:200]}"
        ) from None


def _usable(v: float | None) -> bool:
    return v is None or (math.isfinite(v) and v > 0)


def screen(report: Report) -> tuple[Report, list[str]]:
    """(the report to draw, notes): testcases that are not drawn (Error, Interrupted, Not
    Found, Waived) are named; NaN, infinite and zero cells of Passed testcases are flagged
    and drawn as N/A, never as figures."""
    import attrs

    notes: list[str] = []
    left_out = [
        f"{t.key}{f' @ {format_size_short(t.size)}' if t.size else ''} ({t.status.value})"
        for t in report.testcases
        if t.status is not Status.PASSED
    ]
    if left_out:
        notes.append(f"not drawn: {', '.join(left_out)}")
    kept: list[TestcaseResult] = []
    for t in report.testcases:
        if t.status is not Status.PASSED:
            kept.append(t)
            continue
        matrices = []
        for m in t.matrices:
            bad = sum(1 for row in m.values for v in row if not _usable(v))
            if bad:
                size = f" @ {format_size_short(t.size)}" if t.size else ""
                notes.append(
                    f"flagged: {m.key}{size} has {bad} NaN, infinite or zero cell(s), drawn as N/A"
                )
                values = [[v if _usable(v) else None for v in row] for row in m.values]
                m = attrs.evolve(m, values=values)
            matrices.append(m)
        kept.append(attrs.evolve(t, matrices=tuple(matrices)))
    return attrs.evolve(report, testcases=tuple(kept)), notes


def main(argv: Sequence[str] | None = None) -> int:
    """``gpubw plot REPORT.json -o FILE.png [-t PREFIX] [--dpi N]``; returns 0. Notes on what
    is not drawn (testcases that did not pass, NaN or zero cells) go to stderr."""
    import sys

    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    check_output(_pyplot(), args.output)  # fail early, before reading: no matplotlib, bad -o
    report, notes = screen(_select(load(args.report), args.testcase))
    render(report, args.output, dpi=args.dpi)
    for note in notes:
        print(f"gpubw plot: {note}", file=sys.stderr)
    return 0
