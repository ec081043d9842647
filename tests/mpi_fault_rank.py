"""One rank of ``mpiexec -n 2 python mpi_fault_rank.py GPUBW-ARGS...``: gpubw's CLI after
the fault named by $FAULT is injected into rank 1 (the real-MPI tests, on the simulated
backend; ``benchmarks/gpu_check.sh mpifaults``, on the GPUs under the image's Open MPI).

sm    the cross-rank SM testcases fail on rank 1 (a GpubwError while queuing a sample)
kill  rank 1 is SIGKILLed 1 s into multinode_device_to_device_bidirectional_memcpy_read_ce
hang  rank 1 sleeps 120 s at the start of that testcase (only the world timeout ends it)
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

from gpubw import cli
from gpubw.errors import GpubwError
from gpubw.measurement import MemcpyOperation
from gpubw.testcases import multinode

FAULT = os.environ.get("FAULT", "")
#: this rank (MPICH's hydra sets PMI_RANK, Open MPI OMPI_COMM_WORLD_RANK)
RANK = int(os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or 0)
queue = MemcpyOperation._queue_ranks
original = multinode.MultinodeBidirectionalReadCE.run


def failing(self: MemcpyOperation, *args: Any) -> None:
    if RANK == 1 and self.initiator.name == "SM":
        raise GpubwError("injected failure on rank 1")
    queue(self, *args)


def die(self: Any, size: int, loops: int) -> Any:
    if RANK == 1:  # dies a moment into the testcase (rank 0 has written the report so far)
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL)
    return original(self, size, loops)


def hang(self: Any, size: int, loops: int) -> Any:
    if RANK == 1:
        time.sleep(120)  # far past any bound the callers set
    return original(self, size, loops)


if __name__ == "__main__":
    if FAULT == "sm":
        MemcpyOperation._queue_ranks = failing  # type: ignore[method-assign, assignment]
    if FAULT == "kill":
        multinode.MultinodeBidirectionalReadCE.run = die  # type: ignore[method-assign]
    if FAULT == "hang":
        multinode.MultinodeBidirectionalReadCE.run = hang  # type: ignore[method-assign]
    sys.exit(cli.main(sys.argv[1:]))
