"""The JSON writer: gpubw's own report format, validated against its JSON Schema.

The schema (draft 2020-12) ships inside the package, ``gpubw/schemas/report-v1.schema.json``
(``schemas/`` at the top of the source tree links to it), and is loaded with
importlib.resources, so an installed gpubw validates without the source tree. Every
document is validated BEFORE it is written; a violation is a :class:`GpubwError` naming
the first problems, never a half-written file.

Values are in base units (bytes/s, seconds, bytes); each matrix also says its
``display_unit`` and the ``scale`` that turns a value into it. NaN and infinities are
written as null.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

import jsonschema

from gpubw.errors import GpubwError, UsageError
from gpubw.options import options_from_record
from gpubw.results import Matrix, Report, Status, TestcaseResult, finite_or_none
from gpubw.writers import Writer, display_scale, display_unit, json_safe, simulated_banner

SCHEMA_VERSION = "1"
SCHEMA_FILE = "report-v1.schema.json"
#: how many violations a validation error lists
MAX_ERRORS = 5


@functools.lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    """The report schema, from the installed package."""
    text = resources.files("gpubw").joinpath("schemas").joinpath(SCHEMA_FILE).read_text("utf-8")
    doc: dict[str, Any] = json.loads(text)
    return doc


@functools.lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema())


def validation_errors(doc: Any) -> list[str]:
    """Readable violations of the schema (``$.path: message``), most relevant first."""
    errors = sorted(_validator().iter_errors(doc), key=lambda e: list(e.absolute_path))
    out = []
    for e in errors:
        where = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.path)
        out.append(f"{where}: {e.message}")
    return out


@functools.lru_cache(maxsize=1)
def _matrix_validator() -> jsonschema.Draft202012Validator:
    sub = {"$defs": schema()["$defs"], "$ref": "#/$defs/matrix"}
    return jsonschema.Draft202012Validator(sub)


def _cell_problem(where: str, value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{where} is {value!r:.40} ({type(value).__name__}), not a number or None"
    if not math.isfinite(value):
        return f"{where} is {value!r}, not a finite number (use None for N/A)"
    return None


def matrix_errors(m: Matrix) -> list[str]:
    """What is wrong with a testcase's Matrix for the report schema: every value and sample
    must be a finite number or None (a NaN or a string is a plugin bug, not N/A), and the
    matrix must match the schema's ``matrix`` definition (unit, labels, ...). Empty if it is
    fine. The runner turns a non-empty answer into an Error for that testcase only."""
    out: list[str] = []
    for r, row in enumerate(m.values):
        for c, v in enumerate(row):
            problem = _cell_problem(f"values[{r}][{c}]", v)
            if problem:
                out.append(problem)
    for r, sample_row in enumerate(m.samples):
        for c, cell in enumerate(sample_row):
            if cell is None:
                continue
            if isinstance(cell, (str, bytes)) or not isinstance(cell, (list, tuple)):
                out.append(f"samples[{r}][{c}] is {type(cell).__name__}, not a list or None")
                continue
            for k, v in enumerate(cell):
                problem = _cell_problem(f"samples[{r}][{c}][{k}]", v)
                if problem:
                    out.append(problem)
    if out:
        return out
    try:
        doc = matrix_dict(m)
    except Exception as exc:
        return [f"cannot be written: {type(exc).__name__}: {exc}"]
    for e in sorted(_matrix_validator().iter_errors(doc), key=lambda e: list(e.absolute_path)):
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.path)
        out.append(f"{where.lstrip('.') or 'matrix'}: {e.message}")
    return out


def validate(doc: Any, what: str = "report") -> None:
    """Raise :class:`GpubwError` listing the first violations if ``doc`` is not a valid
    gpubw report."""
    errors = validation_errors(doc)
    if errors:
        shown = "\n  ".join(errors[:MAX_ERRORS])
        more = f"\n  ... and {len(errors) - MAX_ERRORS} more" if len(errors) > MAX_ERRORS else ""
        raise GpubwError(
            f"{what} does not match the gpubw report schema v{SCHEMA_VERSION} "
            f"({len(errors)} problem{'s' if len(errors) != 1 else ''}):\n  {shown}{more}"
        )


def _num(x: float | None) -> float | None:
    return finite_or_none(None if x is None else float(x))


def matrix_dict(m: Matrix) -> dict[str, Any]:
    return {
        "key": m.key,
        "description": m.description,
        "unit": m.unit,
        "display_unit": display_unit(m.unit),
        "scale": display_scale(m.unit),
        "bytes_counted": m.bytes_counted,
        "statistic": m.statistic,
        "initiator": m.initiator,
        "bandwidth_kind": m.bandwidth_kind,
        "bytes_per_copy": m.bytes_per_copy,
        "row_labels": list(m.row_labels),
        "column_labels": list(m.column_labels),
        "values": [[_num(v) for v in row] for row in m.values],
        "samples": (
            [[None if s is None else [_num(x) for x in s] for s in row] for row in m.samples]
            if m.samples
            else None
        ),
        "sum": _num(m.sum),
        "min": _num(m.minimum),
        "max": _num(m.maximum),
        "average": _num(m.average),
        "notes": json_safe(dict(m.notes)),
    }


def testcase_dict(t: TestcaseResult) -> dict[str, Any]:
    return {
        "key": t.key,
        "index": t.index,
        "status": t.status.value,
        "message": t.message,
        "description": t.description,
        "size_bytes": t.size,
        "duration_s": _num(t.duration_s) or 0.0,
        "plugin": t.plugin,
        "matrices": [matrix_dict(m) for m in t.matrices],
    }


def report_dict(report: Report) -> dict[str, Any]:
    """The report as plain JSON data (not yet validated)."""
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "tool": report.tool,
        "tool_version": report.tool_version,
        "simulated": bool(report.simulated),
    }
    if report.simulated:
        doc["notice"] = simulated_banner(report)
    doc.update(
        {
            "backend": report.backend,
            "system_name": report.system_name,
            "host": report.host,
            "versions": json_safe(report.versions),
            "devices": json_safe(list(report.devices)),
            "options": json_safe(report.options),
            "warnings": list(report.warnings),
            "error": report.error,
            "interrupted": report.interrupted,
            "exit_code": report.exit_code,
            "started": report.started,
            "finished": report.finished,
            "duration_s": _num(report.duration_s) or 0.0,
            "testcases": [testcase_dict(t) for t in report.testcases],
        }
    )
    return doc


def dumps(report: Report) -> str:
    """The validated JSON document (2-space indent, trailing newline)."""
    doc = report_dict(report)
    validate(doc)
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"


class JsonWriter(Writer):
    """gpubw's JSON report (schema ``report-v1``), validated before it is written."""

    name = "json"

    def write(self, report: Report, stream: TextIO) -> None:
        text = dumps(report)  # validates first: nothing is written on a violation
        stream.write(text)


def load_report(path: str | Path) -> dict[str, Any]:
    """Read a gpubw JSON report and validate it; UsageError if unreadable, GpubwError if it
    does not match the schema."""
    p = Path(path)
    try:
        text = p.read_text("utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read report {p}: {exc.strerror or exc}") from exc
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{p} is not JSON: {exc}") from exc
    if isinstance(doc, Mapping) and "nvbandwidth" in doc:
        raise UsageError(
            f"{p} is nvbandwidth's own JSON, not a gpubw report "
            "(gpubw.nvbandwidth_json reads that format)"
        )
    validate(doc, what=str(p))
    result: dict[str, Any] = dict(doc)
    return result


def _matrix_from(d: Mapping[str, Any]) -> Matrix:
    samples = d.get("samples") or ()
    return Matrix(
        key=d["key"],
        description=d["description"],
        unit=d["unit"],
        row_labels=d["row_labels"],
        column_labels=d["column_labels"],
        values=d["values"],
        samples=tuple(
            tuple(None if s is None else tuple(x for x in s if x is not None) for s in row)
            for row in samples
        ),
        bytes_counted=d["bytes_counted"],
        statistic=d["statistic"],
        initiator=d["initiator"],
        bandwidth_kind=d["bandwidth_kind"],
        bytes_per_copy=d["bytes_per_copy"],
        notes=tuple(d["notes"].items()),
    )


def report_from_dict(doc: Mapping[str, Any]) -> Report:
    """Rebuild a :class:`Report` from a validated document (e.g. to re-render it as text)."""
    run_options, invocation, stopped_by = options_from_record(doc["options"], doc["interrupted"])
    return Report(
        run_options=run_options,
        invocation=invocation,
        signal=stopped_by,
        tool=doc["tool"],
        tool_version=doc["tool_version"],
        backend=doc["backend"],
        simulated=doc["simulated"],
        system_name=doc["system_name"],
        host=doc["host"],
        versions=dict(doc["versions"]),
        devices=[dict(d) for d in doc["devices"]],
        testcases=[
            TestcaseResult(
                key=t["key"],
                status=Status(t["status"]),
                message=t["message"],
                index=t["index"],
                description=t["description"],
                size=t["size_bytes"],
                matrices=[_matrix_from(m) for m in t["matrices"]],
                duration_s=t["duration_s"],
                plugin=t["plugin"],
            )
            for t in doc["testcases"]
        ],
        warnings=doc["warnings"],
        error=doc["error"],
        started=doc["started"],
        finished=doc["finished"],
        duration_s=doc["duration_s"],
    )
