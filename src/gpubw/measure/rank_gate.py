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
    """The device flags of the cross-rank spin gate: one int per NVLink domain, in memory
    owned by the domain's lowest rank and mapped by that domain's ranks (shared buffers,
    made collectively, once per testcase; a flag reaches no further than fabric handles do),
    plus a small host buffer holding the words 0 and 1 that are copied into them. In each
    domain the first rank with a pair of the cell (:meth:`relays`) zeroes its flag before
    each sample (the owner may take no part in the cell) and its relay kernel sets it when
    its host gate opens; every other gate kernel of the domain waits on it. Close it
    collectively (a context manager)."""

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
        size = len(sharing.rank_domains())
        owners = sorted({sharing.domain_ranks(r)[0] for r in range(size)})
        flags: list[Any] = []
        words: Buffer | None = None
        error: BaseException | None = None
        try:
            for owner in owners:
                flags.append(SharedBuffer.create(system, owner, 4))
        except RemoteRankError:
            _close_flags(flags)  # every rank is here: the closes are collective
            raise  # (a WorldError leaves them to the run's sharing, as below)
        try:
            words = HostBuffer.allocate(system, None, 8)
            words.write(struct.pack("<ii", 0, 1))
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
                _close_flags(flags)
            raise
        assert words is not None
        return cls(system, flags, words, sharing.domain_ranks(system.world.rank))

    def relays(self, ranks: Sequence[int]) -> bool:
        """Whether this rank relays its host gate to its domain's flag in a cell whose pairs
        are issued by ``ranks`` (in pair order): it is the first of them in its domain."""
        first = next((r for r in ranks if r in self.members), None)
        return first == self.system.world.rank

    @property
    def flag_pointer(self) -> int:
        """The flag's address in this rank's mapping."""
        return int(self.shared.ptr)

    def _put(self, word: int) -> None:
        system = self.system
        device = self.shared.context_device
        with system.backend.stream(device) as s:
            system.backend.memcpy_async(self.shared.ptr, self._words.ptr + 4 * word, 4, s)
            system.backend.synchronize(s, system.options.sync_timeout_s)

    def reset(self) -> None:
        """Zero the flag (before each sample, by the rank that relays to it in the cell:
        :meth:`relays`), synchronously."""
        self._put(0)

    def release(self) -> None:
        """Set the flag (on the error path: no rank's streams stay held)."""
        self._put(1)

    def close(self) -> None:
        """Collective: free the flags' memory and the host words."""
        try:
            for flag in self.flags:
                flag.close()
        finally:
            self._words.close()

    def __enter__(self) -> RankGate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close_flags(flags: Sequence[Any]) -> None:
    """Close every flag made so far (collectively: every rank calls it at the same point);
    each close is tried."""
    for flag in flags:
        with contextlib.suppress(GpubwError):
            flag.close()
