"""Draw a report, or two overlaid: the work of ``gpubw plot REPORT.json [OTHER.json] -o FILE``
(its command line is :mod:`gpubw.cli.plot`'s).

A report is a gpubw JSON report or nvbandwidth's ``-j`` output. **One figure per testcase**
(so a 250-entry sweep is a set of ordinary pictures, not one image thousands of pixels
tall): ``-o plot.pdf`` writes them as the pages of one PDF; ``-o plot.png`` (or .svg, ...)
writes ``plot-<testcase>.png`` for each (just ``plot.png`` when there is only one figure).
The 1×N results that are not part of a sweep share an overview figure per unit
(``plot-1xN-bandwidth.png``; split in parts of a readable height).

A second report is drawn over the first: its sweep lines dashed in the same colours, its
bars hatched beside the first's, and N×N matrices as the ratio first / second.

What is drawn, one panel each:

* every testcase run at several buffer sizes (a sweep): bandwidth (GB/s) or latency (ns)
  against size on a log2 axis, one line per cell (or the mean with a min–max band when a
  matrix has more than 8 cells); for device-memory testcases (those with a matrix whose
  bytes are counted read + write, ``Matrix.bytes_counting``) a vertical line at each
  device's L2 size, and on the read + write matrices a horizontal line at each device's
  nominal memory bandwidth;
* every N×N matrix (peer tests): a heatmap with the values written in the cells;
* the 1×N results that are not part of a sweep: one bar chart per unit, a bar per device;
* a soak (``--soak``): first, each matrix's figure against time (one point per repetition)
  and each GPU's SM clock and temperature between repetitions (:mod:`gpubw.tools.plot_soak`).

A simulated report says so in the title, in red. matplotlib is an optional dependency
(``pip install 'gpubw[plot]'``), imported only here, with the Agg backend.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from gpubw.model.errors import UsageError
from gpubw.model.outfile import OutputTarget
from gpubw.model.results import (
    KIND_BANDWIDTH,
    KIND_LATENCY,
    Matrix,
    Report,
    Status,
    TestcaseResult,
)
from gpubw.model.sizes import format_size_short
from gpubw.tools.plot_panels import (
    _draw_bars,
    _draw_heatmap,
    _draw_ratio_heatmap,
    _draw_sweep,
)
from gpubw.tools.plot_soak import soak_panels
from gpubw.writers import sweeps


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


# -- layout ---------------------------------------------------------------------------

Panel = tuple[bool, float, Callable[[Any, Any], None]]  # (full width, height, draw(ax, fig))
Run = tuple[str, Report]  # (label, report)

#: the tallest a figure of 1×N bars gets (inches) before it is split in parts
MAX_BAR_HEIGHT = 12.0


class FigureSpec(NamedTuple):
    """One figure: its name (the file-name part: a testcase key, ``1xN-bandwidth``), the
    panels on it."""

    name: str
    panels: list[Panel]
    left: float = 0.8  # inches of margin left of the panels (room for the y tick labels)


def _per_size(results: Sequence[TestcaseResult], mkey: str) -> list[tuple[int, Matrix]]:
    return [(t.size or 0, m) for t in results for m in t.matrices if m.key == mkey]


def _sized(report: Report, key: str) -> list[TestcaseResult]:
    """Passed results of ``key`` that have a buffer size, by size."""
    got = [
        t
        for t in report.testcases
        if t.key == key and t.status is Status.PASSED and t.size is not None and t.matrices
    ]
    return sorted(got, key=lambda t: t.size or 0)


def _last_passed(report: Report, key: str) -> TestcaseResult | None:
    got = [t for t in report.testcases if t.key == key and t.status is Status.PASSED]
    return max(got, key=lambda t: t.size or 0) if got else None


def _testcase_panels(key: str, runs: Sequence[Run]) -> list[Panel]:
    """The panels of one testcase: each matrix of a sweep against size, and each N×N
    matrix as a heatmap (of a sweep: at its largest size; of two runs: their ratio)."""
    (label, report), others = runs[0], runs[1:]
    panels: list[Panel] = []
    swept = sweeps(report)
    if key in swept:
        results = swept[key]
        mkeys: list[str] = []
        for t in results:
            mkeys += [m.key for m in t.matrices if m.key not in mkeys]
        for mkey in mkeys:
            overlay = [(lb, _per_size(_sized(r, key), mkey)) for lb, r in others]
            overlay = [(lb, ps) for lb, ps in overlay if ps]

            def draw(ax: Any, fig: Any, mk: str = mkey, ov: Any = overlay) -> None:
                _draw_sweep(ax, key, mk, _per_size(results, mk), report, run=label, overlay=ov)

            panels.append((False, 4.6, draw))
    last = _last_passed(report, key)
    other_t = _last_passed(others[0][1], key) if others else None
    for m in last.matrices if last is not None else ():
        if not len(m.row_labels) == len(m.column_labels) >= 2:
            continue

        def draw_h(ax: Any, fig: Any, tt: Any = last, mm: Matrix = m) -> None:
            _draw_heatmap(ax, fig, tt, mm, key in swept)

        panels.append((False, 4.6, draw_h))
        om = next((x for x in other_t.matrices if x.key == m.key), None) if other_t else None
        if om is not None:

            def draw_r(ax: Any, fig: Any, mm: Matrix = m, o: Matrix = om) -> None:
                _draw_ratio_heatmap(ax, fig, mm, o, [lb for lb, _ in runs])

            panels.append((False, 4.6, draw_r))
    return panels


def _bar_figures(runs: Sequence[Run], keys: Sequence[str]) -> list[FigureSpec]:
    """The 1×N results outside sweeps: per kind, figures of bars no taller than
    MAX_BAR_HEIGHT."""
    swept = [set(sweeps(r)) for _, r in runs]
    by_kind: dict[str, list[tuple[str, list[Matrix | None]]]] = {
        KIND_BANDWIDTH: [],
        KIND_LATENCY: [],
    }
    for key in keys:
        # drawn against size in its own figure when the first run that has it swept it
        first = next(i for i, (_, r) in enumerate(runs) if _last_passed(r, key) is not None)
        if key in swept[first]:
            continue
        per_run = [_last_passed(r, key) for _, r in runs]
        mkeys: list[str] = []
        for t in per_run:
            for m in t.matrices if t is not None else ():
                if len(m.row_labels) == 1 and m.kind in by_kind and m.key not in mkeys:
                    mkeys.append(m.key)
        for mkey in mkeys:
            ms = [
                next((m for m in t.matrices if m.key == mkey), None) if t else None for t in per_run
            ]
            kind = next(m.kind for m in ms if m is not None)
            by_kind[kind].append((mkey, ms))
    labels = [lb for lb, _ in runs]
    out: list[FigureSpec] = []
    for kind, items in by_kind.items():
        if not items:
            continue
        ncols = max(len(m.column_labels) for _, ms in items for m in ms if m is not None)
        per_item = 0.25 * ncols * len(runs)
        chunk = max(1, int((MAX_BAR_HEIGHT - 0.9) // per_item))
        parts = [items[i : i + chunk] for i in range(0, len(items), chunk)]
        for n, part in enumerate(parts, 1):
            height = max(2.0, 0.9 + len(part) * per_item)

            def draw_b(ax: Any, fig: Any, it: Any = part, k: str = kind) -> None:
                _draw_bars(ax, it, k, labels)

            name = f"1xN-{kind}" + (f"-{n}" if len(parts) > 1 else "")
            left = 0.5 + 0.065 * max(len(k) for k, _ in part)  # the testcase names
            out.append(FigureSpec(name, [(True, height, draw_b)], left))
    return out


def figures(runs: Sequence[Run]) -> list[FigureSpec]:
    """What ``gpubw plot`` draws for these runs: one figure per testcase (in the first
    run's order, then the others'), then the 1×N overview figures."""
    keys: list[str] = []
    for _, r in runs:
        for t in r.testcases:
            if t.status is Status.PASSED and t.key not in keys:
                keys.append(t.key)
    out = []
    for key in keys:
        have = [run for run in runs if _last_passed(run[1], key) is not None]
        if have and have[0] is runs[0]:
            panels = _testcase_panels(key, runs)
        else:  # only in a later run: drawn alone
            panels = _testcase_panels(key, have[:1])
        if panels:
            out.append(FigureSpec(key, panels))
    soak = soak_panels(runs[0][1])  # --soak: figure and clocks over time, first
    return ([FigureSpec("soak", soak)] if soak else []) + out + _bar_figures(runs, keys)


def _title(report: Report) -> tuple[str, str | None]:
    head = f"{report.tool} {report.tool_version} · {report.host or 'unknown host'}"
    names = sorted({str(d.get("name", "?")) for d in report.devices})
    if report.devices:
        head += f" · {len(report.devices)} × {', '.join(names)}"
    sim = None
    if report.simulated:
        sim = f"SIMULATED SYSTEM {report.system_name or 'model'}: modelled, not measured"
    return head, sim


def _draw_figure(plt: Any, spec: FigureSpec, runs: Sequence[Run]) -> Any:
    # rows: a full-width panel is a row; half-width panels pair up
    rows: list[list[Panel]] = []
    for p in spec.panels:
        if p[0] or not rows or rows[-1][0][0] or len(rows[-1]) == 2:
            rows.append([p])
        else:
            rows[-1].append(p)
    ncols = 1 if len(spec.panels) == 1 else 2
    heights = [max(p[1] for p in row) for row in rows]
    titles = [_title(r) for _, r in runs]
    top = 0.5 + 0.25 * len(runs) + (0.25 if any(sim for _, sim in titles) else 0)
    # A fixed layout (margins in inches): matplotlib's constrained layout measured every
    # text of every figure again and took a third of the time of a large sweep.
    width, height = 7.0 * ncols + spec.left - 0.8, sum(heights) + top
    gap = 1.6  # between rows: the rotated size ticks above, the two-line title below
    fig = plt.figure(figsize=(width, height))
    grid = fig.add_gridspec(
        len(rows),
        ncols,
        height_ratios=heights,
        left=spec.left / width,
        right=1 - 0.9 / width,
        top=1 - (top + 0.45) / height,
        bottom=0.8 / height,
        hspace=gap / (sum(heights) / len(rows)),
        wspace=0.32,
    )
    for i, row in enumerate(rows):
        for j, (full, _, draw) in enumerate(row):
            sub = grid[i, :] if full or ncols == 1 else grid[i, j]
            draw(fig.add_subplot(sub), fig)
    lines = []
    for (label, _), (head, sim) in zip(runs, titles):
        prefix = f"{label}: " if len(runs) > 1 else ""
        lines += ([f"{prefix}{sim}"] if sim else []) + [prefix + head]
    simulated = any(sim for _, sim in titles)
    fig.suptitle(
        "\n".join(lines),
        color="red" if simulated else "black",
        fontsize=11 if len(runs) > 1 else 12,
        fontweight="bold" if simulated else "normal",
    )
    return fig


def _suffix(output: str) -> str:
    return output.rpartition(".")[2].lower() if "." in output.rpartition("/")[2] else ""


def output_paths(output: str, specs: Sequence[FigureSpec]) -> list[str]:
    """Where each figure goes: all in ``output`` for a PDF or a single figure; otherwise
    ``<output without suffix>-<figure name>.<suffix>`` each."""
    if _suffix(output) == "pdf" or len(specs) == 1:
        return [output] * len(specs)
    if output == "-":
        raise UsageError(
            f"gpubw plot: -o -: {len(specs)} figures cannot go to standard output as one "
            "image; give a .pdf (one page each) or a file name (one file each)"
        )
    root, dot, ext = output.rpartition(".") if _suffix(output) else (output, "", "")
    return [f"{root}-{s.name}{dot}{ext}" for s in specs]


def render(report: Report | Sequence[Run], output: str, dpi: int = 120) -> list[str]:
    """Draw a report (or several runs, overlaid on the first) into ``output``: one figure
    per testcase (see the module docstring); returns the files written, in order."""
    runs: list[Run] = [("", report)] if isinstance(report, Report) else list(report)
    plt = _pyplot()
    specs = figures(runs)
    if not specs:
        raise UsageError(
            "nothing to plot: the report has no Passed testcase with results "
            "(no size sweep, no N×N matrix, no 1×N matrix)"
        )
    paths = output_paths(output, specs)
    fmt = _suffix(output) or "png"
    written: list[str] = []
    try:
        with warnings.catch_warnings():
            # matplotlib warns when constrained layout gives up on a crowded figure; the
            # figure is still written, and a library must not print to stderr.
            warnings.simplefilter("ignore", UserWarning)
            if fmt == "pdf":
                from matplotlib.backends.backend_pdf import PdfPages

                target = OutputTarget(output, label="gpubw plot: -o")
                with target.open("wb") as f, PdfPages(f) as pdf:
                    for spec in specs:
                        fig = _draw_figure(plt, spec, runs)
                        try:
                            pdf.savefig(fig)
                        finally:
                            plt.close(fig)
                written.append(output)
            else:
                for spec, path in zip(specs, paths):
                    target = OutputTarget(path, label="gpubw plot: -o").check()
                    fig = _draw_figure(plt, spec, runs)
                    try:
                        with target.open("wb") as f:
                            fig.savefig(f, dpi=dpi, format=fmt)
                    finally:
                        plt.close(fig)
                    written.append(path)
    except OSError as exc:
        raise UsageError(f"cannot write {output}: {exc.strerror or exc}") from exc
    return written


def _chosen(t: TestcaseResult, ids: Sequence[str]) -> bool:
    """Whether ``-t`` names ``t``: its key, or its index (an integer, as gpubw -t)."""
    for i in ids:
        try:
            if t.index is not None and int(i, 0) == t.index:
                return True
        except ValueError:
            pass
        if i == t.key:
            return True
    return False


def _select(report: Report, ids: Sequence[str], prefixes: Sequence[str] = ()) -> Report:
    """The testcases ``-t`` (keys or indexes) or ``-p`` (key prefixes) keep, as the main
    command's options select them; neither keeps all."""
    if ids and prefixes:
        raise UsageError("gpubw plot: -t/--testcase and -p/--testcase-prefixes cannot be combined")
    if not ids and not prefixes:
        return report
    import attrs

    if ids:
        kept = [t for t in report.testcases if _chosen(t, ids)]
        what = f"is {' or '.join(ids)} (a key or an index; -p selects by prefix)"
    else:
        kept = [t for t in report.testcases if t.key.startswith(tuple(prefixes))]
        what = f"starts with {', '.join(prefixes)}"
    if not kept:
        raise UsageError(f"no testcase in the report {what}")
    return attrs.evolve(report, testcases=kept)


def _head(path: str) -> str:
    """The start of the report file ``path`` ("" when it cannot be read: load_report says
    why); a file that is not a regular one is a UsageError (:func:`read_input`)."""
    from gpubw.model.infile import read_input

    try:
        return read_input(path, "report")[:4096]
    except (OSError, UnicodeDecodeError):
        return ""


def load(path: str) -> Report:
    """The Report in ``path``, a gpubw JSON report or nvbandwidth's ``-j`` output; any file
    that is neither (not JSON, nested too deeply, the wrong shape, values no Report can hold)
    is a one-line UsageError."""
    from gpubw.model.errors import GpubwError
    from gpubw.model.report_io import load_report, report_from_dict

    try:
        if '"nvbandwidth"' in _head(path):
            from gpubw.model import nvbandwidth_json

            return nvbandwidth_json.to_report(Path(path))
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
    """(the report to draw, notes): testcases that are not drawn because they failed (Error,
    Interrupted, Not Found) are named, Waived ones counted (a default run waives the 13
    multinode testcases); NaN, infinite and zero cells of Passed testcases are flagged and
    drawn as N/A, never as figures."""
    import attrs

    notes: list[str] = []
    left_out = [
        f"{t.key}{f' @ {format_size_short(t.size)}' if t.size else ''} ({t.status.value})"
        for t in report.testcases
        if t.status not in (Status.PASSED, Status.WAIVED)
    ]
    waived = sum(t.status is Status.WAIVED for t in report.testcases)
    if left_out:
        notes.append(f"not drawn: {', '.join(left_out)}")
    if waived:
        notes.append(f"not drawn: {waived} Waived testcase(s) (see the report for why)")
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


def _labels(paths: Sequence[str]) -> list[str]:
    """Short distinct names for the runs: file names without .json (whole paths if equal)."""
    import os

    names = [os.path.basename(p).removesuffix(".json") for p in paths]
    return names if len(set(names)) == len(names) else list(paths)


def draw(
    paths: Sequence[str],
    output: str,
    ids: Sequence[str] = (),
    prefixes: Sequence[str] = (),
    dpi: int = 120,
) -> tuple[list[str], list[str]]:
    """``gpubw plot``'s work: the reports in ``paths`` (the first drawn, a second overlaid),
    their testcases ``ids`` (keys or indexes) or ``prefixes`` kept, drawn into ``output``;
    returns (the files written, the notes on what is not drawn: testcases that did not
    pass, NaN or zero cells, with the run's label when there are two). ``output`` is
    checked before any report is read (no matplotlib, a format it cannot write)."""
    check_output(_pyplot(), output)
    labels = _labels(paths)
    runs: list[Run] = []
    notes: list[str] = []
    for label, path in zip(labels, paths):
        report, found = screen(_select(load(path), ids, prefixes))
        runs.append((label, report))
        notes += [f"{label}: {n}" if len(paths) > 1 else n for n in found]
    return render(runs, output, dpi=dpi), notes
