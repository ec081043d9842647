"""Expectations files: what a node's figures should be (read by :mod:`gpubw.acceptance.expect`).

This package also holds the built-in expectations (``*.json`` beside this file, one per
data-centre SKU, made by ``benchmarks/expectations.py``), chosen with :func:`builtin_for` by
the devices' PCI device ids (``pci_device_ids``), or by name (``devices``) for a device
whose id is unknown (an older report). Each rule says whether its figure is *measured* (a
committed gpubw report on that SKU) or *derived* (the SKU's public specification times the
efficiency gpubw measured on an H200), and its ``source``; the file's ``sources`` list the
public documents.

**Format** (``gpubw-expect-v1``, JSON, validated by ``gpubw/schemas/expect-v1.schema.json``;
the ``#`` notes below explain, they are not JSON)::

    {
      "format": "gpubw-expect-v1",
      "name": "NVIDIA H200 SXM",
      "devices": ["NVIDIA H200"],          # names it is for (built-in selection)
      "pci_device_ids": ["0x2335"],        # ids it is for (chosen by these first)
      "sources": [{"id": "h200", "title": "NVIDIA H200 Tensor Core GPU",
                   "url": "https://www.nvidia.com/en-us/data-center/h200/"}],
      "tolerance": 0.05,                   # default 0: widens every floor down, ceiling up
      "rules": [
        {"testcase": "host_to_device_memcpy_ce", "size": "512MiB", "link": "host",
         "min": 52.0, "unit": "GB/s"},
        {"testcase": "device_to_device_memcpy_read_ce", "min": 380, "unit": "GB/s"},
        {"testcase": "host_to_device_memcpy_ce", "device": 3, "min": 25, "unit": "GB/s",
         "note": "GPU 3 sits behind a Gen4 switch"},
        {"testcase": "host_device_latency_sm", "max": 1.5, "unit": "us"},
        {"testcase": "device_local_copy", "min": 2000, "unit": "GB/s",
         "basis": "derived", "source": "h200"}   # measured / derived, and where from
      ]
    }

A rule selects cells by ``testcase`` (required), ``matrix`` (default: every matrix of the
testcase), ``size`` (bytes, or a string as ``-b`` takes it; default: every size), ``link``,
``device`` (cells that involve that GPU index), ``row`` and ``column`` (labels). A cell is
judged by its *most specific* matching rules only (row/column given beats device beats
neither), so a per-device or per-cell rule overrides a testcase-wide one. ``unit`` is one of
bytes/s, KB/s, MB/s, GB/s, TB/s (decimal, as gpubw prints) or s, ms, us, ns; without it the
values are in the matrix's base unit (bytes/s or s); with it the rule only applies to matrices
of that quantity.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

from gpubw.model import schemas
from gpubw.model.errors import UsageError
from gpubw.model.infile import read_input
from gpubw.model.results import BANDWIDTH, LATENCY, Report
from gpubw.model.sizes import parse_size

TYPE_CHECKING = False
if TYPE_CHECKING:  # jsonschema is imported where a file is checked: a run without
    import jsonschema  # --expect does not pay its import (30-90 ms) before it starts

FORMAT = "gpubw-expect-v1"
SCHEMA_FILE = "expect-v1.schema.json"
#: unit name -> (base unit, scale to base)
UNITS: dict[str, tuple[str, float]] = {
    "bytes/s": (BANDWIDTH, 1.0),
    "KB/s": (BANDWIDTH, 1e3),
    "MB/s": (BANDWIDTH, 1e6),
    "GB/s": (BANDWIDTH, 1e9),
    "TB/s": (BANDWIDTH, 1e12),
    "s": (LATENCY, 1.0),
    "ms": (LATENCY, 1e-3),
    "us": (LATENCY, 1e-6),
    "ns": (LATENCY, 1e-9),
}


@attrs.frozen
class Rule:
    """One rule of an expectations file, limits in the matrix's base unit."""

    testcase: str
    pointer: str  # where it is in its file ("/rules/3"), for messages
    matrix: str | None = None
    size: int | None = None
    link: str | None = None
    device: int | None = None
    row: str | None = None
    column: str | None = None
    min: float | None = None
    max: float | None = None
    quantity: str | None = None  # BANDWIDTH or LATENCY when the rule named a unit
    tolerance: float = 0.0
    note: str = ""
    #: "measured" (a gpubw report on this SKU) or "derived" (a specification times an
    #: efficiency measured elsewhere); "" where the file does not say
    basis: str = ""
    #: where the figure comes from (a report, or the id of one of the file's sources)
    source: str = ""

    @property
    def specificity(self) -> int:
        if self.row is not None or self.column is not None:
            return 2
        return 1 if self.device is not None else 0


@attrs.frozen
class Expectations:
    name: str
    source: str  # the file (or "built-in NAME", "<dict>")
    devices: tuple[str, ...]
    rules: tuple[Rule, ...]
    description: str = ""
    #: the PCI device (product) ids the file is for (a built-in is chosen by them first)
    pci_device_ids: tuple[int, ...] = ()
    #: the public documents its figures come from: (id, title, url)
    sources: tuple[tuple[str, str, str], ...] = ()


def schema() -> dict[str, Any]:
    """The expectations schema, from the installed package."""
    return schemas.schema(schemas.EXPECT)


def _pointer(path: Sequence[Any]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path) or "/"


def _schema_problem(e: jsonschema.ValidationError) -> str:
    where = _pointer(list(e.absolute_path))
    msg = e.message
    if e.validator == "additionalProperties" and isinstance(e.schema, Mapping):
        allowed = ", ".join(sorted(e.schema.get("properties", {})))
        msg += f" (allowed: {allowed})"
    elif e.validator == "anyOf" and list(e.absolute_path)[:1] == ["rules"]:
        msg = "a rule needs a floor 'min' or a ceiling 'max' (or both)"
    elif e.validator == "required":
        msg += f" (allowed keys: {', '.join(sorted(e.schema.get('properties', {})))})"
    return f"at {where}: {msg}"


#: the longest problem line shown (a schema message quotes the whole wrong value)
_MAX_PROBLEM = 300


def _cut(text: str) -> str:
    return text if len(text) <= _MAX_PROBLEM else f"{text[: _MAX_PROBLEM - 30]}... (cut)"


def _other_kind(doc: Any) -> str | None:
    """What a document given as expectations is instead, when it is a report: ``a gpubw
    report``, ``nvbandwidth's -j output``; else None."""
    if not isinstance(doc, Mapping) or "format" in doc:
        return None
    if "testcases" in doc and "tool" in doc:
        return "a gpubw report"
    if "nvbandwidth" in doc:
        return "nvbandwidth's -j output"
    return None


def _validate(doc: Any, source: str) -> None:
    """UsageError unless ``doc`` is a valid expectations document: one short line for a
    report given instead, else the first problems (each cut) and how many more."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    if not errors:
        return
    kind = _other_kind(doc)
    if kind is not None:  # a report where the expectations go: say so, in one short line
        raise UsageError(
            f"{source} is {kind}, not an expectations file ({FORMAT}); make one from it "
            f"with: gpubw expect-from {source} -o FILE"
        )
    shown = "\n  ".join(_cut(_schema_problem(e)) for e in errors[:5])
    more = f"\n  ... and {len(errors) - 5} more" if len(errors) > 5 else ""
    raise UsageError(
        f"{source} is not a valid gpubw expectations file ({FORMAT}):\n  {shown}{more}"
    )


def expectations_from_dict(doc: Any, source: str = "<dict>") -> Expectations:
    """Validate an expectations document and build :class:`Expectations`; UsageError naming
    ``source``, the JSON pointer of each problem and what is allowed."""
    _validate(doc, source)
    default_tol = float(doc.get("tolerance", 0.0))
    rules = []
    for i, r in enumerate(doc["rules"]):
        where = f"/rules/{i}"
        size = r.get("size")
        if isinstance(size, str):
            try:
                size = parse_size(size)
            except UsageError as exc:
                raise UsageError(f"{source} at {where}/size: {exc}") from None
        quantity, scale = UNITS[r["unit"]] if "unit" in r else (None, 1.0)
        lo = None if "min" not in r else float(r["min"]) * scale
        hi = None if "max" not in r else float(r["max"]) * scale
        if lo is not None and hi is not None and lo > hi:
            raise UsageError(
                f"{source} at {where}: min {r['min']} is above max {r['max']}; a floor must "
                "not be higher than the ceiling"
            )
        rules.append(
            Rule(
                testcase=r["testcase"],
                pointer=where,
                matrix=r.get("matrix"),
                size=size,
                link=r.get("link"),
                device=r.get("device"),
                row=r.get("row"),
                column=r.get("column"),
                min=lo,
                max=hi,
                quantity=quantity,
                tolerance=float(r.get("tolerance", default_tol)),
                note=r.get("note", ""),
                basis=r.get("basis", ""),
                source=r.get("source", ""),
            )
        )
    return Expectations(
        name=doc.get("name", "") or source,
        source=source,
        devices=tuple(doc.get("devices", ())),
        rules=tuple(rules),
        description=doc.get("description", ""),
        pci_device_ids=tuple(int(x, 16) for x in doc.get("pci_device_ids", ())),
        sources=tuple((x["id"], x["title"], x.get("url", "")) for x in doc.get("sources", ())),
    )


def load_expectations(path: str | Path) -> Expectations:
    """Read and validate an expectations file; UsageError (exit 2) on any problem."""
    p = Path(path)
    try:
        text = read_input(p, "expectations file")
    except OSError as exc:
        raise UsageError(f"cannot read expectations file {p}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(f"{p} is not UTF-8 text: {exc}") from exc
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{p} is not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); an "
            f'expectations file is a JSON object with "format": "{FORMAT}"'
        ) from exc
    return expectations_from_dict(doc, source=str(p))


@functools.lru_cache(maxsize=1)
def builtin_expectations() -> tuple[Expectations, ...]:
    """Every expectations file shipped with gpubw (``gpubw/acceptance/expectations/*.json``),
    read and checked once."""
    folder = resources.files("gpubw.acceptance.expectations")
    out = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            doc = json.loads(entry.read_text("utf-8"))
            out.append(expectations_from_dict(doc, source=f"built-in {entry.name}"))
    return tuple(out)


def fits(exp: Expectations, device: Mapping[str, Any]) -> bool:
    """Whether ``exp`` is for this device (a report's device record): by its PCI device id
    when the record has one (an H200 NVL, 0x233b, reports the H200 SXM's name), else by its
    exact name."""
    pid = device.get("pci_device_id")
    if isinstance(pid, int) and not isinstance(pid, bool):
        return pid in exp.pci_device_ids
    return str(device.get("name", "")) in exp.devices


def builtin_for(report: Report) -> Expectations | None:
    """The built-in expectations for the report's devices: the first file (by name) that
    :func:`fits` every device of the run; None when none does."""
    devices = list(report.devices)
    if not devices or any(not d.get("name") for d in devices):
        return None
    for exp in builtin_expectations():
        if all(fits(exp, d) for d in devices):
            return exp
    return None
