"""Verdicts as plain data: where a cell is (its link type and its two ends) and the
judgement of one cell by one rule (:class:`Verdict`), with its one-line description. The
spread of a cell's samples that a verdict carries is the matrix's
(:meth:`gpubw.model.results.Matrix.cell_stats`, one :class:`~gpubw.model.results.CellStats`
per cell). The rules that make verdicts are :mod:`gpubw.acceptance.expect`; reports carry
verdicts (:mod:`gpubw.model.report_io`) and writers print them (:func:`format_verdict`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from gpubw.model.results import (
    AXIS_HOST,
    AXIS_NONE,
    AXIS_PEERS,
    BANDWIDTH,
    BOTH_WAYS,
    COLUMN_TO_ROW,
    GPU_AXES,
    LATENCY,
    Matrix,
)
from gpubw.model.sizes import format_size

HOST, PEER, LOCAL, DEVICE, CELL = "host", "peer", "local", "device", "cell"
FLOOR, CEILING, PEER_OUTLIER, NOISY = "floor", "ceiling", "peer_outlier", "noisy"
#: --soak: the cell's figure fell from the first repetition to the last
SOAK_DROP = "soak_drop"
FAIL, WARN, PASS = "fail", "warn", "pass"

_DISPLAY = {BANDWIDTH: "GB/s", LATENCY: "us"}


# -- where a cell is ------------------------------------------------------------------------


@attrs.frozen
class Endpoint:
    """One end of a cell's traffic: the host, a GPU (with what the report knows of it), or
    ``peers`` (every peer of a GPU, for the all-to-one and one-to-all totals)."""

    kind: str  # "host", "gpu", "peers", "unknown"
    index: int | None = None
    name: str = ""
    pci_bus_id: str = ""
    uuid: str = ""
    serial: str = ""

    def __str__(self) -> str:
        if self.kind == "gpu":
            ids = ", ".join(x for x in (self.pci_bus_id, self.uuid or self.serial) if x)
            return f"GPU {self.index}" + (f" ({ids})" if ids else "")
        return {"host": "host", "peers": "its peers"}.get(self.kind, "?")

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind}
        if self.kind == "gpu":
            d["index"] = self.index
            for k in ("name", "pci_bus_id", "uuid", "serial"):
                if getattr(self, k):
                    d[k] = getattr(self, k)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Endpoint:
        """The inverse of :meth:`as_dict`."""
        return cls(
            str(d.get("kind", "unknown")),
            d.get("index"),
            **{k: str(d.get(k, "")) for k in ("name", "pci_bus_id", "uuid", "serial")},
        )


class _Gpus:
    """The endpoints of a report's GPUs by row or column label, each looked up once (a
    matrix of n GPUs has n^2 cells: a scan of the devices per cell cost n^3)."""

    def __init__(self, devices: Sequence[Mapping[str, Any]]) -> None:
        self.devices = devices
        self.by_ordinal: dict[Any, Mapping[str, Any]] = {}
        for d in reversed(devices):  # the first record of an ordinal wins, as a scan would
            self.by_ordinal[d.get("ordinal")] = d
        self.known: dict[str, Endpoint] = {}

    def __call__(self, label: str) -> Endpoint:
        found = self.known.get(label)
        if found is None:
            found = self.known[label] = _gpu(self, label)
        return found


def _gpu(gpus: _Gpus, label: str) -> Endpoint:
    try:
        i = int(label)
    except ValueError:
        return Endpoint("unknown")
    devices = gpus.devices
    rec: Mapping[str, Any] = gpus.by_ordinal.get(i) or (devices[i] if 0 <= i < len(devices) else {})
    nv = rec.get("nvml") if isinstance(rec.get("nvml"), Mapping) else {}
    serial = rec.get("serial") or (nv or {}).get("serial") or ""
    return Endpoint(
        "gpu",
        i,
        str(rec.get("name", "")),
        str(rec.get("pci_bus_id", "")),
        str(rec.get("uuid", "")),
        str(serial),
    )


@attrs.frozen
class CellPlace:
    row: int
    column: int
    link: str
    group: str  # comparability key inside the matrix (link, or link + peer link type)
    source: Endpoint
    destination: Endpoint
    bidirectional: bool


def _link_and_ends(m: Matrix, r: int, c: int, gpus: _Gpus) -> tuple[str, Endpoint, Endpoint]:
    """A cell's link type and its two ends as the row -> column arrow names them."""
    axes, n_rows = m.axes, len(m.row_labels)
    if axes.columns not in GPU_AXES:
        return CELL, Endpoint("unknown"), Endpoint("unknown")
    col = gpus(m.column_labels[c])
    if n_rows == 1 and axes.rows == AXIS_HOST:
        return HOST, Endpoint("host"), col
    if n_rows == 1 and axes.rows in (AXIS_NONE, AXIS_PEERS):
        # a figure of the column's GPU: alone, or with its peers (nvbandwidth's -> names
        # the GPU's traffic out to them)
        return DEVICE, col, (col if axes.rows == AXIS_NONE else Endpoint("peers"))
    if n_rows > 1 and n_rows == len(m.column_labels) and axes.rows in GPU_AXES:
        link = LOCAL if m.row_labels[r] == m.column_labels[c] else PEER
        return link, gpus(m.row_labels[r]), col
    return CELL, Endpoint("unknown"), Endpoint("unknown")


def cell_places(
    m: Matrix,
    devices: Sequence[Mapping[str, Any]] = (),
    peer_links: Mapping[tuple[int, int], str] | None = None,
) -> list[CellPlace]:
    """Every applicable cell of ``m`` with its link type and its two ends, read from the
    matrix's :class:`~gpubw.model.results.Axes` (a rank is read as its GPU)."""
    direction = m.axes.direction
    gpus = _Gpus(devices)
    out = []
    for r, values in enumerate(m.values):
        for c, v in enumerate(values):
            if v is None:
                continue
            link, a, b = _link_and_ends(m, r, c, gpus)
            if direction == COLUMN_TO_ROW:
                a, b = b, a
            group = link
            if link == PEER and peer_links is not None and a.index is not None:
                pair = (a.index, b.index if b.index is not None else -1)
                group = f"peer/{peer_links.get(pair) or peer_links.get(pair[::-1], '?')}"
            out.append(CellPlace(r, c, link, group, a, b, direction == BOTH_WAYS))
    return out


# -- verdicts -------------------------------------------------------------------------------


def _strs(items: Sequence[str]) -> tuple[str, ...]:
    return tuple(str(x) for x in items)


@attrs.frozen
class Verdict:
    """The judgement of one cell by one rule."""

    testcase: str
    matrix: str
    size: int | None  # bytes
    row: str
    column: str
    link: str
    source: Endpoint
    destination: Endpoint
    bidirectional: bool
    unit: str  # the matrix's base unit: bytes/s or s
    measured: float
    expected: float | None  # the limit: floor or ceiling after tolerance, X % of the median
    reference: float | None  # the rule's min/max before tolerance, or the peers' median
    rule: str  # FLOOR, CEILING, PEER_OUTLIER, NOISY
    severity: str  # FAIL, WARN, PASS
    detail: str = ""  # where the expectation came from, in words
    stdev: float | None = None
    cv: float | None = None
    #: facts (from NVML) that can explain a failed cell, e.g. "GPU 3: PCIe Gen4 x8, max Gen5
    #: x16"; filled in by :mod:`gpubw.acceptance.node` where the facts are known
    suspects: tuple[str, ...] = attrs.field(default=(), converter=_strs)

    @property
    def devices(self) -> tuple[Endpoint, ...]:
        return tuple(e for e in (self.source, self.destination) if e.kind == "gpu")

    @property
    def ratio(self) -> float | None:
        """measured / reference (for latency reference / measured): below 1 is worse."""
        if not self.reference or not self.measured:
            return None
        if self.unit == LATENCY:
            return self.reference / self.measured
        return self.measured / self.reference

    def as_dict(self) -> dict[str, Any]:
        """JSON data, as the ``verdict`` definition of expect-v1.schema.json describes."""
        return {
            "testcase": self.testcase,
            "matrix": self.matrix,
            "size_bytes": self.size,
            "row": self.row,
            "column": self.column,
            "link": self.link,
            "source": self.source.as_dict(),
            "destination": self.destination.as_dict(),
            "bidirectional": self.bidirectional,
            "unit": self.unit,
            "measured": self.measured,
            "expected": self.expected,
            "reference": self.reference,
            "rule": self.rule,
            "severity": self.severity,
            "detail": self.detail,
            "stdev": self.stdev,
            "cv": self.cv,
            "suspects": list(self.suspects),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Verdict:
        """The inverse of :meth:`as_dict` (a report's ``verdicts`` read back)."""
        return cls(
            testcase=d["testcase"],
            matrix=d["matrix"],
            size=d["size_bytes"],
            row=d["row"],
            column=d["column"],
            link=d["link"],
            source=Endpoint.from_dict(d["source"]),
            destination=Endpoint.from_dict(d["destination"]),
            bidirectional=d["bidirectional"],
            unit=d["unit"],
            measured=d["measured"],
            expected=d["expected"],
            reference=d["reference"],
            rule=d["rule"],
            severity=d["severity"],
            detail=d.get("detail", ""),
            stdev=d.get("stdev"),
            cv=d.get("cv"),
            suspects=tuple(d.get("suspects", ())),
        )


def failed(verdicts: Sequence[Verdict]) -> bool:
    """True when any verdict is a FAIL (the run's exit code is then EXIT_BELOW_EXPECTATION)."""
    return any(v.severity == FAIL for v in verdicts)


def worst_first(verdicts: Sequence[Verdict]) -> list[Verdict]:
    """FAILs first, then WARNs, then PASSes; in each, the lowest ratio to the reference
    first."""
    order = {FAIL: 0, WARN: 1, PASS: 2}
    return sorted(verdicts, key=lambda v: (order[v.severity], v.ratio if v.ratio else 1.0))


def _show(x: float | None, unit: str) -> str:
    if x is None:
        return "-"
    if unit == LATENCY:
        return f"{x * 1e6:.2f} us"
    return f"{x / 1e9:.2f} GB/s"


def format_verdict(v: Verdict) -> str:
    """One line for people, e.g. ``FAIL host_to_device_memcpy_ce 512 MiB host -> GPU 3
    (0000:1b:00.0, GPU-...): 20.01 GB/s, floor 52.25 GB/s (built-in h200-sxm.json /rules/0)``.
    A writer may use it or compose its own from the fields."""
    arrow = "<->" if v.bidirectional else "->"
    where = f"{v.source} {arrow} {v.destination}" if v.source != v.destination else str(v.source)
    size = f" {format_size(v.size)}" if v.size else ""
    matrix = f" [{v.matrix}]" if v.matrix != v.testcase else ""
    measured = _show(v.measured, v.unit)
    if v.rule == NOISY:
        cv = f"{v.cv:.1%}" if v.cv is not None else "?"
        what = f"{measured}, noisy: CV {cv} ({v.detail})"
    else:
        word = {FLOOR: "floor", CEILING: "ceiling", PEER_OUTLIER: "outlier limit",
                SOAK_DROP: "soak limit"}[v.rule]  # fmt: skip
        what = f"{measured}, {word} {_show(v.expected, v.unit)} ({v.detail})"
        if v.cv is not None:
            what += f", CV {v.cv:.1%}"
    if v.suspects:
        what += f"; suspect: {'; '.join(v.suspects)}"
    return f"{v.severity.upper()} {v.testcase}{matrix}{size} {where}: {what}"
