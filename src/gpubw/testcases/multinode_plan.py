"""What every rank of one process shares about a multinode testcase: an N x N testcase's
cells, each cell's issuing ranks, each rank's own cells and peers; a fan's column, the
sampled columns, the bisect's partners and pairs; the NVLink domains' members. Each is
computed once per process from immutable inputs.

A real MPI rank computes these once in its own process; the ranks of a simulated rack are
threads of one process, and each computing them again (O(cells) or O(N) a rank) made every
testcase O(N^2) before a copy ran. So they are pure functions of hashable, immutable
arguments, kept by a small :func:`functools.lru_cache`, and return immutable objects that
the ranks' threads share (no rank changes them).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

from gpubw.measure.series import RankCopy, SeriesLayout, cell_ranks
from gpubw.testcases.shapes import chosen_cells, drawn, within_groups

#: the ranks that issue the copies of cell (row, column), in pair order
Issuers = Callable[[int, int], tuple[int, ...]]


def row_issues(r: int, c: int) -> tuple[int, ...]:
    """One copy, issued by the row's rank (read and write)."""
    return (r,)


def both_issue(r: int, c: int) -> tuple[int, ...]:
    """Two copies, the first issued by the row's rank and the second by the column's
    (the bidirectional testcases)."""
    return (r, c)


class GridPlan:
    """An N x N testcase's cells as every rank walks them (immutable, shared)."""

    __slots__ = ("_peers", "across", "cells", "elsewhere", "series", "total")

    def __init__(
        self,
        cells: tuple[tuple[int, int], ...],
        total: int | None,
        across: int,
        issuers: Issuers,
    ) -> None:
        #: the cells measured, (row, column), row-major
        self.cells = cells
        #: with ``--sample-pairs``: the cells a full run measures (the ``sampled`` note)
        self.total = total
        #: the cells not measured because they pair ranks of different NVLink domains
        self.across = across
        #: every cell's pairs as a rank that issues none of them holds them (no buffers)
        self.elsewhere = tuple(tuple(RankCopy(i, None) for i in issuers(r, c)) for r, c in cells)
        #: the cells' groups and which of them each rank takes part in
        self.series = SeriesLayout([cell_ranks(pairs) for pairs in self.elsewhere])
        peers: dict[int, set[int]] = {}
        for r, c in cells:
            peers.setdefault(r, set()).add(c)
            peers.setdefault(c, set()).add(r)
        self._peers = {r: frozenset(p) for r, p in peers.items()}

    def own(self, rank: int) -> tuple[int, ...]:
        """The cells (indexes) of which ``rank`` issues a copy: the pairs it builds."""
        return self.series.cells_of(rank)

    def peers(self, rank: int) -> frozenset[int]:
        """The ranks that share a cell (row, column) with ``rank``: whose buffers it may
        copy."""
        return self._peers.get(rank, frozenset())


@functools.lru_cache(maxsize=8)
def grid_plan(
    n: int,
    k: int | float | None,
    seed: int,
    rows: tuple[int, ...] | None,
    groups: tuple[int, ...] | None,
    issuers: Issuers,
) -> GridPlan:
    """The :class:`GridPlan` of an N x N testcase of ``n`` ranks: ``k`` and ``seed`` the
    run's ``--sample-pairs`` and ``--seed``, ``rows`` the ranks whose GPU is selected (None:
    every rank), ``groups`` each rank's NVLink domain as an index (None: one domain)."""
    chosen = range(n) if rows is None else rows
    cells, total = chosen_cells(n, k, seed, chosen, groups)
    across = 0 if groups is None else within_groups(chosen, None) - within_groups(chosen, groups)
    return GridPlan(cells, total, across, issuers)


class DomainFacts:
    """The NVLink domains of a run's ranks (immutable, shared)."""

    __slots__ = ("groups", "members", "names")

    def __init__(self, domains: tuple[str, ...]) -> None:
        members: dict[str, list[int]] = {}
        for r, d in enumerate(domains):
            members.setdefault(d, []).append(r)
        #: the domains' names, in order of first appearance
        self.names = tuple(members)
        #: each domain's ranks, ascending
        self.members: Mapping[str, tuple[int, ...]] = {d: tuple(rs) for d, rs in members.items()}
        index = {d: i for i, d in enumerate(self.names)}
        #: each rank's domain as an index, or None where every rank is in one domain
        self.groups = None if len(self.names) < 2 else tuple(index[d] for d in domains)


@functools.lru_cache(maxsize=8)
def domain_facts(domains: tuple[str, ...]) -> DomainFacts:
    """The :class:`DomainFacts` of ``domains`` (each rank's NVLink domain, by rank)."""
    return DomainFacts(domains)


@functools.lru_cache(maxsize=8)
def selected_domains(domains: tuple[str, ...], ranks: frozenset[int] | None) -> tuple[str, ...]:
    """The domains of the ranks of ``ranks`` (None: every rank), in order of first
    appearance."""
    return tuple(dict.fromkeys(d for r, d in enumerate(domains) if ranks is None or r in ranks))


class FanColumn:
    """Column g of a 1 x N fan (immutable, shared): the other ranks of g's NVLink domain,
    which of them are selected (the column's issuers, each one copy), and the column's
    pairs as a rank that issues none of them holds them."""

    __slots__ = ("elsewhere", "issuers", "others", "place")

    def __init__(self, others: tuple[int, ...], issuers: tuple[int, ...]) -> None:
        #: every other rank of g's domain: rank others[i] copies with part i of g's buffer
        self.others = others
        #: the selected ones, in that order: the column's pairs
        self.issuers = issuers
        self.elsewhere = tuple(RankCopy(j, None) for j in issuers)
        #: each issuer's (pair index, part index)
        self.place = {j: (k, others.index(j)) for k, j in enumerate(issuers)}


@functools.lru_cache(maxsize=1024)
def fan_column(members: tuple[int, ...], g: int, ranks: frozenset[int] | None) -> FanColumn:
    """The :class:`FanColumn` of column ``g`` (``members``: g's domain's ranks; ``ranks``:
    the selected ranks, None: every rank)."""
    others = tuple(j for j in members if j != g)
    return FanColumn(others, tuple(j for j in others if ranks is None or j in ranks))


class BisectPlan:
    """The bisect testcase's copies (immutable, shared): each rank's partner, the rows
    measured, their pairs as a rank that issues none of them holds them, and which of them
    each rank issues."""

    __slots__ = ("elsewhere", "partners", "place", "rows")

    def __init__(self, domains: tuple[str, ...], ranks: frozenset[int] | None) -> None:
        members = domain_facts(domains).members
        partners = []
        for i, d in enumerate(domains):
            ring = members[d]
            partners.append(ring[(ring.index(i) + len(ring) // 2) % len(ring)])
        #: rank i's partner: the rank N_d/2 further on among the N_d ranks of its domain
        self.partners = tuple(partners)
        chosen = range(len(domains)) if ranks is None else ranks
        #: the rows measured: selected ranks whose partner is selected and another rank
        self.rows = tuple(
            i
            for i in range(len(domains))
            if i in chosen and partners[i] in chosen and partners[i] != i
        )
        #: row k's pair: the copy into rows[k], issued by its partner
        self.elsewhere = tuple(RankCopy(partners[i], None) for i in self.rows)
        place: dict[int, list[int]] = {}
        for k, i in enumerate(self.rows):
            place.setdefault(partners[i], []).append(k)
        #: the pairs (indexes) each rank issues
        self.place = {r: tuple(ks) for r, ks in place.items()}


@functools.lru_cache(maxsize=8)
def bisect_plan(domains: tuple[str, ...], ranks: frozenset[int] | None) -> BisectPlan:
    """The :class:`BisectPlan` of ranks in ``domains`` (each rank's NVLink domain), of which
    ``ranks`` are selected (None: every rank)."""
    return BisectPlan(domains, ranks)


@functools.lru_cache(maxsize=8)
def column_sample(
    n: int, k: int | float, seed: int, domains: tuple[str, ...], ranks: frozenset[int] | None
) -> tuple[frozenset[int], int, int]:
    """``--sample-pairs k``'s columns of a 1 x N testcase of ``n`` ranks in ``domains``
    (:func:`gpubw.measure.sampling.sample_columns`, within the domains), how many columns a
    full run measures (a selected rank with another selected rank in its domain) and how
    many of those the sample holds."""
    from gpubw.measure.sampling import sample_columns

    facts = domain_facts(domains)
    chosen = drawn(k, lambda: sample_columns(n, k, seed, groups=facts.groups))
    picked = range(n) if ranks is None else ranks
    eligible = [
        g
        for g in range(n)
        if g in picked and any(j != g and j in picked for j in facts.members[domains[g]])
    ]
    return chosen, len(eligible), sum(1 for g in eligible if g in chosen)
