"""The fleet's statistics: nodes grouped into fleets (one SKU, reports made with the same
options), and per comparable figure the fleet's median, its MAD, and every node's ratio
to the median and robust z.

A fleet is a matrix of nodes x slots (a slot is one figure's place: testcase, matrix, row
and column GPU, link type, buffer size; :class:`~gpubw.fleet.reading.Slot`), NaN where a
node lacks the figure, so the statistics are a few numpy reductions over 1.8 million
figures rather than a loop.

The ratio is a node's speed against the median (value / median for bandwidth, median /
value for latency), so below 1 is always slower; the robust z is (value - median) divided
by the scaled MAD (1.4826 MAD, a standard deviation's estimate for normal data), its sign
turned for latency. The spread is floored at 1 % of the median: a fleet of identical
figures (a MAD of 0, as simulated nodes give) would otherwise call a 0.1 % difference an
infinite z.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np
import numpy.typing as npt

from gpubw.fleet.gather import Apart, NodeEntry
from gpubw.fleet.reading import Comparable, Slot
from gpubw.model.results import KIND_LATENCY

#: the normal distribution's factor from MAD to standard deviation
MAD_SCALE = 1.4826
#: the spread's floor, as a share of the median (see the module docstring)
SPREAD_FLOOR = 0.01

Array = npt.NDArray[np.float64]


@attrs.frozen
class Settings:
    """What makes a figure low: more than ``threshold`` (a fraction) under the fleet
    median, or a robust z below ``z``; and the nodes a fleet needs to be judged."""

    threshold: float = 0.10
    z: float = -4.0
    min_nodes: int = 5


@attrs.define(eq=False)
class Fleet:
    """The nodes of one SKU measured with the same options, and their statistics.

    ``values``, ``ratio``, ``z`` and ``low`` are nodes x slots; ``median``, ``mad`` and
    ``count`` one per slot; ``judged`` says which slots have enough nodes."""

    sku: str
    options: Comparable
    entries: list[NodeEntry]
    slots: list[Slot]
    values: Array
    median: Array
    mad: Array
    count: npt.NDArray[np.int64]
    ratio: Array
    z: Array
    low: npt.NDArray[np.bool_]
    judged: npt.NDArray[np.bool_]

    @property
    def nodes(self) -> list[str]:
        return [e.node for e in self.entries]


def partition(
    entries: Sequence[NodeEntry], settings: Settings
) -> tuple[list[list[NodeEntry]], list[Apart]]:
    """Nodes grouped by SKU and options; a group smaller than ``min_nodes`` is set apart,
    with the reason (its options differ from the SKU's largest group's, or it is small)."""
    groups: dict[tuple[str, Comparable], list[NodeEntry]] = {}
    for e in entries:
        groups.setdefault((e.table.sku, e.key.options), []).append(e)
    largest: dict[str, tuple[int, Comparable]] = {}
    for (sku, opts), members in groups.items():
        if len(members) > largest.get(sku, (0, opts))[0]:
            largest[sku] = (len(members), opts)
    fleets: list[list[NodeEntry]] = []
    apart: list[Apart] = []
    for (sku, opts), members in groups.items():
        if len(members) >= settings.min_nodes:
            fleets.append(members)
            continue
        size, main = largest[sku]
        if main != opts and size >= settings.min_nodes:
            why = (
                f"options differ from the {size}-node fleet of {sku} ({main.describe()}): "
                f"{opts.describe()}"
            )
        else:
            why = (
                f"only {len(members)} node(s) of {sku} with {opts.describe()} "
                f"(a fleet needs {settings.min_nodes}, --min-nodes)"
            )
        apart.extend(Apart(e.node, e.key.source, why) for e in members)
    return fleets, apart


def _matrix(entries: Sequence[NodeEntry]) -> tuple[list[Slot], Array]:
    """The nodes x slots matrix of values (NaN where a node lacks a figure; a slot a node
    has twice, as an MPI run's pairs to several hosts, keeps its worst figure)."""
    index: dict[Slot, int] = {}
    layouts: dict[tuple[Slot, ...], npt.NDArray[np.intp]] = {}
    for e in entries:
        layout = e.table.layout
        if layout not in layouts:
            layouts[layout] = np.fromiter(
                (index.setdefault(s, len(index)) for s in layout), np.intp, len(layout)
            )
    slots = list(index)
    values = np.full((len(entries), len(slots)), np.nan)
    latency = np.array([s.kind == KIND_LATENCY for s in slots], bool)
    for i, e in enumerate(entries):
        cols = layouts[e.table.layout]
        row = np.asarray(e.table.values, np.float64)
        if len(np.unique(cols)) == len(cols):
            values[i, cols] = row
            continue
        worst = np.where(latency[cols], row, -row)
        out = np.full(len(slots), np.inf)
        np.minimum.at(out, cols, -worst)  # the lowest bandwidth, the highest latency
        seen = np.isfinite(out)
        values[i, seen] = np.where(latency[seen], -out[seen], out[seen])
    return slots, values


def statistics(entries: list[NodeEntry], settings: Settings) -> Fleet:
    """One fleet's statistics (the entries share SKU and options)."""
    slots, values = _matrix(entries)
    count = np.sum(~np.isnan(values), axis=0)
    judged = count >= settings.min_nodes
    with np.errstate(all="ignore"):
        median = np.nanmedian(values, axis=0) if len(slots) else np.zeros(0)
        mad = np.nanmedian(np.abs(values - median), axis=0) if len(slots) else np.zeros(0)
        latency = np.array([s.kind == KIND_LATENCY for s in slots], bool)
        ratio = np.where(latency, median / values, values / median)
        spread = np.maximum(MAD_SCALE * mad, SPREAD_FLOOR * np.abs(median))
        z = np.where(latency, -1.0, 1.0) * (values - median) / spread
    z = np.where(spread > 0, z, 0.0)
    low = judged & ~np.isnan(values) & ((ratio < 1.0 - settings.threshold) | (z < settings.z))
    first = entries[0]
    return Fleet(
        sku=first.table.sku,
        options=first.key.options,
        entries=entries,
        slots=slots,
        values=values,
        median=median,
        mad=mad,
        count=count,
        ratio=ratio,
        z=z,
        low=low,
        judged=judged,
    )


def fleets(entries: Sequence[NodeEntry], settings: Settings) -> tuple[list[Fleet], list[Apart]]:
    """Every fleet's statistics, and the nodes set apart, largest fleet first."""
    groups, apart = partition(entries, settings)
    groups.sort(key=lambda g: (-len(g), g[0].table.sku))
    return [statistics(sorted(g, key=lambda e: e.node), settings) for g in groups], apart
