"""NVLink multicast objects joined by the ranks of a world: the multinode testcases' MC(o).

A :class:`MulticastBuffer` (nvbandwidth's ``MC(o)``) is an NVLink multicast object of one
rank, the *owner*, that every rank of its NVLink domain joins with its own device's memory;
a store to it lands in every member's memory. It is made and destroyed **collectively**, as a
:class:`gpubw.memory.shared.SharedBuffer` is: every rank calls ``create`` (and later
``destroy``, or leaves the ``with`` block) in the same order, and every step that can fail
goes through :func:`gpubw.memory.sharing.agreed`, so an error on one rank makes every rank
raise the same :class:`~gpubw.memory.sharing.RemoteRankError` and unwind together. Its
handle is shared with fabric or posix-fd handles, never legacy CUDA IPC.

Cut along the seam :mod:`gpubw.memory.shared`'s docstring named (shared / sharing /
*multicast*): this module keeps the multicast objects; the handle kind and the descriptors
passed between ranks are :mod:`gpubw.memory.sharing`'s. Never made where multicast is
disabled (:func:`gpubw.backend.base.multicast_disabled`).

This module sits beside :mod:`gpubw.memory.buffers` (it never imports the System).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from gpubw.backend.base import IPC
from gpubw.memory.buffers import Buffer
from gpubw.memory.sharing import (
    RemoteRankError,
    Sharing,
    SharingError,
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

__all__ = ["MulticastBuffer"]


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
                made.server = fd_server(sharing, kind, handle)
                made.offer = (handle, fd_address(made.server))
            except GpubwError as exc:
                made.error = exc
        return made

    @property
    def text(self) -> str | None:
        """The error as the other ranks are told it (None: no error)."""
        return None if self.error is None else error_text(self.error)

    def unwind(self, sharing: Sharing, keys: Iterable[int | None]) -> None:
        """A failed creation on this rank: stop serving, wait for the other ranks (where
        the world still works), free the joined ``keys`` and what this rank created."""
        close_server(self.server)
        with contextlib.suppress(GpubwError):
            quiet_barrier(sharing.world)
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
            with descriptor(sharing, kind, None if world.rank == owner else address) as fd:
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
        binds its own memory and maps the object. Failures as
        :meth:`gpubw.memory.shared.SharedBuffer.create`. Needs a handle kind of fabric or
        posix-fd (SharingError with ipc). The object spans
        the owner's NVLink domain: the ranks of other domains only join the collective steps
        and get a placeholder (``mapped`` False)."""
        sharing = sharing_of(owner_of)
        world, backend, device = sharing.world, sharing.backend, sharing.device
        check_owner(world, owner)
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
                    with descriptor(sharing, kind, None if world.rank == owner else address) as fd:
                        key = backend.multicast_join(device, handle, kind, nbytes, fd)
            except GpubwError as exc:
                error = exc
            agreed(world, error)  # every device added before anyone binds
            close_server(server)
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
        sharing = sharing_of(owner_of)
        world, backend = sharing.world, sharing.backend
        for owner in owners:
            check_owner(world, owner)
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
            close_server(server)
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
        ok = quiet_barrier(world)
        try:
            release_each(reversed(live))
        finally:
            if ok:
                quiet_barrier(world)

    def destroy(self) -> None:
        """COLLECTIVE: barrier, every rank unmaps and releases its part, barrier."""
        if self._freed:
            return
        self._freed = True
        world = self.sharing.world
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
        if not self._local_done:
            self._local_done = True
            self.backend.multicast_free(self.key)

    def close(self) -> None:
        self.destroy()

    def free(self) -> None:
        self.destroy()
