"""Pair sampling for N×N testcases and the columns of 1 x N ones: size, coverage,
determinism and bad input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpubw.cli.argtypes import sample_pairs as parse_sample_pairs
from gpubw.measure.sampling import sample_columns, sample_pairs, sample_size
from gpubw.model.errors import UsageError


@st.composite
def requests(draw: st.DrawFn) -> tuple[int, int | float, int, bool]:
    diagonal = draw(st.booleans())
    n = draw(st.integers(1 if diagonal else 2, 40))
    total = n * n if diagonal else n * (n - 1)
    k: int | float = draw(
        st.one_of(st.integers(n, total + 5), st.floats(1e-6, 1.0, allow_nan=False))
    )
    return n, k, draw(st.integers(0, 2**32)), diagonal


@given(requests())
def test_sample_covers_every_device_both_ways(request: tuple) -> None:
    """Every device is a source and a destination; cells are valid and of the asked number."""
    n, k, seed, diagonal = request
    pairs = sample_pairs(n, k, seed, diagonal)
    assert {s for s, _ in pairs} == set(range(n))
    assert {d for _, d in pairs} == set(range(n))
    assert all(0 <= s < n and 0 <= d < n for s, d in pairs)
    if not diagonal:
        assert all(s != d for s, d in pairs)
    assert len(pairs) == sample_size(n, k, diagonal)


@given(requests())
def test_sample_is_deterministic_with_its_seed(request: tuple) -> None:
    """The same n, size and seed give the same cells."""
    n, k, seed, diagonal = request
    assert sample_pairs(n, k, seed, diagonal) == sample_pairs(n, k, seed, diagonal)


def test_seeds_change_the_sample_and_the_rack_figures() -> None:
    """A 72-GPU rack: 5,112 cells; 10 % keeps 512 of them, and another seed picks others."""
    a = sample_pairs(72, 0.1, seed=1)
    b = sample_pairs(72, 0.1, seed=2)
    assert len(a) == len(b) == 512
    assert a != b
    assert len(sample_pairs(72, 1.0, seed=1)) == 72 * 71


def test_sizes() -> None:
    """Counts are kept, capped at all cells; fractions round up and never fall below n."""
    assert sample_size(8, 8) == 8
    assert sample_size(8, 1000) == 56
    assert sample_size(8, 0.5) == 28
    assert sample_size(8, 0.01) == 8
    assert sample_size(8, 0.01, diagonal=True) == 8
    assert sample_size(3, 1.0, diagonal=True) == 9


@pytest.mark.parametrize(
    ("n", "k", "diagonal", "match"),
    [
        (8, 7, False, "cannot cover 8 devices"),
        (8, 0, False, "cannot cover"),
        (8, 0.0, False, r"in \(0, 1\]"),
        (8, 1.5, False, r"in \(0, 1\]"),
        (8, float("nan"), False, r"in \(0, 1\]"),
        (8, True, False, "int or a fraction"),
        (8, "8", False, "int or a fraction"),
        (1, 1, False, "at least 2 devices"),
        (0, 1, True, "device count"),
    ],
)
def test_bad_requests_name_the_value(n: int, k: object, diagonal: bool, match: str) -> None:
    """Impossible or malformed sample sizes are refused with the value and what is allowed."""
    with pytest.raises(ValueError, match=match):
        sample_pairs(n, k, 0, diagonal)  # type: ignore[arg-type]


def test_parse_sample_pairs() -> None:
    """A sample size is a count, a fraction or a percentage; anything else is a UsageError
    naming the value and its parameter (which the CLI maps to its flag)."""
    assert parse_sample_pairs("64") == 64
    assert parse_sample_pairs("0.25") == 0.25
    assert parse_sample_pairs("25%") == 0.25
    assert parse_sample_pairs("1") == 1
    for bad in ("0", "-3", "abc", "0%", "150%", "1.5", ""):
        with pytest.raises(UsageError, match=f"invalid pair sample '{bad}': expected") as info:
            parse_sample_pairs(bad)
        assert info.value.param == "sample_pairs"


def test_groups_keep_the_sample_within_them() -> None:
    """With groups (NVLink domains) every sampled cell pairs two devices of one group, every
    device is still a source and a destination, a share is of the cells within groups, and
    one group samples exactly as no groups."""
    groups = (0, 0, 0, 1, 1, 1, 1, 2, 2)
    within = sum(1 for s in range(9) for d in range(9) if s != d and groups[s] == groups[d])
    for seed in range(5):
        cells = sample_pairs(9, 9, seed, groups=groups)
        assert len(cells) == 9 and all(groups[s] == groups[d] for s, d in cells)
        assert {s for s, _ in cells} == {d for _, d in cells} == set(range(9))
        assert sample_pairs(9, 9, seed, groups=groups) == cells
        assert sample_pairs(9, 9, seed, groups=(0,) * 9) == sample_pairs(9, 9, seed)
    assert sample_size(9, 0.5, groups=groups) == within // 2
    assert len(sample_pairs(9, 1.0, 0, groups=groups)) == within == 20


@given(
    st.integers(2, 24),
    st.integers(0, 2**16),
    st.lists(st.integers(0, 2), min_size=24, max_size=24),
    st.lists(st.booleans(), min_size=24, max_size=24),
    st.one_of(st.none(), st.floats(0.05, 1.0)),
)
def test_sampled_cells_are_the_sample_of_every_cell(
    n: int, seed: int, group_of: list[int], chosen: list[bool], fraction: float | None
) -> None:
    """A testcase's cells (with --devices and NVLink domains) are, in row-major order, the
    selected in-group cells that the sample holds, and the note counts every such cell; the
    same as filtering all n x n cells, without listing them."""
    from gpubw.model.options import RunOptions
    from gpubw.testcases.shapes import sampled_cells

    groups = tuple(group_of[:n])
    k = max(n, round(n * n * fraction)) if fraction is not None else None

    class Fake:
        class system:
            options = RunOptions(sample_pairs=k, seed=seed)

        @staticmethod
        def selected(index: int) -> bool:
            return chosen[index]

    every = [
        (r, c)
        for r in range(n)
        for c in range(n)
        if r != c and chosen[r] and chosen[c] and groups[r] == groups[c]
    ]
    cells, notes = sampled_cells(Fake, n, groups)  # type: ignore[arg-type]
    if k is None:
        assert (cells, notes) == (every, ())
        return
    sample = sample_pairs(n, k, seed, groups=groups)
    assert cells == [rc for rc in every if rc in sample]
    assert dict(notes)["sampled"] == {"cells": len(every), "measured": len(cells), "seed": seed}


@given(
    st.integers(2, 40),
    st.integers(0, 2**32),
    st.one_of(st.floats(1e-6, 1.0, allow_nan=False), st.integers(0, 2000)),
    st.lists(st.integers(0, 3), min_size=40, max_size=40),
)
def test_sampled_columns_keep_the_share_of_pairs_in_every_group(
    n: int, seed: int, k: float | int, group_of: list[int]
) -> None:
    """Each group of m >= 2 devices keeps ceil(m x size / cells) of its m columns, at least
    one (every device then takes part); a lone device none; the same seed, the same
    columns; one group as no groups."""
    groups = tuple(group_of[:n])
    if isinstance(k, int):
        k = max(k, n)
    size = sample_size(n, k, groups=groups)
    cells = sample_size(n, 1.0, groups=groups)
    columns = sample_columns(n, k, seed, groups)
    assert columns == sample_columns(n, k, seed, groups)
    for g in set(groups):
        members = [d for d in range(n) if groups[d] == g]
        m = len(members)
        kept = [d for d in members if d in columns]
        want = 0 if m < 2 else min(m, max(1, -(-m * size // cells)))
        assert len(kept) == want
    assert sample_columns(n, k, seed, (0,) * n) == sample_columns(n, k, seed)


def test_sampled_columns_of_a_rack() -> None:
    """72 GPUs: --sample-pairs 72 keeps 2 columns (142 pairs), 10 % 8 (one per 5,112 / 512
    cells of each column's 71), every pair all 72; 8 racks of 72 with 576: 2 per rack."""
    assert len(sample_columns(72, 72, 0)) == 2
    assert len(sample_columns(72, 0.1, 0)) == 8
    assert sample_columns(72, 5112, 0) == frozenset(range(72))
    assert sample_columns(72, 72, 0) != sample_columns(72, 72, 1)
    racks = tuple(d // 72 for d in range(576))
    columns = sample_columns(576, 576, 0, racks)
    assert sorted(sum(1 for c in columns if c // 72 == r) for r in range(8)) == [2] * 8
    with pytest.raises(ValueError, match="at least 72"):
        sample_columns(72, 71, 0)
