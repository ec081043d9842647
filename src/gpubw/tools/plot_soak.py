"""The soak figure of ``gpubw plot`` (a report made with ``--soak``): each matrix's figure
against time, one point per repetition (the mean of its cells, and the lowest cell dashed
under it), and below it each GPU's SM clock and temperature at the samples taken between
repetitions, with the throttle reasons active marked."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gpubw.model.results import LATENCY, Report, Status

Panel = tuple[bool, float, Callable[[Any, Any], None]]


def _start_times(report: Report) -> dict[int, float]:
    """repetition -> seconds since the soak began, from the samples taken before each."""
    samples = (report.soak or {}).get("samples") or []
    return {int(s["repetition"]): float(s["time_s"]) for s in samples}


def figure_series(report: Report) -> dict[str, list[tuple[float, float, float]]]:
    """``key/matrix`` -> (time, mean of the cells, lowest cell) per repetition, in display
    units (GB/s; us for latency)."""
    at = _start_times(report)
    out: dict[str, list[tuple[float, float, float]]] = {}
    for t in report.testcases:
        if t.repetition is None or t.status is not Status.PASSED or t.repetition not in at:
            continue
        for m in t.matrices:
            cells = [v for row in m.values for v in row if v is not None]
            if not cells:
                continue
            scale = 1e-6 if m.unit == LATENCY else 1e9
            name = m.key if m.key == t.key else f"{t.key}/{m.key.removeprefix(t.key + '_')}"
            lowest = max(cells) if m.unit == LATENCY else min(cells)
            out.setdefault(name, []).append(
                (at[t.repetition], sum(cells) / len(cells) / scale, lowest / scale)
            )
    return out


def clock_series(report: Report) -> dict[int, list[tuple[float, Any, Any, Sequence[str]]]]:
    """GPU ordinal -> (time, SM MHz, temperature C, reasons) at each sample."""
    out: dict[int, list[tuple[float, Any, Any, Sequence[str]]]] = {}
    for s in (report.soak or {}).get("samples") or []:
        for d in s.get("devices", ()):
            out.setdefault(int(d["ordinal"]), []).append(
                (
                    float(s["time_s"]),
                    d.get("sm_mhz"),
                    d.get("temperature_c"),
                    d.get("reasons") or (),
                )
            )
    return out


def _draw_figures(ax: Any, report: Report) -> None:
    for i, (name, points) in enumerate(sorted(figure_series(report).items())):
        xs = [p[0] for p in points]
        colour = f"C{i % 10}"
        ax.plot(xs, [p[1] for p in points], marker="o", color=colour, label=name)
        ax.plot(xs, [p[2] for p in points], linestyle="--", color=colour, linewidth=0.8)
    ax.set_xlabel("time since the soak began (s)")
    ax.set_ylabel("GB/s (latency: us)")
    ax.set_title("Soak: each matrix per repetition (mean of its cells; dashed: the lowest)")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="lower left")


def _draw_clocks(ax: Any, report: Report) -> None:
    hot = ax.twinx()
    for i, (g, points) in enumerate(sorted(clock_series(report).items())):
        colour = f"C{i % 10}"
        xs = [p[0] for p in points]
        ax.plot(xs, [p[1] for p in points], marker="o", color=colour, label=f"GPU {g} SM")
        hot.plot(xs, [p[2] for p in points], linestyle=":", color=colour)
        for x, mhz, _, reasons in points:
            if reasons and mhz is not None:
                ax.annotate(", ".join(reasons), (x, mhz), fontsize=6, rotation=30)
    ax.set_xlabel("time since the soak began (s)")
    ax.set_ylabel("SM clock (MHz)")
    hot.set_ylabel("temperature (C, dotted)")
    ax.set_title("Clocks and temperature between repetitions (labels: throttle reasons)")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="lower left")


def soak_panels(report: Report) -> list[Panel]:
    """The soak figure's two panels (none for a report without a soak)."""
    if not report.soak or not figure_series(report):
        return []
    return [
        (True, 4.5, lambda ax, fig: _draw_figures(ax, report)),
        (True, 3.5, lambda ax, fig: _draw_clocks(ax, report)),
    ]
