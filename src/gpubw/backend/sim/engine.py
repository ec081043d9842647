"""The device side of the simulated system: a small discrete-event simulation of streams,
events and the copies and kernels they run, on a virtual clock.

Work enqueued on a stream is submitted at the host's virtual time; the engine runs lazily, as
far as the host could have observed (:meth:`Engine.advance`): up to the host's time on every
call, and further while the host waits in a synchronize. Events get virtual timestamps, so
elapsed times are deterministic. Copies are fluid flows over resources (each host link
direction, each device's peer-link send and receive side, each device's memory, host memory):
flows that overlap on a resource share it equally, a link busy in both directions runs at its
bidirectional factor, host memory is filled up to its reading and writing bandwidths
(:mod:`gpubw.backend.sim.rates`), and rates are re-evaluated whenever a flow starts or ends.

The engine knows devices only as numbers of the model (global ordinals), and nothing of memory,
kernels or the host: an operation carries what it does (``effect``, ``prepare``, a gate's
``probe``), and the host clock belongs to the caller, which passes its time in. Simulated
ranks share one engine (:class:`gpubw.backend.sim.backend.SimEngine`: one device clock, one set of
links, one random stream), each through its own facade with its own host clock, so that the
ranks' copies compete for the same links. A gate whose flag lives in device memory
(``Op.remote``: another rank's release reaches it through a device-side write) is re-probed
whenever work finishes and its flag's allocation was written (:mod:`gpubw.backend.sim.gates`),
and :meth:`Engine.held_remotely` tells a facade to wait for that rank rather than run the
clock into a false timeout.

The event loop is kept cheap without changing what it computes: it visits only the streams
with work (``Engine._busy``); after an advance nothing starts or ends before the next event,
so a later advance that reaches no event only moves the flows (``Engine._advance_settled``);
and a copy queued right behind the same copy is that op made once more (``Op.repeats``).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable

from gpubw.backend.sim.faults import FaultInjector
from gpubw.backend.sim.gates import WaitingGates, Watched
from gpubw.backend.sim.model import SimSystem
from gpubw.backend.sim.rates import Flow, FlowRates
from gpubw.model.errors import CudaError, GpubwError, SimulationError


class Stream:
    __slots__ = (
        "busy",
        "cur",
        "destroyed",
        "device",
        "error",
        "free_at",
        "gated",
        "id",
        "queue",
    )

    def __init__(self, sid: int, device: int) -> None:
        self.id = sid
        self.device = device
        self.queue: deque[Op] = deque()
        self.cur: Op | None = None
        self.free_at = 0.0
        self.destroyed = False
        self.gated = False  # a gate was ever enqueued here (copies after it are "measured")
        self.error: GpubwError | None = None
        self.busy = False  # in the engine's list of streams with work (Engine._busy)

    def idle(self) -> bool:
        return self.cur is None and not self.queue

    def __repr__(self) -> str:
        return f"<simulated stream {self.id} on device {self.device}>"


class Event:
    __slots__ = ("destroyed", "device", "id", "last", "time")

    def __init__(self, eid: int, device: int) -> None:
        self.id = eid
        self.device = device
        self.last: Op | None = None  # the most recent record op
        self.time: float | None = None  # timestamp of the last completed record
        self.destroyed = False

    def __repr__(self) -> str:
        return f"<simulated event {self.id} on device {self.device}>"


class Op:
    """One unit of stream work. ``kind``: gate, record, wait, fixed, plugin, xfer.

    A copy made again right behind itself is kept as one op made several times
    (``repeats``: each further copy's submit time and rate jitter, in the order of the calls;
    ``refill``: a copy's flows for a jitter): when one copy ends (its effect done) the op is
    put back at the head of its stream for the next, as a separate op queued behind it would
    start there (:meth:`Engine._finish`)."""

    __slots__ = (
        "again",
        "deadline",
        "done",
        "duration",
        "effect",
        "end",
        "event",
        "flows",
        "kind",
        "name",
        "on_timeout",
        "overhead",
        "phase_end",
        "prepare",
        "probe",
        "record",
        "refill",
        "remote",
        "repeats",
        "submit",
        "watch",
    )

    def __init__(self, kind: str, submit: float, name: str = "") -> None:
        self.kind = kind
        self.submit = submit
        self.name = name
        self.done = False
        self.end: float | None = None
        self.deadline = 0.0
        self.duration = 0.0
        self.overhead = 0.0
        self.phase_end = 0.0
        self.flows: list[Flow] = []
        self.effect: Callable[[], None] | None = None
        self.prepare: Callable[[], float] | None = None
        self.event: Event | None = None
        self.record: Op | None = None
        #: a gate's flag: None if not allocated, else whether it is released
        self.probe: Callable[[], bool | None] | None = None
        #: a gate that timed out reports it (writes its status word)
        self.on_timeout: Callable[[], None] | None = None
        #: a gate whose flag is in device memory: another rank may release it
        self.remote = False
        #: a copy: whether a copy call with these arguments (dst, src, bytes) makes it again
        self.again: Callable[[int, int, int], bool] | None = None
        self.refill: Callable[[float], list[Flow]] | None = None
        self.repeats: deque[tuple[float, float]] | None = None
        #: a gate: what its flag lives in (None: not known, probed at every write)
        self.watch: Watched | None = None


class Engine(FlowRates):
    """Streams, events and the device clock ``t`` of one modelled system."""

    def __init__(self, model: SimSystem, injector: FaultInjector) -> None:
        self.model = model
        self.injector = injector
        self.t = 0.0  # the device side has been run up to here
        self.streams: list[Stream] = []
        #: the streams that may have work, in the order of ``streams`` (by id): the only ones
        #: the event loop visits (an idle stream does nothing there); one that went idle is
        #: dropped before the next event (``_shed``)
        self._busy: list[Stream] = []
        self._shed = False
        #: nothing can start or end at ``t`` before something changes (an advance ended
        #: there with every start done and the next event later): an advance needs no event
        #: loop until that event (:meth:`_advance_settled`); the last scan's flows and its
        #: earliest event other than their ends
        self._settled = False
        self._active: list[Flow] = []
        self._fixed: float | None = None
        self.events: set[Event] = set()
        self._init_rates(model)
        self._ids = 0
        #: streams destroyed but not forgotten yet (their work was still running)
        self._destroyed = 0
        self._rng = random.Random(model.seed)
        #: a gate waiting on a flag in device memory was ever started (multi-rank protocol)
        self.remote_gates = False
        #: running gates not released yet, by their flag's allocation (probed on its writes)
        self._waiting: WaitingGates[Op] = WaitingGates()

    # -- objects ----------------------------------------------------------------------------
    def _next_id(self) -> int:
        self._ids += 1
        return self._ids

    def new_stream(self, device: int, now: float) -> Stream:
        s = Stream(self._next_id(), device)
        s.free_at = now
        self.streams.append(s)
        return s

    def new_event(self, device: int) -> Event:
        e = Event(self._next_id(), device)
        self.events.add(e)
        return e

    def jitter(self) -> float:
        """A copy's rate factor, drawn from [1 - jitter, 1 + jitter] (the model's seed)."""
        j = self.model.jitter
        return 1.0 + j * (2.0 * self._rng.random() - 1.0) if j else 1.0

    def enqueue(self, s: Stream, op: Op, now: float) -> None:
        """Queue ``op`` on ``s`` and run the device side up to ``now``. Behind other work
        ``op`` cannot start yet, so a settled engine stays settled."""
        queue = s.queue
        if s.cur is None and not queue:
            self._settled = False
        queue.append(op)
        if not s.busy:
            self._mark_busy(s)
        self.advance(now)

    def _mark_busy(self, s: Stream) -> None:
        """``s`` has work: the event loop visits it, in stream order (a new list: a loop
        that is running keeps the one it iterates)."""
        s.busy = True
        busy = self._busy
        i = len(busy)
        while i and busy[i - 1].id > s.id:
            i -= 1
        self._busy = [*busy[:i], s, *busy[i:]]

    def _drop_idle(self) -> None:
        """Forget the streams that went idle since the last event (a new list, as above)."""
        self._shed = False
        keep = []
        for s in self._busy:
            if s.cur is None and not s.queue:
                s.busy = False
            else:
                keep.append(s)
        self._busy = keep

    def held_remotely(self, s: Stream) -> bool:
        """Whether ``s`` has a gate ahead whose flag lives in device memory and is not
        released yet (in a multi-rank engine another rank's work releases it)."""
        for op in (s.cur, *s.queue):
            if (
                op is not None
                and op.kind == "gate"
                and op.remote
                and not op.done
                and op.probe is not None
                and op.probe() is False
            ):
                return True
        return False

    def release_gates(self) -> None:
        """Memory was written: running gates whose flag is now released end soon. Only the
        gates still waiting whose flag's allocation was written since they were last probed
        are probed (a rack has one per rank, and every finished copy comes here)."""
        if self._waiting:
            end = self.t + self.model.overheads.gate_poll
            for op in self._waiting.released(self._gate_open):
                op.end = end
                self._settled = False

    # -- the simulation ---------------------------------------------------------------------
    def _gate_open(self, op: Op) -> bool:
        if self.injector.gate_never_opens:
            return False
        assert op.probe is not None
        return bool(op.probe())

    def _start(self, s: Stream, op: Op) -> None:
        t = self.t
        if op.kind == "gate":
            op.deadline = t + op.duration
            self.remote_gates = self.remote_gates or op.remote
            assert op.probe is not None
            if op.probe() is None:
                op.end = t
                s.error = CudaError(
                    "cuStreamSynchronize", "CUDA_ERROR_ILLEGAL_ADDRESS", "gate flag not allocated"
                )
            elif self._gate_open(op):
                op.end = t + self.model.overheads.gate_poll
            else:
                self._waiting.add(op)
        elif op.kind in ("record", "wait"):
            op.end = t
        elif op.kind == "fixed":
            op.end = t + op.duration
        elif op.kind == "plugin":
            assert op.prepare is not None
            try:
                op.end = t + op.prepare()
            except GpubwError as exc:
                op.end = t
                self._fail(s, exc)
        else:
            op.phase_end = t + op.overhead

    def _finish(self, s: Stream, op: Op) -> None:
        op.done = True
        s.cur = None
        s.free_at = self.t
        if not s.queue:
            self._shed = True
        if op.kind == "gate" and (op.end is None or op.end > op.deadline):
            # Timed out: the kernel reports it through *status, like the real one.
            if op.on_timeout is not None:
                op.on_timeout()
        elif op.kind == "record":
            assert op.event is not None
            if op.event.last is op:
                op.event.time = self.t
        if op.effect is not None:
            try:
                op.effect()
            except GpubwError as exc:
                self._fail(s, exc)
            if self.remote_gates and op.kind != "gate":
                self.release_gates()  # the work may have released a flag in device memory
        if op.repeats:  # the same copy again: it starts as the next op queued would
            assert op.refill is not None
            op.submit, jitter = op.repeats.popleft()
            op.flows = op.refill(jitter)
            op.done = False
            s.queue.appendleft(op)

    @staticmethod
    def _fail(s: Stream, exc: GpubwError) -> None:
        """Record an asynchronous failure; the stream's next synchronize raises it."""
        if s.error is None:
            s.error = exc

    def advance(self, limit: float, until: Callable[[], bool] | None = None) -> bool:
        """Run the device side up to time ``limit``, or until ``until()`` holds (then stop
        there); returns whether ``until()`` holds at the end."""
        if self.injector.sync_hang:
            return until() if until is not None else False
        if self._settled:
            done = self._advance_settled(limit, until)
            if done is not None:
                return done
        self._settled = False
        if self._destroyed:
            self._prune()
        if not self.streams:  # nothing on the device side: only the clock moves
            self.t = max(self.t, limit)
            return until() if until is not None else False
        stalls = 0
        while True:
            if self._shed:
                self._drop_idle()
            self._start_ready()
            if until is not None and until():
                return True
            active, nxt = self._scan()
            if nxt is None or nxt > limit:
                # every start at t is done; settled if the next event is later than t
                if limit <= self.t:
                    self._settled = nxt is None or nxt > self.t
                else:
                    self._progress(active, limit - self.t)
                    self.t = limit
                    self._settled = True
                return until() if until is not None else False
            if nxt <= self.t:
                stalls += 1
                if stalls > 10_000:  # pragma: no cover - a bug in the model, not in the user
                    raise SimulationError("the simulated device made no progress")
            else:
                stalls = 0
            nxt = max(nxt, self.t)
            self._progress(active, nxt - self.t)
            self.t = nxt
            self._finish_due()
            if self._destroyed:
                self._prune()

    def _advance_settled(self, limit: float, until: Callable[[], bool] | None) -> bool | None:
        """:meth:`advance` where nothing changed since the last scan: nothing starts or ends
        at ``t``, the flows and their rates are the scan's, and the next event is the
        earliest of the scan's other events (``_fixed``) and the flows' ends computed now
        (as :meth:`_scan` computes them). If it is later than ``limit`` the flows move up
        to it (what the event loop would do) and this returns what ``advance`` returns;
        else None (the event loop runs)."""
        t = self.t
        if limit <= t:
            return until() if until is not None else False
        if until is not None and until():
            return True
        nxt, active = self._fixed, self._active
        for f in active:
            c = t + f.remaining / f.rate
            nxt = c if nxt is None or c < nxt else nxt
        if nxt is not None and nxt <= limit:
            return None
        self._progress(active, limit - t)
        self.t = limit
        return until() if until is not None else False

    def _prune(self) -> None:
        """Forget destroyed streams once their work is done."""
        if self._destroyed:
            self.streams = [s for s in self.streams if not (s.destroyed and s.idle())]
            self._destroyed = sum(s.destroyed for s in self.streams)

    def destroy(self, s: Stream) -> None:
        """``s`` was destroyed: its pending work still runs, then it is forgotten."""
        if not s.destroyed:
            s.destroyed = True
            self._destroyed += 1
            self._settled = False

    def _scan(self) -> tuple[list[Flow], float | None]:
        """The flows moving now (their rates computed) and the next time anything starts or
        ends if nothing changes (None: nothing will)."""
        t = self.t
        active: list[Flow] = []
        nxt: float | None = None
        for s in self._busy:
            op = s.cur
            if op is None:
                if s.queue:
                    head = s.queue[0]
                    if head.kind != "wait" or head.record is None or head.record.done:
                        c = max(s.free_at, head.submit)
                        nxt = c if nxt is None or c < nxt else nxt
                continue
            kind = op.kind
            if kind == "xfer":
                if t < op.phase_end:
                    c = op.phase_end
                else:
                    moving = False
                    for f in op.flows:
                        if f.remaining > 0:
                            active.append(f)
                            moving = True
                    if moving:
                        continue
                    c = t
            elif kind == "gate":
                c = op.end if op.end is not None else op.deadline
            elif op.end is None:
                continue
            else:
                c = op.end
            nxt = c if nxt is None or c < nxt else nxt
        if active != self._rated:
            self._compute_rates(active)
        self._fixed, self._active = nxt, active
        for f in active:
            c = t + f.remaining / f.rate
            nxt = c if nxt is None or c < nxt else nxt
        return active, nxt

    def _finish_due(self) -> None:
        """Finish every running op whose end has come, in stream order."""
        t = self.t
        for s in self._busy:
            op = s.cur
            if op is None:
                continue
            kind = op.kind
            if kind == "xfer":
                if t >= op.phase_end:
                    for f in op.flows:
                        if not f.remaining <= 0:
                            break
                    else:  # drained
                        self._finish(s, op)
            elif kind == "gate":
                if (op.end if op.end is not None else op.deadline) <= t:
                    self._finish(s, op)
            elif op.end is not None and op.end <= t:
                self._finish(s, op)

    def _progress(self, active: list[Flow], dt: float) -> None:
        if dt <= 0:
            return
        for f in active:
            rate = f.rate
            f.remaining -= rate * dt
            # done when what is left is float noise (in bytes, or in time at this rate)
            if f.remaining <= 1e-9 * f.total + 1e-6 or f.remaining <= rate * 1e-11:
                f.remaining = 0.0

    def _start_ready(self) -> None:
        """Start every head op that can start at the current time (zero-length ops chain).

        Passes over the streams until one changes nothing; an op that ends at once (a record,
        a wait, a drained copy, a fixed or plugin op whose end has come) ends in the pass
        that starts it. The tests are written out: this runs for every stream at every
        event."""
        t = self.t
        progressed = True
        while progressed:
            progressed = False
            for s in self._busy:
                op = s.cur
                if op is None:
                    if not s.queue:
                        continue
                    head = s.queue[0]
                    if s.free_at > t or head.submit > t:
                        continue
                    if head.kind == "wait" and head.record is not None and not head.record.done:
                        continue
                    s.queue.popleft()
                    s.cur = op = head
                    self._start(s, head)
                    progressed = True
                kind = op.kind
                if kind == "xfer":
                    if t < op.phase_end:
                        continue
                    for f in op.flows:
                        if not f.remaining <= 0:
                            break
                    else:  # drained
                        self._finish(s, op)
                        progressed = True
                elif (
                    kind == "record"
                    or kind == "wait"
                    or (
                        (kind == "fixed" or kind == "plugin") and op.end is not None and op.end <= t
                    )
                ):
                    self._finish(s, op)
                    progressed = True
