"""The measurement protocol (gpubw.measure.measurement) run through the simulated backend."""

from __future__ import annotations

import math
import statistics

import pytest

from conftest import MIB, SimSystemFactory
from gpubw.backend.sim import Faults, SimulatedBackend
from gpubw.measure.initiators import CE, SM, SPLIT_WARP, Initiator
from gpubw.measure.measurement import Copy, Kind, MemcpyOperation, Prefer, statistic
from gpubw.memory.buffers import DeviceBuffer, HostBuffer
from gpubw.memory.system import System
from gpubw.model.errors import CudaError, GateTimeoutError, UsageError, VerificationError

#: The loop count every measurement here is given (callers always pass it).
LOOPS = 16


def _h2d(system: System, size: int = 4 * MIB) -> Copy:
    return Copy(HostBuffer.allocate(system, 0, size), DeviceBuffer.allocate(system, 0, size))


@pytest.mark.parametrize(
    ("initiator", "low", "high"),
    [(CE, 52e9, 56e9), (SM, 48e9, 52e9), (SPLIT_WARP, 42e9, 48e9)],
)
def test_host_to_device_each_initiator(
    sim_system: SimSystemFactory, initiator: Initiator, low: float, high: float
) -> None:
    """CE, SM and split-warp H2D copies on h200x2 give plausible H200 figures."""
    system = sim_system("h200x2", samples=3)
    m = MemcpyOperation(system, initiator, loops=LOOPS).measure([_h2d(system)])
    assert len(m.pair_samples) == 1 and len(m.pair_samples[0]) == 3
    assert low < m.value(Kind.FIRST) < high


def test_peer_read_ce_and_sm(sim_system: SimSystemFactory) -> None:
    """Device-to-device copies over NV18 come out near the reference 394 (CE) / 376 (SM)."""
    system = sim_system("h200x2", samples=3)
    src, dst = (
        DeviceBuffer.allocate(system, 1, 64 * MIB),
        DeviceBuffer.allocate(system, 0, 64 * MIB),
    )
    assert dst.enable_peer_access(src)
    ce = MemcpyOperation(system, CE, loops=LOOPS, prefer=Prefer.DST).measure([Copy(src, dst)])
    sm = MemcpyOperation(system, SM, loops=LOOPS, prefer=Prefer.DST).measure([Copy(src, dst)])
    assert 380e9 < ce.value(Kind.FIRST) < 400e9
    assert 360e9 < sm.value(Kind.FIRST) < 380e9


def test_kind_first_with_interference(sim_system: SimSystemFactory) -> None:
    """FIRST reports pair 0 only; a reverse copy at the same time lowers it (bidirectional)."""
    system = sim_system("h200x2", samples=3)
    alone = MemcpyOperation(system, CE, loops=LOOPS).measure([_h2d(system)]).value(Kind.FIRST)
    h, d = HostBuffer.allocate(system, 0, 8 * MIB), DeviceBuffer.allocate(system, 0, 8 * MIB)
    m = MemcpyOperation(system, CE, loops=LOOPS).measure([_h2d(system), Copy(d, h)])
    assert len(m.pair_samples) == 2
    assert m.value(Kind.FIRST) == m.pair_value(0)
    assert 45e9 < m.value(Kind.FIRST) < 0.95 * alone


def test_kind_sum_and_vector(sim_system: SimSystemFactory) -> None:
    """SUM adds per-pair statistics; VECTOR lists them."""
    system = sim_system("h200x2", samples=3)
    copies = [
        Copy(DeviceBuffer.allocate(system, 0, 4 * MIB), HostBuffer.allocate(system, 0, 4 * MIB)),
        Copy(DeviceBuffer.allocate(system, 1, 4 * MIB), HostBuffer.allocate(system, 1, 4 * MIB)),
    ]
    m = MemcpyOperation(system, CE, loops=LOOPS, kind=Kind.SUM).measure(copies)
    assert m.value(Kind.SUM) == pytest.approx(sum(m.vector()))
    assert len(m.vector()) == 2 and all(50e9 < v < 56e9 for v in m.vector())
    assert len(m.samples(Kind.SUM)) == 3


def test_kind_total_fan_in(sim_system: SimSystemFactory) -> None:
    """TOTAL (all-to-one over NVSwitch): copies into one device share its link; total ~ one link."""
    system = sim_system("h200x8", samples=3)
    target = 0
    copies = []
    for j in range(1, 8):
        src = DeviceBuffer.allocate(system, j, 16 * MIB)
        dst = DeviceBuffer.allocate(system, target, 16 * MIB)
        assert src.enable_peer_access(dst)
        copies.append(Copy(src, dst))
    m = MemcpyOperation(system, CE, loops=LOOPS, kind=Kind.TOTAL).measure(copies)
    assert len(m.total_samples) == 3
    assert 370e9 < m.value(Kind.TOTAL) < 400e9
    assert all(v < 80e9 for v in m.vector())  # each peer gets about a seventh


def test_sample_count_follows_options(sim_system: SimSystemFactory) -> None:
    """The number of samples is RunOptions.samples; counted bytes x loops is the numerator,
    with the loop count the caller passed (RunOptions.loops is the runner's, not a default)."""
    system = sim_system("h200x1", samples=5, loops=7)
    m = MemcpyOperation(system, CE, loops=4).measure([_h2d(system, 2 * MIB)])
    assert len(m.pair_samples[0]) == 5
    assert m.loops == 4 and m.counted_bytes == (2 * MIB,)


@pytest.mark.parametrize("loops", [0, -1, 1.5, True])
def test_loop_count_must_be_a_positive_int(sim_system: SimSystemFactory, loops: object) -> None:
    """A loop count that is not a positive integer is refused, naming the value."""
    system = sim_system("h200x1")
    with pytest.raises(UsageError, match=f"loop count must be a positive integer, got {loops!r}"):
        MemcpyOperation(system, CE, loops=loops)  # type: ignore[arg-type]


def test_median_versus_mean(sim_system: SimSystemFactory) -> None:
    """median and mean are computed from the same jittered samples and differ slightly."""
    system = sim_system("h200x1", samples=4, statistic="mean")
    m = MemcpyOperation(system, SM, loops=LOOPS).measure([_h2d(system)])
    samples = m.pair_samples[0]
    assert len(set(samples)) == 4
    assert m.value(Kind.FIRST) == pytest.approx(statistics.fmean(samples))
    assert statistic(samples, "median") == pytest.approx(statistics.median(samples))
    assert statistic(samples, "median") != m.value(Kind.FIRST)


def test_statistic_edge_cases() -> None:
    """No samples: median 0.0, mean NaN; an unknown statistic is a usage error."""
    assert statistic([], "median") == 0.0
    assert math.isnan(statistic([], "mean"))
    assert statistic([1.0, 3.0], "median") == 2.0
    with pytest.raises(UsageError):
        statistic([1.0], "mode")


def test_sm_counted_bytes_truncated(sim_system: SimSystemFactory) -> None:
    """An SM copy of 64 MiB on 132 SMs counts the truncated size; CE counts it all."""
    system = sim_system("h200x1", samples=1, loops=1)
    copy = _h2d(system, 64 * MIB)
    sm = MemcpyOperation(system, SM, loops=LOOPS).measure([copy])
    ce = MemcpyOperation(system, CE, loops=LOOPS).measure([copy])
    assert sm.counted_bytes == (16 * 132 * 512 * ((64 * MIB // 16) // (132 * 512)),)
    assert sm.counted_bytes == (67_043_328,)
    assert ce.counted_bytes == (64 * MIB,)


def test_split_warp_counted_half(sim_system: SimSystemFactory) -> None:
    """Split-warp counts half the buffer (bytes that travel each way)."""
    system = sim_system("h200x1", samples=1)
    m = MemcpyOperation(system, SPLIT_WARP, loops=LOOPS).measure([_h2d(system, 4 * MIB)])
    assert m.counted_bytes == (2 * MIB,)


@pytest.mark.parametrize(
    ("initiator", "size"), [(CE, 4 * MIB), (SM, 64 * MIB), (SPLIT_WARP, 16 * MIB)]
)
def test_verification_catches_corruption(
    sim_system: SimSystemFactory, initiator: Initiator, size: int
) -> None:
    """An injected corrupted copy is a VerificationError naming the buffer and the offset."""
    system = sim_system("h200x2", samples=2, faults=Faults(corrupt_copy=True, corrupt_offset=4096))
    with pytest.raises(VerificationError) as info:
        MemcpyOperation(system, initiator, loops=LOOPS).measure([_h2d(system, size)])
    assert info.value.offset == 4096
    assert "Device 0 after the copy Host -> Device 0 issued by device 0" in str(info.value)


def test_corruption_default_offset_is_middle(sim_system: SimSystemFactory) -> None:
    """Without an offset the corrupted word is in the middle of the copy."""
    system = sim_system("h200x1", samples=1, faults=Faults(corrupt_copy=True))
    with pytest.raises(VerificationError) as info:
        MemcpyOperation(system, CE, loops=LOOPS).measure([_h2d(system, 4 * MIB)])
    assert info.value.offset == 2 * MIB


def test_no_verification_when_disabled(sim_system: SimSystemFactory) -> None:
    """With verify off (-s), a corrupted copy is not noticed."""
    system = sim_system("h200x1", samples=2, verify=False, faults=Faults(corrupt_copy=True))
    m = MemcpyOperation(system, CE, loops=LOOPS).measure([_h2d(system)])
    assert len(m.pair_samples[0]) == 2


def test_gate_timeout_is_reported(sim_system: SimSystemFactory) -> None:
    """A gate that never opens makes the sample fail with GateTimeoutError, streams freed."""
    system = sim_system("h200x1", samples=1, faults=Faults(gate_never_opens=True))
    with pytest.raises(GateTimeoutError, match="spin gate timed out"):
        MemcpyOperation(system, CE, loops=LOOPS).measure([_h2d(system)])
    backend = system.backend
    assert isinstance(backend, SimulatedBackend)
    assert backend.live_streams() == 0 and backend.live_events() == 0


def test_kernel_error_surfaces(sim_system: SimSystemFactory) -> None:
    """A failing copy kernel surfaces as CudaError from the synchronize; nothing leaks."""
    system = sim_system("h200x1", samples=1, faults=Faults(kernel_error="gpubw_copy"))
    with pytest.raises(CudaError, match="CUDA_ERROR_LAUNCH_FAILED"):
        MemcpyOperation(system, SM, loops=LOOPS).measure([_h2d(system)])
    backend = system.backend
    assert isinstance(backend, SimulatedBackend)
    assert backend.live_streams() == 0


def test_measure_rejects_bad_copies(sim_system: SimSystemFactory) -> None:
    """Empty copy lists, size mismatches and host-to-host copies are usage errors."""
    system = sim_system("h200x1")
    op = MemcpyOperation(system, CE, loops=LOOPS)
    with pytest.raises(UsageError):
        op.measure([])
    a, b = HostBuffer.allocate(system, 0, MIB), DeviceBuffer.allocate(system, 0, 2 * MIB)
    with pytest.raises(UsageError):
        op.measure([Copy(a, b)])
    with pytest.raises(UsageError):
        op.measure([Copy(a, HostBuffer.allocate(system, 0, MIB))])


def test_exec_device_follows_preference(sim_system: SimSystemFactory) -> None:
    """PREFER_SRC uses the source's device, PREFER_DST the destination's; host never."""
    system = sim_system("h200x2")
    d0, d1 = DeviceBuffer.allocate(system, 0, MIB), DeviceBuffer.allocate(system, 1, MIB)
    h = HostBuffer.allocate(system, 0, MIB)
    assert MemcpyOperation(system, CE, loops=LOOPS).exec_device(Copy(d0, d1)) == 0
    assert (
        MemcpyOperation(system, CE, loops=LOOPS, prefer=Prefer.DST).exec_device(Copy(d0, d1)) == 1
    )
    assert MemcpyOperation(system, CE, loops=LOOPS).exec_device(Copy(h, d1)) == 1
    assert MemcpyOperation(system, CE, loops=LOOPS, prefer=Prefer.DST).exec_device(Copy(d0, h)) == 0


def test_no_streams_or_events_left(sim_system: SimSystemFactory) -> None:
    """A measurement destroys every stream and event it created."""
    system = sim_system("h200x2", samples=2)
    MemcpyOperation(system, SM, loops=LOOPS).measure([_h2d(system)])
    backend = system.backend
    assert isinstance(backend, SimulatedBackend)
    assert backend.live_streams() == 0 and backend.live_events() == 0


def test_failing_event_create_frees_the_events_made(
    sim_system: SimSystemFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cuEventCreate failing half-way frees the events and streams created before it."""
    system = sim_system("h200x2", samples=1)
    backend = system.backend
    assert isinstance(backend, SimulatedBackend)
    copies = [_h2d(system), _h2d(system)]
    real_create = backend.create_event
    made = []

    def create_event(device: int) -> object:
        if len(made) == 3:
            raise CudaError("cuEventCreate", "CUDA_ERROR_OUT_OF_MEMORY", "injected")
        made.append(real_create(device))
        return made[-1]

    monkeypatch.setattr(backend, "create_event", create_event)
    with pytest.raises(CudaError, match="cuEventCreate"):
        MemcpyOperation(system, CE, loops=LOOPS).measure(copies)
    assert len(made) == 3
    assert backend.live_streams() == 0 and backend.live_events() == 0


def test_failing_destroy_still_destroys_the_rest(
    sim_system: SimSystemFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failing cuEventDestroy does not stop the other events and streams being destroyed."""
    system = sim_system("h200x1", samples=1, loops=1)
    backend = system.backend
    real = backend.destroy_event
    calls = {"n": 0}

    def flaky(event: object) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            real(event)
            raise CudaError("cuEventDestroy", "CUDA_ERROR_INVALID_HANDLE")
        real(event)

    monkeypatch.setattr(backend, "destroy_event", flaky)
    with (
        DeviceBuffer.allocate(system, 0, MIB) as a,
        DeviceBuffer.allocate(system, 0, MIB) as b,
        pytest.raises(CudaError, match="cuEventDestroy"),
    ):
        MemcpyOperation(system, CE, loops=LOOPS).measure([Copy(a, b)])
    assert calls["n"] == 3  # start, end and total-end events all destroyed
    assert backend.live_events() == 0
    assert backend.live_streams() == 0
