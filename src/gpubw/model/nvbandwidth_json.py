"""Read nvbandwidth's own ``-j`` JSON, so its figures can be a reference for gpubw's.

nvbandwidth's document (one top key ``"nvbandwidth"``) keeps cells as ``%g`` strings in
GB/s (or ns for latency), ``"N/A"`` for missing ones, and puts the three matrices of a
bidirectional device-to-device test into one ``bandwidth_matrix`` of 3N rows. This module
turns it into gpubw's report-like shape, in gpubw's base units (bytes/s, seconds)::

    {"tool": "nvbandwidth", "tool_version": "v0.8", "simulated": False,
     "versions": {"cuda_driver": 12080, "driver": "570.124.06"},
     "devices": [{"ordinal", "name", "pci_short", "pci_bus_id"}, ...],
     "host": "gpu-node-17", "warnings": [...], "error": "",
     "testcases": [{"key", "status", "message",
                    "matrices": [{"key", "description", "unit", "kind",
                                  "bytes_counting", "row_labels", "column_labels",
                                  "values", "sum"}]}]}

``kind`` is ``"latency"`` for a matrix in ns (nvbandwidth's header says ``(ns)``; a latency
testcase's name says so), else ``"bandwidth"``; nvbandwidth counts each byte copied once, so
``bytes_counting`` is ``"once"`` (``"none"`` for latency), as in
:class:`gpubw.model.results.Matrix`.

:func:`to_report` makes a :class:`gpubw.model.results.Report` of it (``gpubw plot`` draws that).

Statuses are mapped to gpubw's: ``Passed``/``Waived`` as they are, ``ERROR`` (an unknown
testcase) to ``Not Found``, ``Running`` (nvbandwidth stopped inside it) to ``Error``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpubw.model.errors import UsageError
from gpubw.model.infile import read_input
from gpubw.model.nvbandwidth_check import check_document
from gpubw.model.results import (
    BANDWIDTH,
    COUNTED_NONE,
    COUNTED_ONCE,
    KIND_BANDWIDTH,
    KIND_LATENCY,
    LATENCY,
    Matrix,
    Report,
    Status,
    TestcaseResult,
)

_DEVICE = re.compile(
    r"^\s*(\d+):\s*(.*?)\s*\(([0-9a-fA-F]+:[0-9a-fA-F]+:[0-9a-fA-F]+)\)"
    r"(?::\s*\((.*)\))?\s*$"
)

_STATUS = {
    "Passed": "Passed",
    "Waived": "Waived",
    "ERROR": "Not Found",
    "Error": "Error",
    "Running": "Error",
}


def _unit(key: str, description: str) -> str:
    return LATENCY if "(ns)" in description or "latency" in key.lower() else BANDWIDTH


def _scale(unit: str) -> float:
    """Display unit (GB/s, ns) -> base unit (bytes/s, s)."""
    return 1e-9 if unit == LATENCY else 1e9


def _cell(text: Any, scale: float) -> float | None:
    if text is None:
        return None
    if isinstance(text, (int, float)):
        return float(text) * scale
    s = str(text).strip()
    if s in ("N/A", ""):
        return None
    try:
        return float(s) * scale
    except ValueError as exc:
        raise UsageError(f"nvbandwidth JSON: bad matrix cell {s!r}") from exc


def _sum(values: Sequence[Sequence[float | None]]) -> float:
    return float(sum(v for row in values for v in row if v is not None))


def _bidirectional_words(key: str) -> tuple[str, str, str] | None:
    """Matrix suffixes of a 3-matrix test, or None for a one-matrix test."""
    if "bidirectional" not in key or "device_to_device" not in key:
        return None
    return ("write1", "write2", "total") if "_write" in key else ("read1", "read2", "total")


def _header_word(key: str, suffix: str) -> str:
    # multinode #38 prints Read1/Read2 in its headers although it is a write test
    if key == "multinode_device_to_device_bidirectional_memcpy_write_ce":
        suffix = suffix.replace("write", "read")
    return suffix.capitalize()


def _testcase(tc: Mapping[str, Any]) -> dict[str, Any]:
    """One testcase of nvbandwidth's JSON as gpubw's report has it (status, message and its
    matrices; a bidirectional test's 3N rows split into its three matrices)."""
    key = str(tc.get("name", ""))
    raw_status = str(tc.get("status", ""))
    status = _STATUS.get(raw_status, "Error")
    message = ""
    if raw_status == "ERROR":
        message = f"Testcase {key} not found!"
    elif raw_status == "Running":
        message = "nvbandwidth stopped while this testcase was running"
    elif status == "Error" and raw_status != "Error":
        message = f"unknown nvbandwidth status {raw_status!r}"
    out: dict[str, Any] = {"key": key, "status": status, "message": message, "matrices": []}
    if tc.get("bandwidth_matrix") is not None:
        out["matrices"] = _matrices(key, tc)
    return out


def _matrices(key: str, tc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The matrices of testcase ``key`` from its ``bandwidth_matrix`` rows, in base units."""
    description = str(tc.get("bandwidth_description", ""))
    unit = _unit(key, description)
    scale = _scale(unit)
    values = [[_cell(c, scale) for c in row] for row in tc["bandwidth_matrix"]]
    ncols = max((len(r) for r in values), default=0)
    given_sum = tc.get("sum")
    total = None if given_sum is None else float(given_sum) * scale
    common = {
        "description": description,
        "unit": unit,
        **(
            {"kind": KIND_LATENCY, "bytes_counting": COUNTED_NONE}
            if unit == LATENCY
            else {"kind": KIND_BANDWIDTH, "bytes_counting": COUNTED_ONCE}
        ),
    }
    words = _bidirectional_words(key)
    if words and ncols and len(values) == 3 * ncols:
        return [_third(key, common, values[i * ncols : (i + 1) * ncols], w, total)
                for i, w in enumerate(words)]  # fmt: skip
    matrix = {
        "key": key,
        **common,
        "row_labels": [str(r) for r in range(len(values))],
        "column_labels": [str(c) for c in range(ncols)],
        "values": values,
        "sum": total if total is not None else _sum(values),
    }
    for k in ("min", "max", "average"):
        if k in tc:
            matrix[k] = None if tc[k] is None else float(tc[k]) * scale
    return [matrix]


def _third(
    key: str, common: Mapping[str, Any], part: list[list[Any]], suffix: str, total: float | None
) -> dict[str, Any]:
    """One of a bidirectional test's three N x N matrices (``suffix``: its word or total)."""
    n = len(part)
    description = common["description"]
    if suffix != "total":
        description = description.replace("Total", _header_word(key, suffix))
    return {
        "key": f"{key}_{suffix}",
        **common,
        "description": description,
        "row_labels": [str(r) for r in range(n)],
        "column_labels": [str(c) for c in range(n)],
        "values": part,
        # nvbandwidth keeps only the Total's sum; the others are recomputed
        "sum": total if suffix == "total" and total is not None else _sum(part),
    }


def _device(text: str, ordinal: int) -> tuple[dict[str, Any], str]:
    m = _DEVICE.match(text)
    if not m:
        return {"ordinal": ordinal, "name": text}, ""
    pci = m.group(3)
    # nvbandwidth's address (domain:bus:device, no function) is the device's PCI bus id
    # here too, so that verdicts and comparisons name the GPU as nvbandwidth printed it
    record = {"ordinal": int(m.group(1)), "name": m.group(2), "pci_short": pci, "pci_bus_id": pci}
    return record, m.group(4) or ""


def parse(doc: Mapping[str, Any]) -> dict[str, Any]:
    """nvbandwidth's document (already decoded) -> gpubw's report-like dict."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("nvbandwidth"), Mapping):
        raise UsageError('not nvbandwidth JSON: no top-level "nvbandwidth" object')
    nv = doc["nvbandwidth"]
    check_document(nv)  # a member of a wrong type: one line, never a traceback
    devices, host = [], ""
    for i, text in enumerate(nv.get("GPU Device list", []) or []):
        d, h = _device(str(text), i)
        devices.append(d)
        host = host or h
    warning = nv.get("warning")
    error = nv.get("error") or ""
    return {
        "tool": "nvbandwidth",
        "tool_version": str(nv.get("version", "")),
        "git_version": str(nv.get("git_version", "")),
        "simulated": False,
        "backend": "cuda",
        "host": host,
        "versions": {
            "cuda_driver": nv.get("CUDA Runtime Version"),
            "driver": nv.get("Driver Version"),
        },
        "devices": devices,
        "warnings": [str(warning)] if warning else [],
        "error": str(error).strip(),
        "testcases": [_testcase(tc) for tc in nv.get("testcases", []) or []],
    }


def loads(text: str) -> dict[str, Any]:
    """Parse nvbandwidth ``-j`` output given as text."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"not nvbandwidth JSON: {exc}") from exc
    return parse(doc)


def load(path: str | Path) -> dict[str, Any]:
    """Parse an nvbandwidth ``-j`` output file."""
    p = Path(path)
    try:
        text = read_input(p, "nvbandwidth report")
    except OSError as exc:
        raise UsageError(f"cannot read {p}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(f"{p} is not UTF-8 text: {exc}") from exc
    return loads(text)


def testcases(source: str | Path | Mapping[str, Any]) -> list[dict[str, Any]]:
    """Just the per-testcase dicts, from a path, JSON text or a decoded document."""
    if isinstance(source, Mapping):
        return list(parse(source)["testcases"])
    if isinstance(source, Path) or not str(source).lstrip().startswith("{"):
        return list(load(source)["testcases"])
    return list(loads(str(source))["testcases"])


def to_report(source: str | Path | Mapping[str, Any]) -> Report:
    """nvbandwidth's ``-j`` output (a path, JSON text or a decoded document) as a gpubw
    :class:`~gpubw.model.results.Report`, e.g. to plot it. Ragged matrix rows are padded with N/A;
    a matrix that cannot be a gpubw Matrix is a UsageError naming it."""
    if isinstance(source, Mapping):
        doc = parse(source)
    elif isinstance(source, Path) or not str(source).lstrip().startswith("{"):
        doc = load(source)
    else:
        doc = loads(str(source))
    results = []
    for i, tc in enumerate(doc["testcases"]):
        matrices = []
        for m in tc["matrices"]:
            width = len(m["column_labels"])
            values = [list(row) + [None] * (width - len(row)) for row in m["values"]]
            try:
                matrices.append(
                    Matrix(
                        key=m["key"],
                        description=m["description"],
                        unit=m["unit"],
                        row_labels=m["row_labels"],
                        column_labels=m["column_labels"],
                        values=values,
                        kind=m["kind"],
                        bytes_counting=m["bytes_counting"],
                    )
                )
            except ValueError as exc:
                raise UsageError(f"nvbandwidth JSON: testcase {tc['key']!r}: {exc}") from exc
        results.append(
            TestcaseResult(
                key=tc["key"],
                status=Status(tc["status"]),
                message=tc["message"],
                index=i,
                matrices=matrices,
                plugin="nvbandwidth",
            )
        )
    return Report(
        tool="nvbandwidth",
        tool_version=doc["tool_version"],
        backend="cuda",
        simulated=False,
        system_name="",
        host=doc["host"],
        versions=dict(doc["versions"]),
        devices=doc["devices"],
        testcases=results,
        warnings=doc["warnings"],
        error=doc["error"],
    )
