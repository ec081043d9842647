"""The spin gates a simulated engine holds: running gates not released yet, indexed by what
their flag lives in, so that a write probes only the gates whose flag may have changed.

Every finished copy, kernel or host write may release a flag (:meth:`Engine.release_gates
<gpubw.backend.sim.engine.Engine.release_gates>`). A gate's flag lives in an allocation of
the simulated memory, and every store to an allocation moves its ``generation`` (the same
mark a gate's probe keeps to read its flag again only after its allocation was written): the
gates of an allocation whose generation did not move since they were last probed are still
held, and are not probed. A gate whose allocation is not known, or was freed, is probed at
every write, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, Protocol, TypeVar


class Watched(Protocol):
    """What a gate's flag lives in (an allocation): written since ``generation`` last moved."""

    generation: int
    freed: bool


class GateOp(Protocol):
    """A running gate as the index needs it (:class:`gpubw.backend.sim.engine.Op`)."""

    done: bool
    end: float | None
    watch: Watched | None


G = TypeVar("G", bound=GateOp)


class _Group(Generic[G]):
    """The waiting gates of one allocation, and its generation when they were probed."""

    __slots__ = ("gates", "generation", "pruned", "watch")

    def __init__(self, watch: Watched | None) -> None:
        self.watch = watch
        self.generation = -1 if watch is None else watch.generation
        self.gates: list[G] = []
        self.pruned = 0  # how many gates were held after the last pruning

    def unchanged(self) -> bool:
        """Whether no store reached the allocation since its gates were probed."""
        w = self.watch
        return w is not None and not w.freed and w.generation == self.generation


class WaitingGates(Generic[G]):
    """Running gates not released yet, by the allocation of their flag (``GateOp.watch``),
    each allocation's gates in the order they started."""

    def __init__(self) -> None:
        self._groups: dict[int, _Group[G]] = {}

    def __bool__(self) -> bool:
        return bool(self._groups)

    def __iter__(self) -> Iterator[G]:
        for group in self._groups.values():
            yield from group.gates

    def add(self, gate: G) -> None:
        """``gate`` started and its probe found its flag not released (at the allocation's
        present generation). The allocation's other gates keep the generation they were
        probed at: if it moved since, all are probed at the next write."""
        w = gate.watch
        key = 0 if w is None else id(w)
        group = self._groups.get(key)
        if group is None or group.watch is not w:
            group = _Group(w)
            self._groups[key] = group
        gates = group.gates
        if len(gates) > 2 * group.pruned + 16:  # forget gates that ended by timing out
            gates[:] = [g for g in gates if not (g.done or g.end is not None)]
            group.pruned = len(gates)
        gates.append(gate)

    def released(self, is_open: Callable[[G], bool]) -> list[G]:
        """The gates that ``is_open`` finds released now (each forgotten), probing only the
        gates of allocations written since their last probe; gates that ended are
        forgotten as they are met."""
        out: list[G] = []
        for key, group in list(self._groups.items()):
            if group.unchanged():
                continue
            held: list[G] = []
            for gate in group.gates:
                if gate.done or gate.end is not None:
                    continue
                if is_open(gate):
                    out.append(gate)
                else:
                    held.append(gate)
            if held:
                group.gates, group.pruned = held, len(held)
                if group.watch is not None:
                    group.generation = group.watch.generation
            else:
                del self._groups[key]
        return out
