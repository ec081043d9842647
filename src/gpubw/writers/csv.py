"""The CSV writer: one row per matrix cell (long format), for spreadsheets and pandas.

Every row repeats the run's ``simulated`` flag, so a simulated figure cannot be mistaken for
a measured one once rows are filtered. Values are in base units (``value``, ``unit``) and in
nvbandwidth's display units (``display_value``, ``display_unit``); N/A cells are empty.
A testcase without matrices (waived, error, not found) gives one row with empty cells.
"""

from __future__ import annotations

import csv
from typing import TextIO

from gpubw.results import Report
from gpubw.writers import Writer, display_scale, display_unit

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
)


def _g(x: float | None) -> str:
    return "" if x is None or x != x or x in (float("inf"), float("-inf")) else repr(float(x))


class CsvWriter(Writer):
    """Long-format CSV: one row per cell."""

    name = "csv"

    def write(self, report: Report, stream: TextIO) -> None:
        w = csv.writer(stream, lineterminator="\n")
        w.writerow(COLUMNS)
        sim = "true" if report.simulated else "false"
        for t in report.testcases:
            head = [
                sim,
                report.system_name,
                t.key,
                "" if t.index is None else t.index,
                t.status.value,
                t.message,
                "" if t.size is None else t.size,
            ]
            if not t.matrices:
                w.writerow(head + [""] * (len(COLUMNS) - len(head)))
                continue
            for m in t.matrices:
                scale = display_scale(m.unit)
                for r, row in enumerate(m.values):
                    for c, v in enumerate(row):
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
                            ]
                        )
