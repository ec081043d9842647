"""Writers: turn a :class:`gpubw.results.Report` into text, JSON, CSV, ...

A writer is a plugin of the entry-point group ``gpubw.writers``: a subclass of :class:`Writer`
with a ``name`` and ``write(report, stream)``. Writers only format; they never measure.
:func:`gpubw.registry.writer` finds one by name (the registry is the only place that reads
entry points).

Helpers shared by the built-in writers (and the plot command) live here: size-sweep grouping
and the nvbandwidth form of a device's PCI address. Display units, the simulated notice and
JSON-safe data come from :mod:`gpubw.report_io` (re-exported here); sizes are formatted by
:mod:`gpubw.sizes`.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any, TextIO

from gpubw.report_io import DISPLAY, display_scale, display_unit, json_safe, simulated_banner
from gpubw.results import Report, Status, TestcaseResult


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


__all__ = [
    "DISPLAY",
    "Writer",
    "device_pci_short",
    "display_scale",
    "display_unit",
    "json_safe",
    "simulated_banner",
    "sweeps",
]
