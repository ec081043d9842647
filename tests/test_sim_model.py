"""The simulated system model: its checks and the paths bytes take (gpubw.backend.sim.model)."""

from __future__ import annotations

import attrs
import pytest

from gpubw.backend.sim.model import (
    HOSTMEM,
    HostLink,
    Rate,
    SimSystem,
    iter_pairs,
    path,
    reverse,
    single_rate,
)
from gpubw.backend.sim.presets import load_system


def test_model_checks_its_devices_links_and_peers() -> None:
    """No devices, wrong ordinals, a missing host link or a bad peer pair: refused."""
    base = load_system("h200x2")
    with pytest.raises(ValueError, match="at least one device"):
        SimSystem("x", (), ())
    with pytest.raises(ValueError, match=r"ordinals must be 0\.\.1"):
        attrs.evolve(base, devices=base.devices[::-1])
    with pytest.raises(ValueError, match="host_links has 1 entries for 2 devices"):
        attrs.evolve(base, host_links=base.host_links[:1])
    with pytest.raises(ValueError, match=r"peer pair \(0, 2\)"):
        attrs.evolve(base, peers={(0, 2): Rate(1e9, 1e9)})
    with pytest.raises(ValueError, match="bidirectional_factor must be in"):
        HostLink(Rate(1e9, 1e9), Rate(1e9, 1e9), bidirectional_factor=1.5)


def test_iter_pairs() -> None:
    """iter_pairs lists every ordered pair of distinct devices."""
    assert list(iter_pairs(3)) == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]


def test_paths_and_rates() -> None:
    """Each copy route uses its resources at the model's peak for the engine that moves it."""
    m = load_system("pcie4")  # peers only 0<->1 and 2<->3
    link = m.host_links[2]
    assert path(m, None, 2, "ce", False) == ((("h2d", 2), HOSTMEM), link.h2d.ce)
    assert path(m, 2, None, "sm", False) == ((("d2h", 2), HOSTMEM), link.d2h.sm)
    assert path(m, 1, 1, "ce", False) == ((("mem", 1),), m.local_copy.ce)
    peer = m.peer_rate(0, 1)
    assert peer is not None
    assert path(m, 0, 1, "sm", False) == ((("tx", 0), ("rx", 1)), peer.sm)
    staged = (
        (("d2h", 0), ("h2d", 1), HOSTMEM),
        min(m.host_links[0].d2h.ce, m.host_links[1].h2d.ce),
    )
    assert path(m, 0, 1, "ce", True) == staged
    assert path(m, 0, 2, "ce", False)[0] == (("d2h", 0), ("h2d", 2), HOSTMEM)  # no peer link
    assert single_rate(m, 0, 1) == peer.sm
    assert reverse(("tx", 3)) == ("rx", 3) and reverse(("h2d", 0)) == ("d2h", 0)
    assert reverse(("mem", 0)) is None and reverse(HOSTMEM) is None


def test_local_seconds_one_way_and_mixed() -> None:
    """A device's memory: reads alone at local_read, writes alone at local_write, an even
    mix (a copy) at the SM copy's rate; without one-way rates, everything at twice the copy's
    rate as before."""
    from gpubw.backend.sim.model import local_seconds

    h200 = load_system("h200x1")
    gb = 1e9
    assert gb / local_seconds(h200, gb, 0) == pytest.approx(4612e9)
    assert gb / local_seconds(h200, 0, gb) == pytest.approx(4706e9)
    assert 2 * gb / local_seconds(h200, gb, gb) == pytest.approx(2 * 2124e9)
    triad = 3 * gb / local_seconds(h200, 2 * gb, gb)  # stream_triad: 4420 GB/s measured
    assert 4340e9 < triad < 4420e9
    plain = attrs.evolve(h200, local_read=None, local_write=None)
    assert 3 * gb / local_seconds(plain, 2 * gb, gb) == pytest.approx(2 * 2124e9)


def test_host_memory_cost_by_direction() -> None:
    """A byte written to host memory takes reading / writing bandwidth of its budget, a byte
    read one, a copy through host memory both; without a writing bandwidth, one each."""
    from gpubw.backend.sim.model import host_memory_cost, writes_host

    h200 = load_system("h200x2")  # 275 GB/s of reads, 125 of writes
    assert host_memory_cost(h200, (("h2d", 0), HOSTMEM)) == 1.0
    assert host_memory_cost(h200, (("d2h", 0), HOSTMEM)) == pytest.approx(2.2)
    assert host_memory_cost(h200, (("d2h", 0), ("h2d", 1), HOSTMEM)) == pytest.approx(3.2)
    assert host_memory_cost(h200, (HOSTMEM,)) == pytest.approx(3.2)
    assert writes_host((("d2h", 0), HOSTMEM)) and not writes_host((("h2d", 0), HOSTMEM))
    plain = attrs.evolve(h200, host_memory_write_bandwidth=None)
    assert host_memory_cost(plain, (("d2h", 0), HOSTMEM)) == 1.0
    with pytest.raises(ValueError, match="host_memory_write_bandwidth must be in"):
        attrs.evolve(h200, host_memory_write_bandwidth=0.0)
    with pytest.raises(ValueError, match="host_memory_write_weight must be in"):
        attrs.evolve(h200, host_memory_write_weight=0.5)
