"""The fit of a twin of a measured node (``--simulate REPORT``): run the report's testcases
on the twin's model, compare with the report, correct, a few times.

:mod:`gpubw.backend.sim.twin` builds the first guess from the report and
:mod:`gpubw.backend.sim.twin_fit` says which parameter each figure steers; the runner runs
the testcases because only it may (the backend sits below them). The fit runs without the
model's jitter (every step is deterministic, and the same report always gives the same twin)
and stops when every figure is within 0.2 % of the report's, when no parameter moves more
than 0.2 % (what is left, the model cannot correct), or after :data:`MAX_STEPS` runs; the twin
keeps its jitter for the runs that follow.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import attrs

from gpubw.backend.sim.backend import SimulatedBackend
from gpubw.backend.sim.model import SimSystem
from gpubw.backend.sim.twin import CellKey, Fit, Twin
from gpubw.backend.sim.twin_fit import (
    TOLERANCE,
    deviations,
    knobs,
    refine,
    steering_knobs,
    worst,
)
from gpubw.memory.system import System
from gpubw.model.options import DEFAULT_BUFFER_SIZE, RunOptions
from gpubw.model.results import KIND_BANDWIDTH, KIND_LATENCY
from gpubw.runner.registry import Entry, Registry

#: simulated runs at most (the first is the first guess's)
MAX_STEPS = 8
#: the fit has settled when no parameter moved more than this in a step
SETTLED = 0.002
#: samples of each figure while fitting (no jitter: one sample says it all)
_FIT_OPTIONS = RunOptions(samples=1)


def fit_twin(model: SimSystem) -> SimSystem:
    """The twin ``model`` (a first guess, its ``origin`` a :class:`Twin`) fitted to its
    report's figures; its origin records the fit."""
    twin: Twin = model.origin
    entries = _entries(twin.testcases)
    steering = knobs(model, twin.cells)
    best, steps, best_rms = model, 0, float("inf")
    best_worst: tuple[CellKey | None, float] = (None, 0.0)
    before: dict[CellKey, float] = {}
    moved: dict[str, float] = {}
    for steps in range(1, MAX_STEPS + 1):  # noqa: B007 - the count is recorded
        simulated = simulate(model, entries, twin.sizes)
        dev = deviations(twin.cells, simulated)
        found, rms = worst(dev), math.sqrt(sum(d * d for d in dev.values()) / max(1, len(dev)))
        if rms < best_rms:  # the best model: the least root mean square deviation
            best, best_worst, best_rms = model, found, rms
        if abs(found[1]) <= TOLERANCE:
            break
        steering = steering_knobs(steering, moved, before, simulated) if before else steering
        model, moved = refine(model, steering, twin.cells, simulated)
        before = simulated
        if max(moved.values(), default=0.0) <= SETTLED:  # what is left, no knob can correct
            break
    done = attrs.evolve(twin, fit=Fit(steps, best_worst[0], best_worst[1]))
    return attrs.evolve(best, origin=done)


def _entries(keys: Iterable[str]) -> list[Entry]:
    """The installed testcases among ``keys`` that run in one process (a multinode testcase
    needs ranks: its figures are checked by no fit)."""
    registry = Registry.discover()
    by_key = {e.key: e for e in registry.entries}
    return [by_key[k] for k in keys if k in by_key and not k.startswith("multinode")]


def simulate(
    model: SimSystem, entries: Iterable[Entry], sizes: Mapping[str, int | None]
) -> dict[CellKey, float]:
    """Every figure of ``entries`` run on ``model`` without jitter, at the report's sizes."""
    cells: dict[CellKey, float] = {}
    quiet = attrs.evolve(model, jitter=0.0)
    with System(SimulatedBackend(quiet), _FIT_OPTIONS) as system:
        for entry in entries:
            testcase = entry.create(system)
            if not testcase.filter():
                continue
            system.load_kernel_modules(testcase.kernel_modules)
            size = sizes.get(entry.key) or DEFAULT_BUFFER_SIZE
            for m in testcase.run(size, system.options.loops):
                if m.kind not in (KIND_BANDWIDTH, KIND_LATENCY):
                    continue
                for r, row in enumerate(m.values):
                    for c, v in enumerate(row):
                        if v is not None and v > 0:
                            cells[(entry.key, m.key, r, c)] = float(v)
            system.release_pool()
    return cells
