"""Device memory shared by the ranks of a world: the unicast buffers of the multinode testcases.

A :class:`SharedBuffer` (nvbandwidth's ``U(o)``) is memory on the device of one rank, the
*owner*, mapped by every rank of the owner's NVLink domain. It is made and destroyed
**collectively**: every rank calls ``create`` (and later ``destroy``, or leaves the ``with``
block) in the same order, and every step that can fail goes through
:func:`gpubw.memory.sharing.agreed`, so an error on one rank makes every rank raise the same
:class:`~gpubw.memory.sharing.RemoteRankError` at the same step and unwind together.

Cut along the seam the module's docstring named (*shared* / sharing / multicast): this
module keeps the buffers shared by ranks; how the ranks exchange handles and descriptors
and agree on a handle kind is :mod:`gpubw.memory.sharing` (the run's
:class:`~gpubw.memory.sharing.Sharing`), the NVLink multicast objects are
:mod:`gpubw.memory.multicast`.

Typical use on every rank (``sharing`` made once per run)::

    with SharedBuffer.create(sharing, owner=o, nbytes=size) as u:   # collective
        ...  # u.ptr is this rank's mapping; u.label == "Multinode node <o>"
    # leaving the block destroyed it collectively

Every rank's buffer at once: :meth:`SharedBuffer.create_all` (each rank maps its whole
domain's) or :meth:`SharedBuffer.map_all` (each rank maps only the owners its copies use).

This module sits beside :mod:`gpubw.memory.buffers` (it never imports the System).
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Collection, Sequence
from typing import Any

from gpubw.memory.buffers import Buffer
from gpubw.memory.sharing import (
    RemoteRankError,
    Sharing,
    agreed,
    check_owner,
    close_server,
    descriptor,
    error_text,
    fd_address,
    fd_server,
    quiet_barrier,
    release_each,
    sharing_of,
)
from gpubw.model.errors import GpubwError
from gpubw.world.fds import FdServer

__all__ = ["SharedBuffer"]


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
        server = fd_server(sharing, kind, handle)
    except BaseException:
        with contextlib.suppress(GpubwError):
            backend.free_exported(ptr)
        raise
    return ptr, (handle, granularity, fd_address(server)), server


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
        sharing = sharing_of(owner_of)
        world, backend, device = sharing.world, sharing.backend, sharing.device
        check_owner(world, owner)
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
            sent = world.bcast((None if error is None else error_text(error), offer), root=owner)
            if sent[0] is not None:
                raise RemoteRankError(owner, sent[0]) from error
            handle, granularity, address = sent[1]
            offered = True
            if imports:
                try:
                    with descriptor(sharing, kind, address) as fd:
                        ptr = backend.import_device(device, handle, kind, nbytes, fd)
                except GpubwError as exc:
                    error = exc
            agreed(world, error)  # every importer has its descriptor: stop serving it
        except BaseException:
            close_server(server)
            if ptr is not None:
                with contextlib.suppress(GpubwError):
                    if world.rank == owner:
                        # every importer undoes its own import first
                        quiet_barrier(world)
                        backend.free_exported(ptr)
                    else:
                        backend.close_import(ptr)
                        quiet_barrier(world)
            elif world.rank != owner and (error is not None or (offered and not imports)):
                quiet_barrier(world)
            raise
        close_server(server)
        allocated = -(-nbytes // granularity) * granularity
        buf = cls(sharing, owner, ptr or 0, nbytes, allocated, kind)
        sharing.live.add(buf)
        return buf

    @classmethod
    def create_all(
        cls, owner_of: Sharing | Any, nbytes: int, owners: Sequence[int] | None = None
    ) -> list[SharedBuffer]:
        """COLLECTIVE: U(0), ..., U(N-1) at once, every rank the owner of its own (or one
        buffer of each rank of ``owners``, in increasing order), in two collectives
        whatever their number (:meth:`create` per owner takes two each): every owner
        exports, the offers are gathered, every rank imports its domain's others, then one
        agreement. A failure anywhere raises :class:`RemoteRankError` on every rank after
        undoing what was done. Destroy them with :meth:`destroy_all` (two barriers), not
        one by one."""
        sharing = sharing_of(owner_of)
        if owners is None:
            chosen = list(range(sharing.world.size))
        else:
            chosen = sorted(set(owners))
            for owner in chosen:
                check_owner(sharing.world, owner)
        (made,), allocated, kind = cls._make_all(sharing, nbytes, chosen, [None])
        return [
            made[o] if o in made else cls(sharing, o, 0, nbytes, allocated, kind) for o in chosen
        ]

    @classmethod
    def map_all(
        cls, owner_of: Sharing | Any, nbytes: int, uses: Sequence[Collection[int]]
    ) -> list[dict[int, SharedBuffer]]:
        """COLLECTIVE: one set of every rank's buffer (as :meth:`create_all`) per entry of
        ``uses``, all in the two collectives of one, but in set k this rank maps only its
        own and those of ``uses[k]`` (its cells' peers) of its NVLink domain: per set,
        {owner: buffer} of those alone (no placeholder of the others: a rank's work and
        objects grow with its cells, not with the world). Every owner exports whether or not
        any rank maps its buffers. Destroy them with one :meth:`destroy_all` of every set's
        values (on every rank, with what it holds)."""
        sharing = sharing_of(owner_of)
        chosen = list(range(sharing.world.size))
        return cls._make_all(sharing, nbytes, chosen, uses)[0]

    @classmethod
    def _make_all(
        cls,
        sharing: Sharing,
        nbytes: int,
        chosen: list[int],
        uses: Sequence[Collection[int] | None],
    ) -> tuple[list[dict[int, SharedBuffer]], int, str]:
        """The buffers of :meth:`create_all` and :meth:`map_all` that this rank holds, one
        set per entry of ``uses`` (its own and its imports of the owners of ``uses[k]``,
        None: of its whole domain), by owner, and their allocated size and handle kind
        (``chosen``: valid owners, ascending)."""
        world, device = sharing.world, sharing.device
        sharing.pool.check_request(False, device, nbytes)
        kind = sharing.handle_kind()
        sharing.domain_ranks(0)  # every rank's domain (collective on the first call)
        mine: list[_Export] = []
        error: BaseException | None = None
        sets = len(uses)
        if world.rank in chosen:
            error = _export_sets(sharing, kind, nbytes, sets, mine)
        ptrs: list[dict[int, int]] = [{} for _ in range(sets)]
        imported = False  # every rank got as far as importing: unwinding meets a barrier
        try:
            offer = tuple(m[1] for m in mine) if mine else None
            offers = world.allgather((None if error is None else error_text(error), offer))
            failed = _first_failure(offers)
            if failed is not None:
                raise RemoteRankError(*failed) from error
            imported = True
            for k in range(sets):
                targets = _import_targets(sharing, uses[k])
                error = error or _import_all(sharing, kind, nbytes, (offers, k), targets, ptrs[k])
            agreed(world, error)  # every importer has its descriptors: stop serving them
        except BaseException:
            _unwind_all(sharing, mine, ptrs, barrier=imported)
            raise
        for k, (ptr, _, server) in enumerate(mine):
            close_server(server)
            ptrs[k][world.rank] = ptr
        granularity = offers[chosen[0]][1][0][1]
        allocated = -(-nbytes // granularity) * granularity
        made = [
            {o: cls(sharing, o, p[o], nbytes, allocated, kind) for o in sorted(p)} for p in ptrs
        ]
        for bufs in made:
            sharing.live.update(bufs.values())
        return made, allocated, kind

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
        ok = quiet_barrier(live[0].sharing.world)
        try:
            release_each(b for b in live if not b.is_owner)
        finally:
            if ok:
                quiet_barrier(live[0].sharing.world)
            release_each(b for b in live if b.is_owner)

    def destroy(self) -> None:
        """COLLECTIVE: barrier, importers unmap, barrier, the owner releases. Never raises
        because of another rank: if the world is broken, each rank frees its own part
        without waiting. Safe to call twice."""
        if self._freed:
            return
        self._freed = True
        world = self.sharing.world
        if self.is_owner:
            quiet_barrier(world) and quiet_barrier(world)
            self.release_local()
        else:
            ok = quiet_barrier(world)
            try:
                self.release_local()
            finally:
                if ok:
                    quiet_barrier(world)

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


#: one export of this rank: its pointer, the offer it sends, the server of its descriptor
_Export = tuple[int, tuple[Any, int, str | None], FdServer | None]


def _export_sets(
    sharing: Sharing, kind: str, nbytes: int, sets: int, mine: list[_Export]
) -> BaseException | None:
    """This rank's ``sets`` exports of :meth:`SharedBuffer.create_all` into ``mine``; the
    first error, or None, with those made before it undone (``mine`` left empty)."""
    try:
        for _ in range(sets):
            mine.append(_export_offer(sharing, kind, nbytes))
    except GpubwError as exc:
        with contextlib.suppress(GpubwError):
            for ptr, _, server in mine:
                close_server(server)
                sharing.backend.free_exported(ptr)
        mine.clear()
        return exc
    return None


def _import_targets(sharing: Sharing, uses: Collection[int] | None) -> Sequence[int]:
    """The owners whose buffers this rank imports: the others of its NVLink domain, or
    (``uses`` given) those of them in ``uses``, ascending."""
    me = sharing.world.rank
    members = sharing.domain_ranks(me)
    if uses is None:
        return [o for o in members if o != me]
    domains = sharing.rank_domains()
    return sorted(o for o in set(uses) if o != me and domains[o] == domains[me])


def _first_failure(offers: Sequence[tuple[str | None, Any]]) -> tuple[int, str] | None:
    """The first rank whose offer is an error, and its error; None if none is (every rank
    reads every rank's: a pass at C speed, then the rank found only where one failed)."""
    errors = list(map(operator.itemgetter(0), offers))
    if errors.count(None) == len(errors):
        return None
    rank = next(r for r, e in enumerate(errors) if e is not None)
    return rank, str(errors[rank])


def _import_all(
    sharing: Sharing,
    kind: str,
    nbytes: int,
    offers: tuple[Sequence[tuple[Any, Any]], int],
    targets: Sequence[int],
    ptrs: dict[int, int],
) -> BaseException | None:
    """This rank's imports of :meth:`SharedBuffer.create_all`: those of the owners of
    ``targets`` that made an offer, into ``ptrs`` (owner -> mapping); ``offers``: every
    rank's (error, offers) and the set k whose offer is imported (only the targets' are
    read: not a list of every rank's made per set); the first error, or None."""
    backend, device = sharing.backend, sharing.device
    gathered, k = offers
    for owner in targets:
        offered = gathered[owner][1]
        if not offered:
            continue
        handle, _, address = offered[k]
        try:
            with descriptor(sharing, kind, address) as fd:
                ptrs[owner] = backend.import_device(device, handle, kind, nbytes, fd)
        except GpubwError as exc:
            return exc
    return None


def _unwind_all(
    sharing: Sharing, mine: list[_Export], ptrs: list[dict[int, int]], *, barrier: bool
) -> None:
    """Undo a failed :meth:`SharedBuffer.create_all` on this rank: stop serving, unmap its
    imports, wait (where every rank got as far as importing) for the others to unmap
    theirs, free its exports."""
    with contextlib.suppress(GpubwError):
        for _, _, server in mine:
            close_server(server)
        for each in ptrs:
            for ptr in each.values():
                sharing.backend.close_import(ptr)
        if barrier:
            quiet_barrier(sharing.world)
        for ptr, _, _ in mine:
            sharing.backend.free_exported(ptr)
