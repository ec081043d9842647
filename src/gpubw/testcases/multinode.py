"""nvbandwidth's 13 multinode testcases (#44-#56): ranks of an MPI run, one GPU each.

N is the world size; "GPU g" is rank g's device; U(o) is device memory of rank o shared with
every rank, L(o) memory only rank o sees, MC(o) a multicast object of every rank's device.
Every testcase is waived in a run of one rank; the broadcast ones also where NVLink multicast
is disabled or a device lacks it (agreed by all ranks). The headers are nvbandwidth's,
copy-paste errors included (``CPU``, ``CE`` in SM tests, ``Read`` in write tests): see each
docstring for what is really measured.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpubw.measure.initiators import CE, SM
from gpubw.measure.measurement import Prefer
from gpubw.model.results import COLUMN_TO_ROW, ROW_TO_COLUMN, Matrix
from gpubw.testcases.multinode_shapes import (
    MultinodeTestcase,
    bidirectional,
    bisect,
    broadcast,
    fan,
    n_by_n,
    read,
    write,
)
from gpubw.testcases.shapes import Plan

_BIDIR_CE = "memcpy CE CPU(row) <-> GPU(column) {} bandwidth (GB/s)"
_BIDIR_SM = "memcpy SM CPU(row) <-> GPU(column) {} bandwidth (GB/s)"


class MultinodeReadCE(MultinodeTestcase):
    """Copy engine copy across ranks: rank r (row) reads rank c's (column) shared memory into
    its own, issued by r. Reports every pair of ranks, one copy at a time."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        header = "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)"
        return n_by_n(
            Plan(self, size, loops, CE, header), read, prefer=Prefer.DST, direction=ROW_TO_COLUMN
        )


class MultinodeWriteCE(MultinodeTestcase):
    """Copy engine copy across ranks: rank r (row) writes its memory into rank c's (column)
    shared memory, issued by r. Reports every pair of ranks, one copy at a time."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        header = "memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)"
        return n_by_n(
            Plan(self, size, loops, CE, header), write, prefer=Prefer.SRC, direction=COLUMN_TO_ROW
        )


class MultinodeBidirectionalReadCE(MultinodeTestcase):
    """Copy engine copies both ways at once between ranks r (row) and c (column), each issued
    by the rank it copies into (reads). Reports c -> r (Read1), r -> c (Read2) and their
    total; nvbandwidth's header says CPU(row)."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return bidirectional(Plan(self, size, loops, CE, _BIDIR_CE), "Read", prefer=Prefer.DST)


class MultinodeBidirectionalWriteCE(MultinodeTestcase):
    """Copy engine copies both ways at once between ranks r (row) and c (column), each issued
    by the rank it copies from (writes). Reports r -> c (write1), c -> r (write2) and their
    total; nvbandwidth's headers say CPU(row) and Read1/Read2 (reproduced)."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return bidirectional(
            Plan(self, size, loops, CE, _BIDIR_CE), "Read", prefer=Prefer.SRC, key_word="Write"
        )


class MultinodeReadSM(MultinodeTestcase):
    """Copy kernel across ranks: rank r (row) reads rank c's (column) shared memory into its
    own, on r's SMs. Reports every pair of ranks; nvbandwidth's header says CE."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        header = "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)"
        return n_by_n(
            Plan(self, size, loops, SM, header), read, prefer=Prefer.DST, direction=ROW_TO_COLUMN
        )


class MultinodeWriteSM(MultinodeTestcase):
    """Copy kernel across ranks: rank r (row) writes its memory into rank c's (column) shared
    memory, on r's SMs. Reports every pair of ranks, one copy at a time."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        header = "memcpy SM GPU(row) <- GPU(column) bandwidth (GB/s)"
        return n_by_n(
            Plan(self, size, loops, SM, header), write, prefer=Prefer.SRC, direction=COLUMN_TO_ROW
        )


class MultinodeBidirectionalReadSM(MultinodeTestcase):
    """Copy kernels both ways at once between ranks r (row) and c (column), each on the SMs of
    the rank it copies into (reads). Reports c -> r (Read1), r -> c (Read2) and their total;
    nvbandwidth's header says CPU(row)."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return bidirectional(Plan(self, size, loops, SM, _BIDIR_SM), "Read", prefer=Prefer.DST)


class MultinodeBidirectionalWriteSM(MultinodeTestcase):
    """Copy kernels both ways at once between ranks r (row) and c (column), each on the SMs of
    the rank it copies from (writes). Reports r -> c (Write1), c -> r (Write2) and their
    total; nvbandwidth's header says CPU(row)."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return bidirectional(Plan(self, size, loops, SM, _BIDIR_SM), "Write", prefer=Prefer.SRC)


class MultinodeAllToOneWriteSM(MultinodeTestcase):
    """Copy kernels from every other rank at once into rank g (column): each rank j writes
    its local memory into a buffer of g's, on j's SMs. Reports the sum of the ranks'
    bandwidths into each GPU."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        header = "memcpy SM All Gpus -> GPU(column) total bandwidth (GB/s)"
        return fan(Plan(self, size, loops, SM, header), into=True)


class MultinodeAllFromOneReadSM(MultinodeTestcase):
    """Copy kernels from rank g (column) to every other rank at once: each rank j reads a
    buffer of g's into its local memory, on j's SMs. Reports the sum of the ranks'
    bandwidths out of each GPU."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        header = "memcpy SM All Gpus <- GPU(column) total bandwidth (GB/s)"
        return fan(Plan(self, size, loops, SM, header), into=False)


class MultinodeBroadcastOneToAllSM(MultinodeTestcase):
    """Copy kernel on rank g (column) writing its local memory into a multicast object of
    every rank's GPU (NVLink multicast: each byte lands on all GPUs). Reports each rank's
    bandwidth into the multicast object."""

    multicast = True

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        header = "multicast SM GPU(column) -> All Gpus total bandwidth (GB/s)"
        return broadcast(Plan(self, size, loops, SM, header), all_at_once=False)


class MultinodeBroadcastAllToAllSM(MultinodeTestcase):
    """Copy kernels on every rank at once, each writing its local memory into its own
    multicast object of every rank's GPU (NVLink multicast). Reports the sum over ranks in
    one cell."""

    multicast = True

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        header = "multicast SM All -> All Gpus total bandwidth (GB/s)"
        return broadcast(Plan(self, size, loops, SM, header), all_at_once=True)


class MultinodeBisectWriteCE(MultinodeTestcase):
    """Copy engine copies on every rank at once: rank p writes into rank i = (p + N/2) mod N
    (half the ranks talk to the other half, both ways). Row ``i->p`` (nvbandwidth's label:
    the arrow points against the data) holds the bandwidth into i."""

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        header = "Bisect benchmarking, simultaneous write CE BW"
        return bisect(Plan(self, size, loops, CE, header))
