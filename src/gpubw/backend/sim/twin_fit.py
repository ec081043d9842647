"""The fit of a twin (:mod:`gpubw.backend.sim.twin`): which model parameter each measured
figure steers (:class:`Knob`), one correction step from a simulated run (:func:`refine`),
and what was inferred, as data (:func:`inferred`).

A figure grows with the parameter it steers (a rate, a both-ways factor, a host-memory
budget, a latency), so one step multiplies each parameter by the geometric mean of measured /
simulated over its figures: exact at once where a copy runs alone (the inverse of the model),
and a fixed-point iteration where copies share a link or host memory. The runner
(:mod:`gpubw.runner.twin`) runs the report's testcases on the model between steps; nothing
here measures, and every step is deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from gpubw.backend.sim.model import (
    MAX_LATENCY,
    MAX_RATE,
    MIN_FACTOR,
    MIN_LATENCY,
    MIN_RATE,
    SimSystem,
)
from gpubw.backend.sim.twin import CellKey

#: one step of a parameter's path in the model: an attribute, a tuple index, a mapping key
Step = str | int | tuple[int, int]
#: a figure this close to the measured one is not corrected further
TOLERANCE = 0.002


@attrs.frozen
class Knob:
    """One model parameter (at ``path``) and the measured figures that steer it."""

    name: str
    path: tuple[Step, ...]
    cells: tuple[CellKey, ...]
    low: float
    high: float

    def get(self, model: SimSystem) -> float:
        obj: Any = model
        for step in self.path:
            obj = getattr(obj, step) if isinstance(step, str) else obj[step]
        return float(obj)

    def put(self, model: SimSystem, value: float) -> SimSystem:
        result: SimSystem = _put(model, self.path, min(self.high, max(self.low, value)))
        return result


def _put(obj: Any, path: Sequence[Step], value: float) -> Any:
    if not path:
        return value
    step, rest = path[0], path[1:]
    if isinstance(step, str):
        return attrs.evolve(obj, **{step: _put(getattr(obj, step), rest, value)})
    if isinstance(step, int):
        items = list(obj)
        items[step] = _put(items[step], rest, value)
        return tuple(items)
    mapping = dict(obj)
    mapping[step] = _put(mapping[step], rest, value)
    return mapping


_RATE = (MIN_RATE, MAX_RATE)
_FACTOR = (MIN_FACTOR, 1.0)
#: per device: (testcases whose host x GPU figure of that device steer it, the path below
#: host_links[d], bounds)
_HOST_KNOBS: tuple[tuple[tuple[str, ...], tuple[str, ...], tuple[float, float]], ...] = (
    (("host_to_device_memcpy_ce",), ("h2d", "ce"), _RATE),
    (("device_to_host_memcpy_ce",), ("d2h", "ce"), _RATE),
    (("host_to_device_memcpy_sm",), ("h2d", "sm"), _RATE),
    (("device_to_host_memcpy_sm",), ("d2h", "sm"), _RATE),
    (("device_to_host_bidirectional_memcpy_ce",), ("bidirectional_factor",), _FACTOR),
    (("host_to_device_bidirectional_memcpy_ce",), ("h2d_bidirectional_factor",), _FACTOR),
    (
        ("host_to_device_bidirectional_memcpy_sm", "device_to_host_bidirectional_memcpy_sm"),
        ("sm_load_factor",),
        _FACTOR,
    ),
    (("host_to_all_bidirectional_memcpy_ce",), ("host_memory_weight",), (1e-3, 1e3)),
)
_BOTH = "device_to_device_bidirectional_memcpy_"
#: whole-system parameters: (testcases steering it, whose matrices' totals too, path, bounds)
_SYSTEM_KNOBS: tuple[tuple[tuple[str, ...], tuple[Step, ...], tuple[float, float]], ...] = (
    ((_BOTH + "read_ce", _BOTH + "write_ce", _BOTH + "write_sm"), ("peer_bidirectional_factor",),
     _FACTOR),
    ((_BOTH + "read_sm",), ("peer_sm_load_factor",), _FACTOR),
    (("device_local_copy",), ("local_copy", "ce"), _RATE),
    (("device_local_copy_sm",), ("local_copy", "sm"), _RATE),
    (("device_local_copy_tma",), ("local_tma",), _RATE),
    (("device_local_read_sm",), ("local_read",), _RATE),
    (("device_local_write_sm",), ("local_write",), _RATE),
    (("host_device_latency_sm",), ("latency", "host"), (MIN_LATENCY, MAX_LATENCY)),
    (("device_to_device_latency_sm",), ("latency", "peer"), (MIN_LATENCY, MAX_LATENCY)),
    # host memory's reading budget, fine-tuned from reads while every GPU writes too (the
    # budgets' first guess is the inverse: gpubw.backend.sim.twin.host_memory)
    (("host_to_all_bidirectional_memcpy_ce",), ("host_memory_bandwidth",), _RATE),
    # ... and the writes' weight from writes while every GPU reads too
    (("all_to_host_bidirectional_memcpy_ce",), ("host_memory_write_weight",), (1.0, 1e3)),
    # ... and the writing budget from SM kernels both ways on every GPU
    (("host_to_all_bidirectional_memcpy_sm", "all_to_host_bidirectional_memcpy_sm"),
     ("host_memory_write_bandwidth",), _RATE),
)  # fmt: skip


def knobs(model: SimSystem, cells: Mapping[CellKey, float]) -> list[Knob]:
    """The parameters the report's figures steer: only those the model has (a parameter
    left None, e.g. no TMA rate, is not fitted) and that some figure measures."""
    out: list[Knob] = []
    for d in range(len(model.devices)):
        for keys, sub, (low, high) in _HOST_KNOBS:
            mine = tuple(k for k in cells if k[0] in keys and k[2:] == (0, d))
            knob = Knob(f"GPU {d} {'.'.join(sub)}", ("host_links", d, *sub), mine, low, high)
            if mine and _has(model, knob):
                out.append(knob)
    for a, b in model.peers:
        for engine in ("ce", "sm"):
            read, write = (f"device_to_device_memcpy_{w}_{engine}" for w in ("read", "write"))
            mine = tuple(
                k for k in cells
                if (k[0] == k[1] == read and k[2:] == (b, a))
                or (k[0] == k[1] == write and k[2:] == (a, b))
            )  # fmt: skip
            if mine:
                out.append(Knob(f"peer {a}->{b} {engine}", ("peers", (a, b), engine), mine, *_RATE))
    for keys, path, (low, high) in _SYSTEM_KNOBS:
        mine = tuple(k for k in cells if k[0] in keys and not k[1].endswith("_total"))
        knob = Knob(".".join(str(s) for s in path), path, mine, low, high)
        if mine and _has(model, knob):
            out.append(knob)
    return out


def _has(model: SimSystem, knob: Knob) -> bool:
    """Whether the model has a value at the knob's path (None: a mechanism left off)."""
    try:
        knob.get(model)
    except (TypeError, KeyError, AttributeError):
        return False
    return True


def deviations(
    measured: Mapping[CellKey, float], simulated: Mapping[CellKey, float]
) -> dict[CellKey, float]:
    """simulated / measured - 1 of every measured figure the simulated run has too."""
    return {k: simulated[k] / v - 1.0 for k, v in measured.items() if simulated.get(k)}


def refine(
    model: SimSystem,
    steering: Sequence[Knob],
    measured: Mapping[CellKey, float],
    simulated: Mapping[CellKey, float],
) -> tuple[SimSystem, dict[str, float]]:
    """One correction: each knob times the geometric mean of measured / simulated over its
    figures (knobs whose figures are all within :data:`TOLERANCE` stay); returns the model
    and each moved knob's relative change (none: the fit has converged)."""
    moved: dict[str, float] = {}
    for knob in steering:
        ratios = [measured[k] / simulated[k] for k in knob.cells if simulated.get(k)]
        if not ratios or all(abs(r - 1.0) <= TOLERANCE for r in ratios):
            continue
        factor = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        before = knob.get(model)
        model = knob.put(model, before * factor)
        if knob.get(model) != before:
            moved[knob.name] = abs(knob.get(model) / before - 1.0)
    return model, moved


def steering_knobs(
    steering: Sequence[Knob],
    moved: Mapping[str, float],
    before: Mapping[CellKey, float],
    after: Mapping[CellKey, float],
) -> list[Knob]:
    """The knobs still worth turning: a knob that moved while none of its figures did steers
    nothing here (host memory's share where host memory never binds) and is left as is."""
    return [
        knob
        for knob in steering
        if knob.name not in moved
        or any(abs(after.get(k, 0.0) / before[k] - 1.0) > 1e-6 for k in knob.cells if before.get(k))
    ]


def worst(dev: Mapping[CellKey, float]) -> tuple[CellKey | None, float]:
    """The figure furthest from its measurement, and its deviation."""
    if not dev:
        return None, 0.0
    key = max(dev, key=lambda k: abs(dev[k]))
    return key, dev[key]
