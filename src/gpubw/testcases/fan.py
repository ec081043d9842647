"""All to one and one to all (nvbandwidth #12-#15, #28-#31).

Column g: device g and every peer it can access copy at once, one copy per peer, and the figure
is the total bandwidth into or out of g (all bytes over the time from the first start to the
last end). "All to one write" and "one to all read" move data into g; "all to one read" and
"one to all write" move data out of g. They differ in which side issues the copies.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpubw.measure.initiators import CE, SM
from gpubw.measure.measurement import Prefer
from gpubw.model.results import Matrix
from gpubw.testcases.shapes import PeerTestcase, Plan, all_to_one, one_to_all

INTO_CE = "memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)"
OUT_OF_CE = "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)"
INTO_SM = "memcpy SM GPU(row) <- GPU(column) bandwidth (GB/s)"
OUT_OF_SM = "memcpy SM GPU(row) -> GPU(column) bandwidth (GB/s)"


class AllToOneWriteCE(PeerTestcase):
    """Copy engine copies from every accessible peer into one device at once, each issued by
    the peer (it writes the device's memory).
    Reports each device's total inbound bandwidth."""

    kernel_modules = ()  # copy-engine copies: gpubw's protocol kernels only

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return all_to_one(Plan(self, size, loops, CE, INTO_CE), read=False, prefer=Prefer.SRC)


class AllToOneReadCE(PeerTestcase):
    """Copy engine copies from one device into every accessible peer at once, each issued by
    the peer (it reads the device's memory).
    Reports each device's total outbound bandwidth."""

    kernel_modules = ()  # copy-engine copies: gpubw's protocol kernels only

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return all_to_one(Plan(self, size, loops, CE, OUT_OF_CE), read=True, prefer=Prefer.DST)


class OneToAllWriteCE(PeerTestcase):
    """Copy engine copies from one device into every accessible peer at once, all issued by
    that device (it writes the peers' memory).
    Reports each device's total outbound bandwidth."""

    kernel_modules = ()  # copy-engine copies: gpubw's protocol kernels only

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return one_to_all(Plan(self, size, loops, CE, OUT_OF_CE), read=False, prefer=Prefer.SRC)


class OneToAllReadCE(PeerTestcase):
    """Copy engine copies from every accessible peer into one device at once, all issued by
    that device (it reads the peers' memory).
    Reports each device's total inbound bandwidth."""

    kernel_modules = ()  # copy-engine copies: gpubw's protocol kernels only

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return one_to_all(Plan(self, size, loops, CE, INTO_CE), read=True, prefer=Prefer.DST)


class AllToOneWriteSM(PeerTestcase):
    """Copy kernels on every accessible peer at once, each copying from the peer into one
    device (the peers' SMs write the device's memory).
    Reports each device's total inbound bandwidth."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return all_to_one(Plan(self, size, loops, SM, INTO_SM), read=False, prefer=Prefer.SRC)


class AllToOneReadSM(PeerTestcase):
    """Copy kernels on one device, one per accessible peer, all at once, copying from the device
    into every peer (as nvbandwidth: the kernels run on the data's source, not the peers).
    Reports each device's total outbound bandwidth."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return all_to_one(Plan(self, size, loops, SM, OUT_OF_SM), read=True, prefer=Prefer.SRC)


class OneToAllWriteSM(PeerTestcase):
    """Copy kernels on one device, one per accessible peer, all at once, copying from the device
    into every peer (the device's SMs write the peers' memory).
    Reports each device's total outbound bandwidth."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return one_to_all(Plan(self, size, loops, SM, OUT_OF_SM), read=False, prefer=Prefer.SRC)


class OneToAllReadSM(PeerTestcase):
    """Copy kernels on every accessible peer at once, each copying from the peer into one
    device (as nvbandwidth: the kernels run on the data's source, the peers).
    Reports each device's total inbound bandwidth."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return one_to_all(Plan(self, size, loops, SM, INTO_SM), read=True, prefer=Prefer.SRC)
