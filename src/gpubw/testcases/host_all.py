"""Host <-> device copies with every device busy (nvbandwidth #8-#11, #24-#27).

Column g measures a copy between device g and pinned host memory near g while every other
device j copies between itself and host memory near j at the same time; only g's copy is
reported. The copy-engine tests run their interference at twice the size, so it outlasts the
measured copy; the SM tests do not.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpubw.measure.initiators import CE, SM, SPLIT_WARP
from gpubw.model.results import BOTH_WAYS, Matrix
from gpubw.testcases.base import Testcase
from gpubw.testcases.host import (
    BIDIR_CE,
    BIDIR_SM,
    D2H_CE,
    D2H_SM,
    H2D_CE,
    H2D_SM,
    TO_GPU,
    TO_HOST,
)
from gpubw.testcases.shapes import D2H, H2D, Plan, host_traffic


class AllToHostCE(Testcase):
    """Device to host copy by the copy engine, measured while every other device copies to
    the host (twice the size) at the same time.
    Only the measured device's device to host bandwidth is reported."""

    kernel_modules = ()  # copy-engine copies: gpubw's protocol kernels only

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return host_traffic(
            Plan(self, size, loops, CE, D2H_CE),
            D2H,
            direction=TO_HOST,
            other_devices=[D2H],
            interference_size=2 * size,
        )


class AllToHostBidirectionalCE(Testcase):
    """Device to host copy by the copy engine, measured while the same device copies host to
    device and every other device copies both ways (all twice the size) at the same time.
    Only the measured device to host bandwidth is reported."""

    kernel_modules = ()  # copy-engine copies: gpubw's protocol kernels only

    filter = Testcase.no_bounce_buffers

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return host_traffic(
            Plan(self, size, loops, CE, BIDIR_CE),
            D2H,
            direction=BOTH_WAYS,
            same_device=[H2D],
            other_devices=[D2H, H2D],
            interference_size=2 * size,
        )


class HostToAllCE(Testcase):
    """Host to device copy by the copy engine, measured while the host copies to every other
    device (twice the size) at the same time.
    Only the measured device's host to device bandwidth is reported."""

    kernel_modules = ()  # copy-engine copies: gpubw's protocol kernels only

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return host_traffic(
            Plan(self, size, loops, CE, H2D_CE),
            H2D,
            direction=TO_GPU,
            other_devices=[H2D],
            interference_size=2 * size,
        )


class HostToAllBidirectionalCE(Testcase):
    """Host to device copy by the copy engine, measured while the same device copies device to
    host and every other device copies both ways (all twice the size) at the same time.
    Only the measured host to device bandwidth is reported."""

    kernel_modules = ()  # copy-engine copies: gpubw's protocol kernels only

    filter = Testcase.no_bounce_buffers

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return host_traffic(
            Plan(self, size, loops, CE, BIDIR_CE),
            H2D,
            direction=BOTH_WAYS,
            same_device=[D2H],
            other_devices=[H2D, D2H],
            interference_size=2 * size,
        )


class AllToHostSM(Testcase):
    """Device to host copy by a copy kernel on the device's SMs, measured while every other
    device's SMs copy to the host at the same time.
    Only the measured device's bandwidth is reported."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return host_traffic(
            Plan(self, size, loops, SM, D2H_SM), D2H, direction=TO_HOST, other_devices=[D2H]
        )


class AllToHostBidirectionalSM(Testcase):
    """Device <-> host copy by one split-warp kernel per device (half the warps each way),
    measured while every other device runs its own split-warp kernel at the same time.
    Only the measured device's one-direction bandwidth is reported."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return host_traffic(
            Plan(self, size, loops, SPLIT_WARP, BIDIR_SM),
            D2H,
            direction=BOTH_WAYS,
            other_devices=[D2H],
        )


class HostToAllSM(Testcase):
    """Host to device copy by a copy kernel on the device's SMs, measured while every other
    device's SMs copy from the host at the same time.
    Only the measured device's bandwidth is reported."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return host_traffic(
            Plan(self, size, loops, SM, H2D_SM), H2D, direction=TO_GPU, other_devices=[H2D]
        )


class HostToAllBidirectionalSM(Testcase):
    """Host <-> device copy by one split-warp kernel per device (half the warps each way),
    measured while every other device runs its own split-warp kernel at the same time.
    Only the measured device's one-direction bandwidth is reported."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return host_traffic(
            Plan(self, size, loops, SPLIT_WARP, BIDIR_SM),
            H2D,
            direction=BOTH_WAYS,
            other_devices=[D2H],
        )
