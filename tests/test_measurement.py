"""The measurement protocol (gpubw.measure.measurement) run through the simulated backend."""

from __future__ import annotations

import math
import statistics
from types import SimpleNamespace
from typing import Any

import pytest

from conftest import MIB, SimSystemFactory
from gpubw.backend.sim.backend import SimulatedBackend
from gpubw.backend.sim.faults import Faults
from gpubw.kernels.patterns import DST_SEED, SRC_SEED
from gpubw.measure.initiators import CE, SM, SPLIT_WARP, Initiator
from gpubw.measure.measurement import (
    Copy,
    Kind,
    LocalSync,
    MemcpyOperation,
    Prefer,
    statistic,
)
from gpubw.measure.series import RankSync
from gpubw.memory.buffers import DeviceBuffer, HostBuffer
from gpubw.memory.sharing import RemoteRankError
from gpubw.memory.system import System
from gpubw.model.errors import (
    CudaError,
    GateTimeoutError,
    GpubwError,
    UsageError,
    VerificationError,
)
from gpubw.model.options import WARMUP_ITERATIONS, RunOptions
from gpubw.world.base import Agreement

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


# -- the one protocol and its injected synchronisation ----------------------------------------
def _trace(system: System, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the protocol's backend calls through ``system`` (a gate write as close/open,
    a launch as its kernel)."""
    calls: list[str] = []
    backend = system.backend
    names = "create_stream create_event destroy_event destroy_stream record_event wait_event"
    names += " synchronize memcpy_async host_read elapsed_seconds launch host_write"

    def spy(name: str) -> Any:
        real = getattr(backend, name)

        def call(*args: Any) -> Any:
            if name == "launch":
                calls.append(args[0])
            elif name == "host_write":
                calls.append("open" if args[1][:1] == b"\x01" else "close")
            else:
                calls.append(name)
            return real(*args)

        return call

    for name in names.split():
        monkeypatch.setattr(backend, name, spy(name))
    return calls


def test_a_sample_runs_the_numbered_protocol_in_order(
    sim_system: SimSystemFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One process, two CE copies, TOTAL: fill and wait, close, hold + warm-up per stream,
    start events, measured copies and end events, the total end, open, wait, rates, drain."""
    system = sim_system("h200x2", samples=1, verify=False)
    copies = [
        _h2d(system, MIB),
        Copy(DeviceBuffer.allocate(system, 1, MIB), HostBuffer.allocate(system, 1, MIB)),
    ]
    system.load_kernels()
    for device in (0, 1):  # the fill patterns exist before (they are made on first use)
        system.pool.pattern(device, SRC_SEED), system.pool.pattern(device, DST_SEED)
    calls = _trace(system, monkeypatch)
    MemcpyOperation(system, CE, kind=Kind.TOTAL, loops=2).measure(copies)
    warm = ["gpubw_gate_wait", *["memcpy_async"] * WARMUP_ITERATIONS]
    assert calls == [
        *["create_stream"] * 2, *["create_event"] * 5,
        *["gpubw_fill"] * 4, *["synchronize"] * 2,  # 2. fill and wait
        "close", *warm, *warm,  # 3. close, hold + warm-up
        "record_event", "wait_event", "record_event",  # 4. starts
        "memcpy_async", "memcpy_async", "record_event",  # pair 0's copies, end
        "memcpy_async", "memcpy_async", "record_event", "wait_event", "record_event",  # total
        "open", "synchronize", "synchronize", "host_read",  # 5. release, wait, timed out?
        *["elapsed_seconds"] * 3,  # 7. rates and the total
        "open", "synchronize", "synchronize",  # cleanup: drain
        *["destroy_event"] * 5, *["destroy_stream"] * 2,
    ]  # fmt: skip


def test_a_failing_sample_opens_the_gate_and_frees_everything(
    sim_system: SimSystemFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error once the streams are held behind the gate: the error is raised, the gate
    is open, and no stream or event is left."""
    system = sim_system("h200x2", samples=2)
    real = type(CE).enqueue

    def enqueue(self: Any, job: Any, *, loops: int) -> None:
        if loops == LOOPS:
            raise GpubwError("injected after the hold")
        real(self, job, loops=loops)

    monkeypatch.setattr(type(CE), "enqueue", enqueue)
    with pytest.raises(GpubwError, match="injected after the hold"):
        MemcpyOperation(system, CE, loops=LOOPS).measure([_h2d(system), _h2d(system)])
    backend = system.backend
    assert isinstance(backend, SimulatedBackend)
    assert backend.host_read(system.gate.page + system.gate.FLAG, 4) == b"\x01\0\0\0"
    assert backend.live_streams() == 0 and backend.live_events() == 0


class _Recorder:
    """Records every call made on it as (name, args, keywords)."""

    def __init__(self, **attributes: Any) -> None:
        self.calls: list[tuple[Any, ...]] = []
        vars(self).update(attributes)

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: self.calls.append((name, a, k))


class _World:
    """A stand-in world of rank ``rank`` whose every agreement is ``agreement``; each
    agreement asked for is recorded as (error, timeout)."""

    timeout_s = 5.0

    def __init__(self, rank: int, agreement: Agreement) -> None:
        self.rank = rank
        self.agreement = agreement
        self.calls: list[tuple[Any, float | None]] = []

    def agree(self, error: Any = None, timeout_s: float | None = None) -> Agreement:
        self.calls.append((error, timeout_s))
        return self.agreement


def _rank_system(rank: int, agreement: Agreement) -> Any:
    """A stand-in System of rank ``rank``: a recording gate, a :class:`_World`."""
    world = _World(rank, agreement)
    return SimpleNamespace(gate=_Recorder(), world=world, options=RunOptions(gate_timeout_s=2.0))


def test_rank_sync_relays_the_first_ranks_release() -> None:
    """Across ranks: every rank closes its gate at each sample's start, the first rank also
    zeroes the next sample's flag (and the last one's at the cell's end); samples use the
    two flags in turn; the first rank's stream 0 relays, every other stream waits on the
    flag; only the first rank opens its gate."""

    def flag(sample: int) -> int:
        return 0x1000 + 4 * (sample % 2)

    gate = _Recorder(owner=0, flag=flag)
    first = RankSync(_rank_system(1, Agreement(ok=True)), gate, first=True)  # type: ignore[arg-type]
    other = RankSync(_rank_system(0, Agreement(ok=True)), gate, first=False)  # type: ignore[arg-type]
    for sync in (first, other):
        for _ in range(2):
            sync.begin()
            sync.close()
            sync.hold(0, "s0")
            sync.hold(1, "s1")
            sync.release()
        sync.end()
    assert first.system.gate.calls == [
        ("close", (), {}),
        ("enqueue_relay", ("s0", 0x1000, 2.0), {}),
        ("enqueue_wait", ("s1", 2.0), {"flag": 0x1000}),
        ("open", (), {}),
        ("close", (), {}),
        ("enqueue_relay", ("s0", 0x1004, 2.0), {}),
        ("enqueue_wait", ("s1", 2.0), {"flag": 0x1004}),
        ("open", (), {}),
    ]
    assert other.system.gate.calls == [
        ("close", (), {}),
        ("enqueue_wait", ("s0", 2.0), {"flag": 0x1000}),
        ("enqueue_wait", ("s1", 2.0), {"flag": 0x1000}),
        ("close", (), {}),
        ("enqueue_wait", ("s0", 2.0), {"flag": 0x1004}),
        ("enqueue_wait", ("s1", 2.0), {"flag": 0x1004}),
    ]
    # by the first rank (rank 1), not the owner: samples 1 and 2's at the starts, 1's at the end
    assert gate.calls == [("reset", (1,), {}), ("reset", (2,), {}), ("reset", (1,), {})]


def test_a_steps_error_is_raised_at_once_on_one_process_and_agreed_across_ranks() -> None:
    """LocalSync raises a step's error where it happens; RankSync hands it to the agreement
    (waiting the step's bound plus the world's timeout) and raises what every rank agreed."""

    def fail() -> None:
        raise GpubwError("queue failed")

    local = LocalSync(_rank_system(0, Agreement(ok=True)))
    with pytest.raises(GpubwError, match="queue failed"):
        local.step(fail, 2.0)
    assert local.system.world.calls == []
    ok = RankSync(_rank_system(1, Agreement(ok=True)), None, first=False)  # type: ignore[arg-type]
    ok.step(fail, 2.0)
    ok.step(lambda: None)
    (message, timeout_s), (none, no_bound) = ok.system.world.calls
    assert "queue failed" in message and timeout_s == 7.0 and (none, no_bound) == (None, None)
    failed = Agreement(ok=False, failures=((1, "queue failed"),))
    other = RankSync(_rank_system(0, failed), None, first=True)  # type: ignore[arg-type]
    with pytest.raises(RemoteRankError, match="rank 1: queue failed"):
        other.step(lambda: None, 2.0)
