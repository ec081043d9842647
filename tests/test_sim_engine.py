"""The simulated device side: events, the spin gate, stream order, shared links, determinism
(gpubw.backend.sim.engine)."""

from __future__ import annotations

import struct

import pytest

from gpubw.backend.base import ptr, u64
from gpubw.backend.sim.backend import SimulatedBackend
from gpubw.backend.sim.presets import load_system
from gpubw.backend.sim.rates import Flow
from gpubw.model.errors import CudaError, GateTimeoutError

MIB = 1 << 20
GATE_NS = 10_000_000_000


def _gate(be: SimulatedBackend, stream: object, flag: int, timeout_ns: int = GATE_NS) -> None:
    be.launch("gpubw_gate_wait", 1, 1, (ptr(flag), u64(timeout_ns), ptr(flag + 4)), stream)


def _u32(be: SimulatedBackend, pointer: int) -> int:
    return struct.unpack("<i", be.host_read(pointer, 4))[0]


def test_events_and_elapsed(backend: SimulatedBackend) -> None:
    """Events get virtual timestamps; a 64 MiB H2D copy takes about size / 55.5 GB/s."""
    be = backend
    n = 64 * MIB
    h, d = be.alloc_host(n, 0), be.alloc_device(0, n)
    s = be.create_stream(0)
    a, b = be.create_event(0), be.create_event(0)
    be.record_event(a, s)
    be.memcpy_async(d, h, n, s)
    be.record_event(b, s)
    be.synchronize(s, 1.0)
    assert n / be.elapsed_seconds(a, b) == pytest.approx(55.5e9, rel=0.01)


def test_elapsed_not_ready_and_never_recorded(backend: SimulatedBackend) -> None:
    """elapsed_seconds on a pending event is NOT_READY, on an unrecorded one INVALID_HANDLE."""
    be = backend
    flag = be.alloc_host(4096, None)
    s = be.create_stream(0)
    a, b, c = be.create_event(0), be.create_event(0), be.create_event(0)
    _gate(be, s, flag)
    be.record_event(a, s)
    be.record_event(b, s)
    with pytest.raises(CudaError, match="NOT_READY"):
        be.elapsed_seconds(a, b)
    with pytest.raises(CudaError, match="INVALID_HANDLE"):
        be.elapsed_seconds(c, a)
    be.host_write(flag, struct.pack("<i", 1))
    be.synchronize(s, 1.0)
    assert be.elapsed_seconds(a, b) == 0.0


def test_gate_holds_until_released(backend: SimulatedBackend) -> None:
    """Work behind the gate stays pending until the host writes the flag; then it runs."""
    be = backend
    n = 1 * MIB
    flag = be.alloc_host(4096, None)
    h, d = be.alloc_host(n, 0), be.alloc_device(0, n)
    be.host_write(h, b"\x07" * n)
    s = be.create_stream(0)
    start = be.create_event(0)
    _gate(be, s, flag)
    be.record_event(start, s)
    be.memcpy_async(d, h, n, s)
    back = be.alloc_host(n, 0)
    be.memcpy_async(back, d, n, s)
    for _ in range(50):  # the host keeps working; the stream stays held
        be.host_read(flag, 4)
    assert be.host_read(back, 4) == b"\0\0\0\0"
    released = be.now
    be.host_write(flag, struct.pack("<i", 1))
    be.synchronize(s, 1.0)
    assert be.host_read(back, n) == b"\x07" * n
    assert _u32(be, flag + 4) == 0  # no timeout reported
    stamp = be.elapsed_seconds(start, start)
    assert stamp == 0.0 and be.now > released


def test_gate_times_out_and_reports(backend: SimulatedBackend) -> None:
    """A gate that is never released gives up after timeout_ns and writes 1 to *status."""
    be = backend
    flag = be.alloc_host(4096, None)
    s = be.create_stream(0)
    a, b = be.create_event(0), be.create_event(0)
    be.record_event(a, s)
    _gate(be, s, flag, timeout_ns=2_000_000_000)
    be.record_event(b, s)
    with pytest.raises(GateTimeoutError):
        be.synchronize(s, 1.0)  # shorter than the gate's own timeout
    be.synchronize(s, 5.0)
    assert _u32(be, flag + 4) == 1
    assert be.elapsed_seconds(a, b) == pytest.approx(2.0, abs=1e-3)


def test_wait_event_orders_streams(backend: SimulatedBackend) -> None:
    """A stream waiting on another stream's event starts only after that event."""
    be = backend
    n = 64 * MIB
    h, d0 = be.alloc_host(n, 0), be.alloc_device(0, n)
    s0, s1 = be.create_stream(0), be.create_stream(1)
    done, started = be.create_event(0), be.create_event(1)
    origin = be.create_event(0)
    be.record_event(origin, s0)
    be.memcpy_async(d0, h, n, s0)
    be.record_event(done, s0)
    be.wait_event(s1, done)
    be.record_event(started, s1)
    be.synchronize(s1, 1.0)
    assert be.elapsed_seconds(origin, started) >= be.elapsed_seconds(origin, done)


def test_shared_link_splits_bandwidth(backend: SimulatedBackend) -> None:
    """Two copies at once over the same host link direction each get about half of it."""
    be = backend
    n = 64 * MIB
    flag = be.alloc_host(4096, None)
    streams, events = [], []
    for _ in range(2):
        h, d = be.alloc_host(n, 0), be.alloc_device(0, n)
        s = be.create_stream(0)
        a, b = be.create_event(0), be.create_event(0)
        _gate(be, s, flag)
        be.record_event(a, s)
        be.memcpy_async(d, h, n, s)
        be.record_event(b, s)
        streams.append(s)
        events.append((a, b))
    be.host_write(flag, struct.pack("<i", 1))
    for s in streams:
        be.synchronize(s, 1.0)
    for a, b in events:
        assert n / be.elapsed_seconds(a, b) == pytest.approx(55.5e9 / 2, rel=0.02)


def test_deterministic() -> None:
    """The same calls on the same model give identical timings (seeded jitter)."""

    def run() -> float:
        be = SimulatedBackend(load_system("h200x2"))
        h, d = be.alloc_host(MIB, 0), be.alloc_device(0, MIB)
        s = be.create_stream(0)
        a, b = be.create_event(0), be.create_event(0)
        be.record_event(a, s)
        for _ in range(5):
            be.memcpy_async(d, h, MIB, s)
        be.record_event(b, s)
        be.synchronize(s, 1.0)
        return be.elapsed_seconds(a, b)

    assert run() == run()


def test_engine_runs_without_a_facade() -> None:
    """The engine needs only the model: streams of several devices run side by side on one
    device clock (what simulated ranks sharing an engine rely on), events stamp that clock."""
    from gpubw.backend.sim.engine import Engine, Op
    from gpubw.backend.sim.faults import FaultInjector, Faults

    engine = Engine(load_system("h200x2"), FaultInjector(Faults()))
    streams = [engine.new_stream(d, 0.0) for d in (0, 1)]
    event = engine.new_event(1)
    for s, seconds in zip(streams, (2e-3, 1e-3)):
        op = Op("fixed", 0.0, "work")
        op.duration = seconds
        engine.enqueue(s, op, 0.0)
    record = Op("record", 0.0, "record")
    record.event = event
    event.last = record
    engine.enqueue(streams[1], record, 0.0)
    assert engine.advance(1.0, until=lambda: all(s.idle() for s in streams)) is not False
    assert engine.t == pytest.approx(2e-3)  # not 3e-3: the two devices ran concurrently
    assert event.time == pytest.approx(1e-3)


def test_synchronizing_an_idle_stream_does_not_move_the_clock() -> None:
    """Waiting on a stream with no work returns at once, even beside other idle streams: the
    device clock stays where it was (not pushed to the wait's bound)."""
    from gpubw.backend.sim.engine import Engine, Op
    from gpubw.backend.sim.faults import FaultInjector, Faults

    engine = Engine(load_system("h200x2"), FaultInjector(Faults()))
    idle, other = engine.new_stream(0, 0.0), engine.new_stream(1, 0.0)
    op = Op("fixed", 0.0, "work")
    op.duration = 1e-3
    engine.enqueue(other, op, 0.0)
    assert engine.advance(5.0, until=other.idle) is True
    assert engine.advance(10.0, until=idle.idle) is True
    assert engine.t == pytest.approx(1e-3)
    engine.advance(2e-3)  # the clock moves to a bound only when nothing waits on it
    assert engine.advance(10.0, until=idle.idle) is True
    assert engine.t == pytest.approx(2e-3)


def _advances_between_events(settled: bool) -> tuple[list[float], int, list[object]]:
    """Two copies on two of many streams, the device advanced in small steps between their
    events: the flows' bytes left after each step, how many scans ran, the streams visited."""
    from gpubw.backend.sim.engine import Engine

    be = SimulatedBackend(load_system("h200x2"))
    engine = be._engine
    if not settled:  # every advance through the event loop, as before the shortcut
        engine._advance_settled = lambda limit, until: None  # type: ignore[method-assign]
    scans = 0
    scan = engine._scan

    def counted() -> tuple[list[Flow], float | None]:
        nonlocal scans
        scans += 1
        return scan()

    engine._scan = counted  # type: ignore[method-assign]
    idle = [be.create_stream(0) for _ in range(20)]
    s0, s1 = be.create_stream(0), be.create_stream(1)
    h, d0, d1 = be.alloc_host(64 * MIB, 0), be.alloc_device(0, 64 * MIB), be.alloc_device(1, MIB)
    be.memcpy_async(d0, h, 64 * MIB, s0)
    be.memcpy_async(d1, d0, MIB, s1)
    left, scans = [], 0
    for _ in range(40):
        Engine.advance(engine, engine.t + 2e-5)
        left.append(sum(f.remaining for s in (s0, s1) if s.cur for f in s.cur.flows))
    assert not any(s.busy for s in idle)
    return left, scans, list(engine._busy)


def test_an_advance_that_reaches_no_event_only_moves_the_flows() -> None:
    """Between two events an advance runs no event loop (no scan of the streams) and moves
    the flows as the loop would, bit for bit; idle streams are never visited."""
    left, scans, busy = _advances_between_events(settled=True)
    loop_left, loop_scans, _ = _advances_between_events(settled=False)
    assert left == loop_left and 0 < left[-1] < left[0]
    assert scans < loop_scans / 4  # a scan only at the few events (copies starting, ending)
    assert len(busy) == 1  # the small copy ended; the idle streams were never busy


def test_rates_kept_between_events_equal_a_full_recomputation() -> None:
    """Flows starting and ending one by one (shared links, both directions, host memory)
    get the rates a fresh engine computes for the same flows, bit for bit."""
    import random

    from gpubw.backend.sim.engine import Engine
    from gpubw.backend.sim.faults import FaultInjector, Faults
    from gpubw.backend.sim.model import HOSTMEM
    from gpubw.backend.sim.rates import Flow

    model = load_system("h200x8")
    links = [("tx", 0), ("rx", 1), ("tx", 1), ("rx", 0), ("h2d", 2), ("d2h", 2), ("mem", 3)]
    rng = random.Random(7)
    flows = [
        Flow(
            (*rng.sample(links, rng.randint(1, 2)), *((HOSTMEM,) * (i % 3 == 0))),
            1e9 + i,
            1.0,
            load=i % 4 == 1,
        )
        for i in range(12)
    ]
    flows.append(Flow((HOSTMEM,), 5e11, 1.0))  # host to host: memory only
    engine = Engine(model, FaultInjector(Faults()))
    active: list[Flow] = []
    for _ in range(60):
        f = rng.choice(flows)
        active = [g for g in active if g is not f] if f in active else [*active, f]
        engine._compute_rates(list(active))
        kept = [g.rate for g in active]
        fresh = Engine(model, FaultInjector(Faults()))
        fresh._compute_rates(list(active))  # sets every active flow's rate anew
        assert [g.rate for g in active] == kept
        assert engine._rated_set == set(active)


def test_rates_reused_for_an_active_set_seen_before_equal_a_full_recomputation() -> None:
    """Shares kept for an active set are reused when the same set comes back, and a set
    computed after such reuse gets every rate anew (no flow keeps the reused set's rate)."""
    from gpubw.backend.sim.engine import Engine
    from gpubw.backend.sim.faults import FaultInjector, Faults
    from gpubw.backend.sim.model import HOSTMEM
    from gpubw.backend.sim.rates import Flow

    model = load_system("h200x8")
    a = Flow((("tx", 0), ("rx", 1)), 3e11, 1.0)
    b = Flow((("tx", 0), ("rx", 2), HOSTMEM), 2e11, 1.0, jitter=1.01)  # shares tx 0 with a
    c = Flow((("tx", 3), ("rx", 4)), 1e11, 1.0)  # shares nothing with a
    engine = Engine(model, FaultInjector(Faults()))
    for active in ([a], [a, b], [a], [a, b, c], [a, b], [b], [a, b, c], [c, a], [a]):
        engine._compute_rates(list(active))
        kept = [f.rate for f in active]
        Engine(model, FaultInjector(Faults()))._compute_rates(list(active))
        assert kept == [f.rate for f in active], [f.key for f in active]
    assert len(engine._leasts) == 5  # [a], [a, b] and [a, b, c] came back


def test_a_lone_flow_kept_by_its_resources_gets_the_full_computation_s_rate() -> None:
    """A flow alone after none (kept by its resources and load from the first such flow)
    gets the rate the full incremental computation gives it, bit for bit, and leaves the
    counts so that a flow joining it is rated as from scratch."""
    from gpubw.backend.sim.engine import Engine
    from gpubw.backend.sim.faults import FaultInjector, Faults
    from gpubw.backend.sim.model import HOSTMEM
    from gpubw.backend.sim.rates import Flow

    model = load_system("h200x8")
    kinds = [
        ((("tx", 0), ("rx", 1)), False),
        ((("tx", 0), ("rx", 1)), True),  # the same links, loading: kept apart
        ((("tx", 1), ("rx", 0), ("tx", 0)), False),  # a link and its other direction
        ((("d2h", 2), HOSTMEM), False),  # host memory's bandwidth
    ]
    engine = Engine(model, FaultInjector(Faults()))
    other = Flow((("tx", 1), ("rx", 0)), 7e10, 1.0)  # the other direction of the first two
    for peak in (3e11, 5e10, 2e12):  # a new peak each time; the last beyond host memory
        for resources, load in kinds:
            f = Flow(resources, peak, 1.0, load=load)
            engine._compute_rates([])
            engine._compute_rates([f])
            fresh = Flow(resources, peak, 1.0, load=load)
            Engine(model, FaultInjector(Faults()))._update_rates([fresh])
            assert f.rate == fresh.rate and f.link_rate == fresh.link_rate
            engine._compute_rates([f, other])
            both = [Flow(resources, peak, 1.0, load=load), Flow(other.resources, 7e10, 1.0)]
            Engine(model, FaultInjector(Faults()))._update_rates(both)
            assert [f.rate, other.rate] == [g.rate for g in both]


def _rates(model_name: str, *flows: Flow) -> list[float]:
    """The rates ``flows`` get together on ``model_name`` (a fresh engine)."""
    from gpubw.backend.sim.engine import Engine
    from gpubw.backend.sim.faults import FaultInjector, Faults

    engine = Engine(load_system(model_name), FaultInjector(Faults()))
    engine._compute_rates(list(flows))
    return [f.rate for f in flows]


def test_sm_loads_across_a_link_busy_both_ways_run_at_the_load_factor() -> None:
    """NVLink busy both ways: copies that store run at 0.985, SM kernels loading from each
    other's memory at 0.908 (their requests queue behind the other way's data); a host link:
    device to host at 0.925, host to device at 0.88, both at 0.82 while an SM kernel loads
    across it."""
    from gpubw.backend.sim.model import HOSTMEM

    def peer(load: bool) -> list[float]:
        one, two = (("tx", 1), ("rx", 0)), (("tx", 0), ("rx", 1))
        return _rates("h200x2", Flow(one, 373e9, 1.0, load=load), Flow(two, 373e9, 1.0, load=load))

    assert peer(False) == [pytest.approx(373e9 * 0.985)] * 2
    assert peer(True) == [pytest.approx(373e9 * 0.908)] * 2
    up, down = (("h2d", 0), HOSTMEM), (("d2h", 0), HOSTMEM)
    assert _rates("h200x1", Flow(up, 55.5e9, 1.0), Flow(down, 55.3e9, 1.0)) == [
        pytest.approx(55.5e9 * 0.88),
        pytest.approx(55.3e9 * 0.925),
    ]
    loads = _rates("h200x1", Flow(up, 51.4e9, 1.0, load=True), Flow(down, 52.6e9, 1.0))
    assert loads == [pytest.approx(51.4e9 * 0.82), pytest.approx(52.6e9 * 0.82)]


def test_host_memory_serves_writes_first_and_reads_the_rest() -> None:
    """Two GPUs copying both ways through host memory (h200x2: 275 GB/s of reads or 125 of
    writes, a write weighted 1.67 times a read): host memory, not the links, bounds them;
    the writes get 1.67 times the reads' rate and together they use all of it."""
    from gpubw.backend.sim.model import HOSTMEM

    flows = [Flow(((d, g), HOSTMEM), 55.4e9, 1.0) for g in (0, 1) for d in ("h2d", "d2h")]
    reads, writes = _rates("h200x2", *flows)[:2]
    assert reads == pytest.approx(275e9 / (2 + 2 * 2.2 * 1.67))  # 29.4 GB/s
    assert writes == pytest.approx(1.67 * reads)  # 49.1 GB/s, below the link's 51.2
    assert 2 * reads + 2 * 2.2 * writes == pytest.approx(275e9)
    # a flow its link holds lower keeps its link rate and leaves the rest to the others:
    # the writes reach their links' rate, the other read gets what is left
    slow = Flow((("h2d", 0), HOSTMEM), 10e9, 1.0)
    rates = _rates("h200x2", slow, *flows[1:])
    assert rates[0] == pytest.approx(10e9 * 0.88)
    assert rates[1] == rates[3] == pytest.approx(55.4e9 * 0.925)
    assert rates[2] == pytest.approx(275e9 - rates[0] - 2 * 2.2 * rates[1])
