"""Report I/O: gpubw's report as JSON data, and reading it back.

This module sits beside :mod:`gpubw.model.results` and below everything that produces or consumes
reports: the runner (matrix validation, device records), the writers (the JSON writer is a
thin wrapper over :func:`report_to_dict`), ``gpubw plot`` and ``gpubw compare``
(:func:`load_report`, :func:`report_from_dict`). It knows nothing of the command line.

Cut along the seam this docstring named (the report as JSON data / its schema / reading it
back): whether a document or a matrix is what the schema says is
:mod:`gpubw.model.report_check` (:func:`~gpubw.model.report_check.validate`, the cells'
checks); this module converts (a Report to JSON data and back, a file's layout, reading a
file) and checks through it.

Values are in base units (bytes/s, seconds, bytes); each matrix also says its
``display_unit`` and the ``scale`` that turns a value into it. NaN and infinities are written
as null. A matrix is checked for the report by :func:`matrix_errors`: its values and samples
(:func:`gpubw.model.report_check.value_errors`), then the rest of it with the schema; the
whole document is validated with the schema before it is written (:func:`dumps`).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from gpubw.model.errors import UsageError
from gpubw.model.infile import read_input
from gpubw.model.options import options_from_record
from gpubw.model.report_check import (
    MAX_ERRORS,
    SCHEMA_VERSION,
    matrix_structure_errors,
    validate,
    value_errors,
    with_matrices,
)
from gpubw.model.results import (
    BANDWIDTH,
    LATENCY,
    Matrix,
    Report,
    Status,
    TestcaseResult,
    finite_or_none,
)

if TYPE_CHECKING:
    from gpubw.model.devices import DeviceInfo

#: base unit -> (display unit, factor from base to display)
DISPLAY: dict[str, tuple[str, float]] = {BANDWIDTH: ("GB/s", 1e-9), LATENCY: ("ns", 1e9)}


def display_unit(unit: str) -> str:
    """The unit nvbandwidth shows for a base unit: GB/s for bytes/s, ns for s."""
    return DISPLAY.get(unit, (unit, 1.0))[0]


def display_scale(unit: str) -> float:
    """Factor that turns a value in ``unit`` (base) into its display unit."""
    return DISPLAY.get(unit, (unit, 1.0))[1]


def simulated_banner(report: Report) -> str:
    """The notice a simulated report carries (JSON ``notice``; text top and bottom)."""
    name = report.system_name or "model"
    return f"SIMULATED SYSTEM {name}: these figures are modelled, not measured"


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
    np = sys.modules.get("numpy")  # a numpy scalar exists only once numpy is imported
    if np is not None and isinstance(value, np.generic):
        return json_safe(value.item())
    if attrs.has(type(value)):
        return json_safe(attrs.asdict(value, recurse=False))
    return str(value)


def device_record(info: DeviceInfo) -> dict[str, Any]:
    """The record of one device in a Report (``Report.devices``): every DeviceInfo field,
    plus ``pci_short`` and ``nominal_memory_bandwidth`` (bytes/s)."""
    d = attrs.asdict(info)
    d["compute_capability"] = list(info.compute_capability)
    d["local_cpus"] = list(info.local_cpus)
    d["pci_short"] = info.pci_short
    d["nominal_memory_bandwidth"] = info.nominal_memory_bandwidth
    return d


# -- matrix validation ----------------------------------------------------------------


def matrix_errors(m: Matrix, *, structure: bool = True) -> list[str]:
    """What is wrong with a testcase's Matrix for the report: every value and sample must be
    a finite number >= 0 or None, and (``structure``) the rest of the matrix must match the
    schema's ``matrix`` definition (unit, labels, notes, ...). Empty if it is fine. The
    runner turns a non-empty answer into an Error for that testcase only."""
    out = value_errors(m)
    if out or not structure:
        return out
    try:
        doc = matrix_to_dict(m, cells=False)
    except Exception as exc:
        return [f"cannot be written: {type(exc).__name__}: {exc}"]
    return matrix_structure_errors(doc)


def matrix_problem(m: Matrix, *, structure: bool = True) -> str | None:
    """:func:`matrix_errors` as one line (the first few), or None if the matrix is fine."""
    errors = matrix_errors(m, structure=structure)
    if not errors:
        return None
    shown = "; ".join(errors[:MAX_ERRORS])
    more = f"; ... and {len(errors) - MAX_ERRORS} more" if len(errors) > MAX_ERRORS else ""
    return shown + more


# -- Report -> dict ----------------------------------------------------------------------


def _num(x: float | None) -> float | None:
    return finite_or_none(None if x is None else float(x))


def _rows(rows: Sequence[Sequence[float | None]]) -> list[list[float | None]]:
    return [[_num(v) for v in row] for row in rows]


def matrix_to_dict(m: Matrix, *, cells: bool = True) -> dict[str, Any]:
    """One matrix as JSON data. ``cells=False`` leaves values and samples empty (to check
    the rest against the schema without converting millions of cells)."""
    return {
        "key": m.key,
        "description": m.description,
        "unit": m.unit,
        "kind": m.kind,
        "display_unit": display_unit(m.unit),
        "scale": display_scale(m.unit),
        "bytes_counted": m.bytes_counted,
        "bytes_counting": m.bytes_counting,
        "statistic": m.statistic,
        "initiator": m.initiator,
        "bandwidth_kind": m.bandwidth_kind,
        "bytes_per_copy": m.bytes_per_copy,
        "row_labels": list(m.row_labels),
        "column_labels": list(m.column_labels),
        "values": _rows(m.values) if cells else [],
        "samples": (
            [[None if s is None else [_num(x) for x in s] for s in row] for row in m.samples]
            if m.samples and cells
            else None
        ),
        "sum": _num(m.sum) if cells else None,
        "min": _num(m.minimum) if cells else None,
        "max": _num(m.maximum) if cells else None,
        "average": _num(m.average) if cells else None,
        "notes": json_safe(dict(m.notes)),
        **(_spread(m) if m.samples and cells else {}),
    }


def _spread(m: Matrix) -> dict[str, Any]:
    """``stdev`` and ``cv`` per cell: the sample standard deviation of the cell's finite
    samples and the coefficient of variation (stdev / mean); None with fewer than two."""
    stdev: list[list[float | None]] = []
    cv: list[list[float | None]] = []
    for row in m.samples:
        stdev.append([])
        cv.append([])
        for cell in row:
            xs = [float(x) for x in cell or () if x is not None and math.isfinite(float(x))]
            sd = statistics.stdev(xs) if len(xs) > 1 else None
            mean = statistics.fmean(xs) if xs else 0.0
            stdev[-1].append(_num(sd))
            cv[-1].append(_num(sd / mean) if sd is not None and mean else None)
    return {"stdev": stdev, "cv": cv}


def testcase_to_dict(t: TestcaseResult) -> dict[str, Any]:
    doc = {
        "key": t.key,
        "index": t.index,
        "status": t.status.value,
        "message": t.message,
        "description": t.description,
        "size_bytes": t.size,
        "duration_s": _num(t.duration_s) or 0.0,
        "plugin": t.plugin,
        "matrices": [matrix_to_dict(m) for m in t.matrices],
    }
    if t.output:  # optional: only when the plugin printed something
        doc["output"] = t.output
    if t.repetition is not None:  # optional: a soak's results only
        doc["repetition"] = t.repetition
    return doc


def report_to_dict(report: Report) -> dict[str, Any]:
    """The report as plain JSON data (not yet validated: see :func:`validate`)."""
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
            "testcases": [testcase_to_dict(t) for t in report.testcases],
        }
    )
    if report.verdicts or report.expectations is not None:
        doc["verdicts"] = [json_safe(v.as_dict()) for v in report.verdicts]
    if report.expectations is not None:
        doc["expectations"] = json_safe(report.expectations)
    if report.nvml is not None:
        doc["nvml"] = json_safe(report.nvml)
    if report.soak is not None:
        doc["soak"] = json_safe(report.soak)
    if report.trace is not None:
        doc["trace"] = json_safe(report.trace)
    if report.world is not None:
        doc["world"] = json_safe(report.world)
    if report.hosts:
        doc["hosts"] = [
            {"host": host, "testcases": [testcase_to_dict(t) for t in results]}
            for host, results in report.hosts
        ]
    return doc


def dumps(report: Report) -> str:
    """The validated JSON document (2-space indent, a row of a matrix's cells a line,
    trailing newline); GpubwError naming the first violations if the report does not match
    the schema."""
    doc = report_to_dict(report)
    validate(doc)
    return _layout(doc) + "\n"


#: a matrix's row arrays, written a row a line
_ROWS = ("values", "samples", "stdev", "cv")


def _layout(doc: dict[str, Any]) -> str:
    """``doc`` with a 2-space indent, each row of a matrix's cells on one line (one cell a
    line made a 576 x 576 matrix ~5 MB of mostly ``null`` and indentation)."""
    grids: list[list[Any]] = []
    mark = f"\x00rows-{os.urandom(8).hex()}-"  # stands for a grid in the text (unforgeable)

    def mark_grids(m: dict[str, Any]) -> None:
        for name in _ROWS:
            if m.get(name):
                grids.append(m[name])
                m[name] = f"{mark}{len(grids) - 1}"

    text = json.dumps(with_matrices(doc, mark_grids), indent=2, allow_nan=False)
    if not grids:
        return text
    out: list[str] = []
    for line in text.split("\n"):
        key, sep, rest = line.partition(': "\\u0000' + mark[1:])
        if not sep:
            out.append(line)
            continue
        k = int(rest[: rest.index('"')])
        pad = " " * (len(key) - len(key.lstrip()))
        rows = ",\n".join(f"{pad}  {json.dumps(r, allow_nan=False)}" for r in grids[k])
        out.append(f"{key}: [\n{rows}\n{pad}]{rest[rest.index(chr(34)) + 1 :]}")
    return "\n".join(out)


# -- dict -> Report ----------------------------------------------------------------------


def _read_json(p: Path) -> Any:
    """The JSON document in the report file ``p``; UsageError if it cannot be read or is not
    JSON."""
    try:
        text = read_input(p, "report")
    except OSError as exc:
        raise UsageError(f"cannot read report {p}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(f"{p} is not UTF-8 text: {exc}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{p} is not JSON: {exc}") from exc


def read_report(path: str | Path) -> Report:
    """The Report in ``path``: a gpubw JSON report (validated), or nvbandwidth's own ``-j``
    output (converted by :func:`gpubw.model.nvbandwidth_json.to_report`: figures in base units,
    each device with nvbandwidth's PCI address). UsageError if it is neither; GpubwError if a
    gpubw report does not match the schema."""
    p = Path(path)
    doc = _read_json(p)
    if isinstance(doc, Mapping) and "nvbandwidth" in doc:
        from gpubw.model.nvbandwidth_json import to_report

        return to_report(doc)
    validate(doc, what=str(p))
    return report_from_dict(doc)


def load_report(path: str | Path) -> dict[str, Any]:
    """Read a gpubw JSON report and validate it; UsageError if unreadable, GpubwError if it
    does not match the schema."""
    p = Path(path)
    doc = _read_json(p)
    if isinstance(doc, Mapping) and "nvbandwidth" in doc:
        raise UsageError(
            f"{p} is nvbandwidth's own JSON, not a gpubw report "
            "(gpubw.model.nvbandwidth_json reads that format)"
        )
    validate(doc, what=str(p), closed=False)  # a newer gpubw's added members are ignored
    result: dict[str, Any] = dict(doc)
    return result


def matrix_from_dict(d: Mapping[str, Any]) -> Matrix:
    """A Matrix from its JSON data; ``kind`` and ``bytes_counting`` are inferred where an
    older report lacks them."""
    samples = d.get("samples") or ()
    m = Matrix(
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
    # Given explicitly only where the document says something inference would not (so a
    # report read back equals the one written, and evolve() keeps inferring otherwise).
    explicit = {
        k: d[k] for k in ("kind", "bytes_counting") if d.get(k) not in (None, getattr(m, k))
    }
    return attrs.evolve(m, **explicit) if explicit else m


def testcase_from_dict(t: Mapping[str, Any]) -> TestcaseResult:
    """Inverse of :func:`testcase_to_dict`."""
    return TestcaseResult(
        key=t["key"],
        status=Status(t["status"]),
        message=t["message"],
        index=t["index"],
        description=t["description"],
        size=t["size_bytes"],
        matrices=[matrix_from_dict(m) for m in t["matrices"]],
        duration_s=t["duration_s"],
        plugin=t["plugin"],
        output=t.get("output", ""),
        repetition=t.get("repetition"),
    )


def report_from_dict(doc: Mapping[str, Any]) -> Report:
    """Rebuild a :class:`Report` from a validated document (e.g. to re-render it as text)."""
    run_options, invocation, stopped_by = options_from_record(doc["options"], doc["interrupted"])
    return Report(
        tool=doc["tool"],
        tool_version=doc["tool_version"],
        backend=doc["backend"],
        simulated=doc["simulated"],
        system_name=doc["system_name"],
        host=doc["host"],
        versions=dict(doc["versions"]),
        devices=[dict(d) for d in doc["devices"]],
        run_options=run_options,
        invocation=invocation,
        signal=stopped_by,
        testcases=[testcase_from_dict(t) for t in doc["testcases"]],
        world=dict(doc["world"]) if "world" in doc else None,
        hosts=[
            (h["host"], tuple(testcase_from_dict(t) for t in h["testcases"]))
            for h in doc.get("hosts", ())
        ],
        warnings=doc["warnings"],
        error=doc["error"],
        started=doc["started"],
        finished=doc["finished"],
        duration_s=doc["duration_s"],
        verdicts=_verdicts(doc.get("verdicts") or ()),
        nvml=doc.get("nvml"),
        expectations=doc.get("expectations"),
        soak=doc.get("soak"),
        trace=doc.get("trace"),
    )


def _verdicts(items: Sequence[Mapping[str, Any]]) -> tuple[Any, ...]:
    if not items:
        return ()
    from gpubw.model.verdicts import Verdict

    return tuple(Verdict.from_dict(v) for v in items)


__all__ = [
    "DISPLAY",
    "device_record",
    "display_scale",
    "display_unit",
    "dumps",
    "json_safe",
    "load_report",
    "matrix_errors",
    "matrix_from_dict",
    "matrix_problem",
    "matrix_to_dict",
    "report_from_dict",
    "report_to_dict",
    "simulated_banner",
    "testcase_from_dict",
    "testcase_to_dict",
]
