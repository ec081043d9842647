"""What the simulated ranks of one process share about a multinode testcase (the plan)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from _ranked import ranked_report
from gpubw.model.options import RunOptions
from gpubw.testcases import multinode_shapes, shapes

SMALL = RunOptions(samples=1, loops=2, buffer_sizes=(1 << 20,), sample_pairs=8, seed=3)
READ = "multinode_device_to_device_memcpy_read_ce"
WRITE = "multinode_device_to_device_memcpy_write_ce"
BIDIRECTIONAL = "multinode_device_to_device_bidirectional_memcpy_read_ce"
FAN = "multinode_device_to_device_all_to_one_write_sm"
BISECT = "multinode_bisect_write_ce"


def two_domains() -> Any:
    """8 GB200 GPUs on 4 hosts of 2, in 2 NVLink domains of 4."""
    from gpubw.backend.sim.presets import system_from_dict

    doc = {"base": "gb200nvl72", "name": "tworacks", "count": 8, "hosts": [2, 2, 2, 2],
           "nvlink_domains": [4, 4]}  # fmt: skip
    return system_from_dict(doc)


def _measured(report: Any) -> list[tuple[int, int]]:
    """The cells of the report's first testcase's first matrix that hold a figure."""
    grid = report.testcases[0].matrices[0]
    n = len(grid.values)
    return [(r, c) for r in range(n) for c in range(n) if grid.values[r][c] is not None]


def _count_pairs(monkeypatch: pytest.MonkeyPatch) -> Counter[tuple[int, int]]:
    """Each (building rank, issuing rank) of the pairs the N x N shapes build from now on."""
    seen: Counter[tuple[int, int]] = Counter()
    real = multinode_shapes.pair

    def counted(world: Any, rank: int, src: Any, dst: Any) -> Any:
        seen[world.rank, rank] += 1
        return real(world, rank, src, dst)

    monkeypatch.setattr(multinode_shapes, "pair", counted)
    return seen


@pytest.mark.parametrize("key", [READ, BIDIRECTIONAL])
def test_a_rank_builds_the_pairs_of_its_own_cells_only(
    monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    """A rank builds the pairs of the cells it issues a copy of, not of every cell: one a
    read cell (its row's), four a bidirectional cell (its two ranks, two pairs each)."""
    seen = _count_pairs(monkeypatch)
    report = ranked_report(two_domains(), [2, 2, 2, 2], SMALL, [key], timeout_s=60)
    assert report.testcases[0].status.value == "Passed"
    cells = _measured(report)
    assert cells
    if key == READ:
        assert seen == Counter((r, r) for r, _ in cells)
    else:
        want: Counter[tuple[int, int]] = Counter()
        for r, c in cells:
            for builder in (r, c):
                want.update({(builder, r): 1, (builder, c): 1})
        assert seen == want


@pytest.mark.parametrize("key", [FAN, BISECT])
def test_a_rank_builds_its_own_pairs_of_a_column_or_the_bisect_only(
    monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    """In a fan's column and in the bisect, a rank builds the pairs it issues, not every
    rank's: every pair built is the builder's own, one per copy it issues."""
    seen = _count_pairs(monkeypatch)
    report = ranked_report(two_domains(), [2, 2, 2, 2], SMALL, [key], timeout_s=60)
    assert report.testcases[0].status.value == "Passed"
    assert seen and all(builder == issuer for builder, issuer in seen), seen
    if key == BISECT:  # every rank receives from its partner (4 further on in its domain)
        assert seen == Counter({(r, r): 1 for r in range(8)})


def test_the_bisect_partners_are_half_a_domain_further_on() -> None:
    """(i + N/2) mod N in one domain, within each domain of several; a rank alone in its
    domain has no row; unselected ranks and their partners have none."""
    from gpubw.testcases.multinode_plan import bisect_plan

    one = bisect_plan(("a",) * 6, None)
    assert one.partners == (3, 4, 5, 0, 1, 2) and one.rows == tuple(range(6))
    assert one.place == {p: (k,) for k, p in enumerate(one.partners)}
    two = bisect_plan(("a", "b", "a", "b", "c"), frozenset({0, 1, 2, 4}))
    assert two.partners == (2, 3, 0, 1, 4) and two.rows == (0, 2)
    assert [p.rank for p in two.elsewhere] == [2, 0]


def test_the_plan_of_the_cells_is_made_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sampled cells, the cells across domains and the domains' members are computed
    once for every simulated rank (and for two testcases of the same cells), not per rank."""
    from gpubw.testcases import multinode_plan

    multinode_plan.grid_plan.cache_clear()
    multinode_plan.domain_facts.cache_clear()
    calls: list[int] = []
    real = shapes.within_groups

    def counted(rows: Any, groups: Any) -> int:
        calls.append(1)
        return real(rows, groups)

    monkeypatch.setattr(shapes, "within_groups", counted)
    monkeypatch.setattr(multinode_plan, "within_groups", counted)
    report = ranked_report(two_domains(), [2, 2, 2, 2], SMALL, [READ, WRITE], timeout_s=60)
    assert [t.status.value for t in report.testcases] == ["Passed", "Passed"]
    # one plan: the cells a full run measures, and those across domains (every cell, and
    # those within a domain): 3 calls, where every rank made them (3 x 8 ranks x 2)
    assert len(calls) == 3
    info = multinode_plan.grid_plan.cache_info()
    assert (info.misses, info.hits) == (1, 15)
    assert multinode_plan.domain_facts.cache_info().misses == 1


def test_the_plan_is_what_every_rank_computed_alone() -> None:
    """The shared plan's cells, issuers, own cells and peers are those of the cells as one
    rank lists them, in both domains' and one domain's runs."""
    from gpubw.measure.series import cell_ranks
    from gpubw.testcases.multinode_plan import both_issue, grid_plan, row_issues

    for groups in (None, (0, 0, 0, 0, 1, 1, 1, 1)):
        for issuers in (row_issues, both_issue):
            plan = grid_plan(8, 8, 3, None, groups, issuers)
            cells = plan.cells
            assert len(cells) == 8 and list(cells) == sorted(cells)
            assert all(groups is None or groups[r] == groups[c] for r, c in cells)
            for k, (r, c) in enumerate(cells):
                assert plan.series.groups[k] == cell_ranks(plan.elsewhere[k])
                assert [p.rank for p in plan.elsewhere[k]] == list(issuers(r, c))
                assert all(p.copy is None for p in plan.elsewhere[k])
            for rank in range(8):
                own = [k for k, rc in enumerate(cells) if rank in issuers(*rc)]
                assert list(plan.own(rank)) == own
                peers = {c for r, c in cells if r == rank} | {r for r, c in cells if c == rank}
                assert plan.peers(rank) == peers


def test_a_plan_with_devices_selected_keeps_their_cells_only() -> None:
    """With ``rows`` (--devices), the plan's cells are among the selected ranks, and without
    sampling every such cell of one domain."""
    from gpubw.testcases.multinode_plan import grid_plan, row_issues

    plan = grid_plan(6, None, 0, (0, 2, 5), None, row_issues)
    assert plan.cells == ((0, 2), (0, 5), (2, 0), (2, 5), (5, 0), (5, 2))
    assert plan.total is None and plan.across == 0
    plan = grid_plan(4, None, 0, None, (0, 0, 1, 1), row_issues)
    assert plan.cells == ((0, 1), (1, 0), (2, 3), (3, 2)) and plan.across == 8


def test_a_fan_column_is_the_other_ranks_of_its_domain() -> None:
    """Column g's others are its domain's ranks but g, its issuers the selected ones; each
    issuer's pair index and part index."""
    from gpubw.testcases.multinode_plan import fan_column

    column = fan_column((4, 5, 6, 7), 5, frozenset({0, 4, 5, 7}))
    assert column.others == (4, 6, 7) and column.issuers == (4, 7)
    assert column.place == {4: (0, 0), 7: (1, 2)}
    assert [p.rank for p in column.elsewhere] == [4, 7]
    assert fan_column((3,), 3, None).others == ()


def test_the_domain_facts_are_those_of_the_ranks() -> None:
    """Each domain's members, its index per rank (None for one domain) and the selected
    ranks' domains, in order of first appearance."""
    from gpubw.testcases.multinode_plan import domain_facts, selected_domains

    facts = domain_facts(("b", "a", "b", "a"))
    assert facts.names == ("b", "a") and facts.groups == (0, 1, 0, 1)
    assert dict(facts.members) == {"b": (0, 2), "a": (1, 3)}
    assert domain_facts(("x", "x")).groups is None
    assert selected_domains(("b", "a", "b"), frozenset({1, 2})) == ("a", "b")
    assert selected_domains(("b", "a", "b"), None) == ("b", "a")
