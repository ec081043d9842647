"""Tests of gpubw.world.tasks: simulated ranks that pass one baton."""

from __future__ import annotations

import threading

import pytest

from gpubw.world.base import WorldError
from gpubw.world.simulated import SimulatedCluster


def test_a_collective_costs_one_turn_per_rank() -> None:
    """32 ranks, 50 allreduces: one turn per rank per collective (plus each rank's first),
    never a round through the other ranks; the answers are every rank's."""
    cluster = SimulatedCluster([4] * 8, cooperative=True)

    def fn(world: object) -> list[int]:
        return [world.allreduce(world.rank + i, "sum") for i in range(50)]  # type: ignore[attr-defined]

    outcomes = cluster.run(fn)
    assert [o.value for o in outcomes] == [[496 + 32 * i for i in range(50)]] * 32
    hub = cluster.tasks
    assert hub is not None and hub.steps >= 50
    assert hub.turns <= 32 * (hub.steps + 1)


def test_one_rank_runs_at_a_time_in_rank_order() -> None:
    """Between two collectives the ranks run one by one, in rank order, every time."""
    order: list[int] = []
    running = threading.Semaphore(1)

    def fn(world: object) -> None:
        for _ in range(3):
            assert running.acquire(blocking=False), "two ranks ran at once"
            order.append(world.rank)  # type: ignore[attr-defined]
            running.release()
            world.barrier()  # type: ignore[attr-defined]

    SimulatedCluster([2, 2], cooperative=True).run(fn)
    assert order == [0, 1, 2, 3] * 3


def test_a_rank_that_left_fails_the_others_naming_it() -> None:
    """A rank that returns early fails the others' next collective at once, naming it."""

    def fn(world: object) -> None:
        if world.rank == 1:  # type: ignore[attr-defined]
            return
        world.barrier()  # type: ignore[attr-defined]

    outcomes = SimulatedCluster(3, cooperative=True).run(fn)
    for o in (outcomes[0], outcomes[2]):
        assert isinstance(o.error, WorldError)
        assert "rank 1 left the world" in str(o.error)
    assert outcomes[1].error is None


def test_stop_needs_a_cooperative_cluster() -> None:
    """stop= on ranks as free threads is refused."""
    with pytest.raises(ValueError, match="cooperative"):
        SimulatedCluster(2).run(lambda w: None, stop=lambda: None)
