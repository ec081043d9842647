"""Pair sampling for N×N testcases: measure a deterministic subset of the cells (and of the
columns of the multinode 1 x N testcases: :func:`sample_columns`).

On a 72-GPU rack an N×N testcase has 5,112 off-diagonal cells; ``--sample-pairs`` measures
only some of them. The sample is reproducible (same ``n``, size and seed → same cells) and
covers every device at least once as a source and once as a destination, so no GPU goes
unmeasured: it starts from a random cycle through all devices (``n`` cells, each device once
as source and once as destination) and adds cells drawn uniformly from the rest.
"""

from __future__ import annotations

import collections
import functools
import math
import random
from collections.abc import Sequence

Pair = tuple[int, int]


def _cell_count(n: int, diagonal: bool) -> int:
    return n * n if diagonal else n * (n - 1)


def _allowed(groups: Sequence[int] | None, s: int, d: int) -> bool:
    """Whether cell (s, d) pairs devices of one group (every cell without groups)."""
    return groups is None or groups[s] == groups[d]


def sample_size(
    n: int,
    k_or_fraction: int | float,
    diagonal: bool = False,
    groups: Sequence[int] | None = None,
) -> int:
    """How many cells :func:`sample_pairs` keeps for ``n`` devices.

    An int is a number of cells; it must be at least ``n`` (one per device, to cover each as
    source and destination). A float in (0, 1] is a share of all cells, rounded up and raised
    to ``n`` when smaller. Either is capped at the number of cells. ``groups`` (a group per
    device, e.g. its NVLink domain) leaves only the cells within a group: the share is of
    those, and the cap too."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"the device count must be an int >= 1, got {n!r}")
    if not diagonal and n < 2:
        raise ValueError("pairs between distinct devices need at least 2 devices, got 1")
    total = _cell_count(n, diagonal)
    if groups is not None:  # the cells within a group, from the groups' sizes: O(n)
        sizes = collections.Counter(groups[:n]).values()
        total = sum(m * m if diagonal else m * (m - 1) for m in sizes)
    if isinstance(k_or_fraction, bool):
        raise ValueError(f"the sample size must be an int or a fraction, got {k_or_fraction!r}")
    if isinstance(k_or_fraction, int):
        if k_or_fraction < n:
            raise ValueError(
                f"a sample of {k_or_fraction} pair(s) cannot cover {n} devices as sources "
                f"and destinations: ask for at least {n}"
            )
        return min(k_or_fraction, total)
    if isinstance(k_or_fraction, float):
        if not (0.0 < k_or_fraction <= 1.0):
            raise ValueError(f"a sample fraction must be in (0, 1], got {k_or_fraction!r}")
        return min(max(math.ceil(k_or_fraction * total), n), total)
    raise ValueError(f"the sample size must be an int or a fraction, got {k_or_fraction!r}")


def sample_pairs(
    n: int,
    k_or_fraction: int | float,
    seed: int,
    diagonal: bool = False,
    groups: Sequence[int] | None = None,
) -> frozenset[Pair]:
    """See :func:`_sample_pairs`; the last few answers are kept (the ranks of a simulated
    rack, threads of one process, ask the same question: each would draw from all n x n
    cells again)."""
    return _sample_pairs(
        n, k_or_fraction, seed, diagonal, None if groups is None else tuple(groups)
    )


@functools.lru_cache(maxsize=8)
def _sample_pairs(
    n: int,
    k_or_fraction: int | float,
    seed: int,
    diagonal: bool,
    groups: tuple[int, ...] | None,
) -> frozenset[Pair]:
    """A deterministic sample of the ``(src, dst)`` cells of an ``n``×``n`` testcase.

    ``diagonal`` says whether the testcase measures ``src == dst`` cells (most N×N testcases
    do not). See :func:`sample_size` for ``k_or_fraction``. Every device appears at least
    once as a source and once as a destination. ``groups`` (a group per device: its NVLink
    domain) keeps the sample within groups: the cycle runs through each group's devices
    (in the order of the one shuffle, so one group samples as no groups do) and the rest are
    drawn from the cells within a group; a device alone in its group has no cell."""
    size = sample_size(n, k_or_fraction, diagonal, groups)
    rng = random.Random(seed)
    cells = [
        (s, d)
        for s in range(n)
        for d in range(n)
        if (diagonal or s != d) and _allowed(groups, s, d)
    ]
    if size == len(cells):
        return frozenset(cells)
    order = list(range(n))
    rng.shuffle(order)
    chosen: set[Pair] = set()
    for group in sorted(set(groups)) if groups is not None else [None]:
        ring = [i for i in order if group is None or groups is None or groups[i] == group]
        chosen.update((ring[i], ring[(i + 1) % len(ring)]) for i in range(len(ring)))
    if not diagonal:
        chosen = {(s, d) for s, d in chosen if s != d}
    rest = [rc for rc in cells if rc not in chosen]
    chosen.update(rng.sample(rest, max(size - len(chosen), 0)))
    return frozenset(chosen)


def sample_columns(
    n: int,
    k_or_fraction: int | float,
    seed: int,
    groups: Sequence[int] | None = None,
) -> frozenset[int]:
    """A deterministic sample of the columns of a 1 x N testcase whose column ``g`` is
    every other device of ``g``'s group copying at once (``n - 1`` pairs, or ``m - 1`` in a
    group of ``m``).

    The same share of pairs as :func:`sample_pairs` keeps of an N x N testcase's cells:
    ``ceil(m x size / cells)`` columns of each group of ``m >= 2`` devices (``size`` and
    ``cells`` as :func:`sample_size` counts them), and at least one, so that every device
    of the group takes part (as the column's device or as one of the others); drawn
    uniformly from the group's devices with ``random.Random(seed)``. A device alone in its
    group has no column. ``--sample-pairs 72`` on 72 devices: 2 columns (142 pairs)."""
    size = sample_size(n, k_or_fraction, False, groups)
    members: dict[int | None, list[int]] = collections.defaultdict(list)
    for d in range(n):
        members[None if groups is None else groups[d]].append(d)
    cells = sum(len(m) * (len(m) - 1) for m in members.values())
    rng = random.Random(seed)
    chosen: set[int] = set()
    for _, devices in sorted(members.items(), key=lambda item: item[1][0]):
        m = len(devices)
        if m >= 2:
            chosen.update(rng.sample(devices, min(m, max(1, -(-m * size // cells)))))
    return frozenset(chosen)
