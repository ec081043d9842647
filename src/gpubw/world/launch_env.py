"""What an MPI launcher's environment says about this process, read before MPI starts.

Standard library only: the CUDA prestart (:mod:`gpubw.backend.cuda_start`) reads this while
the command is still importing, to make primary contexts only on the devices this process
will drive. Under an MPI launch only a host's first rank runs the single-node testcases (on
every device of its host); every other rank drives one device, its local rank modulo the
device count (:func:`gpubw.world.device_assignment`). :func:`gpubw.world.detect_launch`
uses the same variables to decide whether the run is an MPI world.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from collections.abc import Mapping

#: (launcher, variable holding the world size), in the order they are looked at.
SIZE_VARIABLES = (
    ("Open MPI", "OMPI_COMM_WORLD_SIZE"),  # mpirun/mpiexec of Open MPI 4 and 5
    ("PMI (MPICH hydra, Intel MPI, srun --mpi=pmi2)", "PMI_SIZE"),
    ("Slurm srun", "SLURM_STEP_NUM_TASKS"),  # srun only (sbatch's SLURM_NTASKS is no launch)
)
#: a PMIx launcher that announces no world size sets this
PMIX_VARIABLE = "PMIX_RANK"
#: variables holding the rank's index in the world, in the order looked at
RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", PMIX_VARIABLE)
#: variables holding the rank's index among the ranks of its host, in the order looked at
LOCAL_RANK_VARIABLES = (
    "OMPI_COMM_WORLD_LOCAL_RANK",  # Open MPI
    "MPI_LOCALRANKID",  # MPICH hydra, Intel MPI
    "SLURM_LOCALID",  # srun
)


def size_variable(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """(launcher, variable) of the first launcher whose world-size variable is set (srun's
    only with ``SLURM_PROCID``: a batch script's environment alone is no launch), else None."""
    for launcher, name in SIZE_VARIABLES:
        if name in environ and (name != "SLURM_STEP_NUM_TASKS" or "SLURM_PROCID" in environ):
            return launcher, name
    return None


def several_ranks(environ: Mapping[str, str]) -> bool:
    """Whether an MPI launcher started this process as one of several ranks (or did not
    say how many: PMIx alone, or a size that is not a number)."""
    found = size_variable(environ)
    if found is None:
        return PMIX_VARIABLE in environ
    size = _number(environ, found[1])
    return size is None or size > 1


def _number(environ: Mapping[str, str], name: str) -> int | None:
    try:
        value = int(environ[name])
    except (KeyError, ValueError):
        return None
    return value if value >= 0 else None


def world_rank(environ: Mapping[str, str]) -> int:
    """This process's rank as its launcher's environment says, before MPI starts; 0
    outside an MPI launch (or when no variable says)."""
    for name in RANK_VARIABLES:
        rank = _number(environ, name)
        if rank is not None:
            return rank
    return 0


def rank_device(local_rank: int, count: int) -> int:
    """The GPU a rank drives in the multinode testcases, as nvbandwidth maps it: its local
    rank modulo the host's device count (``count`` >= 1)."""
    return local_rank % count


def driven_devices(count: int, local_rank: int, several_ranks: bool) -> tuple[int, ...]:
    """The devices (of ``count``) a process drives: every one, unless it is one of several
    ranks and not its host's first (local rank 0, which runs the single-node testcases on
    every device); then only :func:`rank_device`."""
    if not several_ranks or local_rank == 0 or count < 1:
        return tuple(range(max(count, 0)))
    return (rank_device(local_rank, count),)


def devices_to_start(count: int, environ: Mapping[str, str]) -> tuple[int, ...]:
    """The device ordinals (of ``count``) whose contexts this process should make before the
    run knows its world: every device outside an MPI launch of several ranks and on a host's
    first rank; only ``local rank % count`` on the host's other ranks; none when a launch is
    detected but its local rank is not in the environment (the run then makes the contexts
    it needs itself)."""
    found = size_variable(environ)
    if found is None:
        if PMIX_VARIABLE not in environ:
            return driven_devices(count, 0, several_ranks=False)
    elif _number(environ, found[1]) == 1:
        return driven_devices(count, 0, several_ranks=False)
    local = None
    for name in LOCAL_RANK_VARIABLES:
        local = _number(environ, name)
        if local is not None:
            break
    if local is None:
        return ()
    return driven_devices(count, local, several_ranks=True)
