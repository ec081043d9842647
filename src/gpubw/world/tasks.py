"""Simulated ranks as tasks that take turns, one at a time: the collectives of a simulated rack.

A rack of N ranks emulated by N free-running threads paid for every collective with a round
through every rank thread under the GIL (each collective woke all N waiting threads, which
then fought for the GIL and the condition's lock), so a cell of a multinode testcase cost
O(N) wake-ups per rank at every agreement point. Here every rank is still a thread of its
own (a real stack: the real multinode code path runs unchanged, and only the standard
library is needed), but the ranks pass **one baton**: exactly one rank runs at a time, and
a rank runs until it reaches a collective, leaves its pickled value there, hands the baton
straight to the next ready rank (one lock released: one wake-up) and parks on its own lock.
The **last** rank to arrive computes the answer **once** (values unpickled once;
``on_step`` called once, while every other rank is parked) and makes every rank ready
again, in rank order. A collective thus costs one wake-up per rank: O(1) per rank, whatever
N. Ranks run in a fixed order between two collectives: a run is deterministic.

A collective of a group of ranks (:meth:`gpubw.world.base.World.group_allgather`: a
multinode cell's ranks) is a rendezvous of its own, keyed by the group and its step; it
completes when the group's last member arrives, and only the members take turns in it.

What the thread hub (:class:`gpubw.world.simulated._Hub`) promises holds here too: values
travel pickled (a rank never holds another rank's mutable object), ranks calling different
collectives at one step is an error, a rank that left (its function returned or raised)
fails the others' collectives at once, naming it, and a collective whose last rank arrived
after a waiting rank's deadline fails that rank with :class:`CollectiveExpired`. A rank
that blocks the thread (a real hang) blocks every rank: :class:`SimulatedCluster` (the
caller) then reports the ranks still running as hung, as it does for threads.

Interruptions come two ways: :meth:`TaskHub.interrupt` (Ctrl-C in the thread that waits
for the rack: every rank raises it at its next collective) and ``stop`` (a signal the run's
guard recorded; polled once per completed collective, so every rank sees it at the same
step): a rank raises that one only at a collective made while it runs a testcase
(``interruptible``), where a single process's signal guard would interrupt it too.
"""

from __future__ import annotations

import pickle
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from gpubw.world.base import OUT_OF_STEP, CollectiveExpired, Contribution, WorldError

#: what a rank that contributes None sends (the common case: every status agreement)
_NONE = pickle.dumps(None)
#: types whose values ranks may share without copying (immutable all the way down)
_ATOMS = (type(None), bool, int, float, str, bytes)


def _frozen(value: Any) -> bool:
    """Whether ``value`` is immutable all the way down (one object may serve every rank)."""
    kind = type(value)
    if kind in _ATOMS:
        return True
    return kind is tuple and all(_frozen(v) for v in value)


def again(exc: BaseException) -> BaseException:
    """A fresh instance of ``exc`` for one rank (its own traceback), with its arguments and
    attributes (``copy.copy`` would call the constructor with ``args``, which is wrong for
    an exception whose constructor builds its message)."""
    new = exc.__class__.__new__(exc.__class__)
    new.__dict__.update(exc.__dict__)
    new.args = exc.args
    return new


def _ranks(ranks: Sequence[int]) -> str:
    return "rank(s) " + ", ".join(str(r) for r in ranks)


class _Answer:
    """What one completed collective gives every rank: its values (one list shared when
    immutable, else one pickle each rank loads), or why it failed."""

    __slots__ = ("arrivals", "blob", "failure", "last_arrival", "values")

    def __init__(self) -> None:
        self.values: list[Any] | None = None
        self.blob: bytes | None = None
        self.failure: Callable[[int, str], BaseException] | None = None
        self.last_arrival = 0.0
        self.arrivals: dict[int, float] = {}

    def result(self, rank: int, name: str, deadline: float) -> list[Any]:
        """This rank's copy of the values, or the failure raised."""
        if self.failure is not None:
            raise self.failure(rank, name)
        if self.last_arrival > deadline:
            late = sorted(r for r, t in self.arrivals.items() if t > deadline)
            raise CollectiveExpired(f"no contribution from {_ranks(late)}")
        if self.values is not None:
            return list(self.values)
        assert self.blob is not None
        values: list[Any] = pickle.loads(self.blob)
        return values


class _Rendezvous:
    """One collective in progress: its members, and for each member that arrived its
    (name, pickled value, arrival time) and its parked task."""

    __slots__ = ("arrived", "members", "parked")

    def __init__(self, members: tuple[int, ...]) -> None:
        self.members = members
        self.arrived: dict[int, tuple[str, bytes, float]] = {}
        self.parked: dict[int, _Task] = {}

    def missing(self) -> list[int]:
        return [r for r in self.members if r not in self.arrived]


class _Task:
    """One rank's thread and its turn: ``go`` is held (locked) while the rank waits for the
    baton; whoever hands it the baton leaves the value it resumes with in ``value``."""

    __slots__ = ("go", "rank", "value")

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.go = threading.Lock()
        self.go.acquire()
        self.value: Any = None


class TaskHub:
    """The rendezvous and the turns of one simulated world whose ranks are threads that
    pass one baton (see the module docstring; a :class:`~gpubw.world.base.Hub`). :meth:`run`
    starts them and waits."""

    def __init__(
        self,
        size: int,
        on_step: Callable[[int, str], None] | None = None,
        stop: Callable[[], BaseException | None] | None = None,
        on_group: Callable[[tuple[int, ...]], None] | None = None,
    ) -> None:
        self.size = size
        self.on_step = on_step
        self.on_group = on_group
        self.stop = stop
        self._everyone = tuple(range(size))
        #: the rank that holds the baton (the one running), and the ranks waiting for it
        self._running: _Task | None = None
        self._ready: deque[tuple[_Task, Any]] = deque()
        self._done = threading.Event()
        #: the collectives in progress, by (group or None for the world, step)
        self._pending: dict[tuple[tuple[int, ...] | None, int], _Rendezvous] = {}
        #: rank -> why it left (its function returned or raised)
        self.departed: dict[int, str] = {}
        #: Ctrl-C in the waiting thread: every rank raises it at its next collective
        self.interruption: BaseException | None = None
        #: what ``stop`` returned (once): interruptible ranks raise it at their collectives
        self.stopped: BaseException | None = None
        #: collectives completed (of the world, and of groups)
        self.steps = 0
        #: turns taken: the baton handed to a rank (about one per member per collective: a
        #: collective costs no round through the other ranks)
        self.turns = 0

    # -- the turns ---------------------------------------------------------------------------
    def run(self, body: Callable[[Any], None], worlds: Sequence[Any]) -> None:
        """Run ``body(world)`` for every world, each in a thread of its own, one at a time
        (in rank order at first), until every one has returned (``body`` must not raise).
        A rank that blocks for good holds the baton: this then waits for ever (the caller
        runs it in a daemon thread, and reports the ranks that never ended as hung)."""
        tasks = [_Task(r) for r in range(len(worlds))]
        threads = [
            threading.Thread(
                target=self._main, args=(t, body, w), name=f"gpubw-rank-{t.rank}", daemon=True
            )
            for t, w in zip(tasks, worlds)
        ]
        for t in threads:
            t.start()  # each waits for its first turn
        self._ready.extend((t, None) for t in tasks)
        if self._ready:
            self._hand_on()
            self._done.wait()

    def _main(self, task: _Task, body: Callable[[Any], None], world: Any) -> None:
        """A rank's thread: its first turn, ``body``, then the baton to the next rank."""
        task.go.acquire()
        try:
            body(world)
        finally:
            self._leave_turns()

    def _leave_turns(self) -> None:
        """The running rank has ended: the baton to the next ready rank, or the run is over."""
        if not self._ready and self._pending:
            self._stalled()
        if self._ready:
            self._hand_on()
        else:
            self._running = None
            self._done.set()

    def _hand_on(self) -> None:
        """The baton to the first ready rank (called by the rank that holds it)."""
        task, value = self._ready.popleft()
        task.value = value
        self._running = task
        self.turns += 1
        task.go.release()

    def _switch(self) -> Any:
        """The running rank (already parked or made ready again) waits for its next turn,
        the baton handed on; returns the value it resumes with."""
        me = self._running
        assert me is not None
        if not self._ready:
            self._stalled()
        if self._ready[0][0] is me:  # its own turn again: no thread switch
            _, value = self._ready.popleft()
            self.turns += 1
            return value
        self._hand_on()
        me.go.acquire()
        return me.value

    def _stalled(self) -> None:
        """No rank can run, yet some wait in a collective: a rank that is neither ready nor
        parked was lost (a bug). Fail the waiting ones rather than wait for ever."""
        missing = sorted({r for rv in self._pending.values() for r in rv.missing()})
        self._fail_parked(
            lambda rank, name: WorldError(
                f"rank {rank}: {name} cannot complete: {_ranks(missing)} can no longer run"
            )
        )

    def pause(self) -> bool:
        """Let the other ranks that are ready run (each until it parks), then come back;
        False at once when none is ready (nothing this rank waits for can happen)."""
        if not self._ready:
            return False
        assert self._running is not None
        self._ready.append((self._running, None))
        self._switch()
        return True

    # -- collectives ------------------------------------------------------------------------
    def exchange(self, c: Contribution) -> list[Any]:
        """Every member's value, in member order, once every member of ``c.group`` (None:
        every rank) has contributed to that group's step ``c.seq`` (see the module
        docstring for what fails it)."""
        rank, seq, name, group = c.rank, c.seq, c.name, c.group
        self._check_interrupted(c.interruptible)
        data = pickle.dumps(c.value)
        key = (group, seq)
        rv = self._pending.get(key)
        if rv is None:
            rv = self._pending[key] = _Rendezvous(self._everyone if group is None else group)
        if self.departed:
            self._check_departed(rank, name, rv)
        rv.arrived[rank] = (name, data, time.monotonic())
        assert self._running is not None and self._running.rank == rank
        rv.parked[rank] = self._running
        if len(rv.arrived) == len(rv.members):
            del self._pending[key]
            self._complete(rv, seq, group)
        answer: _Answer = self._switch()
        self._check_interrupted(c.interruptible)
        return answer.result(rank, name, c.deadline)

    def _check_interrupted(self, interruptible: bool) -> None:
        exc = self.interruption
        if exc is None and interruptible:
            exc = self.stopped
        if exc is not None:
            if self._pending:  # they raise it too, at once
                self._fail_parked(lambda rank, name: again(exc))
            raise again(exc)  # one instance per rank (its own traceback)

    def _check_departed(self, rank: int, name: str, rv: _Rendezvous) -> None:
        gone = [r for r in sorted(self.departed) if r in rv.missing() and r != rank]
        if gone:
            raise _left(gone[0], self.departed[gone[0]])(rank, name)

    def _complete(self, rv: _Rendezvous, seq: int, group: tuple[int, ...] | None) -> None:
        """The last member arrived: the answer, once, for every member; every member ready
        again (in rank order)."""
        arrived = rv.arrived
        answer = _Answer()
        names = {n for n, _, _ in arrived.values()}
        if len(names) > 1:
            calls = ", ".join(f"rank {r} {arrived[r][0]}" for r in sorted(arrived))
            text = f"the ranks called different collectives at step {seq} ({calls}): {OUT_OF_STEP}"
            answer.failure = lambda rank, _name: WorldError(f"rank {rank}: {text}")
        else:
            self._fill(answer, rv, seq, group, names.pop())
        self.steps += 1
        for r in rv.members:
            self._ready.append((rv.parked[r], answer))

    def _fill(
        self,
        answer: _Answer,
        rv: _Rendezvous,
        seq: int,
        group: tuple[int, ...] | None,
        name: str,
    ) -> None:
        """The values of a completed collective (and the step's hooks: ``stop``, and
        ``on_step`` for the world's or ``on_group`` for a group's)."""
        try:
            if self.stopped is None and self.stop is not None:
                self.stopped = self.stop()
            if group is None and self.on_step is not None:
                self.on_step(seq, name)
            elif group is not None and self.on_group is not None:
                self.on_group(group)
        except Exception as exc:  # every rank raises it, instead of waiting for ever
            error = exc
            answer.failure = lambda _rank, _name: again(error)
            return
        answer.arrivals = {r: a[2] for r, a in rv.arrived.items()}
        answer.last_arrival = max(answer.arrivals.values())
        datas = [rv.arrived[r][1] for r in rv.members]
        if all(d == _NONE for d in datas):
            answer.values = [None] * len(datas)
            return
        values = [pickle.loads(d) for d in datas]
        if all(_frozen(v) for v in values):
            answer.values = values
        else:
            answer.blob = pickle.dumps(values)

    def _fail_parked(
        self,
        failure: Callable[[int, str], BaseException],
        which: Callable[[_Rendezvous], bool] = lambda rv: True,
    ) -> None:
        """Every rank parked in a collective in progress (``which`` of them: all by
        default) raises ``failure(rank, name)``, in rank order."""
        failed = {k: rv for k, rv in self._pending.items() if which(rv)}
        if not failed:
            return
        answer = _Answer()
        answer.failure = failure
        parked: dict[int, _Task] = {}
        for key, rv in failed.items():
            del self._pending[key]
            parked.update(rv.parked)
        for r in sorted(parked):
            self._ready.append((parked[r], answer))

    # -- from outside the collectives -------------------------------------------------------
    def interrupt(self, exc: BaseException) -> None:
        """Every rank raises ``exc`` at its next collective (may be called from any thread:
        the ranks notice it at their next collective)."""
        self.interruption = exc

    def leave(self, rank: int, why: str) -> None:
        """``rank`` has left the world: a collective it never reached fails at once."""
        self.departed.setdefault(rank, why)  # the first reason (abort) is the real one
        for rv in list(self._pending.values()):
            if rank in rv.missing():
                gone = min(r for r in self.departed if r in rv.missing())
                self._fail_parked(_left(gone, self.departed[gone]), _this(rv))


def _this(rv: _Rendezvous) -> Callable[[_Rendezvous], bool]:
    """Selects ``rv`` alone (of the collectives in progress)."""
    return lambda other: other is rv


def _left(gone: int, why: str) -> Callable[[int, str], BaseException]:
    """The failure of a collective that rank ``gone`` will never reach."""
    return lambda rank, name: WorldError(
        f"rank {rank}: {name} cannot complete: rank {gone} left the world ({why})"
    )
