"""Each GPU against its own history (``gpubw fleet --db FILE --since 30d``): its trend, and
the figures that fell more than the threshold below its own median over the window, even
where the GPU is still within the fleet.

For every figure of a GPU (a :class:`~gpubw.fleet.history.Series`: one slot, one peer) the
latest point is set against the median of the earlier points in the window; the ratio is
the GPU's speed against its own past, as the fleet's ratio is against the fleet (latest /
median for bandwidth, median / latest for latency: below 1 is always slower). A figure
with fewer than :data:`MIN_EARLIER` earlier points has no trend yet. A GPU's trend is the
median of its figures' ratios (a whole GPU that slowed moves it), and its worst figure;
it fell when some figure's ratio is below ``1 - threshold``.
"""

from __future__ import annotations

import datetime
import itertools
import statistics
from collections.abc import Iterable

import attrs

from gpubw.fleet.history import Series, StoredGpu
from gpubw.fleet.reading import Slot
from gpubw.model.results import KIND_LATENCY

#: the earlier points a figure needs in the window before its latest is judged
MIN_EARLIER = 2


def _utc(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)


@attrs.frozen
class Change:
    """One figure of a GPU against its own past: the slot, the pair's other GPU, the latest
    value and when it was measured, the median of the ``earlier`` points before it, and
    the ratio (below 1: slower than it used to be)."""

    slot: Slot
    peer: StoredGpu | None
    latest: float
    when: datetime.datetime
    median: float
    earlier: int
    ratio: float


@attrs.frozen
class GpuTrend:
    """One GPU's trend over the window: how many reports name it, the first and last,
    the median ratio of its figures (None: no figure has history enough), its worst
    figure and the figures that fell more than the threshold (worst first)."""

    gpu: StoredGpu
    reports: int
    first: datetime.datetime
    last: datetime.datetime
    ratio: float | None
    worst: Change | None
    fell: tuple[Change, ...]


def change(series: Series) -> Change | None:
    """The latest point of ``series`` against the median of its earlier ones (None: fewer
    than :data:`MIN_EARLIER` earlier points, or a median of 0)."""
    if len(series.points) <= MIN_EARLIER:
        return None
    when, latest = series.points[-1]
    median = statistics.median(v for _, v in series.points[:-1])
    if median <= 0 or latest <= 0:
        return None
    ratio = median / latest if series.slot.kind == KIND_LATENCY else latest / median
    earlier = len(series.points) - 1
    return Change(series.slot, series.peer, latest, _utc(when), median, earlier, ratio)


def _trend(gpu: StoredGpu, series: list[Series], threshold: float) -> GpuTrend:
    times = {t for s in series for t, _ in s.points}
    changes = sorted(
        (c for c in (change(s) for s in series) if c is not None), key=lambda c: c.ratio
    )
    return GpuTrend(
        gpu=gpu,
        reports=len(times),
        first=_utc(min(times)),
        last=_utc(max(times)),
        ratio=statistics.median(c.ratio for c in changes) if changes else None,
        worst=changes[0] if changes else None,
        fell=tuple(c for c in changes if c.ratio < 1.0 - threshold),
    )


def trends(series: Iterable[Series], threshold: float) -> list[GpuTrend]:
    """Every GPU's trend from its series (as :meth:`History.series` gives them, a GPU's
    series together), those that fell first (the lowest ratio), then by node and GPU."""
    out = [
        _trend(gpu, list(group), threshold)
        for gpu, group in itertools.groupby(series, key=lambda s: s.gpu)
    ]
    out.sort(
        key=lambda t: (
            not t.fell,
            t.worst.ratio if t.fell and t.worst else 0.0,
            t.gpu.node,
            t.gpu.ordinal,
        )
    )
    return out
