"""Memory latency by pointer chasing (nvbandwidth #32, #33, and v0.10's TMA one #42); see
:mod:`gpubw.measure.latency`. Each testcase's matrix title is its ``TITLE`` (#42's is not
public: gpubw's guess, docs/compatibility.md).

Both ignore the buffer size (the ring is always 2 MiB), the sample count, the statistic and the
loop count; the runner runs them once (``fixed_size``).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpubw.measure.latency import (
    ACCESSES,
    NODE_BYTES,
    RING_BYTES,
    STRIDE_NODES,
    LatencyMeasurement,
    pointer_chase,
    write_device_ring,
    write_host_ring,
)
from gpubw.memory.buffers import DeviceBuffer, HostBuffer
from gpubw.model.results import AXIS_GPU, AXIS_HOST, BOTH_WAYS, LATENCY, Axes, Matrix
from gpubw.testcases.base import Testcase
from gpubw.testcases.shapes import PeerTestcase, labels


def latency_matrix(
    testcase: Testcase,
    header: str,
    grid: list[list[LatencyMeasurement | None]],
    axes: Axes,
    how: str = "SM",
) -> Matrix:
    """A latency matrix (seconds per access); samples are the per-launch latencies."""
    found = next((m for row in grid for m in row if m is not None), None)
    access = "16-byte TMA bulk copy" if how == "TMA" else "8-byte load"
    notes: tuple[tuple[str, object], ...] = (
        ("ring_bytes", RING_BYTES),
        ("stride_bytes", STRIDE_NODES * NODE_BYTES),
    )
    if found is not None:
        notes += (("launches", found.launches), ("steps_per_launch", found.steps))
    return Matrix(
        key=testcase.key,
        description=header,
        unit=LATENCY,
        row_labels=labels(len(grid)),
        column_labels=labels(len(grid[0])),
        values=[[None if m is None else m.seconds for m in row] for row in grid],
        samples=[[None if m is None else m.launch_samples for m in row] for row in grid],
        bytes_counted=(
            f"not a bandwidth: seconds per dependent {access}, the sum of the kernel "
            f"launches' times divided by {ACCESSES:,} accesses (nvbandwidth's divisor), "
            "each launch timed by events queued with it behind the spin gate (the host's "
            "launch call is not in it)"
        ),
        statistic=f"sum of launch times / {ACCESSES} accesses",
        initiator=f"{how} pointer chase",
        bandwidth_kind="latency",
        bytes_per_copy=None,
        notes=notes,
        axes=axes,
    )


class HostDeviceLatencySM(Testcase):
    """Latency of the device's SMs reading pinned host memory near the device: a kernel on each
    device chases pointers through a 2 MB ring in host memory (--bufferSize is ignored).
    Reports the time per access of each device."""

    TITLE = "memory latency SM CPU(row) <-> GPU(column) (ns)"
    fixed_size = True
    filter = Testcase.no_bounce_buffers  # events are unreliable under bounce buffers

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        row: list[LatencyMeasurement | None] = []
        for g in range(self.device_count):
            if not self.selected(g):
                row.append(None)
                continue
            with HostBuffer.allocate(self.system, g, RING_BYTES) as ring:
                assert isinstance(ring, HostBuffer)
                write_host_ring(ring)
                row.append(pointer_chase(self.system, g, ring))
        return [latency_matrix(self, self.TITLE, [row], Axes(AXIS_HOST, AXIS_GPU, BOTH_WAYS))]


class DeviceToDeviceLatencySM(PeerTestcase):
    """Latency of a device's SMs (row) reading each accessible peer's memory (column): a kernel
    chases pointers through a 2 MB ring on the peer (--bufferSize is ignored).
    Reports the time per access of every accessible pair."""

    TITLE = "Device to Device Latency SM GPU(row) <-> GPU(column) (ns)"
    #: how each dereference is made (:data:`gpubw.measure.latency.CHASE_KERNELS`)
    HOW = "SM"
    fixed_size = True

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        n = self.device_count
        grid: list[list[LatencyMeasurement | None]] = [[None] * n for _ in range(n)]
        for c in range(n):
            if not self.selected(c):
                continue
            with DeviceBuffer.allocate(self.system, c, RING_BYTES) as ring:
                assert isinstance(ring, DeviceBuffer)
                write_device_ring(self.system, ring)
                for r in range(n):
                    if r == c or not self.selected(r):
                        continue
                    # nvbandwidth allocates a buffer on r only to enable peer access r <-> c.
                    with DeviceBuffer.allocate(self.system, r, RING_BYTES) as reader:
                        assert isinstance(reader, DeviceBuffer)
                        if reader.enable_peer_access(ring):
                            grid[r][c] = pointer_chase(self.system, r, ring, self.HOW)
        axes = Axes(AXIS_GPU, AXIS_GPU, BOTH_WAYS)
        return [latency_matrix(self, self.TITLE, grid, axes, self.HOW)]


class DeviceToDeviceLatencyTMA(DeviceToDeviceLatencySM):
    """Latency of a device's TMA (row) reading each accessible peer's memory (column): a kernel
    chases pointers through a 2 MB ring on the peer by 16-byte TMA bulk copies (--bufferSize is
    ignored). Reports the time per access of every accessible pair."""

    TITLE = "Device to Device Latency TMA GPU(row) <-> GPU(column) (ns)"
    HOW = "TMA"

    def filter(self) -> bool:
        return self.needs_tma() and self.needs_peers()
