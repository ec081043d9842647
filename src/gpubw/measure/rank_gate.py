"""The cross-rank spin gate's device flag (the multinode testcases; see
:func:`gpubw.measure.series.measure_ranks`)."""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Sequence
from typing import Any

from gpubw.memory.buffers import Buffer, HostBuffer
from gpubw.memory.shared import SharedBuffer
from gpubw.memory.sharing import RemoteRankError, agreed
from gpubw.memory.system import System
from gpubw.model.errors import GpubwError


class RankGate:
    """The device flags of the cross-rank spin gate: two ints per NVLink domain, in memory
    owned by the domain's lowest rank and mapped by that domain's ranks (shared buffers,
    made collectively, once per testcase; a flag reaches no further than fabric handles do),
    plus a small host buffer holding the words that are copied into them. Sample s of a
    cell uses flag s mod 2: in each domain the first rank with a pair of the cell
    (:meth:`relays`) sets it when its host gate opens (its relay kernel), and every other
    gate kernel of the domain waits on it. Two flags let that rank zero the *next* sample's
    flag at the start of a sample (every wait on it ended before the previous sample's last
    agreement) instead of agreeing on a zeroed flag before each sample: both flags are zero
    whenever no cell runs (made so here by each owner, and by a cell's first rank after its
    last sample). Close it collectively (a context manager)."""

    #: the owner rank of this rank's flag: the lowest rank of its NVLink domain (0 where
    #: every rank is in one domain)
    owner = 0

    def __init__(
        self, system: System, flags: Sequence[Any], words: Buffer, members: Sequence[int]
    ) -> None:
        self.system = system
        #: every domain's flag, by its owner in ascending order (this rank maps its own)
        self.flags = tuple(flags)
        #: the ranks of this rank's NVLink domain, ascending
        self.members = tuple(members)
        self.owner = self.members[0]
        self.shared = next(f for f in self.flags if f.owner == self.owner)
        self._words = words

    @classmethod
    def create(cls, system: System) -> RankGate:
        """Collective: every rank calls it at the same point. If any rank fails to make its
        host words, every rank frees the flags (collectively) and raises the same
        :class:`gpubw.memory.sharing.RemoteRankError` (a broken world leaves the flags to the
        run's sharing, which frees what is left at its end)."""
        sharing = system.sharing
        owners = sharing.domain_leaders()  # each domain's first rank
        words: Buffer | None = None
        error: BaseException | None = None
        # every domain's flags at once (two collectives, however many domains; undone on
        # every rank if any fails: a WorldError leaves them to the run's sharing, as below)
        flags = SharedBuffer.create_all(system, _FLAGS_BYTES, owners)
        try:
            words = HostBuffer.allocate(system, None, 2 * _FLAGS_BYTES)
            words.write(struct.pack("<4i", 0, 0, 1, 1))
            me = system.world.rank
            if sharing.domain_ranks(me)[0] == me:  # an owner zeroes its domain's flags
                own = next(f for f in flags if f.owner == me)
                _put(system, own.ptr, words.ptr, own.context_device, _FLAGS_BYTES)
        except GpubwError as exc:
            error = exc
        try:
            agreed(system.world, error)
        except BaseException as exc:
            # the first error is the one raised; the frees are each tried
            with contextlib.suppress(GpubwError):
                if words is not None:
                    words.close()
            if isinstance(exc, RemoteRankError):  # every rank is here: the close is collective
                SharedBuffer.destroy_all(flags)
            raise
        assert words is not None
        return cls(system, flags, words, sharing.domain_ranks(system.world.rank))

    def relays(self, ranks: Sequence[int]) -> bool:
        """Whether this rank relays its host gate to its domain's flag in a cell whose pairs
        are issued by ``ranks`` (in pair order): it is the first of them in its domain."""
        first = next((r for r in ranks if r in self.members), None)
        return first == self.system.world.rank

    def flag(self, sample: int) -> int:
        """The address, in this rank's mapping, of the flag of sample ``sample`` of a cell."""
        return int(self.shared.ptr) + 4 * (sample % 2)

    def reset(self, sample: int) -> None:
        """Zero the flag of sample ``sample`` (by the rank that relays to it in the cell:
        :meth:`relays`), synchronously."""
        self._put(self.flag(sample), self._words.ptr, 4)

    def release(self) -> None:
        """Set both flags (on the error path: no rank's streams stay held)."""
        self._put(self.flag(0), self._words.ptr + _FLAGS_BYTES, _FLAGS_BYTES)

    def _put(self, dst: int, src: int, nbytes: int) -> None:
        _put(self.system, dst, src, self.shared.context_device, nbytes)

    def close(self) -> None:
        """Collective: free the flags' memory and the host words."""
        try:
            SharedBuffer.destroy_all(self.flags)
        finally:
            self._words.close()

    def __enter__(self) -> RankGate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: the two flags of a domain (ints); the host words are two zeros, then two ones
_FLAGS_BYTES = 8


def _put(system: System, dst: int, src: int, device: int | None, nbytes: int) -> None:
    """Copy ``nbytes`` of the host words at ``src`` to the flag(s) at ``dst`` on a stream of
    ``device`` (the flags' context: this rank's device), and wait for it."""
    with system.backend.stream(system.rank_device if device is None else device) as s:
        system.backend.memcpy_async(dst, src, nbytes, s)
        system.backend.synchronize(s, system.options.sync_timeout_s)
