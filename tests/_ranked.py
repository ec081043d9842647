"""Test support: simulated ranks in one process (one simulated engine, a view per rank).

:func:`run_ranks` runs a function on every rank's System; :func:`ranked_report` runs whole
testcases through the runner on every rank and returns rank 0's Report, as ``gpubw
--simulate`` does for a preset with hosts (:func:`gpubw.runner.simulation.run_rack`). The model's
jitter is set to 0 so that figures do not depend on the order the rank threads run in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from gpubw.backend.sim.backend import SimEngine
from gpubw.backend.sim.faults import Faults
from gpubw.backend.sim.model import SimSystem
from gpubw.backend.sim.presets import load_system
from gpubw.memory.system import System
from gpubw.model.options import RunOptions
from gpubw.model.results import Report
from gpubw.runner import core as runner
from gpubw.runner.simulation import Simulation
from gpubw.runner.spec import RunSpec, select
from gpubw.world import World
from gpubw.world.simulated import RankOutcome, SimulatedCluster


def model(preset: str) -> SimSystem:
    return attrs.evolve(load_system(preset), jitter=0.0)


def run_ranks(
    preset: str,
    hosts: Sequence[int],
    fn: Callable[[System], Any],
    options: RunOptions,
    faults: dict[int, Faults] | None = None,
    timeout_s: float = 30.0,
) -> list[RankOutcome[Any]]:
    """``fn(system)`` on every rank of a cluster of ``hosts`` (ranks per host)."""
    engine = SimEngine(model(preset))
    cluster = SimulatedCluster(
        list(hosts), timeout_s=timeout_s, on_step=engine.align_clocks, on_group=engine.align_group
    )

    def body(world: World) -> Any:
        view = engine.rank_view(
            world.rank, cluster.rank_hosts[world.rank], (faults or {}).get(world.rank)
        )
        with System(view, options, world=world) as system:
            return fn(system)

    return cluster.run(body)


def ranked_report(
    preset: str | SimSystem,
    hosts: Sequence[int],
    options: RunOptions,
    testcases: Sequence[str] = (),
    prefixes: Sequence[str] = (),
    timeout_s: float | None = None,
) -> Report:
    """Rank 0's Report of running the selection on every simulated rank."""
    selection, warnings = select(list(testcases), list(prefixes))
    system = model(preset) if isinstance(preset, str) else preset
    simulation = Simulation(system.name, system, ranks=tuple(hosts))
    if timeout_s is not None:  # the ranks' bound is the run's --world-timeout
        options = attrs.evolve(options, world_timeout_s=timeout_s)
    return runner.run(RunSpec(selection, options, simulation=simulation, warnings=warnings))
