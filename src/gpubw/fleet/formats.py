"""The outputs of ``gpubw fleet`` by name (``--format``): each a function from the
:class:`~gpubw.fleet.analysis.FleetReport` and the output's options to the text written.
Another output is one more entry of :data:`FORMATTERS`."""

from __future__ import annotations

import json
from collections.abc import Callable

import attrs

from gpubw.fleet.analysis import FleetReport


@attrs.frozen
class FormatOptions:
    """What the command line says about the output: ``verbose`` (text: every finding and
    its figures)."""

    verbose: bool = False


def _text(report: FleetReport, options: FormatOptions) -> str:
    from gpubw.fleet.text import text

    out = text(report, options.verbose)
    if report.history is not None:  # --db --since: each GPU against its own past
        from gpubw.fleet.trend_output import trend_lines

        lines = trend_lines(report.history, report.settings.threshold, options.verbose)
        out += "\n".join(lines) + "\n"
    return out


def _json(report: FleetReport, options: FormatOptions) -> str:
    from gpubw.fleet.document import json_doc

    doc = json_doc(report)
    if report.history is not None:  # --db --since: each GPU against its own past
        from gpubw.fleet.trend_output import trend_doc

        doc["history"] = trend_doc(report.history)
    return json.dumps(doc, indent=1, allow_nan=False) + "\n"


def _openmetrics(report: FleetReport, options: FormatOptions) -> str:
    from gpubw.fleet.metrics import openmetrics

    return openmetrics(report)


def _html(report: FleetReport, options: FormatOptions) -> str:
    from gpubw.fleet.html import page

    return page(report, report.history)


Formatter = Callable[[FleetReport, FormatOptions], str]

#: ``--format`` name -> formatter
FORMATTERS: dict[str, Formatter] = {
    "text": _text,
    "json": _json,
    "openmetrics": _openmetrics,
    "html": _html,
}
