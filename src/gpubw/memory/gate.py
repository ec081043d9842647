"""The spin gate: one page of pinned host memory that holds streams until the host opens it.

:class:`Gate` owns the page's layout; nothing else knows the offsets. ``gpubw_gate_wait``
spins on the int32 *flag* until the host writes 1 (or its own timeout passes, then it writes 1
to the int32 *status*). From offset 64 on the page holds u64 verification result slots, where
the compares' first-bad-word results land for the host to read after a synchronize.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from gpubw.backend.base import Backend, ptr, u64

#: The gate kernel (see kernels/gpubw.cu): (flag pointer, timeout in ns, status pointer).
GATE_KERNEL = "gpubw_gate_wait"
#: The relay kernel of the cross-rank gate (see kernels/gpubw.cu): (host flag, device flag,
#: timeout in ns, status). It waits on the host flag like ``gpubw_gate_wait``, then sets the
#: device flag every other rank's gate kernels wait on.
RELAY_KERNEL = "gpubw_gate_relay"

_CLOSED = struct.pack("<ii", 0, 0)  # flag 0 and status 0, written together
_OPEN = struct.pack("<i", 1)


class Gate:
    """The gate page and what is done with it. The page itself is allocated on first use by
    ``allocate_page`` (a callable returning a pinned host pointer of :attr:`PAGE_BYTES`
    bytes, owned and freed by whoever provides it)."""

    #: int32 flag: 0 holds the waiting streams, 1 releases them
    FLAG = 0
    #: int32 status: the gate kernel writes 1 when it gave up waiting (timed out)
    STATUS = 4
    #: first u64 verification result slot
    RESULTS = 64
    PAGE_BYTES = 4096
    #: number of result slots on the page
    SLOTS = (PAGE_BYTES - RESULTS) // 8

    def __init__(self, backend: Backend, allocate_page: Callable[[], int]) -> None:
        self._backend = backend
        self._allocate_page = allocate_page
        self._page: int | None = None

    @property
    def page(self) -> int:
        """The page's host pointer (allocated here on first use)."""
        if self._page is None:
            self._page = self._allocate_page()
        return self._page

    def close(self) -> None:
        """Hold every stream that waits at the gate from now on; clear the timeout status."""
        self._backend.host_write(self.page + self.FLAG, _CLOSED)

    def open(self) -> None:
        """Release every stream held by the gate."""
        self._backend.host_write(self.page + self.FLAG, _OPEN)

    def timed_out(self) -> bool:
        """Whether a gate kernel gave up waiting since the last :meth:`close`."""
        raw = self._backend.host_read(self.page + self.STATUS, 4)
        return bool(struct.unpack("<i", raw)[0] != 0)

    def enqueue_wait(self, stream: Any, timeout_s: float, *, flag: int | None = None) -> None:
        """Hold ``stream`` at the gate (a one-thread kernel on its device) until it is opened
        or ``timeout_s`` seconds have passed on the device. With ``flag`` (the address of an
        int32, the cross-rank gate's device flag) the kernel waits on that int instead of the
        page's flag; a timeout still lands in this page's status."""
        page = self.page
        waited = page + self.FLAG if flag is None else flag
        args = (ptr(waited), u64(int(timeout_s * 1e9)), ptr(page + self.STATUS))
        self._backend.launch(GATE_KERNEL, 1, 1, args, stream)

    def enqueue_relay(self, stream: Any, device_flag: int, timeout_s: float) -> None:
        """Hold ``stream`` at the gate like :meth:`enqueue_wait`; when the gate opens (or
        ``timeout_s`` passed: status set) the kernel sets the int32 at ``device_flag``, which
        the other ranks' streams wait on (:meth:`enqueue_wait` with ``flag``)."""
        page = self.page
        args = (
            ptr(page + self.FLAG),
            ptr(device_flag),
            u64(int(timeout_s * 1e9)),
            ptr(page + self.STATUS),
        )
        self._backend.launch(RELAY_KERNEL, 1, 1, args, stream)

    def slot(self, index: int) -> int:
        """Host pointer of verification result slot ``index`` (a u64)."""
        if not 0 <= index < self.SLOTS:
            raise ValueError(f"gate result slot {index} out of range 0..{self.SLOTS - 1}")
        return self.page + self.RESULTS + 8 * index
