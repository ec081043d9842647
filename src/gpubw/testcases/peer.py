"""Device <-> device copies over every accessible peer pair (nvbandwidth #4-#7, #20-#23, and
v0.10's TMA ones #34-#37).

Row r is the target device, column c its peer. "Read" copies peer -> target and "write"
target -> peer, both issued by the target (row) device. The diagonal and pairs where r cannot
access c are N/A; the testcases are waived unless some pair of devices has peer access (the
TMA ones also where a device has no TMA: compute capability below 9.0).

Each testcase's matrix title is its ``TITLE`` (v0.10's TMA titles are not public: gpubw's
guesses, docs/compatibility.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpubw.measure.initiators import CE, SM, TMA
from gpubw.measure.measurement import Copy, Prefer
from gpubw.memory.buffers import DeviceBuffer
from gpubw.model.results import COLUMN_TO_ROW, ROW_TO_COLUMN, Matrix
from gpubw.testcases.shapes import Cell, PeerTestcase, Plan, bidirectional, n_by_n


class TmaPeerTestcase(PeerTestcase):
    """Base of the peer testcases made with TMA: waived without TMA or without peer access."""

    def filter(self) -> bool:
        return self.needs_tma() and self.needs_peers()


def from_peer(cell: Cell, target: DeviceBuffer, peer: DeviceBuffer) -> list[Copy]:
    """The peer's memory is copied into the target's."""
    return [Copy(peer, target)]


def to_peer(cell: Cell, target: DeviceBuffer, peer: DeviceBuffer) -> list[Copy]:
    """The target's memory is copied into the peer's."""
    return [Copy(target, peer)]


class DeviceToDeviceReadCE(PeerTestcase):
    """Copy engine copy from each accessible peer device (column) into the target device (row),
    issued in the target's context: the target reads the peer's memory.
    Reports every accessible pair's bandwidth, one copy at a time."""

    kernel_modules = ()  # copy-engine copies: gpubw's protocol kernels only

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        header = "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)"
        return n_by_n(
            Plan(self, size, loops, CE, header),
            from_peer,
            prefer=Prefer.DST,
            direction=ROW_TO_COLUMN,
        )


class DeviceToDeviceWriteCE(PeerTestcase):
    """Copy engine copy from the target device (row) into each accessible peer (column),
    issued in the target's context: the target writes the peer's memory.
    Reports every accessible pair's bandwidth, one copy at a time."""

    kernel_modules = ()  # copy-engine copies: gpubw's protocol kernels only

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        header = "memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)"
        return n_by_n(
            Plan(self, size, loops, CE, header), to_peer, prefer=Prefer.SRC, direction=COLUMN_TO_ROW
        )


class DeviceToDeviceBidirectionalReadCE(PeerTestcase):
    """Copy engine copies both ways at once between the target (row) and each accessible peer
    (column), each issued by the device it copies into (reads).
    Reports peer -> target (Read1), target -> peer (Read2) and their total."""

    kernel_modules = ()  # copy-engine copies: gpubw's protocol kernels only

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        header = "memcpy CE GPU(row) <-> GPU(column) {} bandwidth (GB/s)"
        return bidirectional(Plan(self, size, loops, CE, header), "Read", prefer=Prefer.DST)


class DeviceToDeviceBidirectionalWriteCE(PeerTestcase):
    """Copy engine copies both ways at once between the target (row) and each accessible peer
    (column), each issued by the device it copies from (writes).
    Reports peer -> target (Write1, written by the peer), target -> peer (Write2), total."""

    kernel_modules = ()  # copy-engine copies: gpubw's protocol kernels only

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        header = "memcpy CE GPU(row) <-> GPU(column) {} bandwidth (GB/s)"
        return bidirectional(Plan(self, size, loops, CE, header), "Write", prefer=Prefer.SRC)


class DeviceToDeviceReadSM(PeerTestcase):
    """Copy kernel on the target device (row) copying from each accessible peer (column) into
    the target: the target's SMs read the peer's memory.
    Reports every accessible pair's bandwidth, one copy at a time."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        header = "memcpy SM GPU(row) -> GPU(column) bandwidth (GB/s)"
        return n_by_n(
            Plan(self, size, loops, SM, header),
            from_peer,
            prefer=Prefer.DST,
            direction=ROW_TO_COLUMN,
        )


class DeviceToDeviceWriteSM(PeerTestcase):
    """Copy kernel on the target device (row) copying from the target into each accessible peer
    (column): the target's SMs write the peer's memory.
    Reports every accessible pair's bandwidth, one copy at a time."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        header = "memcpy SM GPU(row) <- GPU(column) bandwidth (GB/s)"
        return n_by_n(
            Plan(self, size, loops, SM, header), to_peer, prefer=Prefer.SRC, direction=COLUMN_TO_ROW
        )


class DeviceToDeviceBidirectionalReadSM(PeerTestcase):
    """Copy kernels both ways at once between the target (row) and each accessible peer
    (column), each on the device it copies into (reads).
    Reports peer -> target (Read1), target -> peer (Read2) and their total."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        header = "memcpy SM GPU(row) <-> GPU(column) {} bandwidth (GB/s)"
        return bidirectional(Plan(self, size, loops, SM, header), "Read", prefer=Prefer.DST)


class DeviceToDeviceBidirectionalWriteSM(PeerTestcase):
    """Copy kernels both ways at once between the target (row) and each accessible peer
    (column), each on the device it copies from (writes).
    Reports peer -> target (Write1, written by the peer), target -> peer (Write2), total."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        header = "memcpy SM GPU(row) <-> GPU(column) {} bandwidth (GB/s)"
        return bidirectional(Plan(self, size, loops, SM, header), "Write", prefer=Prefer.SRC)


class DeviceToDeviceReadTMA(TmaPeerTestcase):
    """TMA bulk copies on the target device (row) from each accessible peer (column) into the
    target, through the target's shared memory: the target's TMA reads the peer's memory.
    Reports every accessible pair's bandwidth, one copy at a time."""

    TITLE = "memcpy TMA GPU(row) -> GPU(column) bandwidth (GB/s)"

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return n_by_n(
            Plan(self, size, loops, TMA, self.TITLE),
            from_peer,
            prefer=Prefer.DST,
            direction=ROW_TO_COLUMN,
        )


class DeviceToDeviceWriteTMA(TmaPeerTestcase):
    """TMA bulk copies on the target device (row) from the target into each accessible peer
    (column), through the target's shared memory: the target's TMA writes the peer's memory.
    Reports every accessible pair's bandwidth, one copy at a time."""

    TITLE = "memcpy TMA GPU(row) <- GPU(column) bandwidth (GB/s)"

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return n_by_n(
            Plan(self, size, loops, TMA, self.TITLE),
            to_peer,
            prefer=Prefer.SRC,
            direction=COLUMN_TO_ROW,
        )


class DeviceToDeviceBidirectionalReadTMA(TmaPeerTestcase):
    """TMA bulk copies both ways at once between the target (row) and each accessible peer
    (column), each made by the device it copies into (reads).
    Reports peer -> target (Read1), target -> peer (Read2) and their total."""

    TITLE = "memcpy TMA GPU(row) <-> GPU(column) {} bandwidth (GB/s)"

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return bidirectional(Plan(self, size, loops, TMA, self.TITLE), "Read", prefer=Prefer.DST)


class DeviceToDeviceBidirectionalWriteTMA(TmaPeerTestcase):
    """TMA bulk copies both ways at once between the target (row) and each accessible peer
    (column), each made by the device it copies from (writes).
    Reports peer -> target (Write1, written by the peer), target -> peer (Write2), total."""

    TITLE = "memcpy TMA GPU(row) <-> GPU(column) {} bandwidth (GB/s)"

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return bidirectional(Plan(self, size, loops, TMA, self.TITLE), "Write", prefer=Prefer.SRC)
