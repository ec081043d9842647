"""Writers: turn a :class:`gpubw.model.results.Report` into text, JSON, CSV, ...

A writer is a plugin of the entry-point group ``gpubw.writers``: a class gpubw constructs
without arguments (then it sets the flags ``verbose`` and ``perf_formatter`` on it, and the
values of the options it declares: see :func:`make_writer`) that implements one of two
protocols. Writers only format; they never measure.

A writer may declare command-line options of its own, cliff-style: ``options``, a tuple of
:class:`WriterOption` (``--metrics-detail`` of the OpenMetrics writer). ``gpubw`` accepts
them when ``--format`` names that writer, lists them in ``gpubw -h`` and in its shell
completion, and sets each value on the writer as the attribute :attr:`WriterOption.dest`.

* :class:`ReportWriter` -- ``write(report, stream)`` writes a whole Report at once (JSON: one
  validated document). :class:`Writer` is its base class.
* :class:`StreamingWriter` -- ``begin(header, stream)`` before the first testcase (``header``:
  the Report without testcases), ``testcase(result, stream)`` as each one finishes, and
  ``end(report, stream)`` with the whole Report. Standard output gets these calls as the run
  goes; so does a file (``-o``), at the end (written atomically). While a judged run
  streams, ``result.verdicts`` holds the verdicts on that result. A writer that also has
  ``write`` (text, CSV) must write the same with it as with the three calls: gpubw then
  uses ``write`` wherever it writes a report whole.

:func:`write_whole` writes a Report whole with either kind. Helpers shared by the built-in
writers (and the plot command) live here: size-sweep grouping and the nvbandwidth form of a
device's PCI address. Display units, the simulated notice and JSON-safe data come from
:mod:`gpubw.model.report_io` (re-exported here); sizes are formatted by
:mod:`gpubw.model.sizes`.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TextIO, runtime_checkable

import attrs

from gpubw.model.report_io import DISPLAY, display_scale, display_unit, json_safe, simulated_banner
from gpubw.model.results import AXIS_PEERS, GPU_AXES, Matrix, Report, Status, TestcaseResult

#: the row sides whose label names a device record (see :func:`cell_devices`)
_ROW_DEVICES = GPU_AXES | {AXIS_PEERS}


@attrs.frozen
class WriterOption:
    """One command-line option a writer declares (its ``options``): gpubw takes it when
    ``--format`` names the writer and sets the value (a string, one of ``choices`` when
    given; ``default`` when the option is not given) as the writer's attribute
    :attr:`dest`."""

    #: the long option, e.g. ``--metrics-detail``
    flag: str
    #: one line for ``gpubw -h``
    help: str
    #: the values it takes (empty: any string)
    choices: tuple[str, ...] = ()
    default: str | None = None
    #: the value's name in help (default: the choices)
    metavar: str | None = None

    def __attrs_post_init__(self) -> None:
        if not self.flag.startswith("--") or not self.dest.isidentifier():
            raise ValueError(f"a writer option is a long option like --name-of-it: {self.flag!r}")

    @property
    def dest(self) -> str:
        """The writer's attribute that gets the value: ``--metrics-detail`` ->
        ``metrics_detail``."""
        return self.flag[2:].replace("-", "_")


def writer_options(cls: Any) -> tuple[WriterOption, ...]:
    """The options a writer class declares (none when it declares none, or not a tuple of
    :class:`WriterOption`)."""
    declared = getattr(cls, "options", ())
    if not isinstance(declared, tuple) or not all(isinstance(o, WriterOption) for o in declared):
        return ()
    return declared


@runtime_checkable
class ReportWriter(Protocol):
    """A writer that writes a whole Report at once."""

    def write(self, report: Report, stream: TextIO) -> None:
        """Write ``report`` to ``stream`` (a text stream)."""


@runtime_checkable
class StreamingWriter(Protocol):
    """A writer that writes as the run goes; the three calls together write the report."""

    def begin(self, header: Report, stream: TextIO) -> None:
        """The run has started: ``header`` is the Report without testcases (system,
        devices, versions, options)."""

    def testcase(self, result: TestcaseResult, stream: TextIO) -> None:
        """One testcase (at one size) has finished (``result.verdicts``: the verdicts on
        it, in a judged run)."""

    def end(self, report: Report, stream: TextIO) -> None:
        """The run is over; ``report`` is complete."""


class Writer(abc.ABC):
    """Base class of the built-in writers, and of any plugin's that wants it (a
    :class:`ReportWriter`; a streaming writer adds ``begin``, ``testcase`` and ``end``).

    The flags that change the output are attributes, never read from the report:
    ``verbose`` (per-sample figures) and ``perf_formatter`` (nvbandwidth's
    ``--perfFormatter`` lines). gpubw constructs a writer without arguments and then sets
    them (:func:`make_writer`); they are keyword arguments here too, for code that makes a
    writer itself.
    """

    #: the entry-point name (``gpubw --format NAME``)
    name: str = ""
    #: the command-line options this writer takes (see :class:`WriterOption`)
    options: tuple[WriterOption, ...] = ()
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


def make_writer(
    cls: Callable[[], Any],
    *,
    verbose: bool = False,
    perf: bool = False,
    settings: Mapping[str, str | None] | None = None,
) -> Any:
    """A writer of class ``cls`` (constructed without arguments) with the two flags set on
    it (a writer whose ``__slots__`` leave them out ignores them), and each option it
    declares (:func:`writer_options`) set to its value in ``settings`` (by ``dest``), else
    to its default."""
    writer = cls()
    with contextlib.suppress(AttributeError):
        writer.verbose, writer.perf_formatter = verbose, perf
    given = settings or {}
    for option in writer_options(cls):
        setattr(writer, option.dest, given.get(option.dest, option.default))
    if not isinstance(writer, (ReportWriter, StreamingWriter)):
        raise TypeError(
            f"{type(writer).__name__} has neither write(report, stream) nor "
            "begin/testcase/end(..., stream): it is not a writer"
        )
    return writer


def write_whole(writer: Any, report: Report, stream: TextIO) -> None:
    """Write ``report`` whole: with ``write`` if the writer has it, else through
    ``begin``, ``testcase`` (each result with its verdicts) and ``end``."""
    if isinstance(writer, ReportWriter):
        writer.write(report, stream)
    else:
        write_streamed(writer, report, stream)


def write_streamed(writer: Any, report: Report, stream: TextIO) -> None:
    """Write ``report`` with a streaming writer's calls, as a run makes them: ``begin``
    (the report without testcases), ``testcase`` per result (with its verdicts), ``end``."""
    writer.begin(attrs.evolve(report, testcases=()), stream)
    for result in report.testcases:
        writer.testcase(attrs.evolve(result, verdicts=verdicts_on(result, report)), stream)
    writer.end(report, stream)


def verdicts_on(result: TestcaseResult, report: Report) -> tuple[Any, ...]:
    """The report's verdicts on one result (its testcase at its size)."""
    return tuple(v for v in report.verdicts if v.testcase == result.key and v.size == result.size)


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
    "ReportWriter",
    "StreamingWriter",
    "Writer",
    "WriterOption",
    "cell_devices",
    "device_pci_short",
    "display_scale",
    "display_unit",
    "json_safe",
    "make_writer",
    "simulated_banner",
    "sweeps",
    "verdicts_on",
    "write_streamed",
    "write_whole",
    "writer_options",
]
