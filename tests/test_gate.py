"""The spin gate page (gpubw.gate) on the simulated backend: layout, hold, release, timeout."""

from __future__ import annotations

import pytest

from conftest import SimSystemFactory
from gpubw.backend.sim import Faults, SimulatedBackend
from gpubw.errors import GateTimeoutError
from gpubw.gate import Gate


def test_layout_is_the_gate_kernels() -> None:
    """int32 flag at 0, int32 status at 4, u64 result slots from 64 to the end of a page."""
    assert (Gate.FLAG, Gate.STATUS, Gate.RESULTS, Gate.PAGE_BYTES) == (0, 4, 64, 4096)
    assert Gate.SLOTS == 504


def test_page_is_allocated_once_on_first_use(sim_system: SimSystemFactory) -> None:
    """A System's gate takes no memory until used; then one pinned page, freed by close()."""
    system = sim_system("h200x1")
    backend = system.backend
    assert isinstance(backend, SimulatedBackend)
    assert backend.live_allocations() == []
    page = system.gate.page
    assert system.gate.page == page
    assert [(p, n) for p, n, _ in backend.live_allocations()] == [(page, Gate.PAGE_BYTES)]
    assert system.gate.slot(0) == page + 64 and system.gate.slot(503) == page + 4088
    with pytest.raises(ValueError, match=r"slot 504 out of range 0\.\.503"):
        system.gate.slot(504)
    with pytest.raises(ValueError, match="slot -1"):
        system.gate.slot(-1)
    system.close()
    assert backend.live_allocations() == []


def test_close_holds_and_open_releases(sim_system: SimSystemFactory) -> None:
    """A stream waiting at a closed gate does not finish until the gate is opened; then it
    does, and the gate did not time out."""
    system = sim_system("h200x1")
    system.load_kernels()
    gate, backend = system.gate, system.backend
    with backend.stream(0) as stream:
        gate.close()
        gate.enqueue_wait(stream, 10.0)
        with pytest.raises(GateTimeoutError):
            backend.synchronize(stream, 0.5)
        gate.open()
        backend.synchronize(stream, 1.0)
        assert not gate.timed_out()


def test_timed_out_reports_the_kernels_own_timeout(sim_system: SimSystemFactory) -> None:
    """A gate that is never seen open gives up after its timeout and says so; close()
    clears the status for the next sample."""
    system = sim_system("h200x1", faults=Faults(gate_never_opens=True))
    system.load_kernels()
    gate, backend = system.gate, system.backend
    with backend.stream(0) as stream:
        gate.close()
        gate.enqueue_wait(stream, 0.001)
        gate.open()
        backend.synchronize(stream, 1.0)
        assert gate.timed_out()
        gate.close()
        assert not gate.timed_out()
