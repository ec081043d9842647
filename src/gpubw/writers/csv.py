"""The CSV writer: one row per matrix cell (long format), for spreadsheets and pandas.

Every row repeats the run's ``simulated`` flag, so a simulated figure cannot be mistaken for
a measured one once rows are filtered. Values are in base units (``value``, ``unit``) and in
nvbandwidth's display units (``display_value``, ``display_unit``); N/A cells are empty.
A testcase without matrices (waived, error, not found) gives one row with empty cells.

For rows gathered from many hosts and runs, each row also names the ``host``, the run's
start (``timestamp``, ISO 8601), the devices of the cell's row and column (``row_device``,
``row_uuid``, ``column_device``, ``column_uuid``; empty where that side is the host) and the
spread of the cell's samples (``stdev`` in base units, ``cv`` = stdev / mean; empty without
at least 2 samples). The rows are written as testcases finish.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from typing import Any, TextIO

from gpubw.model.results import Report, TestcaseResult
from gpubw.writers import Writer, cell_devices, display_scale, display_unit

COLUMNS = (
    "simulated",
    "system_name",
    "key",
    "index",
    "status",
    "message",
    "size_bytes",
    "matrix",
    "row",
    "column",
    "value",
    "unit",
    "display_value",
    "display_unit",
    "statistic",
    "bandwidth_kind",
    "initiator",
    "bytes_counted",
    "host",
    "timestamp",
    "row_device",
    "row_uuid",
    "column_device",
    "column_uuid",
    "stdev",
    "cv",
)


def _g(x: float | None) -> str:
    return "" if x is None or x != x or x in (float("inf"), float("-inf")) else repr(float(x))


def _names(device: Mapping[str, Any] | None) -> list[str]:
    return (
        ["", ""] if device is None else [str(device.get("name", "")), str(device.get("uuid", ""))]
    )


class CsvWriter(Writer):
    """Long-format CSV: one row per cell, written as each testcase finishes."""

    name = "csv"

    def __init__(self, *, verbose: bool = False, perf_formatter: bool = False) -> None:
        super().__init__(verbose=verbose, perf_formatter=perf_formatter)
        self._header: Report | None = None

    def write(self, report: Report, stream: TextIO) -> None:
        self.begin(report, stream)
        for t in report.testcases:
            self.testcase(t, stream)
        self._header = None

    def begin(self, header: Report, stream: TextIO) -> None:
        self._header = header
        csv.writer(stream, lineterminator="\n").writerow(COLUMNS)
        stream.flush()

    def end(self, report: Report, stream: TextIO) -> None:
        if self._header is None:
            self.write(report, stream)
        self._header = None

    def testcase(self, t: TestcaseResult, stream: TextIO) -> None:
        report = self._header
        if report is None:
            return
        w = csv.writer(stream, lineterminator="\n")
        head = [
            "true" if report.simulated else "false",
            report.system_name,
            t.key,
            "" if t.index is None else t.index,
            t.status.value,
            t.message,
            "" if t.size is None else t.size,
        ]
        run = [report.host, report.started]
        if not t.matrices:
            w.writerow(head + [""] * (COLUMNS.index("host") - len(head)) + run + [""] * 6)
        for m in t.matrices:
            scale = display_scale(m.unit)
            stats = m.cell_stats()
            for r, row in enumerate(m.values):
                for c, v in enumerate(row):
                    s = stats[r][c] if stats else None
                    row_dev, col_dev = cell_devices(m, r, c, report.devices)
                    w.writerow(
                        [
                            *head,
                            m.key,
                            m.row_labels[r],
                            m.column_labels[c],
                            _g(v),
                            m.unit,
                            _g(None if v is None else v * scale),
                            display_unit(m.unit),
                            m.statistic,
                            m.bandwidth_kind,
                            m.initiator,
                            m.bytes_counted,
                            *run,
                            *_names(row_dev),
                            *_names(col_dev),
                            _g(None if s is None else s.stdev),
                            _g(None if s is None else s.cv),
                        ]
                    )
        stream.flush()
