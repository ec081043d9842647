"""Writers: turn a :class:`gpubw.results.Report` into text, JSON, CSV, ...

A writer is a plugin of the entry-point group ``gpubw.writers``: a subclass of :class:`Writer`
with a ``name`` and ``write(report, stream)``. Writers only format; they never measure.
:func:`gpubw.registry.writer` finds one by name (the registry is the only place that reads
entry points).

Helpers shared by the built-in writers (and the plot command) live here: display units,
human sizes, size-sweep grouping and the device record that goes into a Report.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping
from typing import Any, TextIO

import attrs

from gpubw.backend.base import DeviceInfo
from gpubw.results import BANDWIDTH, LATENCY, Matrix, Report, Status, TestcaseResult


class Writer(abc.ABC):
    """Base class of every writer.

    The flags that change the output are constructor arguments, never read from the report:
    ``verbose`` (per-sample figures) and ``perf_formatter`` (nvbandwidth's
    ``--perfFormatter`` lines). A writer that defines its own ``__init__`` should accept them
    as keyword arguments and pass them on (``super().__init__(**flags)``); one whose
    ``__init__`` takes no arguments still works: the CLI then sets the flags as attributes
    after construction (:func:`gpubw.cli.make_writer`).
    """

    #: the entry-point name (``gpubw --format NAME``)
    name: str = ""
    #: per-sample figures (``gpubw -v``)
    verbose: bool = False
    #: nvbandwidth's ``--perfFormatter`` output
    perf_formatter: bool = False

    def __init__(self, *, verbose: bool = False, perf_formatter: bool = False) -> None:
        self.verbose = verbose
        self.perf_formatter = perf_formatter

    @abc.abstractmethod
    def write(self, report: Report, stream: TextIO) -> None:
        """Write ``report`` to ``stream`` (a text stream)."""


# -- units ------------------------------------------------------------------------------

#: base unit -> (display unit, factor from base to display)
DISPLAY: dict[str, tuple[str, float]] = {BANDWIDTH: ("GB/s", 1e-9), LATENCY: ("ns", 1e9)}


def display_unit(unit: str) -> str:
    return DISPLAY.get(unit, (unit, 1.0))[0]


def display_scale(unit: str) -> float:
    """Factor that turns a value in ``unit`` (base) into its display unit."""
    return DISPLAY.get(unit, (unit, 1.0))[1]


def to_display(value: float | None, unit: str) -> float | None:
    return None if value is None else value * display_scale(unit)


def human_size(nbytes: int | float) -> str:
    """Binary units, as nvbandwidth's MiB: ``512 B``, ``4 KiB``, ``1.5 MiB``, ``2 GiB``."""
    n = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if n == int(n) else f"{n:.3g} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def json_safe(value: Any) -> Any:
    """Plain JSON data: tuples to lists, NaN/inf to None, unknown objects to strings."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_safe(v) for v in value]
    if isinstance(value, Status):
        return value.value
    if attrs.has(type(value)):
        return json_safe(attrs.asdict(value, recurse=False))
    return str(value)


# -- report shapes ----------------------------------------------------------------------


def sweeps(report: Report) -> dict[str, list[TestcaseResult]]:
    """Testcase keys run at more than one buffer size -> their Passed results, by size."""
    by_key: dict[str, list[TestcaseResult]] = {}
    for t in report.testcases:
        if t.status is Status.PASSED and t.size is not None and t.matrices:
            by_key.setdefault(t.key, []).append(t)
    return {
        k: sorted(ts, key=lambda t: t.size or 0)
        for k, ts in by_key.items()
        if len({t.size for t in ts}) > 1
    }


def notes_dict(matrix: Matrix) -> dict[str, Any]:
    return dict(matrix.notes)


def device_dict(info: DeviceInfo) -> dict[str, Any]:
    """The record of one device in a Report (``Report.devices``): every DeviceInfo field,
    plus ``pci_short`` and ``nominal_memory_bandwidth`` (bytes/s)."""
    d = attrs.asdict(info)
    d["compute_capability"] = list(info.compute_capability)
    d["local_cpus"] = list(info.local_cpus)
    d["pci_short"] = info.pci_short
    d["nominal_memory_bandwidth"] = info.nominal_memory_bandwidth
    return d


def device_pci_short(device: Mapping[str, Any]) -> str:
    """nvbandwidth's ``dddddddd:bb:dd`` form for a device record."""
    if device.get("pci_short"):
        return str(device["pci_short"])
    bus_id = str(device.get("pci_bus_id", ""))
    try:
        dom, bus, rest = bus_id.split(":")
        return f"{int(dom, 16):08x}:{int(bus, 16):02x}:{int(rest.split('.')[0], 16):02x}"
    except ValueError:
        return bus_id or "unknown"


def simulated_banner(report: Report) -> str:
    name = report.system_name or "model"
    return f"SIMULATED SYSTEM {name}: these figures are modelled, not measured"


__all__ = [
    "DISPLAY",
    "Writer",
    "device_dict",
    "device_pci_short",
    "display_scale",
    "display_unit",
    "human_size",
    "json_safe",
    "notes_dict",
    "simulated_banner",
    "sweeps",
    "to_display",
]
