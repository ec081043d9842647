"""Host <-> device copies, one device at a time (nvbandwidth #0-#3, #16-#19).

Column g copies between device g and pinned host memory near g; only g is busy.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpubw.measure.initiators import CE, SM, SPLIT_WARP
from gpubw.model.results import BOTH_WAYS, COLUMN_TO_ROW, ROW_TO_COLUMN, Matrix
from gpubw.testcases.base import Testcase
from gpubw.testcases.shapes import D2H, H2D, Plan, host_traffic

H2D_CE = "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)"
D2H_CE = "memcpy CE CPU(row) <- GPU(column) bandwidth (GB/s)"
BIDIR_CE = "memcpy CE CPU(row) <-> GPU(column) bandwidth (GB/s)"
H2D_SM = "memcpy SM CPU(row) -> GPU(column) bandwidth (GB/s)"
D2H_SM = "memcpy SM CPU(row) <- GPU(column) bandwidth (GB/s)"
BIDIR_SM = "memcpy SM CPU(row) <-> GPU(column) bandwidth (GB/s)"
#: the headers' arrows between the host (the row) and the GPUs (the columns)
TO_GPU, TO_HOST = ROW_TO_COLUMN, COLUMN_TO_ROW


class HostToDeviceCE(Testcase):
    """Host to device copy by the copy engine (cuMemcpyAsync), one device at a time.
    Reports each device's host to device bandwidth."""

    kernel_modules = ()  # copy-engine copies: gpubw's protocol kernels only

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return host_traffic(Plan(self, size, loops, CE, H2D_CE), H2D, direction=TO_GPU)


class DeviceToHostCE(Testcase):
    """Device to host copy by the copy engine (cuMemcpyAsync), one device at a time.
    Reports each device's device to host bandwidth."""

    kernel_modules = ()  # copy-engine copies: gpubw's protocol kernels only

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return host_traffic(Plan(self, size, loops, CE, D2H_CE), D2H, direction=TO_HOST)


class HostToDeviceBidirectionalCE(Testcase):
    """Host to device copy by the copy engine, measured while a device to host copy (twice
    the size) runs on the same device at the same time.
    Only the host to device bandwidth is reported."""

    kernel_modules = ()  # copy-engine copies: gpubw's protocol kernels only

    filter = Testcase.no_bounce_buffers

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return host_traffic(
            Plan(self, size, loops, CE, BIDIR_CE),
            H2D,
            direction=BOTH_WAYS,
            same_device=[D2H],
            interference_size=2 * size,
        )


class DeviceToHostBidirectionalCE(Testcase):
    """Device to host copy by the copy engine, measured while a host to device copy (twice
    the size) runs on the same device at the same time.
    Only the device to host bandwidth is reported."""

    kernel_modules = ()  # copy-engine copies: gpubw's protocol kernels only

    filter = Testcase.no_bounce_buffers

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return host_traffic(
            Plan(self, size, loops, CE, BIDIR_CE),
            D2H,
            direction=BOTH_WAYS,
            same_device=[H2D],
            interference_size=2 * size,
        )


class HostToDeviceSM(Testcase):
    """Host to device copy by a copy kernel on the device's SMs, one device at a time.
    Reports each device's host to device bandwidth."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return host_traffic(Plan(self, size, loops, SM, H2D_SM), H2D, direction=TO_GPU)


class DeviceToHostSM(Testcase):
    """Device to host copy by a copy kernel on the device's SMs, one device at a time.
    Reports each device's device to host bandwidth."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return host_traffic(Plan(self, size, loops, SM, D2H_SM), D2H, direction=TO_HOST)


class HostToDeviceBidirectionalSM(Testcase):
    """Host <-> device copy by one split-warp kernel on the device: half the warps copy host
    to device while the other half copy device to host, between the same two buffers.
    Reports the bandwidth of one direction (bytes moved / time, halved)."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return host_traffic(Plan(self, size, loops, SPLIT_WARP, BIDIR_SM), H2D, direction=BOTH_WAYS)


class DeviceToHostBidirectionalSM(Testcase):
    """Device <-> host copy by one split-warp kernel on the device: half the warps copy in
    each direction between the same two buffers (identical to
    host_to_device_bidirectional_memcpy_sm, as in nvbandwidth). Reports one direction."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return host_traffic(Plan(self, size, loops, SPLIT_WARP, BIDIR_SM), H2D, direction=BOTH_WAYS)
