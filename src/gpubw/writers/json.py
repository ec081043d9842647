"""The JSON writer: gpubw's own report format (schema ``report-v1``).

A thin writer: :mod:`gpubw.model.report_io` turns the report into JSON data and validates it
against the schema BEFORE anything is written; a violation is a :class:`GpubwError` naming
the first problems, never a half-written file.
"""

from __future__ import annotations

from typing import TextIO

from gpubw.model.report_io import dumps
from gpubw.model.results import Report
from gpubw.writers import Writer


class JsonWriter(Writer):
    """gpubw's JSON report (schema ``report-v1``), validated before it is written."""

    name = "json"

    def write(self, report: Report, stream: TextIO) -> None:
        text = dumps(report)  # validates first: nothing is written on a violation
        stream.write(text)
