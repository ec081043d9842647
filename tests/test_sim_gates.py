"""The waiting spin gates of the simulated engine, indexed by their flag's allocation
(gpubw.backend.sim.gates)."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest

from gpubw.backend.base import ptr, u64
from gpubw.backend.sim.backend import SimulatedBackend
from gpubw.backend.sim.engine import Op

GATE_NS = 10_000_000_000
ONE = struct.pack("<i", 1)


def _gate(be: SimulatedBackend, stream: object, flag: int) -> None:
    be.launch("gpubw_gate_wait", 1, 1, (ptr(flag), u64(GATE_NS), ptr(flag + 4)), stream)


def _counted_probes(be: SimulatedBackend) -> tuple[list[Op], list[Op]]:
    """The engine's waiting gates, and the list their probes add themselves to when called."""
    gates, probed = list(be._engine._waiting), []
    for op in gates:
        probe = op.probe
        assert probe is not None

        def counted(op: Op = op, probe: Callable[[], bool | None] = probe) -> bool | None:
            probed.append(op)
            return probe()

        op.probe = counted
    return gates, probed


def test_a_write_elsewhere_probes_no_waiting_gate(backend: SimulatedBackend) -> None:
    """Twenty gates wait on one host flag: writes to other memory probe none of them; a
    write to the flag's allocation probes each once; its release lets every one go."""
    be = backend
    flag, other = be.alloc_host(64, None), be.alloc_host(64, None)
    streams = [be.create_stream(0) for _ in range(20)]
    for s in streams:
        _gate(be, s, flag)
    gates, probed = _counted_probes(be)
    assert len(gates) == 20
    for _ in range(10):
        be.host_write(other, ONE)
    assert probed == []
    be.host_write(flag + 16, ONE)  # the flag's allocation, not the flag: still held
    assert probed == gates  # each once, in the order they started
    be.host_write(flag, ONE)
    for s in streams:
        be.synchronize(s, 1.0)
    assert all(op.done and op.end is not None and op.end < op.deadline for op in gates)
    assert not be._engine._waiting


def _release_by_copy(be: SimulatedBackend, flag: int) -> None:
    one = be.alloc_host(4, 0)
    be.host_write(one, ONE)
    s = be.create_stream(0)
    be.memcpy_async(flag, one, 4, s)
    be.synchronize(s, 1.0)


def _release_by_kernel(be: SimulatedBackend, flag: int) -> None:
    pattern = be.alloc_device(0, 64)
    staging = be.alloc_host(4, 0)
    be.host_write(staging, ONE)
    s = be.create_stream(0)
    be.memcpy_async(pattern, staging, 4, s)
    be.launch("gpubw_fill", 1, 1, (ptr(flag), ptr(pattern), u64(1)), s)
    be.synchronize(s, 1.0)


def _release_by_host_write(be: SimulatedBackend, flag: int) -> None:
    be.host_write(flag, ONE)


@pytest.mark.parametrize(
    ("release", "on_device"),
    [(_release_by_copy, True), (_release_by_kernel, True), (_release_by_host_write, False)],
    ids=["copy", "kernel", "host write"],
)
def test_a_gate_is_released_by_a_copy_a_kernel_or_a_host_write_of_its_flag(
    backend: SimulatedBackend, release: Callable[[SimulatedBackend, int], None], on_device: bool
) -> None:
    """A gate goes as soon as a copy or a kernel (a flag in device memory) or a host write (a
    host flag) stores a non-zero flag, after unrelated writes that probed nothing."""
    be = backend
    flag = be.alloc_device(0, 64) if on_device else be.alloc_host(64, None)
    other = be.alloc_host(64, None)
    s = be.create_stream(0)
    _gate(be, s, flag)
    (op,) = be._engine._waiting
    for _ in range(3):
        be.host_write(other, ONE)
    release(be, flag)
    be.synchronize(s, 1.0)
    assert op.done and op.end is not None and op.end < op.deadline  # released, not timed out
    assert not be._engine._waiting


def test_a_gate_probed_before_a_store_it_was_not_told_of_is_still_released(
    backend: SimulatedBackend,
) -> None:
    """Two gates on two words of one host allocation: a copy stores the first's flag (a host
    flag: no probe follows the copy), then the second gate starts and finds its own word
    zero; the next write anywhere still releases the first."""
    be = backend
    words, other = be.alloc_host(64, None), be.alloc_host(64, None)
    first, second = be.create_stream(0), be.create_stream(0)
    _gate(be, first, words)
    _release_by_copy(be, words)  # no gate waits on device memory: nothing is probed
    assert be._engine._waiting and not be._engine.remote_gates
    _gate(be, second, words + 32)
    assert len(list(be._engine._waiting)) == 2
    be.host_write(other, ONE)
    be.synchronize(first, 1.0)  # released, not timed out
    assert struct.unpack("<i", be.host_read(words + 4, 4))[0] == 0
    be.host_write(words + 32, ONE)
    be.synchronize(second, 1.0)
    assert struct.unpack("<i", be.host_read(words + 36, 4))[0] == 0


def test_gates_that_timed_out_are_forgotten(backend: SimulatedBackend) -> None:
    """Sixty gates on one flag that nobody writes each time out in turn: the index keeps
    at most a few of them, not all sixty."""
    be = backend
    flag, status = be.alloc_host(64, None), be.alloc_host(64, None)
    s = be.create_stream(0)
    for _ in range(60):
        be.launch("gpubw_gate_wait", 1, 1, (ptr(flag), u64(1_000_000), ptr(status)), s)
    be.synchronize(s, 1.0)  # each gate gave up after 1 ms and wrote its status
    assert struct.unpack("<i", be.host_read(status, 4))[0] == 1
    assert len(list(be._engine._waiting)) <= 17
