"""N ranks emulated in one process: one thread per rank, collectives through a shared hub.

So that CI exercises the multinode protocol without MPI. The hub behaves like MPI where it
matters to gpubw: values are copied by pickling (a rank never sees another rank's objects),
every collective is bounded by the same timeouts, and ranks calling different collectives at
the same step is an error. Unlike MPI it also notices a rank that *left* (its function
returned or raised while others still wait) and fails the waiting ranks at once, naming it.

Ranks are threads, each free to block (the tests of hung and late ranks), or, with
``cooperative=True`` (a simulated rack: :func:`gpubw.runner.simulation.run_rack`), tasks
that pass one baton, one running at a time (:mod:`gpubw.world.tasks`), whose collectives
cost one wake-up per rank: the same protocol, deterministic, at a fraction of the cost.

    cluster = SimulatedCluster([4, 4])          # 2 hosts x 4 ranks
    outcomes = cluster.run(lambda world: world.allreduce(world.rank, "sum"))
    assert [o.value for o in outcomes] == [28] * 8
"""

from __future__ import annotations

import math
import pickle
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import attrs

from gpubw.world.base import (
    DEFAULT_TIMEOUT_S,
    OUT_OF_STEP,
    CollectiveExpired,
    Contribution,
    Hub,
    World,
    WorldError,
)
from gpubw.world.tasks import TaskHub, again

T = TypeVar("T")


def _ranks(missing: Sequence[int]) -> str:
    return "rank(s) " + ", ".join(str(r) for r in missing)


class _Hub:
    """The rendezvous of one simulated world whose ranks are free threads (a
    :class:`~gpubw.world.base.Hub`): contributions per collective step (of the world, or of
    a group of ranks: keyed by the group and its step)."""

    def __init__(
        self,
        size: int,
        on_step: Callable[[int, str], None] | None = None,
        on_group: Callable[[tuple[int, ...]], None] | None = None,
    ) -> None:
        self.size = size
        self.on_step = on_step
        self.on_group = on_group
        self.cond = threading.Condition()
        #: step (or (group, step)) -> rank -> (collective name, pickled value)
        self.slots: dict[Any, dict[int, tuple[str, bytes]]] = {}
        self.taken: dict[Any, int] = {}
        #: rank -> why it left (its function returned or raised)
        self.departed: dict[int, str] = {}
        #: Ctrl-C / SIGTERM that reached the process: every rank raises it at its collectives
        self.interruption: BaseException | None = None
        #: a stop (``SimulatedCluster.run``'s ``stop``) is for ranks that take turns: never here
        self.stopped: BaseException | None = None

    def exchange(self, c: Contribution) -> list[Any]:
        rank, seq, name, group = c.rank, c.seq, c.name, c.group
        members = tuple(range(self.size)) if group is None else group
        key: Any = seq if group is None else (group, seq)
        data = pickle.dumps(c.value)
        with self.cond:
            self._check_interrupted()
            slot = self.slots.setdefault(key, {})
            slot[rank] = (name, data)
            if len(slot) == len(members):
                # the last rank to arrive: every other member is blocked in this step
                if group is None and self.on_step is not None:
                    self.on_step(seq, name)
                elif group is not None and self.on_group is not None:
                    self.on_group(group)
            self.cond.notify_all()
            while len(slot) < len(members):
                self._wait_for(slot, members, rank, name, c.deadline)
            names = {r: n for r, (n, _) in slot.items()}
            if len(set(names.values())) > 1:
                calls = ", ".join(f"rank {r} {n}" for r, n in sorted(names.items()))
                raise WorldError(
                    f"rank {rank}: the ranks called different collectives at step {seq} "
                    f"({calls}): {OUT_OF_STEP}"
                )
            values = [pickle.loads(slot[r][1]) for r in members]
            self.taken[key] = self.taken.get(key, 0) + 1
            if self.taken[key] == len(members):
                del self.slots[key], self.taken[key]
            return values

    def _wait_for(
        self,
        slot: dict[int, tuple[str, bytes]],
        members: tuple[int, ...],
        rank: int,
        name: str,
        deadline: float,
    ) -> None:
        """One wait (holding ``cond``) for the members missing from ``slot``: raise if one
        left or the deadline passed."""
        self._check_interrupted()
        missing = [r for r in members if r not in slot]
        gone = [r for r in missing if r in self.departed]
        if gone:
            raise WorldError(
                f"rank {rank}: {name} cannot complete: rank {gone[0]} left the world "
                f"({self.departed[gone[0]]})"
            )
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise CollectiveExpired(f"no contribution from {_ranks(missing)}")
        self.cond.wait(remaining)

    def _check_interrupted(self) -> None:
        if self.interruption is not None:
            raise again(self.interruption)  # one instance per rank (own traceback)

    def interrupt(self, exc: BaseException) -> None:
        with self.cond:
            self.interruption = exc
            self.cond.notify_all()

    def leave(self, rank: int, why: str) -> None:
        with self.cond:
            self.departed.setdefault(rank, why)  # the first reason (abort) is the real one
            self.cond.notify_all()


class SimulatedWorld(World):
    """One rank of a :class:`SimulatedCluster`; use it only from that rank's thread."""

    kind = "simulated"

    def __init__(
        self,
        hub: Hub,
        rank: int,
        rank_hosts: Sequence[int],
        host_names: Sequence[str],
        timeout_s: float,
    ) -> None:
        super().__init__(rank, hub.size, rank_hosts, host_names, timeout_s)
        self._hub = hub
        #: True while the rank runs a testcase (set by the run's signal view): a stop that
        #: the cluster's ``stop`` reports is raised at this rank's collectives only then
        self.interruptible = False

    @property
    def stopped(self) -> BaseException | None:
        """What the cluster's ``stop`` reported (seen by every rank at the same step), or
        None; always None for ranks as threads."""
        return self._hub.stopped

    def _exchange(self, seq: int, name: str, value: Any, deadline: float) -> list[Any]:
        part = Contribution(self.rank, seq, name, value, deadline, self.interruptible)
        return self._hub.exchange(part)

    def _group_exchange(
        self, name: str, group: tuple[int, ...], seq: int, value: Any, deadline: float
    ) -> list[Any]:
        part = Contribution(self.rank, seq, name, value, deadline, self.interruptible, group)
        return self._hub.exchange(part)

    def _barrier(self, name: str, seq: int, deadline: float) -> None:
        self._exchange(seq, name, None, deadline)

    def _bcast(self, name: str, seq: int, value: Any, root: int, deadline: float) -> Any:
        mine = value if self.rank == root else None
        return self._exchange(seq, name, mine, deadline)[root]

    def _gather(
        self, name: str, seq: int, value: Any, root: int, deadline: float
    ) -> list[Any] | None:
        values = self._exchange(seq, name, value, deadline)
        return values if self.rank == root else None

    def _allgather(self, name: str, seq: int, value: Any, deadline: float) -> list[Any]:
        return self._exchange(seq, name, value, deadline)

    def _end_broken(self, exit_code: int) -> None:
        """Leave the world (the other ranks' waits end at once, as MPI_Abort would end
        them); the thread carries on, so that its caller can return ``exit_code``."""
        self._hub.leave(self.rank, f"closed a broken world (exit code {exit_code})")

    def abort(self, exit_code: int = 1) -> None:
        """Leave the world (the other ranks fail at their next collective), then end this
        rank's thread with SystemExit."""
        self._hub.leave(self.rank, f"aborted with exit code {exit_code}")
        raise SystemExit(exit_code)


@attrs.frozen
class RankOutcome(Generic[T]):
    """How one rank's function ended: its value, its exception, or still running (hung)."""

    rank: int
    value: T | None = None
    error: BaseException | None = None
    hung: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and not self.hung


class SimulatedCluster:
    """N ranks on hosts of given sizes, emulated in this process.

    ``hosts`` is the number of ranks on each host (``[4] * 18`` for an NVL72 rack) or, as an
    int, the number of ranks on one host. Ranks are numbered host by host, as ``mpirun``
    places them by default. ``cooperative``: the ranks' threads take turns, one running at a
    time (:mod:`gpubw.world.tasks`), instead of running freely.

    A Ctrl-C or SIGTERM (InterruptedRun) that reaches the thread in :meth:`run` is raised in
    every rank at its next collective, then re-raised by :meth:`run`.

    ``on_step(step, name)``, if given, is called once per completed collective, by the last
    rank to arrive, while every other rank is still blocked in it: a deterministic point at
    which a shared simulated engine can line up the ranks' clocks; ``on_group(ranks)`` is
    the same for a collective of a group of ranks (:meth:`World.group_allgather`)."""

    def __init__(
        self,
        hosts: Sequence[int] | int,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        host_names: Sequence[str] | None = None,
        on_step: Callable[[int, str], None] | None = None,
        cooperative: bool = False,
        on_group: Callable[[tuple[int, ...]], None] | None = None,
    ) -> None:
        per_host = [hosts] if isinstance(hosts, int) else list(hosts)
        if not per_host or any(n < 1 for n in per_host):
            raise ValueError(f"hosts must be one or more rank counts >= 1, got {hosts!r}")
        names = list(host_names) if host_names is not None else None
        if names is None:
            names = [f"simhost{h:02d}" for h in range(len(per_host))]
        if len(names) != len(per_host) or len(set(names)) != len(names):
            raise ValueError(f"host_names must be {len(per_host)} distinct names, got {names}")
        self.rank_hosts = tuple(h for h, n in enumerate(per_host) for _ in range(n))
        self.host_names = tuple(names)
        self.size = len(self.rank_hosts)
        self.timeout_s = timeout_s
        self.on_step = on_step
        self.on_group = on_group
        self.cooperative = cooperative
        #: the hub of the cooperative run in progress (or last run)
        self.tasks: TaskHub | None = None

    def _connected(self, hub: Hub) -> list[SimulatedWorld]:
        return [
            SimulatedWorld(hub, r, self.rank_hosts, self.host_names, self.timeout_s)
            for r in range(self.size)
        ]

    def worlds(self) -> list[SimulatedWorld]:
        """A fresh set of connected worlds, one per rank (for a caller's own threads)."""
        return self._connected(_Hub(self.size, self.on_step, self.on_group))

    def pause(self) -> bool:
        """From a rank of a cooperative run: let the other ranks that are ready take their
        turns first; False when none is (see :meth:`gpubw.world.tasks.TaskHub.pause`)."""
        return self.tasks.pause() if self.tasks is not None else False

    def run(
        self,
        fn: Callable[[SimulatedWorld], T],
        join_timeout_s: float | None = None,
        stop: Callable[[], BaseException | None] | None = None,
    ) -> list[RankOutcome[T]]:
        """Run ``fn(world)`` on every rank and return how each ended.

        A rank still running after ``join_timeout_s`` (default: twice the collective bound)
        is reported ``hung``; its thread is a daemon and is left behind, never waited for.
        ``join_timeout_s=math.inf`` waits for rank 0 however long it runs (a whole run: every
        collective it makes is bounded), then for the others up to twice the bound.
        ``stop`` (cooperative runs only), polled once per completed collective: once it
        returns an exception, every rank raises it at its collectives while it is
        ``interruptible`` (:attr:`SimulatedWorld.interruptible`)."""
        if self.cooperative:
            return self._run_tasks(fn, join_timeout_s, stop)
        if stop is not None:
            raise ValueError("stop= needs a cooperative cluster")
        return self._run_threads(fn, join_timeout_s)

    def _run_tasks(
        self,
        fn: Callable[[SimulatedWorld], T],
        join_timeout_s: float | None,
        stop: Callable[[], BaseException | None] | None,
    ) -> list[RankOutcome[T]]:
        """:meth:`run` with the ranks taking turns (:class:`gpubw.world.tasks.TaskHub`)."""
        hub = self.tasks = TaskHub(self.size, self.on_step, stop, self.on_group)
        outcomes: list[RankOutcome[T] | None] = [None] * self.size
        root_done = threading.Event()
        body = _rank_body(fn, hub, outcomes, root_done)
        thread = threading.Thread(
            target=hub.run, args=(body, self._connected(hub)), name="gpubw-ranks", daemon=True
        )
        self._wait(hub, [thread], join_timeout_s, root_done)
        return [o if o is not None else RankOutcome(r, hung=True) for r, o in enumerate(outcomes)]

    def _run_threads(
        self, fn: Callable[[SimulatedWorld], T], join_timeout_s: float | None
    ) -> list[RankOutcome[T]]:
        """:meth:`run` with one thread per rank."""
        worlds = self.worlds()
        hub = worlds[0]._hub
        outcomes: list[RankOutcome[T] | None] = [None] * self.size
        root_done = threading.Event()
        body = _rank_body(fn, hub, outcomes, root_done)
        threads = [
            threading.Thread(target=body, args=(w,), name=f"gpubw-rank-{w.rank}", daemon=True)
            for w in worlds
        ]
        self._wait(hub, threads, join_timeout_s, root_done)
        return [o if o is not None else RankOutcome(r, hung=True) for r, o in enumerate(outcomes)]

    def _wait(
        self,
        hub: Hub,
        threads: Sequence[threading.Thread],
        join_timeout_s: float | None,
        root_done: threading.Event,
    ) -> None:
        """Start ``threads`` and wait for them (see :meth:`run`), interruptibly."""
        bound = 2 * self.timeout_s if join_timeout_s is None else join_timeout_s
        try:
            for t in threads:
                t.start()
            if math.isinf(bound):
                while not root_done.wait(0.05) and any(t.is_alive() for t in threads):
                    pass
                bound = 2 * self.timeout_s
            _join(threads, time.monotonic() + bound)
        except BaseException as exc:
            # Ctrl-C/SIGTERM arrive in this (main) thread: pass them to every rank, at its
            # next collective, as MPI launchers forward them to every rank; give the ranks
            # one collective bound to write what they have, then re-raise.
            hub.interrupt(exc)
            _join([t for t in threads if t.ident is not None], time.monotonic() + self.timeout_s)
            raise


def _rank_body(
    fn: Callable[[SimulatedWorld], T],
    hub: Hub,
    outcomes: list[RankOutcome[T] | None],
    root_done: threading.Event,
) -> Callable[[SimulatedWorld], None]:
    """What each rank's thread runs: ``fn``, its outcome kept in ``outcomes``, then the rank
    leaves the hub (rank 0 also sets ``root_done``)."""

    def body(world: SimulatedWorld) -> None:
        outcomes[world.rank], why = _outcome(fn, world)
        hub.leave(world.rank, why)
        if world.rank == 0:
            root_done.set()

    return body


def _outcome(
    fn: Callable[[SimulatedWorld], T], world: SimulatedWorld
) -> tuple[RankOutcome[T], str]:
    """How ``fn(world)`` ended, and why the rank leaves the world (never raises)."""
    try:
        value = fn(world)
    except BaseException as exc:  # a rank's failure is its outcome, never lost
        return RankOutcome(world.rank, error=exc), f"{type(exc).__name__}: {exc}"
    return RankOutcome(world.rank, value=value), "it finished"


def _join(threads: Sequence[threading.Thread], deadline: float) -> None:
    """Join until every thread ended or ``deadline``, in short slices so that a signal
    reaches the joining thread promptly."""
    while True:
        alive = [t for t in threads if t.is_alive()]
        remaining = deadline - time.monotonic()
        if not alive or remaining <= 0:
            return
        alive[0].join(min(0.05, remaining))
