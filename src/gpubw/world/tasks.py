"""Simulated ranks as tasks taking turns on one thread: the collectives of a simulated rack.

A rack of N ranks emulated by N threads pays for every collective with a round through
every rank thread under the GIL (each wake-up an operating-system thread switch, slow on a
loaded machine), so a cell of a multinode testcase cost O(N) switches per agreement point.
Here every rank is a greenlet (a stackful coroutine) of one thread, the *rank thread*, and
the ranks take turns: a rank runs until it reaches a collective, leaves its pickled value
there and parks (a greenlet switch, ~1 µs, no system call); the **last** rank to arrive
computes the answer **once** (values unpickled once; ``on_step`` called once, while every
other rank is parked) and makes every rank ready again, in rank order. Ranks therefore run
in a fixed order between two collectives: a run is deterministic.

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
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import greenlet

from gpubw.world.base import CollectiveExpired, WorldError

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

    def result(self, rank: int, name: str, deadline: float) -> list:
        """This rank's copy of the values, or the failure raised."""
        if self.failure is not None:
            raise self.failure(rank, name)
        if self.last_arrival > deadline:
            late = sorted(r for r, t in self.arrivals.items() if t > deadline)
            raise CollectiveExpired(f"no contribution from {_ranks(late)}")
        if self.values is not None:
            return list(self.values)
        assert self.blob is not None
        return pickle.loads(self.blob)


class TaskHub:
    """The rendezvous and the turns of one simulated world whose ranks are greenlets of one
    thread (see the module docstring). :meth:`run` is that thread's loop."""

    def __init__(
        self,
        size: int,
        on_step: Callable[[int, str], None] | None = None,
        stop: Callable[[], BaseException | None] | None = None,
    ) -> None:
        self.size = size
        self.on_step = on_step
        self.stop = stop
        self._loop: greenlet.greenlet | None = None
        self._ready: deque[tuple[greenlet.greenlet, Any]] = deque()
        #: the collective in progress: rank -> (name, pickled value, arrival), and the
        #: greenlets parked in it
        self._arrived: dict[int, tuple[str, bytes, float]] = {}
        self._parked: dict[int, greenlet.greenlet] = {}
        #: rank -> why it left (its function returned or raised)
        self.departed: dict[int, str] = {}
        #: Ctrl-C in the waiting thread: every rank raises it at its next collective
        self.interruption: BaseException | None = None
        #: what ``stop`` returned (once): interruptible ranks raise it at their collectives
        self.stopped: BaseException | None = None
        #: collectives completed (every rank took part once in each)
        self.steps = 0

    # -- the rank thread's loop -----------------------------------------------------------
    def run(self, body: Callable[[Any], None], worlds: Sequence[Any]) -> None:
        """Run ``body(world)`` for every world, each in its own greenlet, taking turns,
        until every one has returned (``body`` must not raise)."""
        self._loop = greenlet.getcurrent()
        for w in worlds:
            self._ready.append((greenlet.greenlet(body, parent=self._loop), w))
        while self._ready or self._parked:
            if not self._ready:
                self._stalled()
                continue
            task, value = self._ready.popleft()
            task.switch(value)

    def _stalled(self) -> None:
        """No rank can run, yet some wait in a collective: a rank that is neither ready nor
        parked was lost (a bug). Fail the waiting ones rather than wait for ever."""
        missing = [r for r in range(self.size) if r not in self._arrived]
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
        assert self._loop is not None
        self._ready.append((greenlet.getcurrent(), None))
        self._loop.switch()
        return True

    # -- collectives ------------------------------------------------------------------------
    def exchange(
        self,
        rank: int,
        seq: int,
        name: str,
        value: Any,
        deadline: float,
        interruptible: bool = False,
    ) -> list:
        """Every rank's ``value``, by rank, once every rank has called this for step
        ``seq`` (see the module docstring for what fails it)."""
        self._check_interrupted(interruptible)
        data = pickle.dumps(value)
        if self.departed:
            self._check_departed(rank, name)
        self._arrived[rank] = (name, data, time.monotonic())
        self._parked[rank] = greenlet.getcurrent()
        if len(self._arrived) == self.size:
            self._complete(seq)
        assert self._loop is not None
        answer: _Answer = self._loop.switch()
        self._check_interrupted(interruptible)
        return answer.result(rank, name, deadline)

    def _check_interrupted(self, interruptible: bool) -> None:
        exc = self.interruption
        if exc is None and interruptible:
            exc = self.stopped
        if exc is not None:
            if self._parked:  # they raise it too, at once
                self._fail_parked(lambda rank, name: again(exc))
            raise again(exc)  # one instance per rank (its own traceback)

    def _check_departed(self, rank: int, name: str) -> None:
        gone = [r for r in sorted(self.departed) if r not in self._arrived and r != rank]
        if gone:
            raise _left(gone[0], self.departed[gone[0]])(rank, name)

    def _complete(self, seq: int) -> None:
        """The last rank arrived: the answer, once, for every rank; every rank ready again
        (in rank order)."""
        arrived, self._arrived = self._arrived, {}
        parked, self._parked = self._parked, {}
        answer = _Answer()
        names = {n for n, _, _ in arrived.values()}
        if len(names) > 1:
            calls = ", ".join(f"rank {r} {arrived[r][0]}" for r in sorted(arrived))
            text = f"the ranks called different collectives at step {seq} ({calls}): a protocol bug"
            answer.failure = lambda rank, _name: WorldError(f"rank {rank}: {text}")
        else:
            self._fill(answer, arrived, seq, names.pop())
        self.steps += 1
        for r in range(self.size):
            self._ready.append((parked[r], answer))

    def _fill(
        self, answer: _Answer, arrived: dict[int, tuple[str, bytes, float]], seq: int, name: str
    ) -> None:
        """The values of a completed collective (and the step's hooks: ``stop``, ``on_step``)."""
        try:
            if self.stopped is None and self.stop is not None:
                self.stopped = self.stop()
            if self.on_step is not None:
                self.on_step(seq, name)
        except Exception as exc:  # every rank raises it, instead of waiting for ever
            error = exc
            answer.failure = lambda _rank, _name: again(error)
            return
        answer.arrivals = {r: a[2] for r, a in arrived.items()}
        answer.last_arrival = max(answer.arrivals.values())
        datas = [arrived[r][1] for r in range(self.size)]
        if all(d == _NONE for d in datas):
            answer.values = [None] * self.size
            return
        values = [pickle.loads(d) for d in datas]
        if all(_frozen(v) for v in values):
            answer.values = values
        else:
            answer.blob = pickle.dumps(values)

    def _fail_parked(self, failure: Callable[[int, str], BaseException]) -> None:
        """Every rank parked in the collective in progress raises ``failure(rank, name)``."""
        answer = _Answer()
        answer.failure = failure
        parked, self._parked = self._parked, {}
        self._arrived = {}
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
        if self._parked and rank not in self._arrived:
            gone = min(r for r in self.departed if r not in self._arrived)
            self._fail_parked(_left(gone, self.departed[gone]))


def _left(gone: int, why: str) -> Callable[[int, str], BaseException]:
    """The failure of a collective that rank ``gone`` will never reach."""
    return lambda rank, name: WorldError(
        f"rank {rank}: {name} cannot complete: rank {gone} left the world ({why})"
    )
