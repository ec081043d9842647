"""Plain data: what a testcase returns and what a run reports. Writers only format these.

Values are in base units: bytes/s for bandwidth, seconds for latency, bytes for sizes.
"""

from __future__ import annotations

import enum
import functools
import math
import re
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from gpubw.model.options import Invocation, RunOptions, _signal_name, exit_status, options_record

#: Units a Matrix may carry (base units only; writers convert for display).
BANDWIDTH = "bytes/s"
LATENCY = "s"

#: What a Matrix measures (``Matrix.kind``): higher is better for bandwidth, lower for latency.
KIND_BANDWIDTH = "bandwidth"
KIND_LATENCY = "latency"
KINDS = (KIND_BANDWIDTH, KIND_LATENCY)
#: How the bytes behind a bandwidth figure were counted (``Matrix.bytes_counting``): once per
#: byte copied (nvbandwidth's way), or every byte read and every byte written (a memory
#: datasheet's way: comparable with the nominal memory bandwidth); "none" for latency.
COUNTED_ONCE = "once"
COUNTED_READ_WRITE = "read+write"
COUNTED_NONE = "none"
BYTES_COUNTINGS = (COUNTED_ONCE, COUNTED_READ_WRITE, COUNTED_NONE)

#: What a Matrix's rows, or its columns, stand for (``Axes.rows``, ``Axes.columns``).
AXIS_HOST = "host"  # the host: the one row of a host <-> GPU matrix
AXIS_GPU = "gpu"  # a GPU of the node; its label is the device ordinal
AXIS_RANK = "rank"  # a rank of a multi-rank run; its label is the rank, read as that rank's GPU
AXIS_PEERS = "peers"  # every peer of the column's GPU at once: the one row of an all-to-one
AXIS_NONE = "none"  # no end of the traffic: the one row (or column) that only holds figures
AXIS_KINDS = (AXIS_HOST, AXIS_GPU, AXIS_RANK, AXIS_PEERS, AXIS_NONE)
#: the sides whose labels name a GPU (a device ordinal, or a rank read as its GPU)
GPU_AXES = frozenset({AXIS_GPU, AXIS_RANK})
#: Which way a cell reads (``Axes.direction``): the arrow of nvbandwidth's header between
#: the row and the column (``->``, ``<-``, ``<->``).
ROW_TO_COLUMN = "row->column"
COLUMN_TO_ROW = "column->row"
BOTH_WAYS = "both"
DIRECTIONS = (ROW_TO_COLUMN, COLUMN_TO_ROW, BOTH_WAYS)
_ARROWS = {ROW_TO_COLUMN: "->", COLUMN_TO_ROW: "<-", BOTH_WAYS: "<->"}


def _tuple(items: Iterable[Any]) -> tuple[Any, ...]:
    """``tuple`` as a typed converter (mypy cannot infer attrs' ``converter=tuple``)."""
    return tuple(items)


def _tuple2(rows: Sequence[Sequence[Any]]) -> tuple[tuple[Any, ...], ...]:
    """Rows as tuples; a numpy array (or anything with ``tolist``) becomes Python numbers."""
    if hasattr(rows, "tolist"):
        rows = rows.tolist()
    return tuple(tuple(r.tolist() if hasattr(r, "tolist") else r) for r in rows)


def _samples(rows: Sequence[Sequence[Any]]) -> tuple[tuple[Any, ...], ...]:
    """Sample rows as tuples; a cell that is a numpy array becomes a tuple of floats."""
    if hasattr(rows, "tolist"):
        rows = rows.tolist()
    return tuple(
        tuple(tuple(c.tolist()) if hasattr(c, "tolist") else c for c in row) for row in rows
    )


@attrs.frozen
class Axes:
    """What a Matrix's rows and columns stand for, and which way its cells read.

    ``rows`` and ``columns`` are each ``"host"``, ``"gpu"`` (the label is a device ordinal),
    ``"rank"`` (the label is a rank of a multi-rank run, standing for its GPU), ``"peers"``
    (the one row of an all-to-one or one-to-all matrix: every peer of the column's GPU) or
    ``"none"`` (a row or column that names no end, e.g. the one row of device-local copies).
    ``direction`` is the arrow of nvbandwidth's header between them: ``"row->column"``
    (``->``), ``"column->row"`` (``<-``) or ``"both"`` (``<->``, bidirectional). A testcase
    gives a Matrix its axes; a Matrix without them gets :func:`axes_from_header`'s.
    """

    rows: str = attrs.field(validator=attrs.validators.in_(AXIS_KINDS))
    columns: str = attrs.field(validator=attrs.validators.in_(AXIS_KINDS))
    direction: str = attrs.field(default=ROW_TO_COLUMN, validator=attrs.validators.in_(DIRECTIONS))

    @property
    def arrow(self) -> str:
        """The direction as nvbandwidth's header writes it: ``->``, ``<-`` or ``<->``."""
        return _ARROWS[self.direction]

    @property
    def bidirectional(self) -> bool:
        return self.direction == BOTH_WAYS


_ENDS = re.compile(r"(CPU|GPU)\(row\)\s*(<->|->|<-)\s*(CPU|GPU)\(column\)")
_BY_ARROW = {arrow: direction for direction, arrow in _ARROWS.items()}


@functools.lru_cache(maxsize=256)
def axes_from_header(description: str, n_rows: int = 1) -> Axes:
    """The axes an nvbandwidth-style header names, for a Matrix built without axes (a
    plugin's, one read back from a report, nvbandwidth's own JSON): the one place that reads
    a header for meaning. ``CPU(row) -> GPU(column)`` is host x gpu; ``GPU(row) <-
    GPU(column)`` gpu x gpu, or peers x gpu over one row (nvbandwidth's all-to-one and
    one-to-all); ``CPU(row)`` over several rows is gpu (nvbandwidth's multinode bidirectional
    headers say CPU); ``GPU(column)`` alone is none x gpu; anything else none x none. The
    arrow gives the direction; without one, row->column."""
    found = _ENDS.search(description)
    if found is None:
        columns = AXIS_GPU if "GPU(column)" in description else AXIS_NONE
        return Axes(AXIS_NONE, columns)
    row, arrow, column = found.groups()
    one_row = AXIS_HOST if row == "CPU" else AXIS_PEERS
    rows = AXIS_GPU if n_rows > 1 else one_row
    return Axes(rows, AXIS_HOST if column == "CPU" else AXIS_GPU, _BY_ARROW[arrow])


def _default_kind(m: Matrix) -> str:
    return KIND_LATENCY if m.unit == LATENCY else KIND_BANDWIDTH


def _default_counting(m: Matrix) -> str:
    """For a Matrix built without ``bytes_counting``: none for latency; read + write where the
    testcase compares the figure with the nominal memory bandwidth (its ``percent_of_nominal``
    note, the documented name); else once, as nvbandwidth counts."""
    if m.kind == KIND_LATENCY:
        return COUNTED_NONE
    if any(name == "percent_of_nominal" for name, _ in m.notes):
        return COUNTED_READ_WRITE
    return COUNTED_ONCE


@attrs.frozen
class Matrix:
    """One result matrix of a testcase.

    ``values[r][c]`` is a float in ``unit`` or None (not applicable: diagonal, a pair without
    peer access, ...). ``samples[r][c]`` holds the raw per-sample values behind that cell
    (same unit) or None.
    """

    key: str  # name of the matrix (the testcase key, or key + "_read1", ...)
    description: str  # the header line, as nvbandwidth prints it
    unit: str  # BANDWIDTH or LATENCY
    row_labels: tuple[str, ...] = attrs.field(converter=_tuple)
    column_labels: tuple[str, ...] = attrs.field(converter=_tuple)
    values: tuple[tuple[float | None, ...], ...] = attrs.field(converter=_tuple2)
    samples: tuple[tuple[tuple[float, ...] | None, ...], ...] = attrs.field(
        converter=_samples, default=()
    )
    #: how the bytes behind the figure were counted, in words
    bytes_counted: str = ""
    #: "median" or "mean" (the statistic over samples), or e.g. "mean of 1000000 accesses"
    statistic: str = "median"
    #: the engine: "CE", "SM", "SM split-warp", "pointer chase", ...
    initiator: str = ""
    #: "first", "sum", "total", "vector" or "latency"
    bandwidth_kind: str = "first"
    #: bytes per copy actually timed (after any SM truncation), None where it varies
    bytes_per_copy: int | None = None
    #: extra, free-form facts (e.g. percent of nominal, l2_fits per column)
    notes: tuple[tuple[str, Any], ...] = ()
    #: KIND_BANDWIDTH or KIND_LATENCY; None (the default): inferred from ``unit``. Read it
    #: through the ``kind`` property. Kept None until given, so ``attrs.evolve`` re-infers.
    _kind: str | None = None
    #: COUNTED_ONCE, COUNTED_READ_WRITE or COUNTED_NONE (latency); None: inferred (see
    #: ``_default_counting``). Read it through ``bytes_counting``.
    _bytes_counting: str | None = None
    #: what the rows and columns stand for (:class:`Axes`); None: read from the header
    #: (:func:`axes_from_header`). Read it through ``axes``. Not written to the JSON report.
    _axes: Axes | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(Axes))
    )

    @property
    def kind(self) -> str:
        """What the figures measure: KIND_BANDWIDTH (higher is better) or KIND_LATENCY."""
        return self._kind if self._kind is not None else _default_kind(self)

    @property
    def bytes_counting(self) -> str:
        """How the bytes behind a bandwidth figure were counted: COUNTED_ONCE (as
        nvbandwidth), COUNTED_READ_WRITE (as a memory datasheet: comparable with the nominal
        memory bandwidth) or COUNTED_NONE (latency)."""
        if self._bytes_counting is not None:
            return self._bytes_counting
        return _default_counting(self)

    @property
    def axes(self) -> Axes:
        """What the rows and columns stand for: the axes the matrix was built with, else
        those its header names (:func:`axes_from_header`)."""
        if self._axes is not None:
            return self._axes
        return axes_from_header(self.description, len(self.row_labels))

    def __attrs_post_init__(self) -> None:
        if len(self.values) != len(self.row_labels):
            raise ValueError(
                f"matrix {self.key}: {len(self.values)} rows of values, "
                f"{len(self.row_labels)} row labels"
            )
        for row in self.values:
            if len(row) != len(self.column_labels):
                raise ValueError(
                    f"matrix {self.key}: a row has {len(row)} values, "
                    f"{len(self.column_labels)} column labels"
                )
        if self.samples and len(self.samples) != len(self.values):
            raise ValueError(f"matrix {self.key}: samples do not match values' shape")
        kind, counting = self.kind, self.bytes_counting
        if kind not in KINDS:
            raise ValueError(f"matrix {self.key}: kind {kind!r} is not one of {', '.join(KINDS)}")
        expected = {BANDWIDTH: KIND_BANDWIDTH, LATENCY: KIND_LATENCY}.get(self.unit)
        if expected is not None and kind != expected:
            raise ValueError(f"matrix {self.key}: kind {kind!r} does not match unit {self.unit!r}")
        if counting not in BYTES_COUNTINGS:
            raise ValueError(
                f"matrix {self.key}: bytes_counting {counting!r} is not one of "
                f"{', '.join(BYTES_COUNTINGS)}"
            )
        if (counting == COUNTED_NONE) != (kind == KIND_LATENCY):
            raise ValueError(
                f"matrix {self.key}: bytes_counting {counting!r} does not fit a {kind} matrix "
                f"({COUNTED_NONE!r} is for latency, and only for latency)"
            )

    @property
    def cells(self) -> list[float]:
        return [v for row in self.values for v in row if v is not None]

    @property
    def sum(self) -> float:
        """Sum of the applicable cells (nvbandwidth counts N/A as 0)."""
        return float(sum(self.cells))

    @property
    def minimum(self) -> float | None:
        c = self.cells
        return min(c) if c else None

    @property
    def maximum(self) -> float | None:
        c = self.cells
        return max(c) if c else None

    @property
    def average(self) -> float | None:
        c = [v for v in self.cells if v > 0]
        return sum(c) / len(c) if c else None

    def cell_stats(self) -> tuple[tuple[CellStats | None, ...], ...]:
        """The spread of each cell's raw samples (same shape as ``values``; None where a cell
        has no samples); empty when the matrix kept no samples."""
        if not self.samples:
            return ()
        return tuple(tuple(cell_stats(cell) for cell in row) for row in self.samples)


@attrs.frozen
class CellStats:
    """The spread of one cell's samples: how many, their mean, the sample standard deviation
    and the coefficient of variation (stdev / mean); stdev and cv are None with fewer than 2
    samples, cv also when the mean is 0."""

    n: int
    mean: float
    stdev: float | None
    cv: float | None


def cell_stats(samples: Sequence[float] | None) -> CellStats | None:
    """:class:`CellStats` of one cell's samples (None for no samples)."""
    if not samples:
        return None
    xs = [float(x) for x in samples]
    mean = statistics.fmean(xs)
    if len(xs) < 2:
        return CellStats(len(xs), mean, None, None)
    sd = statistics.stdev(xs)
    return CellStats(len(xs), mean, sd, sd / mean if mean else None)


class Status(enum.Enum):
    PASSED = "Passed"
    WAIVED = "Waived"
    ERROR = "Error"
    NOT_FOUND = "Not Found"
    INTERRUPTED = "Interrupted"


@attrs.frozen
class TestcaseResult:
    """The outcome of one selected testcase at one buffer size."""

    __test__ = False  # not a pytest class

    key: str  # the testcase key, or the unresolved -t string for NOT_FOUND
    status: Status
    message: str = ""
    index: int | None = None
    description: str = ""
    size: int | None = None  # bytes (the -b value), None where not applicable
    matrices: tuple[Matrix, ...] = attrs.field(converter=_tuple, default=())
    duration_s: float = 0.0
    plugin: str = ""  # distribution that provided the testcase
    #: what the testcase's plugin code printed to standard output while it ran (captured so
    #: that it cannot corrupt gpubw's own output; a testcase's first result also holds what
    #: its plugin module printed while it was imported, first); "" if nothing
    output: str = ""
    #: while a judged run streams: the verdicts (:class:`gpubw.model.verdicts.Verdict`) on
    #: this result, for a streaming writer's ``testcase()`` to print after the matrices they
    #: judge. Not part of the JSON testcase (the report keeps every verdict in ``verdicts``)
    verdicts: tuple[Any, ...] = attrs.field(converter=_tuple, default=(), eq=False)
    #: --soak: which repetition of the selection this result belongs to (0 first); None in
    #: a run that is not a soak
    repetition: int | None = None

    @property
    def ok(self) -> bool:
        return self.status in (Status.PASSED, Status.WAIVED)


@attrs.frozen
class Report:
    """One run: the outcome of every selected testcase at every size, plus what the run was
    (system, versions, devices, options) and how it ended."""

    tool: str
    tool_version: str
    backend: str  # "cuda" or "simulated"
    simulated: bool
    system_name: str  # simulated preset/file name, or "" for real hardware
    host: str
    versions: dict[str, Any]
    devices: tuple[dict[str, Any], ...] = attrs.field(converter=_tuple)
    #: how every measurement was made (sizes, samples, loops, statistic, ...)
    run_options: RunOptions = attrs.field(factory=RunOptions)
    #: how the run was asked for (argv, format, output, selection), for the record only
    invocation: Invocation | None = None
    testcases: tuple[TestcaseResult, ...] = attrs.field(converter=_tuple, default=())
    warnings: tuple[str, ...] = attrs.field(converter=_tuple, default=())
    error: str = ""  # a run-level error (e.g. no driver), if the run could not start
    #: the signal that stopped the run ("SIGINT", "SIGTERM"), None if it was not stopped
    signal: str | None = attrs.field(default=None, converter=_signal_name)
    started: str = ""
    finished: str = ""
    duration_s: float = 0.0
    #: judgements of the cells (:class:`gpubw.acceptance.expect.Verdict`, by ``--expect``, ``gpubw
    #: check`` or the peer-outlier rule); empty when nothing was judged
    verdicts: tuple[Any, ...] = attrs.field(converter=_tuple, default=())
    #: node-level NVML facts (driver, NVML version, available or why not); per-device facts
    #: are in each device record's ``nvml`` (start of run) and ``nvml_end`` (end of run)
    nvml: dict[str, Any] | None = None
    #: what the verdicts judged against: name, source, outlier_pct, cv_threshold (None: the
    #: cells were not judged)
    expectations: dict[str, Any] | None = None
    #: a soak (--soak): duration_s asked for, repetitions run, and per repetition the
    #: devices' clocks, temperature, power and throttle reasons (``samples``); None otherwise
    soak: dict[str, Any] | None = None
    #: --trace: where the run's time went (:func:`gpubw.model.trace.trace_record`: the clock
    #: and the events); None when not asked for
    trace: dict[str, Any] | None = None

    @property
    def below_expectation(self) -> bool:
        """True when a verdict failed (a cell below its floor, above its ceiling, or an
        outlier among its peers)."""
        return any(getattr(v, "severity", None) == "fail" for v in self.verdicts)

    #: the ranks of a multi-rank run (size, hosts, rank_hosts, processes, mpi_library,
    #: handle_type, launcher); None for a run of one rank
    world: dict[str, Any] | None = None
    #: the single-node testcases' results of every host other than rank 0's, in host order:
    #: (host name, results)
    hosts: tuple[tuple[str, tuple[TestcaseResult, ...]], ...] = attrs.field(
        converter=_tuple, default=()
    )

    @property
    def interrupted(self) -> bool:
        """True if a signal stopped the run."""
        return self.signal is not None

    @property
    def exit_code(self) -> int:
        """0 if every selected testcase Passed or was Waived, 130/143 if interrupted, 1 on
        an error, else 3 if a verdict failed (:func:`exit_status`)."""
        failed = bool(self.error) or not all(t.ok for t in self.testcases)
        failed = failed or not all(t.ok for _, results in self.hosts for t in results)
        return exit_status(
            signal=self.signal, failed=failed, below_expectation=self.below_expectation
        )

    @property
    def options(self) -> dict[str, Any]:
        """The JSON report's ``options`` object, built from :attr:`run_options`,
        :attr:`invocation` and :attr:`signal`."""
        return options_record(self.run_options, self.invocation, self.signal)

    def records(self) -> list[dict[str, Any]]:
        """Long-form data, one dict per matrix cell of every Passed testcase: ``testcase``,
        ``size`` (bytes, None for a fixed-size testcase), ``matrix``, ``row``, ``column``,
        ``value`` (base units, None where not applicable) and ``unit`` ("bytes/s" or "s").
        ``pandas.DataFrame(report.records())`` gives a tidy table."""
        out: list[dict[str, Any]] = []
        for t in self.testcases:
            for m in t.matrices:
                for r, row in enumerate(m.values):
                    for c, value in enumerate(row):
                        out.append(
                            {
                                "testcase": t.key,
                                "size": t.size,
                                "matrix": m.key,
                                "row": m.row_labels[r],
                                "column": m.column_labels[c],
                                "value": finite_or_none(value),
                                "unit": m.unit,
                            }
                        )
        return out


def finite_or_none(x: float | None) -> float | None:
    return None if x is None or math.isnan(x) or math.isinf(x) else x
