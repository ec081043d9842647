"""Writers: turn a :class:`gpubw.model.results.Report` into text, JSON, CSV, ...

A writer is a plugin of the entry-point group ``gpubw.writers``: a subclass of :class:`Writer`
with a ``name`` and ``write(report, stream)``. Writers only format; they never measure.
:func:`gpubw.runner.registry.writer` finds one by name (the registry is the only place that reads
entry points).

Results as they happen: the CLI drives a writer through :meth:`Writer.begin` (once, before the
first testcase), :meth:`Writer.testcase` (as each testcase finishes) and :meth:`Writer.end`
(with the whole Report). The defaults write nothing until ``end``, which calls ``write``: a
writer that only defines ``write`` (JSON: one validated document) works unchanged. A writer
that streams (text, CSV) sets ``streams = True`` and overrides all three; what it writes in
the three calls together must equal what ``write`` writes for the same report.

Helpers shared by the built-in writers (and the plot command) live here: size-sweep grouping
and the nvbandwidth form of a device's PCI address. Display units, the simulated notice and
JSON-safe data come from :mod:`gpubw.model.report_io` (re-exported here); sizes are formatted by
:mod:`gpubw.model.sizes`.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from gpubw.model.report_io import DISPLAY, display_scale, display_unit, json_safe, simulated_banner
from gpubw.model.results import AXIS_PEERS, GPU_AXES, Matrix, Report, Status, TestcaseResult

#: the row sides whose label names a device record (see :func:`cell_devices`)
_ROW_DEVICES = GPU_AXES | {AXIS_PEERS}


class Writer(abc.ABC):
    """Base class of every writer.

    The flags that change the output are constructor arguments, never read from the report:
    ``verbose`` (per-sample figures) and ``perf_formatter`` (nvbandwidth's
    ``--perfFormatter`` lines). A writer that defines its own ``__init__`` should accept them
    as keyword arguments and pass them on (``super().__init__(**flags)``); one whose
    ``__init__`` takes no arguments still works: the CLI then sets the flags as attributes
    after construction (:func:`gpubw.cli.command.make_writer`).
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

    #: True: begin/testcase write as the run goes (else everything is written by ``end``)
    streams: bool = False

    @abc.abstractmethod
    def write(self, report: Report, stream: TextIO) -> None:
        """Write ``report`` to ``stream`` (a text stream)."""

    def begin(self, header: Report, stream: TextIO) -> None:
        """The run has started: ``header`` is the Report without testcases (system, devices,
        versions, options). The default writes nothing."""
        return None

    def testcase(self, result: TestcaseResult, stream: TextIO) -> None:
        """One testcase (at one size) has finished. The default writes nothing."""
        return None

    def end(self, report: Report, stream: TextIO) -> None:
        """The run is over; ``report`` is complete. The default writes it with ``write``."""
        self.write(report, stream)


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


def _device(devices: Sequence[Mapping[str, Any]], label: str) -> Mapping[str, Any] | None:
    """The device record whose ordinal is ``label`` (a matrix row or column label)."""
    try:
        ordinal = int(label)
    except ValueError:
        return None
    for i, d in enumerate(devices):
        if d.get("ordinal", i) == ordinal:
            return d
    return None


def cell_devices(
    m: Matrix, r: int, c: int, devices: Sequence[Mapping[str, Any]]
) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]:
    """The device records of a cell's row and column, read from the matrix's axes; None
    where that side is not a GPU (the host, a pair label such as ``0->2``) or the report
    does not list the device. The one row of an all-to-one matrix (its peers) is read as
    the device its label names, as nvbandwidth's header (``GPU(row)``) names it."""
    axes = m.axes
    row = _device(devices, m.row_labels[r]) if axes.rows in _ROW_DEVICES else None
    column = _device(devices, m.column_labels[c]) if axes.columns in GPU_AXES else None
    return row, column


__all__ = [
    "DISPLAY",
    "Writer",
    "cell_devices",
    "device_pci_short",
    "display_scale",
    "display_unit",
    "json_safe",
    "simulated_banner",
    "sweeps",
]
