"""Which world this process belongs to: the MPI launcher's environment read, and the world
made from it (re-exported by :mod:`gpubw.world`)."""

from __future__ import annotations

import os
from collections.abc import Mapping

import attrs

from gpubw.world.base import (
    DEFAULT_TIMEOUT_S,
    SingleWorld,
    World,
    WorldError,
)
from gpubw.world.launch_env import PMIX_VARIABLE, size_variable


@attrs.frozen
class Launch:
    """What the environment says about the MPI launcher that started this process.

    ``size`` is None when the launcher is known but does not announce the world size
    (PMIx alone)."""

    launcher: str
    size: int | None
    variable: str  # the variable the size (or the launcher) was read from


def _int(environ: Mapping[str, str], name: str) -> int:
    text = environ[name]
    try:
        value = int(text)
    except ValueError:
        raise WorldError(f"{name}={text!r} in the environment is not a rank count") from None
    if value < 1:
        raise WorldError(f"{name}={text!r} in the environment is not a rank count")
    return value


def detect_launch(environ: Mapping[str, str] | None = None) -> Launch | None:
    """The MPI launcher that started this process, from its environment, or None.

    Open MPI sets ``OMPI_COMM_WORLD_SIZE``; MPICH's hydra (and Intel MPI, MVAPICH, srun with
    PMI-2) ``PMI_SIZE`` (with ``MPI_LOCALNRANKS``); srun ``SLURM_STEP_NUM_TASKS`` and
    ``SLURM_PROCID``; a PMIx launcher ``PMIX_RANK``. A batch script's ``SLURM_NTASKS`` alone
    is not a launch: ``gpubw`` run directly in ``sbatch`` is one process."""
    env = os.environ if environ is None else environ
    found = size_variable(env)
    if found is not None:
        launcher, name = found
        return Launch(launcher, _int(env, name), name)
    if PMIX_VARIABLE in env:
        return Launch("PMIx", None, PMIX_VARIABLE)
    return None


def world_from_environment(
    environ: Mapping[str, str] | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
) -> World:
    """This process's world: an ``MpiWorld`` when an MPI launcher started it with more than
    one rank (or did not say how many), else a :class:`SingleWorld` — without importing
    mpi4py, so ``gpubw -l`` and single-process runs never load MPI."""
    launch = detect_launch(environ)
    if launch is None or (launch.size is not None and launch.size <= 1):
        return SingleWorld(timeout_s=timeout_s)
    from gpubw.world.mpi import MpiWorld

    world = MpiWorld.create(expected_size=launch.size, timeout_s=timeout_s)
    if world.size == 1:  # a PMIx launch of one rank: nothing to coordinate
        world.close()
        return SingleWorld(host_name=world.host_name, timeout_s=timeout_s)
    return world
