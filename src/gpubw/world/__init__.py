"""Ranks of a run: which world this process belongs to, and how to find it.

:func:`world_from_environment` returns a :class:`SingleWorld` unless this process was started
by an MPI launcher with more than one rank, in which case it returns an ``MpiWorld``
(importing mpi4py, which nothing else in gpubw does). See :mod:`gpubw.world.base` for the
collectives, :mod:`gpubw.world.mpi` and :mod:`gpubw.world.simulated` for the two multi-rank
implementations, and :mod:`gpubw.world.fds` for passing a file descriptor (a POSIX-fd handle)
to the other ranks of a host.
"""

from __future__ import annotations

import importlib

# Names are imported on first use (PEP 562): importing gpubw.world.launch_env (which the CUDA
# prestart reads while the command is still importing) runs this file and must stay cheap.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gpubw.world.base import (
        DEFAULT_TIMEOUT_S,
        MORE_RANKS_THAN_GPUS,
        Agreement,
        CollectiveExpired,
        DeviceAssignment,
        SingleWorld,
        World,
        WorldError,
        WorldTimeoutError,
        device_assignment,
        process_ids,
    )
    from gpubw.world.environment import Launch, detect_launch, world_from_environment

_LAZY: dict[str, str] = {
    "DEFAULT_TIMEOUT_S": "gpubw.world.base",
    "MORE_RANKS_THAN_GPUS": "gpubw.world.base",
    "Agreement": "gpubw.world.base",
    "CollectiveExpired": "gpubw.world.base",
    "DeviceAssignment": "gpubw.world.base",
    "SingleWorld": "gpubw.world.base",
    "World": "gpubw.world.base",
    "WorldError": "gpubw.world.base",
    "WorldTimeoutError": "gpubw.world.base",
    "device_assignment": "gpubw.world.base",
    "process_ids": "gpubw.world.base",
    "Launch": "gpubw.world.environment",
    "detect_launch": "gpubw.world.environment",
    "world_from_environment": "gpubw.world.environment",
}

if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        """A name of :mod:`gpubw.world.base` or :mod:`gpubw.world.environment`."""
        if name in _LAZY:
            value = getattr(importlib.import_module(_LAZY[name]), name)
            globals()[name] = value
            return value
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_TIMEOUT_S",
    "MORE_RANKS_THAN_GPUS",
    "Agreement",
    "CollectiveExpired",
    "DeviceAssignment",
    "Launch",
    "SingleWorld",
    "World",
    "WorldError",
    "WorldTimeoutError",
    "detect_launch",
    "device_assignment",
    "process_ids",
    "world_from_environment",
]
