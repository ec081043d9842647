"""How the ranks of a world share device memory: the handle kind, descriptors, agreement.

Cut from :mod:`gpubw.memory.shared` along the seam its docstring named (shared / *sharing* /
multicast): this module is the exchange between the ranks that the buffers they share
(:mod:`gpubw.memory.shared`, :mod:`gpubw.memory.multicast`) are built on; it holds no buffer.

:class:`Sharing` is run-scoped (one per run, held next to the buffer pool): it knows the
world, this rank's device, and the *handle kind* all ranks use, agreed once on first use
(:meth:`Sharing.handle_kind`): each rank probes which kinds its device can export
(:meth:`gpubw.backend.base.Backend.handle_probes`), the ranks keep the best kind that works
on all of them (fabric > posix-fd > ipc), POSIX-fd is then tried end to end (export on each
host's first rank, import on the others: the descriptor's passing or the import can be
refused) and, with ranks on more than one host, anything but fabric is a
:class:`SharingError` naming IMEX. It also gathers every rank's NVLink domain once
(:meth:`Sharing.domain_ranks`), and tracks the shared buffers still alive so that
:meth:`Sharing.close` frees what an interrupted testcase left.

A POSIX-fd handle's descriptor goes from the owner to the importers of its host over a Unix
socket (:mod:`gpubw.world.fds`: SCM_RIGHTS, peers checked with SO_PEERCRED against the
world's process ids): the owner serves it from the export until the ranks agreed
(:func:`fd_server`), the socket's name travels with the handle in the same collective, each
importer closes its duplicate once imported (:func:`descriptor`). No rank needs ptrace
rights over another.

Every step of a collective that can fail goes through :func:`agreed` (over
:meth:`gpubw.world.World.agree`), so an error on one rank makes every rank raise the same
:class:`RemoteRankError` at the same step and unwind together; teardown waits with
:func:`quiet_barrier`, which never raises.

This module sits beside :mod:`gpubw.memory.buffers` (it never imports the System).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

import attrs

from gpubw.backend.base import (
    FABRIC,
    HANDLE_KINDS,
    HANDLE_LEVELS,
    POSIX_FD,
    Backend,
    HandleProbe,
)
from gpubw.memory.pool import BufferPool
from gpubw.model.errors import GpubwError
from gpubw.world.base import World, WorldError
from gpubw.world.fds import FdServer, receive_fd

__all__ = [
    "IMEX_MESSAGE",
    "LocalPart",
    "RankProbes",
    "RemoteRankError",
    "Sharing",
    "SharingError",
    "agreed",
    "check_owner",
    "close_server",
    "descriptor",
    "error_text",
    "fd_address",
    "fd_server",
    "quiet_barrier",
    "release_each",
    "sharing_of",
]

#: The error when ranks on different hosts have no fabric handles (``{detail}``: the first
#: rank whose fabric export failed, and how).
IMEX_MESSAGE = (
    "ranks on different hosts need CUDA fabric handles, which need the IMEX service and a "
    "channel (/dev/nvidia-caps-imex-channels/channelN): {detail}"
)


class SharingError(GpubwError):
    """The ranks have no common way to share device memory (every rank raises the same)."""


class RemoteRankError(GpubwError):
    """A collective step failed on rank ``rank``; every rank raises this, with the same text
    ``rank <r>: <message>`` (the failing rank's own error is the ``__cause__`` there)."""

    def __init__(self, rank: int, message: str) -> None:
        self.rank = rank
        self.remote_message = message
        super().__init__(f"rank {rank}: {message}")


def error_text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def agreed(
    world: World,
    error: BaseException | None,
    timeout_s: float | None = None,
    group: tuple[int, ...] | None = None,
) -> None:
    """One agreement point of a cross-rank protocol: every rank (of ``group`` if given)
    passes its own error (or None); if any failed, every one raises the same
    :class:`RemoteRankError` (``rank <r>: <message>`` of the lowest failing rank; the
    failing rank's own error is its ``__cause__``), so they all unwind together."""
    text = None if error is None else error_text(error)
    if group is None:
        agreement = world.agree(text, timeout_s=timeout_s)
    else:
        agreement = world.group_agree(text, group, timeout_s=timeout_s)
    if not agreement.ok:
        assert agreement.failed_rank is not None
        raise RemoteRankError(agreement.failed_rank, agreement.message or "failed") from error


def quiet_barrier(world: World) -> bool:
    """A teardown barrier: False (and no exception) if the world is broken or the barrier
    fails, so that teardown never raises on an error path; the caller stops collectives."""
    if world.broken is not None:
        return False
    try:
        world.barrier()
    except WorldError:
        return False
    return True


def fd_server(sharing: Sharing, kind: str, handle: Any) -> FdServer | None:
    """The owner's server of a posix-fd ``handle``'s descriptor, for the other ranks of its
    host (None for another kind, or when no other rank shares the host)."""
    world = sharing.world
    if kind != POSIX_FD or world.local_size < 2:
        return None
    return FdServer(sharing.backend.exported_fd(handle), world.host_pids)


def fd_address(server: FdServer | None) -> str | None:
    return None if server is None else server.address


@contextlib.contextmanager
def descriptor(sharing: Sharing, kind: str, address: str | None) -> Iterator[int | None]:
    """This rank's duplicate of the descriptor served at ``address`` (a posix-fd handle's),
    closed after the block; None for another kind or no server (the owner's own)."""
    if kind != POSIX_FD or address is None:
        yield None
        return
    world = sharing.world
    fd = receive_fd(address, world.host_pids, world.timeout_s)
    try:
        yield fd
    finally:
        os.close(fd)


def close_server(server: FdServer | None) -> None:
    if server is not None:
        server.close()


class LocalPart(Protocol):
    """What :attr:`Sharing.live` tracks: a buffer made through the Sharing (a
    :class:`gpubw.memory.shared.SharedBuffer` or :class:`gpubw.memory.multicast.MulticastBuffer`)
    whose part on this rank can be freed without any collective."""

    def release_local(self) -> None: ...


@attrs.frozen
class RankProbes:
    """What one rank found when probing handle kinds."""

    rank: int
    host: int
    probes: tuple[HandleProbe, ...]

    def ok(self, kind: str) -> bool:
        return any(p.kind == kind and p.ok for p in self.probes)

    def error(self, kind: str) -> str:
        for p in self.probes:
            if p.kind == kind:
                return p.error or "failed"
        return "not probed"


class Sharing:
    """Run-scoped sharing of device memory across the ranks of ``world``; this rank uses
    ``device`` (a local ordinal of ``pool.backend``). Buffers made through it are tracked so
    that :meth:`close` frees whatever an interrupted testcase left (locally, without any
    collective: on the error path the other ranks free theirs the same way)."""

    def __init__(
        self, pool: BufferPool, world: World, device: int, *, prefer: str | None = None
    ) -> None:
        self.pool = pool
        self.world = world
        self.device = device
        #: the kind the user asked for (``--handle-type``), or None for the best common one
        self.prefer = prefer
        self._kind: str | None = None
        self._error: SharingError | None = None
        #: every rank's probes as (kind, ok, error), by rank (after :meth:`handle_kind`)
        self._gathered: list[tuple[tuple[str, bool, str], ...]] = []
        #: why POSIX-fd was given up after its end-to-end test ("" if it was not)
        self.posix_fd_failure = ""
        self.live: set[LocalPart] = set()
        self._domains: tuple[str, ...] | None = None
        self._members: dict[str, tuple[int, ...]] | None = None

    @property
    def backend(self) -> Backend:
        return self.pool.backend

    # -- the handle kind, agreed once -----------------------------------------------------
    @property
    def probes(self) -> tuple[RankProbes, ...]:
        """Every rank's probes, by rank (after :meth:`handle_kind`; made when asked: a
        simulated rack's N ranks would each make N)."""
        hosts = self.world.rank_hosts
        return tuple(
            RankProbes(r, hosts[r], tuple(HandleProbe(*t) for t in p))
            for r, p in enumerate(self._gathered)
        )

    @property
    def agreed_kind(self) -> str | None:
        """The agreed handle kind, or None before :meth:`handle_kind` succeeded (for the
        report's metadata)."""
        return self._kind

    def handle_kind(self) -> str:
        """The handle kind every rank uses: "fabric", "posix-fd" or "ipc". COLLECTIVE on the
        first call (every rank must call it at the same point, e.g. the first multinode
        testcase); later calls return the answer, or raise the same :class:`SharingError`
        again, without communicating. A WorldError (a rank lost) propagates and is not
        remembered."""
        if self._kind is not None:
            return self._kind
        if self._error is not None:
            raise self._error
        world = self.world
        try:
            mine = tuple(self.backend.handle_probes(self.device))
        except GpubwError as exc:
            mine = tuple(HandleProbe(k, False, error_text(exc)) for k in HANDLE_KINDS)
        # as plain tuples: a simulated rack's ranks then share one gathered list instead of
        # each unpickling N x 3 probes (O(N^2) in one process)
        self._gathered = world.allgather(tuple((p.kind, p.ok, p.error) for p in mine))
        common = list(_common_kinds(tuple(self._gathered)))
        if POSIX_FD in common and FABRIC not in common and world.size > 1:
            failure = self._posix_fd_end_to_end()
            if failure:
                self.posix_fd_failure = failure
                common.remove(POSIX_FD)
        best = max(common, key=HANDLE_LEVELS.__getitem__, default=None)
        if self.prefer is not None and best is not None:
            if self.prefer not in common:
                self._error = SharingError(
                    f"the handle type {self.prefer} was asked for, but not every rank can use "
                    f"it (the ranks can all use: {', '.join(common)})"
                )
                raise self._error
            best = self.prefer
        if world.host_count > 1 and best != FABRIC:
            failing = next(rp for rp in self.probes if not rp.ok(FABRIC))
            detail = f"fabric export failed on rank {failing.rank} with {failing.error(FABRIC)}"
            self._error = SharingError(IMEX_MESSAGE.format(detail=detail))
            raise self._error
        if best is None:
            parts = []
            for kind in HANDLE_KINDS:
                rp = next(rp for rp in self.probes if not rp.ok(kind))
                why = self.posix_fd_failure if kind == POSIX_FD and rp.ok(kind) else None
                parts.append(f"{kind}: rank {rp.rank}: {why or rp.error(kind)}")
            self._error = SharingError(
                "the ranks have no common way to share device memory (" + "; ".join(parts) + ")"
            )
            raise self._error
        self._kind = best
        return best

    # -- NVLink domains, gathered once ------------------------------------------------------
    def rank_domains(self) -> tuple[str, ...]:
        """Every rank's NVLink domain (:meth:`gpubw.backend.base.Backend.nvlink_domain` of its
        device), by rank. COLLECTIVE on the first call (every rank at the same point: the
        first multinode shape or shared buffer); later calls return it without
        communicating. A WorldError propagates and is not remembered."""
        if self._domains is None:
            mine = self.backend.nvlink_domain(self.device)
            self._domains = tuple(map(str, self.world.allgather(mine)))
        return self._domains

    def domain_ranks(self, rank: int) -> tuple[int, ...]:
        """The ranks in rank ``rank``'s NVLink domain, ascending (``rank`` among them).
        Collective on the first call, as :meth:`rank_domains`."""
        domains = self.rank_domains()
        if self._members is None:  # each domain's ranks, once (asked per buffer and cell)
            self._members = _domain_members(domains)
        return self._members[domains[rank]]

    def domain_leaders(self) -> tuple[int, ...]:
        """Each NVLink domain's lowest rank, ascending (from :meth:`domain_ranks`' members,
        made once a rank: not a pass over every rank each time it is asked)."""
        self.domain_ranks(self.world.rank)
        assert self._members is not None
        return tuple(sorted(rs[0] for rs in self._members.values()))

    def _posix_fd_end_to_end(self) -> str:
        """Export one granule as POSIX-fd on each host's first rank, pass its descriptor to
        the host's other ranks and import it there; returns "" if every import worked, else
        the first failure as ``rank r: ...``. Collective."""
        world, backend, device = self.world, self.backend, self.device
        nbytes = backend.shared_granularity(device, POSIX_FD)
        exported: int | None = None
        server: FdServer | None = None
        offer: tuple[Any, str | None] | None = None
        error: BaseException | None = None
        leader = world.local_rank == 0 and world.local_size > 1
        if leader:
            try:
                exported, handle = backend.export_device(device, nbytes, POSIX_FD)
                server = fd_server(self, POSIX_FD, handle)
                offer = (handle, fd_address(server))
            except GpubwError as exc:
                error = exc
        try:
            offers = world.allgather(offer)
            source = offers[world.host_leaders()[world.host_index]]
            if not leader and world.local_size > 1 and source is not None:
                try:
                    with descriptor(self, POSIX_FD, source[1]) as fd:
                        imported = backend.import_device(device, source[0], POSIX_FD, nbytes, fd)
                    backend.close_import(imported)
                except GpubwError as exc:
                    error = exc
            agreement = world.agree(None if error is None else error_text(error))
        finally:
            close_server(server)
            if exported is not None:
                with contextlib.suppress(GpubwError):
                    backend.free_exported(exported)
        return "" if agreement.ok else agreement.describe()

    def describe(self) -> str:
        """One line on the agreed kind (or that none was agreed yet)."""
        if self._kind is None:
            return "no handle kind agreed yet"
        text = f"memory shared across ranks with {self._kind} handles"
        if self.posix_fd_failure:
            text += f" (posix-fd refused: {self.posix_fd_failure})"
        return text

    # -- teardown -------------------------------------------------------------------------
    def close(self) -> None:
        """Free, locally and without collectives, every shared buffer still alive (after an
        error or Ctrl-C; the backend's own close frees the rest). Safe to call twice."""
        try:
            release_each(list(self.live))
        finally:
            self.live.clear()


@functools.lru_cache(maxsize=4)
def _common_kinds(gathered: tuple[tuple[tuple[str, bool, str], ...], ...]) -> tuple[str, ...]:
    """The handle kinds that every rank's probes (``gathered``, by rank) found usable, in
    :data:`HANDLE_KINDS` order: once per process for the ranks of a simulated rack, which
    gather the same probes (each reading all N, O(N^2) in one process)."""
    usable = [{kind for kind, ok, _ in p if ok} for p in gathered]
    return tuple(k for k in HANDLE_KINDS if all(k in kinds for kinds in usable))


@functools.lru_cache(maxsize=4)
def _domain_members(domains: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    """Each domain's ranks, ascending, from every rank's domain (by rank): once per process
    for a simulated rack's ranks (shared, never changed)."""
    members: dict[str, list[int]] = {}
    for r, d in enumerate(domains):
        members.setdefault(d, []).append(r)
    return {d: tuple(rs) for d, rs in members.items()}


def release_each(bufs: Iterable[LocalPart]) -> None:
    """Free this rank's part of every one of ``bufs`` (``release_local``), each tried even
    after one failed, so that one failing free leaves nothing else held; then raise the
    first failure."""
    errors: list[BaseException] = []
    for buf in bufs:
        try:
            buf.release_local()
        except BaseException as exc:
            errors.append(exc)
    if errors:
        raise errors[0]


def sharing_of(owner: Sharing | Any) -> Sharing:
    """``owner`` if it is a :class:`Sharing`, else its ``sharing`` attribute (a System)."""
    if isinstance(owner, Sharing):
        return owner
    sharing = getattr(owner, "sharing", None)
    if not isinstance(sharing, Sharing):
        raise TypeError(f"{owner!r} is neither a Sharing nor holds one as .sharing")
    return sharing


def check_owner(world: World, owner: int) -> None:
    if isinstance(owner, bool) or not isinstance(owner, int) or not 0 <= owner < world.size:
        raise ValueError(f"owner must be a rank of 0..{world.size - 1}, got {owner!r}")
