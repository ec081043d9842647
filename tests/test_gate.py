"""The spin gate page (gpubw.memory.gate), simulated: layout, hold, release, timeout."""

from __future__ import annotations

import pytest

from conftest import SimSystemFactory
from gpubw.backend.sim.backend import SimulatedBackend
from gpubw.backend.sim.faults import Faults
from gpubw.memory.buffers import DeviceBuffer, HostBuffer
from gpubw.memory.gate import Gate
from gpubw.model.errors import GateTimeoutError


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


def test_relay_sets_the_device_flag_that_releases_the_flag_waiters(
    sim_system: SimSystemFactory,
) -> None:
    """enqueue_relay holds its stream at the host gate; once the gate opens it sets the device
    int, which releases a stream held by enqueue_wait(flag=) on another device (and only that
    int does: an open host gate does not); nothing timed out."""
    system = sim_system("h200x2")
    system.load_kernels()
    gate, backend = system.gate, system.backend
    backend.enable_peer_access(1, 0)  # device 1's waiter polls device 0's memory
    flag = DeviceBuffer.allocate(system, 0, 4)
    zero = HostBuffer.allocate(system, 0, 4)
    zero.write(b"\0" * 4)
    zero_ptr = zero.ptr
    with backend.stream(0) as s:
        backend.memcpy_async(flag.ptr, zero_ptr, 4, s)
        backend.synchronize(s, 1.0)
    with backend.stream(0) as relay, backend.stream(1) as waiting:
        gate.close()
        gate.enqueue_relay(relay, flag.ptr, 10.0)
        gate.enqueue_wait(waiting, 10.0, flag=flag.ptr)
        for stream in (relay, waiting):
            with pytest.raises(GateTimeoutError):
                backend.synchronize(stream, 0.2)
        gate.open()
        backend.synchronize(relay, 1.0)
        backend.synchronize(waiting, 1.0)
        # the waiter follows the device flag, not the host gate: open, yet held until set
        backend.memcpy_async(flag.ptr, zero_ptr, 4, relay)
        backend.synchronize(relay, 1.0)
        gate.open()
        gate.enqueue_wait(waiting, 10.0, flag=flag.ptr)
        with pytest.raises(GateTimeoutError):
            backend.synchronize(waiting, 0.2)
        gate.enqueue_relay(relay, flag.ptr, 10.0)
        backend.synchronize(waiting, 1.0)
    assert not gate.timed_out()
    with HostBuffer.allocate(system, 0, 4) as out, backend.stream(0) as s:
        backend.memcpy_async(out.ptr, flag.ptr, 4, s)
        backend.synchronize(s, 1.0)
        assert out.read(4) == b"\1\0\0\0"
