"""Traffic inside one device's memory (nvbandwidth v0.10's #38-#41 and #43).

The copies (CE, SM, TMA): both buffers are on device g, so every byte is read once and written
once. nvbandwidth counts the bytes once; a memory datasheet's bandwidth counts reads and
writes, so each copy testcase also returns ``<key>_read_write`` with the figure doubled, and
notes the percent of the device's nominal memory bandwidth (bus width x memory clock x 2).
The read-only and write-only kernels (#40, #41) count the bytes read, or written, once: that
is all the memory moves, so their one matrix notes the percent of the nominal bandwidth.

Each testcase's matrix title is its ``TITLE`` (v0.10's titles of #39-#41 and #43 are not
public: gpubw's guesses, docs/compatibility.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from gpubw.measure.initiators import CE, SM, SM_READ, SM_WRITE, TMA, Initiator
from gpubw.measure.measurement import Copy
from gpubw.model.results import AXIS_GPU, AXIS_NONE, Axes, Matrix
from gpubw.testcases.base import Testcase
from gpubw.testcases.shapes import Cell, Plan, one_by_n


def within_device(cell: Cell, g: int) -> list[Copy]:
    """One buffer on g copied into another buffer on g."""
    return [Copy(cell.device(g), cell.device(g))]


def local_copy(
    testcase: Testcase, size: int, loops: int, initiator: Initiator, header: str
) -> list[Matrix]:
    """The counted-once matrix (nvbandwidth's) and the read + write one, with the nominal
    memory bandwidth and the percent of it in both matrices' notes."""
    # the one row names no end: each figure is the column's GPU with itself
    axes = Axes(AXIS_NONE, AXIS_GPU)
    (once,) = one_by_n(Plan(testcase, size, loops, initiator, header), within_device, axes=axes)
    nominal = tuple(d.nominal_memory_bandwidth for d in testcase.system.devices)
    twice = [[None if v is None else 2 * v for v in row] for row in once.values]

    def percent(values: Sequence[float | None]) -> tuple[float | None, ...]:
        return tuple(None if v is None or not n else 100.0 * v / n for v, n in zip(values, nominal))

    read_write_percent = ("percent_of_nominal_read_write", percent(twice[0]))
    once = attrs.evolve(
        once,
        bytes_counted=(
            f"{once.bytes_counted}, as nvbandwidth; each byte is also read, so the memory "
            f"moves twice as much: see {testcase.key}_read_write"
        ),
        notes=(("nominal_memory_bandwidth", nominal), read_write_percent),
    )
    read_write = attrs.evolve(
        once,
        key=f"{testcase.key}_read_write",
        description=header.replace(" bandwidth", " read + write bandwidth"),
        values=twice,
        samples=[
            [None if s is None else tuple(2 * x for x in s) for s in row] for row in once.samples
        ],
        bytes_counted=(
            "read + write (each byte copied counted twice: read from one buffer, written to "
            f"the other), for comparison with the memory's datasheet bandwidth; "
            f"{testcase.key} counts it once"
        ),
        notes=(
            ("nominal_memory_bandwidth", nominal),
            ("percent_of_nominal", percent(twice[0])),
        ),
    )
    return [once, read_write]


def one_buffer(cell: Cell, g: int) -> list[Copy]:
    """One buffer on g, both ends of the "copy" (a kernel that only reads or only writes)."""
    buf = cell.device(g)
    return [Copy(buf, buf)]


def one_way(testcase: Testcase, size: int, loops: int, initiator: Initiator, header: str) -> Matrix:
    """The bandwidth of a read-only or write-only kernel over one buffer of each device, with
    the nominal memory bandwidth and the percent of it in the notes."""
    axes = Axes(AXIS_NONE, AXIS_GPU)
    (matrix,) = one_by_n(Plan(testcase, size, loops, initiator, header), one_buffer, axes=axes)
    nominal = tuple(d.nominal_memory_bandwidth for d in testcase.system.devices)
    percent = tuple(
        None if v is None or not n else 100.0 * v / n for v, n in zip(matrix.values[0], nominal)
    )
    moved = "read" if initiator is SM_READ else "written"
    return attrs.evolve(
        matrix,
        bytes_counted=matrix.bytes_counted.replace("bytes of the copy", f"bytes {moved}"),
        notes=(("nominal_memory_bandwidth", nominal), ("percent_of_nominal", percent)),
    )


class DeviceLocalCopy(Testcase):
    """Copy engine copy between two buffers in the same device's memory, one device at a time.
    Reports each device's copy bandwidth (bytes counted once, as nvbandwidth), and also read +
    write (twice that) with the percent of the memory's nominal bandwidth."""

    TITLE = "memcpy local GPU(column) bandwidth (GB/s)"

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return local_copy(self, size, loops, CE, self.TITLE)


class DeviceLocalCopySM(Testcase):
    """Copy kernel on the device's SMs between two buffers in its own memory, one device at a
    time. Reports the copy bandwidth counted once, and read + write (twice that) with the
    percent of the memory's nominal bandwidth."""

    TITLE = "memcpy SM local GPU(column) bandwidth (GB/s)"

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return local_copy(self, size, loops, SM, self.TITLE)


class DeviceLocalReadSM(Testcase):
    """Read-only kernel on the device's SMs over a buffer in its own memory, one device at a
    time. Reports the bytes read per second (counted once) with the percent of the memory's
    nominal bandwidth."""

    TITLE = "memcpy SM local read GPU(column) bandwidth (GB/s)"

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return [one_way(self, size, loops, SM_READ, self.TITLE)]


class DeviceLocalWriteSM(Testcase):
    """Write-only kernel on the device's SMs over a buffer in its own memory, one device at a
    time. Reports the bytes written per second (counted once) with the percent of the memory's
    nominal bandwidth."""

    TITLE = "memcpy SM local write GPU(column) bandwidth (GB/s)"

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return [one_way(self, size, loops, SM_WRITE, self.TITLE)]


class DeviceLocalCopyTMA(Testcase):
    """TMA bulk copies between two buffers in the same device's memory, through its shared
    memory, one device at a time. Reports the copy bandwidth counted once, and read + write
    (twice that) with the percent of the memory's nominal bandwidth."""

    TITLE = "memcpy TMA local GPU(column) bandwidth (GB/s)"
    filter = Testcase.needs_tma

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return local_copy(self, size, loops, TMA, self.TITLE)
