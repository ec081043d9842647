"""Device memory shared by the ranks of a world: the buffers of the multinode testcases.

A :class:`SharedBuffer` (nvbandwidth's ``U(o)``) is memory on the device of one rank, the
*owner*, mapped by every rank of the world; a :class:`MulticastBuffer` (``MC(o)``) is an
NVLink multicast object every rank joins, whose stores land in every member's memory. Both
are made and destroyed **collectively**: every rank calls ``create`` (and later ``destroy``,
or leaves the ``with`` block) in the same order, and every step that can fail goes through
:meth:`gpubw.world.World.agree`, so an error on one rank makes every rank raise the same
:class:`RemoteRankError` at the same step and unwind together.

:class:`Sharing` is run-scoped (one per run, held next to the buffer pool): it knows the
world, this rank's device, and the *handle kind* all ranks use, agreed once on first use
(:meth:`Sharing.handle_kind`): each rank probes which kinds its device can export
(:meth:`gpubw.backend.base.Backend.handle_probes`), the ranks keep the best kind that works
on all of them (fabric > posix-fd > ipc), POSIX-fd is then tried end to end (export on each
host's first rank, import on the others: the descriptor's passing or the import can be
refused) and, with ranks on more than one host, anything but fabric is a
:class:`SharingError` naming IMEX.

A POSIX-fd handle's descriptor goes from the owner to the importers of its host over a Unix
socket (:mod:`gpubw.world.fds`: SCM_RIGHTS, peers checked with SO_PEERCRED against the
world's process ids): the owner serves it from the export until the ranks agreed, the
socket's name travels with the handle in the same collective, each importer closes its
duplicate once imported. No rank needs ptrace rights over another.

Typical use on every rank (``sharing`` made once per run)::

    with SharedBuffer.create(sharing, owner=o, nbytes=size) as u:   # collective
        ...  # u.ptr is this rank's mapping; u.label == "Multinode node <o>"
    # leaving the block destroyed it collectively

This module sits beside :mod:`gpubw.memory.buffers` (it never imports the System).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import attrs

from gpubw.backend.base import (
    FABRIC,
    HANDLE_KINDS,
    HANDLE_LEVELS,
    IPC,
    POSIX_FD,
    Backend,
    HandleProbe,
)
from gpubw.memory.buffers import Buffer, BufferPool
from gpubw.model.errors import GpubwError
from gpubw.world.base import World, WorldError
from gpubw.world.fds import FdServer, receive_fd

__all__ = [
    "IMEX_MESSAGE",
    "MulticastBuffer",
    "RemoteRankError",
    "SharedBuffer",
    "Sharing",
    "SharingError",
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


def _text(exc: BaseException) -> str:
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
    text = None if error is None else _text(error)
    if group is None:
        agreement = world.agree(text, timeout_s=timeout_s)
    else:
        agreement = world.group_agree(text, group, timeout_s=timeout_s)
    if not agreement.ok:
        assert agreement.failed_rank is not None
        raise RemoteRankError(agreement.failed_rank, agreement.message or "failed") from error


def _quiet_barrier(world: World) -> bool:
    """A teardown barrier: False (and no exception) if the world is broken or the barrier
    fails, so that teardown never raises on an error path; the caller stops collectives."""
    if world.broken is not None:
        return False
    try:
        world.barrier()
    except WorldError:
        return False
    return True


def _fd_server(sharing: Sharing, kind: str, handle: Any) -> FdServer | None:
    """The owner's server of a posix-fd ``handle``'s descriptor, for the other ranks of its
    host (None for another kind, or when no other rank shares the host)."""
    world = sharing.world
    if kind != POSIX_FD or world.local_size < 2:
        return None
    return FdServer(sharing.backend.exported_fd(handle), world.host_pids)


def _address(server: FdServer | None) -> str | None:
    return None if server is None else server.address


@contextlib.contextmanager
def _descriptor(sharing: Sharing, kind: str, address: str | None) -> Iterator[int | None]:
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


def _close(server: FdServer | None) -> None:
    if server is not None:
        server.close()


def _export_offer(
    sharing: Sharing, kind: str, nbytes: int
) -> tuple[int, tuple[Any, int, str | None], FdServer | None]:
    """The owner's part of :meth:`SharedBuffer.create`: its pointer, the offer it sends
    (handle, granularity, where its descriptor is served) and that server; if a step fails,
    nothing is left."""
    backend, device = sharing.backend, sharing.device
    ptr, handle = backend.export_device(device, nbytes, kind)
    try:
        granularity = backend.shared_granularity(device, kind)
        server = _fd_server(sharing, kind, handle)
    except BaseException:
        with contextlib.suppress(GpubwError):
            backend.free_exported(ptr)
        raise
    return ptr, (handle, granularity, _address(server)), server


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
        self.live: set[SharedBuffer | MulticastBuffer] = set()
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
            mine = tuple(HandleProbe(k, False, _text(exc)) for k in HANDLE_KINDS)
        # as plain tuples: a simulated rack's ranks then share one gathered list instead of
        # each unpickling N x 3 probes (O(N^2) in one process)
        self._gathered = world.allgather(tuple((p.kind, p.ok, p.error) for p in mine))
        usable = [{kind for kind, ok, _ in p if ok} for p in self._gathered]
        common = [k for k in HANDLE_KINDS if all(k in kinds for kinds in usable)]
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
            self._domains = tuple(str(d) for d in self.world.allgather(mine))
        return self._domains

    def domain_ranks(self, rank: int) -> tuple[int, ...]:
        """The ranks in rank ``rank``'s NVLink domain, ascending (``rank`` among them).
        Collective on the first call, as :meth:`rank_domains`."""
        domains = self.rank_domains()
        if self._members is None:  # each domain's ranks, once (asked per buffer and cell)
            members: dict[str, list[int]] = {}
            for r, d in enumerate(domains):
                members.setdefault(d, []).append(r)
            self._members = {d: tuple(rs) for d, rs in members.items()}
        return self._members[domains[rank]]

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
                server = _fd_server(self, POSIX_FD, handle)
                offer = (handle, _address(server))
            except GpubwError as exc:
                error = exc
        try:
            offers = world.allgather(offer)
            source = offers[world.host_leaders()[world.host_index]]
            if not leader and world.local_size > 1 and source is not None:
                try:
                    with _descriptor(self, POSIX_FD, source[1]) as fd:
                        imported = backend.import_device(device, source[0], POSIX_FD, nbytes, fd)
                    backend.close_import(imported)
                except GpubwError as exc:
                    error = exc
            agreement = world.agree(None if error is None else _text(error))
        finally:
            _close(server)
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
            _release_each(list(self.live))
        finally:
            self.live.clear()


def _release_each(bufs: Iterable[Any]) -> None:
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


def _sharing_of(owner: Sharing | Any) -> Sharing:
    """``owner`` if it is a :class:`Sharing`, else its ``sharing`` attribute (a System)."""
    if isinstance(owner, Sharing):
        return owner
    sharing = getattr(owner, "sharing", None)
    if not isinstance(sharing, Sharing):
        raise TypeError(f"{owner!r} is neither a Sharing nor holds one as .sharing")
    return sharing


def _check_owner(world: World, owner: int) -> None:
    if isinstance(owner, bool) or not isinstance(owner, int) or not 0 <= owner < world.size:
        raise ValueError(f"owner must be a rank of 0..{world.size - 1}, got {owner!r}")


class SharedBuffer(Buffer):
    """Device memory of rank ``owner`` (``U(owner)``), mapped by every rank of the owner's
    NVLink domain (:meth:`Sharing.domain_ranks`: fabric handles reach no further).

    ``ptr`` is this rank's mapping (the owner's own, or the imported one), ``nbytes`` the
    size asked for (copies use it), ``allocated`` that size rounded up to the handle kind's
    granularity, ``device`` and ``context_device`` this rank's local device (whose context
    issues work on it here), ``label`` nvbandwidth's verbose name ``Multinode node <owner>``.
    Fill and verify work as on any buffer, from this rank's device. On a rank of another
    domain it is a placeholder (``mapped`` False, ``ptr`` 0) that only joins the collective
    destroy: nothing may use it."""

    is_host = False

    def __init__(
        self,
        sharing: Sharing,
        owner: int,
        ptr: int,
        nbytes: int,
        allocated: int,
        kind: str,
    ) -> None:
        super().__init__(sharing.pool, ptr, nbytes, sharing.device)
        self.sharing = sharing
        self.owner = owner
        self.allocated = allocated
        self.kind = kind
        #: whether this rank maps the memory (False: a rank of another NVLink domain)
        self.mapped = bool(ptr)
        self._local_done = not self.mapped

    @property
    def is_owner(self) -> bool:
        return self.sharing.world.rank == self.owner

    @property
    def label(self) -> str:
        return f"Multinode node {self.owner}"

    @classmethod
    def create(cls, owner_of: Sharing | Any, owner: int, nbytes: int) -> SharedBuffer:
        """COLLECTIVE: every rank calls it with the same ``owner`` and ``nbytes``. The
        owner allocates and exports, the handle is broadcast, the others import; a failure
        anywhere raises :class:`RemoteRankError` on every rank after undoing what was done
        (a :class:`SharingError` of the handle-kind agreement, or a WorldError, propagate
        as they are). ``owner_of`` is the run's :class:`Sharing` or what holds it. Only the
        ranks of the owner's NVLink domain import; the others get a placeholder
        (``mapped`` False)."""
        sharing = _sharing_of(owner_of)
        world, backend, device = sharing.world, sharing.backend, sharing.device
        _check_owner(world, owner)
        sharing.pool.check_request(False, device, nbytes)
        kind = sharing.handle_kind()
        members = sharing.domain_ranks(owner)  # collective on the first call
        imports = world.rank != owner and world.rank in members
        ptr: int | None = None
        error: BaseException | None = None
        offer: tuple[Any, int, str | None] | None = None
        server: FdServer | None = None
        offered = False  # the owner's offer came: an unwinding rank meets the others' barrier
        if world.rank == owner:
            try:
                ptr, offer, server = _export_offer(sharing, kind, nbytes)
            except GpubwError as exc:
                error = exc
        try:
            sent = world.bcast((None if error is None else _text(error), offer), root=owner)
            if sent[0] is not None:
                raise RemoteRankError(owner, sent[0]) from error
            handle, granularity, address = sent[1]
            offered = True
            if imports:
                try:
                    with _descriptor(sharing, kind, address) as fd:
                        ptr = backend.import_device(device, handle, kind, nbytes, fd)
                except GpubwError as exc:
                    error = exc
            agreed(world, error)  # every importer has its descriptor: stop serving it
        except BaseException:
            _close(server)
            if ptr is not None:
                with contextlib.suppress(GpubwError):
                    if world.rank == owner:
                        # every importer undoes its own import first
                        _quiet_barrier(world)
                        backend.free_exported(ptr)
                    else:
                        backend.close_import(ptr)
                        _quiet_barrier(world)
            elif world.rank != owner and (error is not None or (offered and not imports)):
                _quiet_barrier(world)
            raise
        _close(server)
        allocated = -(-nbytes // granularity) * granularity
        buf = cls(sharing, owner, ptr or 0, nbytes, allocated, kind)
        sharing.live.add(buf)
        return buf

    @classmethod
    def create_all(cls, owner_of: Sharing | Any, nbytes: int) -> list[SharedBuffer]:
        """COLLECTIVE: U(0), ..., U(N-1) at once, every rank the owner of its own, in two
        collectives whatever N (:meth:`create` per owner takes two each): every rank
        exports, the offers are gathered, every rank imports its domain's others, then one
        agreement. A failure anywhere raises :class:`RemoteRankError` on every rank after
        undoing what was done. Destroy them with :meth:`destroy_all` (two barriers), not
        one by one."""
        sharing = _sharing_of(owner_of)
        world, device = sharing.world, sharing.device
        sharing.pool.check_request(False, device, nbytes)
        kind = sharing.handle_kind()
        sharing.domain_ranks(0)  # every rank's domain (collective on the first call)
        mine: tuple[int, tuple[Any, int, str | None], FdServer | None] | None = None
        error: BaseException | None = None
        try:
            mine = _export_offer(sharing, kind, nbytes)
        except GpubwError as exc:
            error = exc
        ptrs: dict[int, int] = {}
        imported = False  # every rank got as far as importing: unwinding meets a barrier
        try:
            offers = world.allgather((None if error is None else _text(error), mine and mine[1]))
            failed = [(r, e) for r, (e, _) in enumerate(offers) if e is not None]
            if failed:
                raise RemoteRankError(*failed[0]) from error
            imported = True
            error = _import_all(sharing, kind, nbytes, [o for _, o in offers], ptrs)
            agreed(world, error)  # every importer has its descriptors: stop serving them
        except BaseException:
            _unwind_all(sharing, mine, ptrs, barrier=imported)
            raise
        assert mine is not None
        _close(mine[2])
        ptrs[world.rank] = mine[0]
        granularity = mine[1][1]
        allocated = -(-nbytes // granularity) * granularity
        bufs = [cls(sharing, o, ptrs.get(o, 0), nbytes, allocated, kind) for o in range(world.size)]
        sharing.live.update(bufs)
        return bufs

    @classmethod
    def destroy_all(cls, bufs: Sequence[SharedBuffer]) -> None:
        """COLLECTIVE: free what :meth:`SharedBuffer.create_all` made, in two barriers: every
        rank unmaps its imports, then frees its own. Never raises because of another rank: if
        the world is broken, each rank frees its own part without waiting. Safe to call
        twice."""
        live = [b for b in bufs if not b._freed]
        if not live:
            return
        for b in live:
            b._freed = True
        ok = _quiet_barrier(live[0].sharing.world)
        try:
            _release_each(b for b in live if not b.is_owner)
        finally:
            if ok:
                _quiet_barrier(live[0].sharing.world)
            _release_each(b for b in live if b.is_owner)

    def destroy(self) -> None:
        """COLLECTIVE: barrier, importers unmap, barrier, the owner releases. Never raises
        because of another rank: if the world is broken, each rank frees its own part
        without waiting. Safe to call twice."""
        if self._freed:
            return
        self._freed = True
        world = self.sharing.world
        if self.is_owner:
            _quiet_barrier(world) and _quiet_barrier(world)
            self.release_local()
        else:
            ok = _quiet_barrier(world)
            try:
                self.release_local()
            finally:
                if ok:
                    _quiet_barrier(world)

    def release_local(self) -> None:
        """Free this rank's part now, without any collective (error paths)."""
        self._freed = True
        self.sharing.live.discard(self)
        if self._local_done:
            return
        self._local_done = True
        if self.is_owner:
            self.backend.free_exported(self.ptr)
        else:
            self.backend.close_import(self.ptr)

    def close(self) -> None:
        """Leaving a ``with`` block destroys the buffer (collectively)."""
        self.destroy()

    def free(self) -> None:
        self.destroy()

    def __repr__(self) -> str:
        return (
            f"<SharedBuffer {self.label} {self.nbytes} bytes ({self.kind}) at 0x{self.ptr:x} "
            f"on rank {self.sharing.world.rank}>"
        )


def _import_all(
    sharing: Sharing,
    kind: str,
    nbytes: int,
    offers: list[tuple[Any, int, str | None]],
    ptrs: dict[int, int],
) -> BaseException | None:
    """This rank's imports of :meth:`SharedBuffer.create_all`: every other owner's of its
    NVLink domain, into ``ptrs`` (owner -> mapping); the first error, or None."""
    world, backend, device = sharing.world, sharing.backend, sharing.device
    for owner in sharing.domain_ranks(world.rank):
        if owner == world.rank:
            continue
        handle, _, address = offers[owner]
        try:
            with _descriptor(sharing, kind, address) as fd:
                ptrs[owner] = backend.import_device(device, handle, kind, nbytes, fd)
        except GpubwError as exc:
            return exc
    return None


def _unwind_all(
    sharing: Sharing,
    mine: tuple[int, Any, FdServer | None] | None,
    ptrs: dict[int, int],
    *,
    barrier: bool,
) -> None:
    """Undo a failed :meth:`SharedBuffer.create_all` on this rank: stop serving, unmap its
    imports, wait (where every rank got as far as importing) for the others to unmap
    theirs, free its export."""
    with contextlib.suppress(GpubwError):
        if mine is not None:
            _close(mine[2])
        for ptr in ptrs.values():
            sharing.backend.close_import(ptr)
        if barrier:
            _quiet_barrier(sharing.world)
        if mine is not None:
            sharing.backend.free_exported(mine[0])


def _multicast_kind(sharing: Sharing, nbytes: int) -> str:
    """The handle kind a multicast object of ``nbytes`` is shared with (the ranks' agreed
    one); SharingError where that is legacy CUDA IPC, which cannot share one."""
    sharing.pool.check_request(False, sharing.device, nbytes)
    kind = sharing.handle_kind()
    if kind == IPC:
        raise SharingError(
            "multicast objects are shared with fabric or posix-fd handles; the ranks "
            "agreed on legacy CUDA IPC, which cannot share them"
        )
    return kind


@attrs.define
class _McOffer:
    """An owner's multicast object on offer: what it created (None: nothing, or not an
    owner), the (handle, descriptor address) offered, the descriptor server, or its error."""

    created: int | None = None
    offer: tuple[Any, str | None] = (None, None)
    server: FdServer | None = None
    error: BaseException | None = None

    @classmethod
    def make(cls, sharing: Sharing, kind: str, nbytes: int, devices: int, owner: bool) -> _McOffer:
        """The object for ``devices`` devices, created and offered where ``owner``."""
        made = cls()
        if owner:
            try:
                made.created, handle = sharing.backend.multicast_create(
                    sharing.device, nbytes, devices, kind
                )
                made.server = _fd_server(sharing, kind, handle)
                made.offer = (handle, _address(made.server))
            except GpubwError as exc:
                made.error = exc
        return made

    @property
    def text(self) -> str | None:
        """The error as the other ranks are told it (None: no error)."""
        return None if self.error is None else _text(self.error)

    def unwind(self, sharing: Sharing, keys: Iterable[int | None]) -> None:
        """A failed creation on this rank: stop serving, wait for the other ranks (where
        the world still works), free the joined ``keys`` and what this rank created."""
        _close(self.server)
        with contextlib.suppress(GpubwError):
            _quiet_barrier(sharing.world)
            for k in {*keys, self.created} - {None}:
                sharing.backend.multicast_free(k)  # type: ignore[arg-type]


def _join_all(
    sharing: Sharing,
    kind: str,
    nbytes: int,
    owners: Sequence[int],
    offers: list[tuple[str | None, tuple[Any, str | None]]],
    keys: dict[int, int],
) -> BaseException | None:
    """This rank's joins of :meth:`MulticastBuffer.create_all`: the object of every owner of
    its NVLink domain (``owners``), into ``keys`` (owner -> key); the first error, or None."""
    world, backend, device = sharing.world, sharing.backend, sharing.device
    for owner in owners:
        handle, address = offers[owner][1]
        try:
            with _descriptor(sharing, kind, None if world.rank == owner else address) as fd:
                keys[owner] = backend.multicast_join(device, handle, kind, nbytes, fd)
        except GpubwError as exc:
            return exc
    return None


class MulticastBuffer(Buffer):
    """An NVLink multicast object of rank ``owner`` (``MC(owner)``) that every rank joined
    with its own device's memory: ``ptr`` is this rank's multicast mapping; a store to it
    lands in every member's memory. Made only where multicast is allowed: the backends refuse
    (CudaError, NOT_PERMITTED) when :func:`gpubw.backend.base.multicast_disabled` says so,
    and testcases filter on it first (``Testcase.needs_multicast``)."""

    is_host = False

    def __init__(self, sharing: Sharing, owner: int, key: int, ptr: int, nbytes: int) -> None:
        super().__init__(sharing.pool, ptr, nbytes, sharing.device)
        self.sharing = sharing
        self.owner = owner
        self.key = key
        #: whether this rank joined (False: a rank of another NVLink domain, a placeholder)
        self.mapped = bool(ptr)
        self._local_done = not self.mapped

    @property
    def label(self) -> str:
        return f"Multinode node {self.owner}"

    @classmethod
    def create(cls, owner_of: Sharing | Any, owner: int, nbytes: int) -> MulticastBuffer:
        """COLLECTIVE: the owner creates the object for all ranks' devices, its handle is
        broadcast, every rank joins (imports and adds its device), then - after all joined -
        binds its own memory and maps the object. Failures as :meth:`SharedBuffer.create`.
        Needs a handle kind of fabric or posix-fd (SharingError with ipc). The object spans
        the owner's NVLink domain: the ranks of other domains only join the collective steps
        and get a placeholder (``mapped`` False)."""
        sharing = _sharing_of(owner_of)
        world, backend, device = sharing.world, sharing.backend, sharing.device
        _check_owner(world, owner)
        kind = _multicast_kind(sharing, nbytes)
        members = sharing.domain_ranks(owner)
        member = world.rank in members
        key: int | None = None
        made = _McOffer.make(sharing, kind, nbytes, len(members), world.rank == owner)
        error, server = made.error, made.server
        try:
            sent = world.bcast((made.text, made.offer), root=owner)
            if sent[0] is not None:
                raise RemoteRankError(owner, sent[0]) from error
            handle, address = sent[1]
            try:
                if member:
                    with _descriptor(sharing, kind, None if world.rank == owner else address) as fd:
                        key = backend.multicast_join(device, handle, kind, nbytes, fd)
            except GpubwError as exc:
                error = exc
            agreed(world, error)  # every device added before anyone binds
            _close(server)
            ptr: int | None = None
            try:
                if key is not None:
                    ptr = backend.multicast_map(key)
            except GpubwError as exc:
                error = exc
            agreed(world, error)
        except BaseException:
            made.unwind(sharing, [key])
            raise
        assert member == (key is not None and ptr is not None)
        buf = cls(sharing, owner, key or 0, ptr or 0, nbytes)
        sharing.live.add(buf)
        return buf

    @classmethod
    def create_all(
        cls, owner_of: Sharing | Any, owners: Sequence[int], nbytes: int
    ) -> list[MulticastBuffer]:
        """COLLECTIVE: MC(g) of every g of ``owners`` at once (all-to-all broadcast), in three
        collectives whatever their number (:meth:`create` takes three each): every owner
        creates its object for its NVLink domain, the handles are gathered, every rank joins
        the objects of its domain's owners, one agreement (every device added before anyone
        binds), every rank maps them, one agreement. Failures as :meth:`create`, on every
        rank alike, after undoing what was done. Destroy them with :meth:`destroy_all`."""
        sharing = _sharing_of(owner_of)
        world, backend = sharing.world, sharing.backend
        for owner in owners:
            _check_owner(world, owner)
        kind = _multicast_kind(sharing, nbytes)
        mine = set(sharing.domain_ranks(world.rank))
        keys: dict[int, int] = {}
        ptrs: dict[int, int] = {}
        made = _McOffer.make(sharing, kind, nbytes, len(mine), world.rank in owners)
        error, server = made.error, made.server
        try:
            offers = world.allgather((made.text, made.offer))
            failed = [(r, e) for r, (e, _) in enumerate(offers) if e is not None]
            if failed:
                raise RemoteRankError(*failed[0]) from error
            error = _join_all(sharing, kind, nbytes, [o for o in owners if o in mine], offers, keys)
            agreed(world, error)  # every device added before anyone binds
            _close(server)
            try:
                for owner, key in keys.items():
                    ptrs[owner] = backend.multicast_map(key)
            except GpubwError as exc:
                error = exc
            agreed(world, error)
        except BaseException:
            made.unwind(sharing, keys.values())
            raise
        bufs = [cls(sharing, o, keys.get(o, 0), ptrs.get(o, 0), nbytes) for o in owners]
        sharing.live.update(bufs)
        return bufs

    @classmethod
    def destroy_all(cls, bufs: Sequence[MulticastBuffer]) -> None:
        """COLLECTIVE: free what :meth:`create_all` made, in two barriers: barrier, every
        rank releases its parts (the last made first), barrier. Never raises because of
        another rank; safe to call twice."""
        live = [b for b in bufs if not b._freed]
        if not live:
            return
        for b in live:
            b._freed = True
        world = live[0].sharing.world
        ok = _quiet_barrier(world)
        try:
            _release_each(reversed(live))
        finally:
            if ok:
                _quiet_barrier(world)

    def destroy(self) -> None:
        """COLLECTIVE: barrier, every rank unmaps and releases its part, barrier."""
        if self._freed:
            return
        self._freed = True
        world = self.sharing.world
        ok = _quiet_barrier(world)
        try:
            self.release_local()
        finally:
            if ok:
                _quiet_barrier(world)

    def release_local(self) -> None:
        """Free this rank's part now, without any collective (error paths)."""
        self._freed = True
        self.sharing.live.discard(self)
        if not self._local_done:
            self._local_done = True
            self.backend.multicast_free(self.key)

    def close(self) -> None:
        self.destroy()

    def free(self) -> None:
        self.destroy()
