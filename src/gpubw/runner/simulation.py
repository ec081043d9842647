"""``--simulate NAME|FILE``, resolved once, and the System every run path opens from it.

:func:`resolve_simulation` turns a preset name, a JSON system file or a report (a twin of
the node it measured, fitted by :mod:`gpubw.runner.twin`) into a :class:`Simulation`: the
model (checked now, with the kernels of every installed testcase's
kernel modules, which a system file's ``faults.kernel_error`` may name) and its hosts. The
command, :func:`gpubw.run`, ``gpubw info`` and simulated racks all take it from here, so a
system file means the same everywhere. :func:`opener` gives the function that opens the
run's :class:`~gpubw.memory.system.System` (on the real GPUs for no simulation), always with
its world: a System is made for one world and never re-targeted. :func:`run_rack` emulates
the ranks of a simulated system of several hosts in this process.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from gpubw.memory.system import System
from gpubw.model.errors import UsageError
from gpubw.model.options import RunOptions
from gpubw.world import World, WorldError

if TYPE_CHECKING:
    from gpubw.backend.sim.model import SimSystem

__all__ = ["Opener", "Simulation", "opener", "resolve_simulation", "run_rack"]


class Opener(Protocol):
    """Opens the run's System for these options, in this world (None: one rank holding every
    GPU)."""

    def __call__(self, options: RunOptions, world: World | None = None) -> System: ...


@attrs.frozen
class Simulation:
    """A simulated system: the ``name`` it was given (a preset or a file's path) and its
    ``model``; ``ranks``, if given, the devices per host whose ranks are emulated in this
    process (tests: two ranks on one host), else the model's hosts when it has several."""

    name: str
    model: SimSystem
    ranks: tuple[int, ...] | None = None
    #: what the run should warn about the system (a twin's report lacking something)
    warnings: tuple[str, ...] = ()

    @property
    def hosts(self) -> tuple[int, ...] | None:
        """Devices per host when this process emulates the ranks (a rack, whose ranks
        ``--simulate`` emulates in one process); None for one process, one rank."""
        if self.ranks is not None:
            return self.ranks
        hosts = self.model.hosts
        return tuple(hosts) if hosts is not None and len(hosts) > 1 else None


def _preset_names() -> list[str]:
    from gpubw.backend.sim import presets

    return sorted(presets.names())


def plugin_kernel_names() -> set[str]:
    """Kernels of the kernel modules every installed testcase declares (a system file's
    ``faults.kernel_error`` may name one of them)."""
    from gpubw.runner.registry import Registry

    names: set[str] = set()
    for entry in Registry.discover().load().entries:
        for module in getattr(entry.cls, "kernel_modules", ()):
            names.update(module.names)
    return names


def resolve_simulation(simulate: str | os.PathLike[str] | None) -> Simulation | None:
    """The simulation ``simulate`` names (None: the real GPUs). An unknown preset or a bad
    system file raises :class:`UsageError` naming it and what is allowed."""
    if simulate is None:
        return None
    text = os.fspath(simulate)
    try:
        from gpubw.backend.sim.presets import load_system

        model = load_system(text, plugin_kernels=plugin_kernel_names)
    except ImportError as exc:
        raise UsageError(f"simulation is not available: {exc}") from None
    except UsageError:  # already names the value and what is allowed
        raise
    except Exception as exc:
        names = ", ".join(_preset_names()) or "none"
        raise UsageError(
            f"simulated system {text!r}: {exc} (presets: {names}; or a JSON system file)"
        ) from None
    if model.origin is not None:  # a report: a twin of the node it measured
        from gpubw.runner.twin import fit_twin

        model = fit_twin(model)
        warning = model.origin.warning()
        return Simulation(text, model, warnings=() if warning is None else (warning,))
    return Simulation(text, model)


def opener(simulation: Simulation | None) -> Opener:
    """What opens the run's System: on the real GPUs for None (the CUDA driver is loaded
    only when it is called), else on ``simulation``'s model."""

    def open_system(options: RunOptions, world: World | None = None) -> System:
        if simulation is None:
            from gpubw.backend.cuda import CudaBackend

            return System(CudaBackend(), options, world=world)
        from gpubw.backend.sim.backend import SimulatedBackend

        return System(SimulatedBackend(simulation.model), options, world=world)

    return open_system


def run_rack(
    simulation: Simulation,
    run_rank: Callable[[Opener, World], Any],
    timeout_s: float,
    stop: Callable[[], BaseException | None] | None = None,
) -> Any:
    """Emulate one rank per simulated device in this process: a
    :class:`gpubw.world.simulated.SimulatedCluster` of the simulation's hosts whose ranks
    take turns, one at a time (:mod:`gpubw.world.tasks`), over one simulated engine (each
    rank a view of its host's devices, its own clock; the clocks meet at every collective).
    ``run_rank(open_system, world)`` runs on every rank; rank 0's return value is returned
    (its error raised; WorldError if it hung). ``stop``: see
    :meth:`~gpubw.world.simulated.SimulatedCluster.run` (a signal that stops the run)."""
    from gpubw.backend.sim.backend import SimEngine
    from gpubw.world.simulated import SimulatedCluster

    hosts = simulation.hosts or (len(simulation.model.devices),)
    engine = SimEngine(simulation.model)
    cluster = SimulatedCluster(
        list(hosts),
        timeout_s=timeout_s,
        on_step=engine.align_clocks,
        cooperative=True,
        on_group=engine.align_group,
    )
    engine.pause = cluster.pause  # a rank waiting for another's release lets it run

    def body(rank_world: World) -> Any:
        view = engine.rank_view(rank_world.rank, cluster.rank_hosts[rank_world.rank])

        def open_rank(options: RunOptions, world: World | None = None) -> System:
            return System(view, options, world=rank_world)

        return run_rank(open_rank, rank_world)

    # a whole run: wait for rank 0 as long as it runs (each of its collectives is bounded)
    root = cluster.run(body, join_timeout_s=math.inf, stop=stop)[0]  # others' failures reach 0
    if root.error is not None:
        raise root.error
    if root.hung:
        raise WorldError("simulated rank 0 did not finish")
    return root.value
