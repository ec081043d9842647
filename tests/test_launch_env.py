"""What the launcher's environment says before MPI starts: which devices get a context."""

from __future__ import annotations

import pytest

from gpubw.world import detect_launch
from gpubw.world.launch_env import devices_to_start, world_rank


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, (0, 1, 2, 3)),  # no launcher: one process drives every device
        ({"OMPI_COMM_WORLD_SIZE": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}, (0, 1, 2, 3)),
        ({"OMPI_COMM_WORLD_SIZE": "1"}, (0, 1, 2, 3)),  # one rank: no local rank needed
        ({"PMI_SIZE": "1"}, (0, 1, 2, 3)),
        ({"OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}, (0, 1, 2, 3)),
        ({"OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "3"}, (3,)),
        ({"OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "6"}, (2,)),  # 6 % 4
        ({"PMI_SIZE": "2", "MPI_LOCALRANKID": "1"}, (1,)),  # MPICH hydra
        ({"SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "5", "SLURM_LOCALID": "1"}, (1,)),
        ({"SLURM_STEP_NUM_TASKS": "4", "SLURM_LOCALID": "1"}, (0, 1, 2, 3)),  # no srun step
        ({"PMIX_RANK": "3"}, ()),  # a launch whose local rank is unknown: none made early
        ({"PMI_SIZE": "2"}, ()),
        ({"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "x"}, ()),
        ({"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "-1"}, ()),
    ],
)
def test_devices_to_start(environ: dict[str, str], expected: tuple[int, ...]) -> None:
    """Every device outside a launch and on a host's first rank; the rank's own device
    (local rank mod count) on the others; none when the local rank is not known."""
    assert devices_to_start(4, environ) == expected


def test_no_devices_no_contexts() -> None:
    """A process that sees no device starts none, launched or not."""
    assert devices_to_start(0, {}) == ()
    assert devices_to_start(0, {"PMI_SIZE": "2", "MPI_LOCALRANKID": "1"}) == ()


@pytest.mark.parametrize(
    ("environ", "variable"),
    [
        ({"OMPI_COMM_WORLD_SIZE": "2"}, "OMPI_COMM_WORLD_SIZE"),
        ({"OMPI_COMM_WORLD_SIZE": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}, "OMPI_COMM_WORLD_SIZE"),
        ({"PMI_SIZE": "3"}, "PMI_SIZE"),
        ({"PMI_SIZE": "1", "MPI_LOCALRANKID": "0"}, "PMI_SIZE"),
        ({"SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "0"}, "SLURM_STEP_NUM_TASKS"),
        ({"SLURM_STEP_NUM_TASKS": "2"}, None),
        ({"PMIX_RANK": "0"}, "PMIX_RANK"),
        ({}, None),
    ],
)
def test_the_world_reads_the_same_launch(environ: dict[str, str], variable: str | None) -> None:
    """detect_launch (which decides whether the run is an MPI world) finds the launcher the
    environment names, and the prestart starts every device exactly when that is no launch
    of several ranks."""
    launch = detect_launch(environ)
    assert (launch.variable if launch else None) == variable
    assert (devices_to_start(2, environ) == (0, 1)) == (launch is None or launch.size == 1)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, 0),
        ({"OMPI_COMM_WORLD_RANK": "3", "PMI_RANK": "1"}, 3),
        ({"PMI_RANK": "1"}, 1),
        ({"SLURM_PROCID": "5"}, 5),
        ({"PMIX_RANK": "2"}, 2),
        ({"PMI_RANK": "x"}, 0),
    ],
)
def test_world_rank(environ: dict[str, str], expected: int) -> None:
    """The rank a launcher's environment names, before MPI starts (0 outside a launch)."""
    assert world_rank(environ) == expected
