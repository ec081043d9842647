"""The example testcase: a copy inside each GPU's memory, counted as read + write."""

from __future__ import annotations

from collections.abc import Sequence

from gpubw import (
    BANDWIDTH,
    CE,
    COUNTED_READ_WRITE,
    Axes,
    Copy,
    DeviceBuffer,
    Kind,
    Matrix,
    MemcpyOperation,
    Testcase,
    device_labels,
)


class LocalReadWrite(Testcase):
    """Copy engine copy inside each device's memory, counted as read + write: each byte is
    read from one buffer and written to the other, the figure to hold against the memory's
    datasheet bandwidth."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        op = MemcpyOperation(self.system, CE, loops=loops)
        values: list[float] = []
        samples: list[tuple[float, ...]] = []
        statistic = self.system.options.statistic
        for g in range(self.device_count):
            with (
                DeviceBuffer.allocate(self.system, g, size) as a,
                DeviceBuffer.allocate(self.system, g, size) as b,
            ):
                cell = op.measure([Copy(a, b)])
            # the bytes copied, counted twice (read + written): the figure and every sample
            values.append(2 * cell.value(Kind.FIRST))
            samples.append(tuple(2 * s for s in cell.samples(Kind.FIRST)))
        return [
            Matrix(
                self.key,
                # "GPU(column)": each column is one GPU (gpubw names it in verdicts, CSV, ...)
                "memcpy CE local GPU(column) read + write bandwidth (GB/s)",
                BANDWIDTH,
                ["0"],
                device_labels(self.device_count),  # "0" .. "n-1", as nvbandwidth labels
                [values],
                axes=Axes("none", "gpu"),  # one row of figures, a column per GPU
                samples=[samples],  # per cell, the raw samples: -v, stdev, cv, the noise rule
                bytes_counting=COUNTED_READ_WRITE,  # how the bytes are counted, as data
                bytes_counted="each byte read and each byte written (twice the bytes copied)",
                statistic=statistic,
                initiator="CE",
                bytes_per_copy=size,
            )
        ]
