"""System on the simulated backend: devices, peers, teardown, leaks, affinity, patterns."""

from __future__ import annotations

import os

import attrs
import pytest

from conftest import MIB, SimSystemFactory
from gpubw.backend.sim.backend import SimulatedBackend
from gpubw.backend.sim.faults import Faults
from gpubw.backend.sim.presets import load_system
from gpubw.kernels.patterns import SRC_SEED, pattern_bytes
from gpubw.measure.initiators import CE
from gpubw.measure.measurement import Copy, MemcpyOperation
from gpubw.memory.buffers import DeviceBuffer, HostBuffer
from gpubw.memory.system import System
from gpubw.model.errors import CudaError, VerificationError
from gpubw.model.options import RunOptions

#: The loop count every measurement here is given (callers always pass it).
LOOPS = 16


def _backend(system: System) -> SimulatedBackend:
    assert isinstance(system.backend, SimulatedBackend)
    return system.backend


def test_devices_and_peer_pairs(sim_system: SimSystemFactory) -> None:
    """System exposes the model's devices and the accessible ordered pairs."""
    system = sim_system("pcie4")
    assert system.device_count == 4
    assert system.peer_pairs() == [(0, 1), (1, 0), (2, 3), (3, 2)]
    assert not system.can_access_peer(2, 2)


def test_pattern_bytes_is_xorshift() -> None:
    """The pattern's first word is one xorshift32 step from the seed."""
    x = SRC_SEED
    x ^= (x << 13) & 0xFFFFFFFF
    x ^= x >> 17
    x ^= (x << 5) & 0xFFFFFFFF
    assert int.from_bytes(pattern_bytes(SRC_SEED)[:4], "little") == x


def test_pattern_cached_per_device(sim_system: SimSystemFactory) -> None:
    """System.pattern uploads each (device, seed) pattern once."""
    system = sim_system("h200x2")
    p = system.pattern(0, SRC_SEED)
    assert system.pattern(0, SRC_SEED) == p
    assert system.pattern(1, SRC_SEED) != p


def test_close_frees_everything(sim_system: SimSystemFactory) -> None:
    """close() frees live, pooled, pattern, gate and scratch memory; twice is fine."""
    system = sim_system("h200x2", samples=1)
    a = DeviceBuffer.allocate(system, 0, 4 * MIB)  # leaked on purpose
    HostBuffer.allocate(system, 1, MIB).close()  # pooled
    MemcpyOperation(system, CE, loops=LOOPS).measure(
        [Copy(HostBuffer.allocate(system, 0, 4 * MIB), a)]
    )
    assert _backend(system).live_allocations()
    system.close()
    system.close()
    assert _backend(system).live_allocations() == []


def test_close_after_exception_mid_measure(sim_system: SimSystemFactory) -> None:
    """A measurement that fails (corrupted copy) still leaves nothing after close()."""
    system = sim_system("h200x2", samples=2, faults=Faults(corrupt_copy=True))
    with pytest.raises(VerificationError):
        MemcpyOperation(system, CE, loops=LOOPS).measure(
            [
                Copy(
                    HostBuffer.allocate(system, 0, 4 * MIB),
                    DeviceBuffer.allocate(system, 1, 4 * MIB),
                )
            ]
        )
    backend = _backend(system)
    assert backend.live_streams() == 0 and backend.live_events() == 0
    system.close()
    assert backend.live_allocations() == []


def test_allocation_failure_midway_frees_what_was_taken(sim_system: SimSystemFactory) -> None:
    """If the third of several allocations fails, the first two are freed by the owner."""
    system = sim_system("h200x2", faults=Faults(alloc_fail_after=2))
    taken: list[DeviceBuffer] = []
    with pytest.raises(CudaError, match="OUT_OF_MEMORY"):
        try:
            for d in (0, 1, 0):
                taken.append(DeviceBuffer.allocate(system, d, MIB))
        except BaseException:
            for buf in taken:
                buf.close()
            raise
    assert len(taken) == 2 and system.live_buffers == 0
    system.close()
    assert _backend(system).live_allocations() == []


def test_context_manager(sim_system: SimSystemFactory) -> None:
    """``with System(...)`` closes on exit, also when the body raises."""
    backend = SimulatedBackend(load_system("h200x1"))
    with pytest.raises(RuntimeError), System(backend) as system:
        DeviceBuffer.allocate(system, 0, MIB)
        raise RuntimeError("boom")
    assert system.closed and backend.live_allocations() == []


def test_load_kernels_once(sim_system: SimSystemFactory) -> None:
    """load_kernels loads every device once."""
    system = sim_system("h200x8")
    system.load_kernels()
    system.load_kernels()
    assert _backend(system)._loaded == set(range(8))


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_affinity_set_and_restored() -> None:
    """near(device) sets the device's local CPUs for the body and restores them after."""
    before = os.sched_getaffinity(0)
    cpu = min(before)
    model = load_system("h200x1")
    dev = attrs.evolve(model.devices[0], local_cpus=(cpu,))
    model = attrs.evolve(model, devices=(dev,))
    with System(SimulatedBackend(model)) as system:
        with system.near(0):
            assert os.sched_getaffinity(0) == {cpu}
        assert os.sched_getaffinity(0) == before
        with pytest.raises(KeyError), system.near(0):
            raise KeyError("x")
        assert os.sched_getaffinity(0) == before
        HostBuffer.allocate(system, 0, MIB)  # allocation goes through near()
        assert os.sched_getaffinity(0) == before


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_affinity_disabled() -> None:
    """With affinity off (-d), near() leaves the CPU mask alone."""
    before = os.sched_getaffinity(0)
    cpu = min(before)
    model = load_system("h200x1")
    model = attrs.evolve(model, devices=(attrs.evolve(model.devices[0], local_cpus=(cpu,)),))
    with System(SimulatedBackend(model), RunOptions(affinity=False)) as system, system.near(0):
        assert os.sched_getaffinity(0) == before


def test_before_close_hooks_run_first_and_a_failure_frees_all(
    sim_system: SimSystemFactory,
) -> None:
    """Hooks run before anything is freed; a failing hook is raised after everything was."""
    system = sim_system("h200x2")
    backend = system.backend
    assert isinstance(backend, SimulatedBackend)
    DeviceBuffer.allocate(system, 0, MIB)
    seen: list[int] = []
    system.before_close(lambda: seen.append(len(backend.live_allocations())))

    def failing() -> None:
        raise RuntimeError("hook failed")

    system.before_close(failing)
    with pytest.raises(RuntimeError, match="hook failed"):
        system.close()
    assert seen and seen[0] >= 1 and backend.live_allocations() == []
