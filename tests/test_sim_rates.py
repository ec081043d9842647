"""The rates of the simulated engine's flows, kept between calls (gpubw.backend.sim.rates)."""

from __future__ import annotations

import random

import pytest

from gpubw.backend.sim.model import HOSTMEM
from gpubw.backend.sim.presets import load_system
from gpubw.backend.sim.rates import Flow, FlowRates


def _clone(f: Flow) -> Flow:
    """A flow like ``f`` (the same resources, load, peak and jitter), not yet rated."""
    g = Flow(f.resources, 1.0, f.total, f.jitter, f.load)
    g.peak = f.peak
    return g


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kept_reused_and_lone_rates_equal_a_fresh_computation_at_every_step(seed: int) -> None:
    """A long walk over few flows (sets come back, so kept shares are reused; all end now
    and then, so a lone flow is rated from what its resources kept): after every step each
    active flow's rate is what a fresh computation gives flows like them, bit for bit."""
    model = load_system("h200x8")
    rng = random.Random(seed)
    links = [("tx", 0), ("rx", 1), ("tx", 1), ("rx", 0), ("h2d", 2), ("d2h", 2)]
    flows = [
        Flow(
            (*rng.sample(links, rng.randint(1, 2)), *((HOSTMEM,) * (i % 3 == 0))),
            1e9 * (1 + i),
            1.0,
            jitter=1.0 + i / 100,
            load=i % 4 == 1,
        )
        for i in range(5)
    ]
    rates = FlowRates()
    rates._init_rates(model)
    active: list[Flow] = []
    reused = 0
    for _ in range(400):
        if rng.random() < 0.05:
            active = []
        else:
            f = rng.choice(flows)
            active = [g for g in active if g is not f] if f in active else [*active, f]
        reused += rates._keys(active) in rates._leasts and active != rates._rated
        rates._compute_rates(list(active))
        fresh, like = FlowRates(), [_clone(f) for f in active]
        fresh._init_rates(model)
        fresh._compute_rates(like)
        assert [f.rate for f in active] == [g.rate for g in like], [f.key for f in active]
        assert rates._rated_set == set(active)
    assert reused > 50  # the walk did come back to sets seen before
