"""gpubw.runner.ranks: the hooks a run over several ranks goes through (no-ops for one rank)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from gpubw.model.options import RunOptions
from gpubw.model.results import Status, TestcaseResult
from gpubw.runner.ranks import (
    Ranks,
    finish,
    is_multinode,
    leader_bound,
    rank_prefix,
)
from gpubw.runner.registry import Registry
from gpubw.runner.simulation import resolve_simulation
from gpubw.world import SingleWorld


def test_is_multinode_tells_the_13_from_the_rest() -> None:
    """Only the multinode testcases run on every rank."""
    registry = Registry.discover()
    multi = [e.key for e in registry.entries if is_multinode(e)]
    assert len(multi) == 13 and all(k.startswith("multinode_") for k in multi)
    assert not is_multinode(registry.by_key("device_local_copy"))


def test_simulated_hosts_only_for_a_system_of_several_hosts() -> None:
    """--simulate emulates ranks only for presets with hosts (the GB200 rack), or where a
    simulation says which ranks to emulate."""
    rack = resolve_simulation("gb200nvl72")
    two = resolve_simulation("h200x2")
    assert rack is not None and rack.hosts == (4,) * 18
    assert two is not None and two.hosts is None and resolve_simulation(None) is None
    assert attrs.evolve(two, ranks=(2,)).hosts == (2,)


def test_one_rank_is_a_no_op(sim_system: Any) -> None:
    """In a world of one rank the step runs as it is and nothing is exchanged or added."""
    system = sim_system("h200x2")
    ranks = Ranks(system)
    assert not ranks.active and ranks.report_fields() == {} and ranks.warnings == []
    done = TestcaseResult("k", Status.PASSED)
    assert ranks.step(lambda *a: done, None, system, 1, None) is done  # type: ignore[arg-type]
    assert rank_prefix(system.world) == ""
    assert finish(SingleWorld(), 2) == 2


def test_leader_bound_covers_every_cell_of_the_host(sim_system: Any) -> None:
    """Other ranks wait for a host's first rank as long as an N x N testcase may take: past
    the world's own bound, it grows with the square of the GPUs and with the samples, and
    covers 64 cells of 2 samples each waiting out its gate and its sync on 8 GPUs."""
    options = RunOptions(samples=2, gate_timeout_s=1.0)
    eight = sim_system("h200x8", options=options)
    two = sim_system("h200x2", options=options)
    more = sim_system("h200x8", options=RunOptions(samples=4, gate_timeout_s=1.0))
    world = eight.world.timeout_s
    assert leader_bound(eight) - world == pytest.approx(16 * (leader_bound(two) - world))
    assert leader_bound(more) - world == pytest.approx(2 * (leader_bound(eight) - world))
    one_cell_sample = options.gate_timeout_s + options.sync_timeout_s
    assert leader_bound(eight) >= 8 * 8 * 2 * one_cell_sample + world


def test_a_system_opened_for_a_world_drives_only_what_its_rank_drives() -> None:
    """The opener makes the System with its world (never re-targeted after): a host's first
    rank drives every GPU, its second rank only its own, whose context also makes the
    device-less host memory."""
    from gpubw.api import system_opener
    from gpubw.world.simulated import SimulatedCluster

    first, second = SimulatedCluster([2]).worlds()
    opened = []
    for world in (first, second):
        with system_opener("h200x2")(RunOptions(), world) as system:
            opened.append((system.world is world, system.driven_devices, system.pool.home_device))
    assert opened == [(True, (0, 1), 0), (True, (1,), 1)]
