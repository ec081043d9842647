"""Pointer-chase latency (gpubw.measure.latency): the ring, and cleanup when something fails."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import SimSystemFactory
from gpubw.backend.sim.backend import SimulatedBackend
from gpubw.measure.latency import (
    RING_BYTES,
    pointer_chase,
    ring_bytes,
    write_device_ring,
    write_host_ring,
)
from gpubw.memory.buffers import DeviceBuffer, HostBuffer
from gpubw.model.errors import CudaError, GateTimeoutError


def test_ring_nodes_point_128_bytes_on() -> None:
    """Node i holds base + 8 x ((i + 16) mod nodes)."""
    raw = ring_bytes(0x1000, 4096)
    nodes = [int.from_bytes(raw[i : i + 8], "little") for i in range(0, 4096, 8)]
    assert nodes[0] == 0x1000 + 128 and nodes[-1] == 0x1000 + 8 * 15


@pytest.mark.parametrize("nbytes", [8, 64, 128, 136, 4096])
def test_every_node_of_any_ring_points_16_nodes_on(nbytes: int) -> None:
    """Node i of a ring of any size holds the address of node (i + 16) mod nodes, inside the
    buffer; where 16 and the node count are coprime (17 nodes) a walk from node 0 visits
    every node before it comes back."""
    base = 0x7F00_0000_0000
    raw = ring_bytes(base, nbytes)
    n = nbytes // 8
    nodes = [int.from_bytes(raw[i : i + 8], "little") for i in range(0, nbytes, 8)]
    assert len(raw) == nbytes and nodes == [base + 8 * ((i + 16) % n) for i in range(n)]
    if n == 17:
        seen, at = set(), 0
        while at not in seen:
            seen.add(at)
            at = (nodes[at] - base) // 8
        assert seen == set(range(n))


def test_the_ring_needs_no_numpy() -> None:
    """Building the 2 MiB ring imports no numpy (65 ms of a run, more where numpy has no
    byte-compiled files)."""
    import subprocess
    import sys

    code = (
        "import sys; from gpubw.measure.latency import ring_bytes; "
        "assert len(ring_bytes(0x1000)) == 2 << 20; print('numpy' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, encoding="utf-8", check=True
    )
    assert out.stdout.strip() == "False"


def test_pointer_chase_frees_everything_when_a_launch_and_a_destroy_fail(
    sim_system: SimSystemFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failing launch is the error raised even when destroying an event fails too, and the
    other event, the stream and the sink are still given back."""
    system = sim_system("h200x1")
    backend = system.backend
    assert isinstance(backend, SimulatedBackend)
    with HostBuffer.allocate(system, 0, RING_BYTES) as ring:
        write_host_ring(ring)

        def launch(*args: Any) -> None:
            raise CudaError("cuLaunchKernel", "CUDA_ERROR_LAUNCH_FAILED", "planted")

        real_destroy = backend.destroy_event
        destroyed: list[Any] = []

        def destroy_event(event: Any) -> None:
            destroyed.append(event)
            real_destroy(event)
            if len(destroyed) == 1:
                raise CudaError("cuEventDestroy", "CUDA_ERROR_INVALID_HANDLE", "planted")

        monkeypatch.setattr(backend, "launch", launch)
        monkeypatch.setattr(backend, "destroy_event", destroy_event)
        with pytest.raises(CudaError, match="LAUNCH_FAILED"):
            pointer_chase(system, 0, ring)
    assert len(destroyed) == 2
    assert backend.live_streams() == 0 and backend.live_events() == 0
    assert system.live_buffers == 0


def test_pointer_chase_raises_a_failing_destroy_after_success(
    sim_system: SimSystemFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the walk succeeded, a failing destroy is reported, after every other handle was
    destroyed."""
    system = sim_system("h200x1")
    backend = system.backend
    assert isinstance(backend, SimulatedBackend)
    real_destroy = backend.destroy_event

    def destroy_event(event: Any) -> None:
        real_destroy(event)
        raise CudaError("cuEventDestroy", "CUDA_ERROR_INVALID_HANDLE", "planted")

    with DeviceBuffer.allocate(system, 0, RING_BYTES) as ring:
        write_device_ring(system, ring)
        monkeypatch.setattr(backend, "destroy_event", destroy_event)
        with pytest.raises(CudaError, match="cuEventDestroy"):
            pointer_chase(system, 0, ring)
    assert backend.live_streams() == 0 and backend.live_events() == 0


def test_each_chase_launch_is_queued_with_its_events_behind_the_gate(
    sim_system: SimSystemFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Gate wait, start event, chase, end event, then the gate opens: the host's launch call
    is outside the timed span (issue 36 item 3)."""
    system = sim_system("h200x1")
    backend = system.backend
    calls: list[str] = []
    real_launch, real_record, real_open = backend.launch, backend.record_event, system.gate.open

    def launch(name: str, *args: Any, **kwargs: Any) -> None:
        calls.append(name)
        real_launch(name, *args, **kwargs)

    def record(*args: Any) -> None:
        calls.append("event")
        real_record(*args)

    def gate_open() -> None:
        calls.append("open")
        real_open()

    monkeypatch.setattr(backend, "launch", launch)
    monkeypatch.setattr(backend, "record_event", record)
    monkeypatch.setattr(system.gate, "open", gate_open)
    with DeviceBuffer.allocate(system, 0, RING_BYTES) as ring:
        write_device_ring(system, ring)
        calls.clear()
        got = pointer_chase(system, 0, ring)
    one = ["gpubw_gate_wait", "event", "gpubw_pointer_chase", "event", "open"]
    assert calls == one * got.launches


def test_a_gate_that_gave_up_discards_the_latency(
    sim_system: SimSystemFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gate kernel that timed out before its launch was queued: GateTimeoutError, and
    every handle is freed."""
    system = sim_system("h200x1")
    monkeypatch.setattr(system.gate, "timed_out", lambda: True)
    with HostBuffer.allocate(system, 0, RING_BYTES) as ring:
        write_host_ring(ring)
        with pytest.raises(GateTimeoutError, match="latency launch"):
            pointer_chase(system, 0, ring)
    backend = system.backend
    assert isinstance(backend, SimulatedBackend)
    assert backend.live_streams() == 0 and backend.live_events() == 0
