"""One rank of ``mpiexec -n 2 python mpi_fault_rank.py GPUBW-ARGS...``: gpubw's CLI after
the fault named by $FAULT is injected into rank 1 (the real-MPI tests, on the simulated
backend; ``benchmarks/gpu_check.sh mpifaults``, on the GPUs under the image's Open MPI).

sm    the cross-rank SM testcases fail on rank 1 (a GpubwError while queuing a sample)
kill  rank 1 is SIGKILLed 1 s into multinode_device_to_device_bidirectional_memcpy_read_ce
hang  rank 1 sleeps 120 s at the start of that testcase (only the world timeout ends it)
fdhang  rank 1 connects to rank 0's POSIX-fd descriptor server (the first one: the handle
      kind's end-to-end test in the first multinode testcase), then sleeps 120 s without
      reading: a rank hung mid-handshake (only the world timeout ends it)
args  no fault: each rank runs the command line in $ARGS_<rank> (a JSON list) instead of
      its own (ranks given different command lines)
nvargs  no fault: each rank runs gpubw-nvbandwidth with the command line in $ARGS_<rank>
      and the variables of $ENV_<rank> (a JSON object) added to its environment
lastbroken  rank 1's world is broken when the run ends (as when a signal to the launcher
      reached rank 1 mid-collective and rank 0 between two): rank 0's is not
early rank 1 gets SIGINT while it is still starting, before MPI starts (as from mpiexec
      a moment after the launch)
devices  no fault: each rank ends by writing ``rank R touched D`` into the file
      ``touched-R`` of the current folder (one file per rank: mpiexec merges the ranks'
      streams in chunks), D the devices its backend made (or needed) a CUDA context on
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from typing import Any

FAULT = os.environ.get("FAULT", "")
if FAULT == "early":  # be the command itself: its start-up signal handling (cli._startup)
    sys.argv[0] = "gpubw"

from gpubw.cli import command as cli
from gpubw.measure.measurement import MemcpyOperation
from gpubw.memory import sharing
from gpubw.model.errors import GpubwError
from gpubw.testcases import multinode

#: this rank (MPICH's hydra sets PMI_RANK, Open MPI OMPI_COMM_WORLD_RANK)
RANK = int(os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or 0)
queue = MemcpyOperation._queue
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


def stall_receive(address: str, pids: Any, timeout_s: float) -> int:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(address)
        time.sleep(120)  # connected, never reads: far past any bound the callers set
    raise GpubwError("rank 1 woke up")


#: backend calls that make or need a device's context, and which argument is the device
#: (alloc_host's: the context that allocates it, None meaning the first device)
CONTEXT_CALLS = (("memory_info", 0), ("alloc_device", 0), ("alloc_host", 1),
                 ("create_stream", 0), ("create_event", 0), ("load_kernels", 0))  # fmt: skip
touched: set[int] = set()


def record(cls: type, name: str, position: int) -> None:
    method = getattr(cls, name)

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        device = args[position] if len(args) > position else None
        touched.add(0 if device is None else device)
        return method(self, *args, **kwargs)

    setattr(cls, name, call)


def early_signal() -> None:
    """Rank 1: SIGINT to itself just before it would start MPI (world_from_environment)."""
    import gpubw.world

    start = gpubw.world.world_from_environment

    def signalled(*args: Any, **kwargs: Any) -> Any:
        if RANK == 1:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)  # the handler has run (it records the signal on an MPI rank)
        return start(*args, **kwargs)

    gpubw.world.world_from_environment = signalled  # type: ignore[assignment]


if __name__ == "__main__":
    if FAULT == "args":
        import json

        sys.argv[1:] = json.loads(os.environ[f"ARGS_{RANK}"])
    if FAULT == "nvargs":
        import json

        from gpubw.cli import nvbandwidth

        os.environ.update(json.loads(os.environ.get(f"ENV_{RANK}", "{}")))
        sys.exit(nvbandwidth.main(json.loads(os.environ[f"ARGS_{RANK}"])))
    if FAULT == "early":
        early_signal()
        sys.exit(cli.main())
    if FAULT == "devices":
        from gpubw.backend.cuda import CudaBackend
        from gpubw.backend.sim.backend import SimulatedBackend

        for cls in (CudaBackend, SimulatedBackend):
            for name, position in CONTEXT_CALLS:
                record(cls, name, position)
        code = cli.main(sys.argv[1:])
        with open(f"touched-{RANK}", "w", encoding="utf-8") as note:
            note.write(f"rank {RANK} touched {sorted(touched)}\n")
        sys.exit(code)
    if FAULT == "lastbroken" and RANK == 1:
        from gpubw.cli import run as run_module

        finish = run_module.finish

        def broken_finish(world: Any, code: int) -> int:
            world._broken = "rank 1: injected: interrupted mid-collective"
            return finish(world, code)

        run_module.finish = broken_finish
    if FAULT == "sm":
        MemcpyOperation._queue = failing  # type: ignore[method-assign, assignment]
    if FAULT == "kill":
        multinode.MultinodeBidirectionalReadCE.run = die  # type: ignore[method-assign]
    if FAULT == "hang":
        multinode.MultinodeBidirectionalReadCE.run = hang  # type: ignore[method-assign]
    if FAULT == "fdhang" and RANK == 1:
        sharing.receive_fd = stall_receive
    sys.exit(cli.main(sys.argv[1:]))
