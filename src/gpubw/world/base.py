"""The world of ranks a run belongs to, and the bounded collectives the protocol needs.

A :class:`World` knows its rank, the world size, where it sits on its host (local rank and
local size, counted in rank order among the ranks sharing the host's memory) and the host
layout of every rank. Its collectives (barrier, bcast, gather to a root, allgather,
allreduce, and :meth:`World.agree` on a status) are *bounded in time*: a rank that died or
hangs makes the others raise :class:`WorldTimeoutError` after ``timeout_s`` instead of
waiting forever. After any :class:`WorldError` the world is *broken*: every later
collective raises at once (naming the first failure), so one dead rank costs one timeout,
not one per remaining collective (an exception or Ctrl-C inside a collective breaks it too).
A broken world cannot be shut down cleanly: the caller writes what it has, then every rank
calls :meth:`World.close` last, which ends the run (MPI_Abort) when the world is broken.

Every rank must call the same collectives in the same order. Values travel pickled (as over
MPI), so they must be picklable and small: handles, figures, statuses, not buffers.

**Groups.** :meth:`World.group_allgather` and :meth:`World.group_agree` are the same bounded
collectives among some ranks only (a sorted tuple of ranks, this one among them); the other
ranks take no part and do not wait. Every member of a group must call that group's
collectives in the same order (each group counts its own steps); they may interleave with
the world's and other groups' collectives as the program's order has it. A multinode cell
agrees among the ranks that copy in it, not the whole world
(:mod:`gpubw.measure.series`).

Implementations: :class:`SingleWorld` (one process, size 1, here), ``MpiWorld``
(:mod:`gpubw.world.mpi`, imports mpi4py) and ``SimulatedWorld``
(:mod:`gpubw.world.simulated`, N ranks as threads of one process), whose ranks meet at a
:class:`Hub` (each rank's part of a step a :class:`Contribution`).
"""

from __future__ import annotations

import abc
import contextlib
import operator
import os
import socket
import time
from collections.abc import Callable, Sequence
from functools import reduce
from typing import Any, Literal, Protocol

import attrs

from gpubw.model.errors import GpubwError
from gpubw.world.launch_env import rank_device

#: Default bound of one collective, in seconds. Long waits (a rank waiting while another
#: measures) must pass their own ``timeout_s``.
DEFAULT_TIMEOUT_S = 60.0

ReduceOp = Literal["max", "min", "sum"]
_REDUCERS: dict[str, Callable[[Any, Any], Any]] = {
    "max": max,
    "min": min,
    "sum": operator.add,
}

#: nvbandwidth's warning when a host runs more ranks than it has GPUs (§6 of the spec).
MORE_RANKS_THAN_GPUS = (
    "Warning: there are more processes than GPUs on {host}. "
    "Please reduce number of processes to match GPU count."
)


#: why the ranks' collectives no longer match, as the worlds say it
OUT_OF_STEP = (
    "one rank left a step the others are still in (a testcase that failed on that rank "
    "alone, or a protocol bug)"
)


class WorldError(GpubwError):
    """A collective across ranks failed: a peer left, the ranks disagree, MPI is missing."""


class WorldTimeoutError(WorldError):
    """A collective did not complete within its bound (a rank died or hangs)."""

    def __init__(self, collective: str, rank: int, timeout_s: float, detail: str = "") -> None:
        self.collective = collective
        self.rank = rank
        self.timeout_s = timeout_s
        text = f"rank {rank}: {collective} did not complete within {timeout_s:g} s"
        if detail:
            text += f" ({detail})"
        super().__init__(text)


class CollectiveExpired(Exception):
    """Raised by a World implementation when a collective passes its deadline; carries what
    it was still waiting for. :meth:`World._run` turns it into :class:`WorldTimeoutError`."""

    def __init__(self, detail: str = "") -> None:
        self.detail = detail
        super().__init__(detail)


@attrs.frozen
class Agreement:
    """What the ranks agreed on after :meth:`World.agree`: did every rank succeed?

    ``failures`` holds ``(rank, message)`` for every rank that reported an error, by rank;
    the lowest one is *the* failure (``failed_rank``, ``message``)."""

    ok: bool
    failures: tuple[tuple[int, str], ...] = ()

    @property
    def failed_rank(self) -> int | None:
        return self.failures[0][0] if self.failures else None

    @property
    def message(self) -> str | None:
        return self.failures[0][1] if self.failures else None

    def describe(self) -> str:
        """One line for a report: ``rank 1: <message>`` (+ how many other ranks failed)."""
        if self.ok:
            return "every rank succeeded"
        text = f"rank {self.failed_rank}: {self.message}"
        if len(self.failures) > 1:
            text += f" (and {len(self.failures) - 1} more rank(s) failed)"
        return text


@attrs.frozen
class DeviceAssignment:
    """Which local GPU a rank drives, and nvbandwidth's warning for its host (set on the
    host's first rank only, so that it is recorded once per host)."""

    device: int
    warning: str | None = None


@attrs.frozen
class Contribution:
    """One rank's part in one collective step of a simulated world, as it reaches the hub:
    ``value`` from ``rank`` for step ``seq`` of the world's (``group`` None) or of
    ``group``'s collectives, called ``name``; the rank waits until ``deadline``
    (time.monotonic) and raises a stop at it only when ``interruptible``."""

    rank: int
    seq: int
    name: str
    value: Any
    deadline: float
    interruptible: bool = False
    group: tuple[int, ...] | None = None


class Hub(Protocol):
    """The rendezvous of the ranks of a simulated world (:mod:`gpubw.world.simulated`):
    ranks as free threads (``simulated._Hub``) or taking turns
    (:class:`gpubw.world.tasks.TaskHub`). What :class:`~gpubw.world.simulated.SimulatedWorld`
    and :class:`~gpubw.world.simulated.SimulatedCluster` need of either."""

    #: the number of ranks
    size: int
    #: a stop every rank raises at its collectives while interruptible (None: none)
    stopped: BaseException | None

    def exchange(self, c: Contribution) -> list[Any]:
        """Every member's value, in member order, once every member has contributed to the
        step; raises what fails the step (a rank that left, mismatched collectives, the
        deadline passed, an interruption)."""
        ...

    def interrupt(self, exc: BaseException) -> None:
        """Every rank raises ``exc`` at its next collective."""
        ...

    def leave(self, rank: int, why: str) -> None:
        """``rank`` has left the world: the collectives it never reaches fail at once."""
        ...


def _error_message(error: str | BaseException) -> str:
    if isinstance(error, BaseException):
        return str(error) or type(error).__name__
    return error


def process_ids() -> frozenset[int]:
    """This process's ids: its pid, and its pid in every PID namespace (/proc/self/status
    NSpid), so that NVML's view from outside a container still recognises it."""
    pids = {os.getpid()}
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    pids.update(int(x) for x in line.split()[1:] if x.isdigit())
    except OSError:
        pass
    return frozenset(pids)


class World(abc.ABC):
    """One rank's view of the world of ranks. See the module docstring."""

    #: "single", "mpi" or "simulated"
    kind: str = ""

    def __init__(
        self,
        rank: int,
        size: int,
        rank_hosts: Sequence[int],
        host_names: Sequence[str],
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if not 0 <= rank < size:
            raise ValueError(f"rank must be in [0, {size}), got {rank}")
        if len(rank_hosts) != size or not all(0 <= h < len(host_names) for h in rank_hosts):
            raise ValueError(
                f"rank_hosts must give each of {size} ranks a host index below "
                f"{len(host_names)}, got {tuple(rank_hosts)}"
            )
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.rank = rank
        self.size = size
        #: host index of every rank, by rank; host indexes are 0.. in order of first rank
        self.rank_hosts = tuple(rank_hosts)
        #: name of every host, by host index
        self.host_names = tuple(host_names)
        self.timeout_s = timeout_s
        self.host_index = self.rank_hosts[rank]
        self.host_name = self.host_names[self.host_index]
        same_host = self.ranks_on_host(self.host_index)
        self.local_rank = same_host.index(rank)
        self.local_size = len(same_host)
        #: the process ids (see :func:`process_ids`) of every rank on this rank's host, this
        #: one's included: the run's own processes, which NVML lists beside other programs'
        #: (an MPI world gathers them; one process knows only its own)
        self.host_pids: frozenset[int] = process_ids()
        self._broken: str | None = None
        self._closed = False
        self._seq = 0
        #: steps taken by each group this rank belongs to (see :meth:`group_allgather`)
        self._group_seqs: dict[tuple[int, ...], int] = {}

    # -- layout -------------------------------------------------------------------------------

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    @property
    def host_count(self) -> int:
        return len(self.host_names)

    @property
    def broken(self) -> str | None:
        """Why the world is broken (the first collective failure), or None."""
        return self._broken

    def ranks_on_host(self, host_index: int) -> tuple[int, ...]:
        """The world ranks on one host, in rank order (local rank = position here)."""
        return tuple(r for r, h in enumerate(self.rank_hosts) if h == host_index)

    def host_leaders(self) -> tuple[int, ...]:
        """The first (local rank 0) rank of every host, by host index."""
        return tuple(self.ranks_on_host(h)[0] for h in range(self.host_count))

    def describe(self) -> str:
        return (
            f"rank {self.rank} of {self.size} ({self.kind}), host {self.host_index} "
            f"{self.host_name!r}, local rank {self.local_rank} of {self.local_size}"
        )

    # -- collectives --------------------------------------------------------------------------

    def barrier(self, timeout_s: float | None = None) -> None:
        """Return once every rank has entered the barrier."""
        self._run("barrier", timeout_s, lambda seq, dl: self._barrier("barrier", seq, dl))

    def bcast(self, value: Any, root: int = 0, timeout_s: float | None = None) -> Any:
        """``root``'s ``value`` on every rank (what other ranks pass is ignored)."""
        self._check_root(root)
        return self._run(
            "bcast", timeout_s, lambda seq, dl: self._bcast("bcast", seq, value, root, dl)
        )

    def gather(self, value: Any, root: int = 0, timeout_s: float | None = None) -> list[Any] | None:
        """Every rank's value, by rank, on ``root``; None elsewhere."""
        self._check_root(root)
        values: list[Any] | None = self._run(
            "gather", timeout_s, lambda seq, dl: self._gather("gather", seq, value, root, dl)
        )
        return values

    def allgather(self, value: Any, timeout_s: float | None = None) -> list[Any]:
        """Every rank's value, by rank, on every rank."""
        values: list[Any] = self._run(
            "allgather", timeout_s, lambda s, dl: self._allgather("allgather", s, value, dl)
        )
        return values

    def allreduce(self, value: Any, op: ReduceOp, timeout_s: float | None = None) -> Any:
        """``op`` ("max", "min" or "sum") of every rank's value, on every rank."""
        if op not in _REDUCERS:
            raise ValueError(f"allreduce op must be one of {sorted(_REDUCERS)}, got {op!r}")
        values = self._run(
            f"allreduce({op})",
            timeout_s,
            lambda seq, dl: self._allgather(f"allreduce({op})", seq, value, dl),
        )
        return reduce(_REDUCERS[op], values)

    def agree(
        self, error: str | BaseException | None = None, timeout_s: float | None = None
    ) -> Agreement:
        """Status agreement: each rank passes None (it succeeded) or its error; every rank
        gets the same :class:`Agreement` (ok only if every rank succeeded)."""
        mine = None if error is None else _error_message(error)
        values = self._run("agree", timeout_s, lambda s, dl: self._allgather("agree", s, mine, dl))
        if values.count(None) == len(values):  # every rank succeeded (the common case)
            return Agreement(ok=True)
        failures = tuple((r, m) for r, m in enumerate(values) if m is not None)
        return Agreement(ok=not failures, failures=failures)

    def group_allgather(
        self, value: Any, group: Sequence[int], timeout_s: float | None = None
    ) -> list[Any]:
        """Every member's value, in the order of ``group`` (distinct ranks in increasing
        order, this rank among them), on every member; the other ranks take no part."""
        members = self._members(group)
        if len(members) == 1:
            return [value]
        values: list[Any] = self._run(
            "group allgather",
            timeout_s,
            lambda s, dl: self._group_exchange("group allgather", members, s, value, dl),
            members,
        )
        return values

    def group_agree(
        self,
        error: str | BaseException | None,
        group: Sequence[int],
        timeout_s: float | None = None,
    ) -> Agreement:
        """:meth:`agree` among the ranks of ``group`` only (failures name world ranks)."""
        members = self._members(group)
        mine = None if error is None else _error_message(error)
        if len(members) == 1:
            values = [mine]
        else:
            values = self._run(
                "group agree",
                timeout_s,
                lambda s, dl: self._group_exchange("group agree", members, s, mine, dl),
                members,
            )
        failures = tuple((r, m) for r, m in zip(members, values) if m is not None)
        return Agreement(ok=not failures, failures=failures)

    def _members(self, group: Sequence[int]) -> tuple[int, ...]:
        members = tuple(group)
        if (
            self.rank not in members
            or list(members) != sorted(set(members))
            or not 0 <= members[0] <= members[-1] < self.size
        ):
            raise ValueError(
                f"group must be distinct ranks in [0, {self.size}) in increasing order, "
                f"this rank ({self.rank}) among them; got {members}"
            )
        return members

    def final_word(self, exit_code: int) -> int:
        """The ranks' last exchange before :meth:`close`: rank 0's exit code on every rank
        (bounded; on failure this rank keeps its own). An implementation whose ranks can
        break apart alone (MPI) also makes every rank's world broken when any rank's is, so
        that rank 0 ends the job at once instead of waiting for a rank that will not come."""
        with contextlib.suppress(WorldError):
            exit_code = int(self.bcast(exit_code if self.rank == 0 else None, root=0))
        return exit_code

    def abort(self, exit_code: int = 1) -> None:
        """End every rank now (after a broken world, once rank 0 has written its report)."""
        raise SystemExit(exit_code)

    def close(self, exit_code: int = 1) -> None:
        """The last call of every rank (collective): a final bounded barrier, then free what
        the world holds. If the world is broken, or that barrier fails (a rank is lost or
        hangs: MPI_Finalize would wait for it forever, measured), end the run instead with
        ``exit_code`` (:meth:`_end_broken`). Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._broken is None:
            with contextlib.suppress(WorldError):
                self.barrier()
        if self._broken is not None:
            self._end_broken(exit_code)
        self._free()

    def _end_broken(self, exit_code: int) -> None:
        """How a rank with a broken world ends (MPI: MPI_Abort)."""
        self.abort(exit_code)

    def _free(self) -> None:  # noqa: B027 - nothing to free by default
        """Free what the world holds once closed (MPI: its communicator)."""

    # -- machinery ----------------------------------------------------------------------------

    def _check_root(self, root: int) -> None:
        if not 0 <= root < self.size:
            raise ValueError(f"root must be a rank in [0, {self.size}), got {root}")

    def _run(
        self,
        name: str,
        timeout_s: float | None,
        body: Callable[[int, float], Any],
        group: tuple[int, ...] | None = None,
    ) -> Any:
        """Run one collective (of the world, or of ``group``): its step number, its bound,
        and a broken world on any failure (see the module docstring)."""
        if self._broken is not None:
            raise WorldError(
                f"rank {self.rank}: {name} refused: the world is broken ({self._broken})"
            )
        bound = self.timeout_s if timeout_s is None else timeout_s
        if bound <= 0:
            raise ValueError(f"timeout_s must be > 0, got {bound}")
        if group is None:
            seq = self._seq
            self._seq += 1
        else:
            seq = self._group_seqs.get(group, 0)
            self._group_seqs[group] = seq + 1
        try:
            return body(seq, time.monotonic() + bound)
        except CollectiveExpired as expired:
            exc = WorldTimeoutError(name, self.rank, bound, expired.detail)
            self._broken = str(exc)
            raise exc from None
        except WorldError as exc:
            self._broken = str(exc)
            raise
        except BaseException as exc:
            # Ctrl-C, SIGTERM (InterruptedRun), an unpicklable value: the other ranks are now
            # a step out of line with this one, so no later collective can be trusted.
            self._broken = f"rank {self.rank}: {name} interrupted ({type(exc).__name__}: {exc})"
            raise

    def _allgather(self, name: str, seq: int, value: Any, deadline: float) -> list[Any]:
        """Default allgather: gather to rank 0, then bcast (implementations may do better)."""
        values = self._gather(name, seq, value, 0, deadline)
        everyone: list[Any] = self._bcast(name, seq, values, 0, deadline)
        return everyone

    @abc.abstractmethod
    def _barrier(self, name: str, seq: int, deadline: float) -> None:
        """Raise :class:`CollectiveExpired` once ``time.monotonic()`` passes ``deadline``
        (likewise the other primitives), :class:`WorldError` when a peer is known gone."""

    @abc.abstractmethod
    def _bcast(self, name: str, seq: int, value: Any, root: int, deadline: float) -> Any: ...

    @abc.abstractmethod
    def _group_exchange(
        self, name: str, group: tuple[int, ...], seq: int, value: Any, deadline: float
    ) -> list[Any]:
        """Every member's value, in group order: step ``seq`` of ``group`` (2+ ranks)."""

    @abc.abstractmethod
    def _gather(
        self, name: str, seq: int, value: Any, root: int, deadline: float
    ) -> list[Any] | None: ...


class SingleWorld(World):
    """One process, size 1, holding every local GPU: every collective returns at once."""

    kind = "single"

    def __init__(self, host_name: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S):
        super().__init__(0, 1, (0,), (host_name or socket.gethostname(),), timeout_s)

    def _barrier(self, name: str, seq: int, deadline: float) -> None:
        return None

    def _bcast(self, name: str, seq: int, value: Any, root: int, deadline: float) -> Any:
        return value

    def _gather(self, name: str, seq: int, value: Any, root: int, deadline: float) -> list[Any]:
        return [value]

    def _group_exchange(
        self, name: str, group: tuple[int, ...], seq: int, value: Any, deadline: float
    ) -> list[Any]:
        raise AssertionError("a world of one rank has no group of two ranks")


def device_assignment(world: World, device_count: int) -> DeviceAssignment:
    """The local GPU a rank drives, as nvbandwidth maps it: local rank mod device count, with
    nvbandwidth's warning (on the host's first rank) when the host has more ranks than GPUs.

    A :class:`SingleWorld` holds every GPU; callers use this only for worlds of size > 1."""
    if device_count < 1:
        raise WorldError(
            f"rank {world.rank} on {world.host_name}: no CUDA device visible to this rank"
        )
    warning = None
    if world.local_rank == 0 and world.local_size > device_count:
        warning = MORE_RANKS_THAN_GPUS.format(host=world.host_name)
    return DeviceAssignment(device=rank_device(world.local_rank, device_count), warning=warning)
