"""The node-check requests of a run, checked once its System is open and before anything
runs: ``--devices``/``--pair`` resolved (:meth:`gpubw.memory.system.System.select_devices`)
and ``--host-numa`` placed (:meth:`gpubw.memory.pool.BufferPool.check_host_numa`). A bad
value is a :class:`UsageError` (exit 2) on every rank."""

from __future__ import annotations

from gpubw.memory.selection import device_list
from gpubw.memory.system import System
from gpubw.model.errors import UsageError


def check_requests(system: System) -> tuple[str, ...]:
    """Resolve the selection and check the host memory placement; returns the selection's
    tokens that name none of this process's GPUs (possible only under MPI)."""
    unmatched = system.select_devices(lenient=system.world.size > 1)
    system.pool.check_host_numa()
    return unmatched


def agree_selection(system: System, unmatched: tuple[str, ...]) -> None:
    """Under MPI: a UUID or PCI bus id that names no GPU on any rank's host is the usage
    error of every rank (one collective)."""
    everyone = system.world.allgather(unmatched)
    nowhere = [t for t in unmatched if all(t in theirs for theirs in everyone)]
    for theirs in everyone:
        nowhere += [t for t in theirs if t not in nowhere and all(t in o for o in everyone)]
    if nowhere:
        flag = "--pair" if system.options.device_pair else "--devices"
        raise UsageError(
            f"{flag} {','.join(system.options.devices or ())}: no rank has a GPU "
            f"{nowhere[0]!r} (an index, a UUID or its start, or a PCI bus id). This host's "
            f"{device_list(system.devices)}"
        )
