"""The world of an MPI run, over mpi4py (imported here only, never by ``gpubw -l`` or a
single-process run).

MPI's own collectives block without a bound, so gpubw builds its few collectives from
non-blocking calls polled against a deadline: ``Ibarrier`` for the barrier, and pickled
``isend`` + ``improbe`` (point to point, through rank 0 for the all-to-all ones) for the
rest. A rank that died or hangs thus makes the others raise :class:`WorldTimeoutError`
naming the collective, the rank and the bound. Every message carries the collective's step
and name, so ranks calling different collectives is reported, not mismatched silently.
Collectives of a group of ranks (a multinode cell's) travel on a communicator of their own,
through the group's first rank, each message carrying the group and its step.

Ranks on one host are found with ``Split_type(COMM_TYPE_SHARED)`` (the ranks sharing memory
with this one), never by comparing host names; that split is a blocking MPI call made once,
right after MPI starts.
"""

from __future__ import annotations

import atexit
import time
import zlib
from collections.abc import Callable
from typing import Any

from gpubw.world.base import (
    DEFAULT_TIMEOUT_S,
    OUT_OF_STEP,
    CollectiveExpired,
    World,
    WorldError,
    process_ids,
)

#: Polling back-off while a non-blocking call is pending (seconds): short enough for the
#: per-sample barriers, long enough not to steal a shared CPU from the ranks being waited on.
#: A multinode cell had 11 agreement points across every rank; with 8 ranks under Open MPI
#: on one H200 a back-off of up to 200 µs made them 8.5 ms of a cell, up to 50 µs 3.5 ms
#: (20 µs: 3.1 ms), benchmarks/README.md "The real cost of a multinode cell".
_FIRST_SLEEP_S = 20e-6
_MAX_SLEEP_S = 50e-6


def _import_mpi() -> Any:
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise WorldError(
            "this process was started by an MPI launcher with several ranks, but mpi4py "
            f"cannot be imported ({exc}); install it with: pip install 'gpubw[mpi]'"
        ) from exc
    return MPI


def _import_mpi_for_pmix() -> Any:
    """mpi4py's MPI for a launch that only says ``PMIX_RANK`` (a PMIx launcher): MPI started
    only once its library is known to speak PMIx. MPICH built without PMIx (the ``mpich``
    wheel's) would otherwise abort in MPI_Init with a many-line error stack."""
    import sys

    if "mpi4py.MPI" in sys.modules:  # started already (by the caller): nothing to check
        return _import_mpi()
    try:
        import mpi4py
    except ImportError:
        return _import_mpi()  # its one-line error
    mpi4py.rc.initialize = False
    mpi4py.rc.finalize = True
    mpi = _import_mpi()
    version = library_version(mpi.Get_library_version())
    if version.startswith("MPICH") and "pmix" not in version.lower():
        first = " ".join(version.splitlines()[0].split())
        raise WorldError(
            "PMIX_RANK is set (a PMIx launcher, e.g. srun --mpi=pmix) but mpi4py's MPI "
            f"library ({first}) was not built for PMIx; start the ranks with that MPI's "
            "own mpiexec, or use an mpi4py built for the launcher's MPI"
        )
    if not mpi.Is_initialized():
        mpi.Init_thread()
    return mpi


def _abort_run(exit_code: int) -> None:
    """MPI_Abort on MPI_COMM_WORLD, never on gpubw's duplicate of it. MPICH (ch4) ends a
    duplicate by messages to its ranks, which a hung rank never reads: it lives on until the
    launcher notices the aborting rank's exit, or forever where the launcher does not clean
    up (``mpiexec -disable-auto-cleanup``; a CI run lost 90 s to it). On the world
    communicator it asks the launcher (PMI abort), which kills every rank, hung or not."""
    _import_mpi().COMM_WORLD.Abort(exit_code)


def _wait(test: Callable[[], bool], deadline: float, waiting_for: Callable[[], str]) -> None:
    """Poll ``test`` until it is true, or raise CollectiveExpired at ``deadline``."""
    sleep = _FIRST_SLEEP_S
    while not test():
        if time.monotonic() >= deadline:
            raise CollectiveExpired(waiting_for())
        time.sleep(sleep)
        sleep = min(sleep * 2, _MAX_SLEEP_S)


def _group_tag(key: tuple[tuple[int, ...], int]) -> int:
    """The MPI tag of a group's step: a hash of (group, step). Two steps sharing a tag are
    still received in order (MPI keeps one sender's messages of one tag in order, and every
    rank receives its messages in the program's order); the message names its step."""
    return zlib.crc32(repr(key).encode("ascii")) % 32768


def library_version(raw: str) -> str:
    """MPI_Get_library_version's text for the report: without the C string's NUL that some
    libraries leave in it (Open MPI 4.1.6 did: the report's ``mpi_library`` ended in
    ``\\u0000``), nor surrounding blanks."""
    return raw.replace("\x00", "").strip()


class MpiWorld(World):
    """One MPI rank. Build it with :meth:`create` (which starts MPI through mpi4py)."""

    kind = "mpi"

    def __init__(
        self,
        comm: Any,
        rank_hosts: tuple[int, ...],
        host_names: tuple[str, ...],
        timeout_s: float,
        library: str,
        group_comm: Any = None,
    ) -> None:
        super().__init__(comm.Get_rank(), comm.Get_size(), rank_hosts, host_names, timeout_s)
        self._comm = comm
        #: the groups' messages (never mixed with the world's; see _group_exchange)
        self._group_comm = group_comm
        #: the MPI library's version string (nvbandwidth prints it as "MPI version: ...")
        self.library = library
        #: the ranks' last word (:meth:`final_word`), out of reach of any broken step
        self._final_comm: Any = None

    @classmethod
    def create(
        cls, expected_size: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> MpiWorld:
        """Start MPI (if mpi4py has not), find each rank's host and return this rank's world.

        ``expected_size`` is the size the launcher announced in the environment; an MPI that
        sees another size (mpi4py built for another MPI than the launcher's, or ``srun``
        without a PMI plugin) is a clear error, not N independent single-rank runs."""
        mpi = _import_mpi() if expected_size is not None else _import_mpi_for_pmix()
        world_comm = mpi.COMM_WORLD
        if expected_size is not None and world_comm.Get_size() != expected_size:
            raise WorldError(
                f"the launcher started {expected_size} ranks but MPI sees "
                f"{world_comm.Get_size()}: mpi4py uses an MPI library "
                f"({' '.join(mpi.Get_library_version().splitlines()[0].split())}) that is not the "
                "launcher's (use the mpiexec of the MPI that mpi4py loads, or srun --mpi=pmix)"
            )
        comm = world_comm.Dup()  # gpubw's messages never meet anyone else's
        group_comm = world_comm.Dup()  # nor do its groups' meet its world's
        final_comm = world_comm.Dup()  # nor the last word what an interrupted step left
        rank = comm.Get_rank()
        local = comm.Split_type(mpi.COMM_TYPE_SHARED, key=rank)
        try:
            leader = local.bcast(rank, root=0)  # world rank of this host's first rank
        finally:
            local.Free()
        name = mpi.Get_processor_name()
        library = library_version(mpi.Get_library_version())
        # Host layout through gpubw's own, bounded allgather.
        probe = cls(comm, (0,) * comm.Get_size(), ("?",), timeout_s, library)
        try:
            found = probe.allgather((leader, name, process_ids()))
        except WorldError:
            atexit.register(probe._at_exit)  # broken from the start: abort, never hang, at exit
            raise
        leaders = sorted({lead for lead, _, _ in found})
        rank_hosts = tuple(leaders.index(lead) for lead, _, _ in found)
        host_names = tuple(found[lead][1] for lead in leaders)
        world = cls(comm, rank_hosts, host_names, timeout_s, library, group_comm)
        world._final_comm = final_comm
        world.host_pids = frozenset().union(*(pids for lead, _, pids in found if lead == leader))
        world._seq = probe._seq
        atexit.register(world._at_exit)
        return world

    # -- primitives ---------------------------------------------------------------------------

    def _tag(self, seq: int) -> int:
        return seq % 32768  # MPI guarantees tags up to 32767

    def _send_all(
        self, dests: list[int], message: Any, seq: Any, deadline: float, comm: Any = None
    ) -> None:
        """Send ``message`` to every rank of ``dests`` (world step ``seq``, or a group's
        (group, step) on ``comm``), bounded."""
        comm = self._comm if comm is None else comm
        tag = self._tag(seq) if isinstance(seq, int) else _group_tag(seq)
        requests = [comm.isend(message, dest=d, tag=tag) for d in dests]
        try:
            _wait(
                lambda: all(r.Test() for r in requests),
                deadline,
                lambda: (
                    "the message to rank(s) "
                    + ", ".join(str(d) for d, r in zip(dests, requests) if not r.Test())
                    + " was not received"
                ),
            )
        except CollectiveExpired:
            for r in requests:
                if not r.Test():
                    r.Cancel()
            raise

    def _receive(self, source: int, name: str, seq: Any, deadline: float, comm: Any = None) -> Any:
        comm = self._comm if comm is None else comm
        tag = self._tag(seq) if isinstance(seq, int) else _group_tag(seq)
        found: list[Any] = []

        def arrived() -> bool:
            msg = comm.improbe(source=source, tag=tag)
            if msg is not None:
                found.append(msg.recv())
            return bool(found)

        _wait(arrived, deadline, lambda: f"nothing from rank {source}")
        return self._check(found[0], source, name, seq)

    def _barrier(self, name: str, seq: int, deadline: float) -> None:
        request = self._comm.Ibarrier()
        _wait(request.Test, deadline, lambda: "not every rank entered the barrier")

    def _bcast(self, name: str, seq: int, value: Any, root: int, deadline: float) -> Any:
        if self.rank == root:
            others = [r for r in range(self.size) if r != root]
            self._send_all(others, (seq, name, value), seq, deadline)
            return value
        return self._receive(root, name, seq, deadline)

    def _gather(
        self, name: str, seq: int, value: Any, root: int, deadline: float
    ) -> list[Any] | None:
        if self.rank != root:
            self._send_all([root], (seq, name, value), seq, deadline)
            return None
        values: dict[int, Any] = {root: value}
        pending = [r for r in range(self.size) if r != root]

        def all_in() -> bool:
            for r in list(pending):
                msg = self._comm.improbe(source=r, tag=self._tag(seq))
                if msg is not None:
                    values[r] = self._check(msg.recv(), r, name, seq)
                    pending.remove(r)
            return not pending

        _wait(all_in, deadline, lambda: "nothing from rank(s) " + ", ".join(map(str, pending)))
        return [values[r] for r in range(self.size)]

    def _group_exchange(
        self, name: str, group: tuple[int, ...], seq: int, value: Any, deadline: float
    ) -> list[Any]:
        """Through the group's first rank: the others send it their value, it sends every
        member the list. A message's step is (group, seq), so that a message of another
        group or step is reported, never taken for this one."""
        leader, key, comm = group[0], (group, seq), self._group_comm
        if self.rank != leader:
            self._send_all([leader], (key, name, value), key, deadline, comm)
            values: list[Any] = self._receive(leader, name, key, deadline, comm)
            return values
        found: dict[int, Any] = {leader: value}
        pending = list(group[1:])
        tag = _group_tag(key)

        def all_in() -> bool:
            for r in list(pending):
                msg = comm.improbe(source=r, tag=tag)
                if msg is not None:
                    found[r] = self._check(msg.recv(), r, name, key)
                    pending.remove(r)
            return not pending

        _wait(all_in, deadline, lambda: "nothing from rank(s) " + ", ".join(map(str, pending)))
        values = [found[r] for r in group]
        self._send_all(list(group[1:]), (key, name, values), key, deadline, comm)
        return values

    def _check(self, message: Any, source: int, name: str, seq: Any) -> Any:
        their_seq, their_name, value = message
        if (their_seq, their_name) != (seq, name):
            raise WorldError(
                f"rank {self.rank}: the ranks called different collectives: rank {self.rank} "
                f"{name} (step {seq}), rank {source} {their_name} (step {their_seq}): "
                f"{OUT_OF_STEP}"
            )
        return value

    # -- ending -------------------------------------------------------------------------------

    def final_word(self, exit_code: int) -> int:
        """Rank 0's exit code on every rank, and every rank's world broken if any rank's is,
        on a communicator of its own (so a world broken by a signal mid-step still has its
        word): each rank tells rank 0 whether its world is broken, rank 0 answers the code
        and whether any was (a rank not heard from within the bound counts as broken). A
        rank broken alone no longer leaves rank 0 waiting the whole bound in its last
        barrier, nor itself waiting for an abort that rank 0 had no reason to make."""
        comm = self._final_comm
        if comm is None:
            return super().final_word(exit_code)
        deadline = time.monotonic() + self.timeout_s
        mine = self._broken is not None
        try:
            if self.rank == 0:
                anyone = self._hear_all(comm, mine, deadline)
                others = list(range(1, self.size))
                self._send_all(others, (0, "final word", (exit_code, anyone)), 0, deadline, comm)
            else:
                self._send_all([0], (0, "final word", mine), 0, deadline, comm)
                exit_code, anyone = self._receive(0, "final word", 0, deadline, comm)
        except (CollectiveExpired, WorldError):
            anyone = True
        if anyone and self._broken is None:
            self._broken = f"rank {self.rank}: another rank's world is broken at the end"
        return int(exit_code)

    def _hear_all(self, comm: Any, broken: bool, deadline: float) -> bool:
        """Rank 0: whether any rank's world is broken (its own: ``broken``), from every
        rank's last word; one not heard from by ``deadline`` counts as broken."""
        pending = list(range(1, self.size))

        def all_in() -> bool:
            nonlocal broken
            for r in list(pending):
                msg = comm.improbe(source=r, tag=0)
                if msg is not None:
                    broken = bool(self._check(msg.recv(), r, "final word", 0)) or broken
                    pending.remove(r)
            return not pending

        try:
            _wait(all_in, deadline, lambda: "")
        except CollectiveExpired:
            return True
        return broken

    def abort(self, exit_code: int = 1) -> None:
        """MPI_Abort: ends every rank of the run (the launcher exits with ``exit_code``)."""
        _abort_run(exit_code)

    def _free(self) -> None:
        """Free gpubw's communicator; MPI itself is finalized by mpi4py at exit."""
        if self._comm is not None:
            self._comm.Free()
            self._comm = None
        if self._group_comm is not None:
            self._group_comm.Free()
            self._group_comm = None
        if self._final_comm is not None:
            self._final_comm.Free()
            self._final_comm = None

    def _at_exit(self) -> None:
        # Runs before mpi4py's MPI_Finalize: a process leaving with a broken world (an
        # uncaught error, a caller that forgot close()) must not hang in MPI_Finalize.
        if self._broken is not None and self._comm is not None:
            _abort_run(1)
