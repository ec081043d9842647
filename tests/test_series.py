"""The layout of a series of cells across ranks (which cells each rank takes part in)."""

from __future__ import annotations

import random

import pytest

from gpubw.measure.series import SeriesLayout, measure_series
from gpubw.model.errors import UsageError


def test_a_rank_steps_through_its_own_cells_and_each_next_one_only() -> None:
    """steps(rank) are the cells at which the walk over every cell hands over or measures on
    that rank (every cell for rank 0; else its cells and the cell after each), no other."""
    rng = random.Random(5)
    groups = [tuple(sorted(rng.sample(range(9), rng.choice([1, 2, 3])))) for _ in range(40)]
    layout = SeriesLayout(groups)
    assert layout.groups == tuple(groups)
    for me in range(10):
        walked = [
            k
            for k, group in enumerate(groups)
            if (k > 0 and (me == 0 or me in group or me in groups[k - 1])) or me in group
        ]
        steps = list(layout.steps(me))
        assert steps == sorted(steps) and set(walked) <= set(steps), me
        assert set(steps) - set(walked) <= {0}, me  # rank 0 visits cell 0, doing nothing
        assert list(layout.cells_of(me)) == [k for k, g in enumerate(groups) if me in g]


def test_a_layout_of_other_cells_is_refused() -> None:
    """measure_series refuses a layout of another cell count, before any collective."""
    layout = SeriesLayout([(0,), (1,)])
    with pytest.raises(UsageError, match="a layout of 2 cells for 1 cells"):
        measure_series(None, [[object()]], None, layout=layout)  # type: ignore[arg-type, list-item]
