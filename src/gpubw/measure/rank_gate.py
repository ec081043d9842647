"""The cross-rank spin gate's device flag (the multinode testcases; see
:meth:`gpubw.measure.measurement.MemcpyOperation.measure_ranks`)."""

from __future__ import annotations

import contextlib
import struct
from typing import Any

from gpubw.memory.buffers import Buffer, HostBuffer
from gpubw.memory.shared import RemoteRankError, SharedBuffer, agreed
from gpubw.memory.system import System
from gpubw.model.errors import GpubwError


class RankGate:
    """The device flag of the cross-rank spin gate: one int in memory owned by rank 0 and
    mapped by every rank (a shared buffer, made collectively, once per testcase), plus a
    small host buffer holding the words 0 and 1 that are copied into it. Rank 0 zeroes it
    before each sample; the first rank's relay kernel sets it when its host gate opens;
    every other gate kernel waits on it. Close it collectively (a context manager)."""

    #: the owner rank of the flag's memory
    owner = 0

    def __init__(self, system: System, shared: Any, words: Buffer) -> None:
        self.system = system
        self.shared = shared
        self._words = words

    @classmethod
    def create(cls, system: System) -> RankGate:
        """Collective: every rank calls it at the same point. If any rank fails to make its
        host words, every rank frees the flag (collectively) and raises the same
        :class:`gpubw.memory.shared.RemoteRankError` (a broken world leaves the flag to the run's
        sharing, which frees what is left at its end)."""
        shared = SharedBuffer.create(system, cls.owner, 4)
        words: Buffer | None = None
        error: BaseException | None = None
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
                with contextlib.suppress(GpubwError):
                    shared.close()
            raise
        assert words is not None
        return cls(system, shared, words)

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
        """Zero the flag (rank 0, before each sample), synchronously."""
        self._put(0)

    def release(self) -> None:
        """Set the flag (on the error path: no rank's streams stay held)."""
        self._put(1)

    def close(self) -> None:
        """Collective: free the flag's memory and the host words."""
        try:
            self.shared.close()
        finally:
            self._words.close()

    def __enter__(self) -> RankGate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
