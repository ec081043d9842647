"""Copies inside one device's memory (nvbandwidth #34, and gpubw's SM variant).

Both buffers are on device g, so every byte is read once and written once. nvbandwidth counts
the bytes once; a memory datasheet's bandwidth counts reads and writes, so each testcase also
returns ``<key>_read_write`` with the figure doubled, and notes the percent of the device's
nominal memory bandwidth (bus width x memory clock x 2).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from gpubw.measure.initiators import CE, SM, Initiator
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


class DeviceLocalCopy(Testcase):
    """Copy engine copy between two buffers in the same device's memory, one device at a time.
    Reports each device's copy bandwidth (bytes counted once, as nvbandwidth), and also read +
    write (twice that) with the percent of the memory's nominal bandwidth."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return local_copy(self, size, loops, CE, "memcpy local GPU(column) bandwidth (GB/s)")


class DeviceLocalCopySM(Testcase):
    """Copy kernel on the device's SMs between two buffers in its own memory, one device at a
    time (gpubw's own; not in nvbandwidth). Reports the copy bandwidth counted once, and read +
    write (twice that) with the percent of the memory's nominal bandwidth."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return local_copy(self, size, loops, SM, "memcpy SM local GPU(column) bandwidth (GB/s)")
