"""Is every GPU and every link as fast as it should be? Expectations, and verdicts on each cell.

Three rules judge the cells of a :class:`~gpubw.results.Report` (only testcases that Passed):

* **floor / ceiling** -- from an expectations file (:mod:`gpubw.expectations`) or a built-in
  one: a cell below ``min x (1 - tolerance)`` or above ``max x (1 + tolerance)`` fails.
* **peer outlier** -- needs no file: a cell below ``outlier_pct`` % (default 90) of the median
  of the *other comparable cells* of the same matrix fails. For latency (lower is better) the
  ratio is turned round: a cell fails when the median is below ``outlier_pct`` % of it.
* **noisy** -- a cell whose samples' coefficient of variation (sample standard deviation /
  mean) exceeds ``cv_threshold`` (default 10 %) is a warning: the figure is not to be trusted.

**Comparable cells.** Two cells of one matrix are comparable when they have the same *link
type*, read from the matrix's shape and its header (``CPU(row) -> GPU(column)``, ...):

* ``host`` -- a one-row matrix whose row is the CPU: each column is one GPU's host link (all
  host links of a node are compared with each other; gpubw puts each GPU's host buffer on that
  GPU's NUMA node, so they should match);
* ``device`` -- a one-row matrix whose row is not the CPU: one figure per GPU (device-local
  copies, all-to-one and one-to-all totals, a plugin's ``GPU(column)`` figures);
* ``peer`` -- an off-diagonal cell of an N x N GPU matrix (N > 1): one GPU pair; with
  ``peer_links`` (e.g. from :func:`gpubw.nvml.peer_link_types`) pairs over NVLink and pairs
  over PCIe are two separate groups, since a mixed topology would otherwise flag every PCIe
  pair;
* ``local`` -- a diagonal cell of such a matrix (a GPU with itself);
* ``cell`` -- anything else (a shape gpubw does not recognise): all its cells are compared.

A group of one cell has nothing to compare with, and no outlier verdict. The median is taken
over the *other* cells of the group, so with two GPUs the slower one is flagged when it is
below 90 % of the faster, and one slow GPU of eight does not drag its own reference down.

The expectations file format is described in :mod:`gpubw.expectations`.

API: :func:`evaluate` (-> :class:`Verdict` list), :func:`failed`, :func:`worst_first`,
:func:`format_verdict`, :func:`expect_from`, :func:`cell_noise`, :func:`cell_places`; the file
side (:func:`load_expectations`, :func:`builtin_for`, ...) is re-exported from
:mod:`gpubw.expectations`.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from gpubw.errors import UsageError
from gpubw.expectations import (
    FORMAT,
    UNITS,
    Expectations,
    Rule,
    builtin_expectations,
    builtin_for,
    expectations_from_dict,
    load_expectations,
    schema,
)
from gpubw.results import BANDWIDTH, LATENCY, Matrix, Report, Status
from gpubw.sizes import format_size

__all__ = [
    "EXIT_BELOW_EXPECTATION",
    "FORMAT",
    "CellNoise",
    "CellPlace",
    "Endpoint",
    "Expectations",
    "Rule",
    "Verdict",
    "builtin_expectations",
    "builtin_for",
    "cell_noise",
    "cell_places",
    "evaluate",
    "expect_from",
    "expectations_from_dict",
    "failed",
    "format_verdict",
    "load_expectations",
    "schema",
    "worst_first",
]

#: exit code of a run that went fine but is below expectation (nvbandwidth's codes are 0/1)
EXIT_BELOW_EXPECTATION = 3
DEFAULT_OUTLIER_PCT = 90.0
DEFAULT_CV_THRESHOLD = 0.10

HOST, PEER, LOCAL, DEVICE, CELL = "host", "peer", "local", "device", "cell"
FLOOR, CEILING, PEER_OUTLIER, NOISY = "floor", "ceiling", "peer_outlier", "noisy"
FAIL, WARN, PASS = "fail", "warn", "pass"

_DISPLAY = {BANDWIDTH: "GB/s", LATENCY: "us"}
_HEADER = re.compile(r"(CPU|GPU)\(row\)\s*(<->|->|<-)\s*(CPU|GPU)\(column\)")


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
            ids = ", ".join(x for x in (self.pci_bus_id, self.serial or self.uuid) if x)
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


def _gpu(devices: Sequence[Mapping[str, Any]], label: str) -> Endpoint:
    try:
        i = int(label)
    except ValueError:
        return Endpoint("unknown")
    rec: Mapping[str, Any] = next(
        (d for d in devices if d.get("ordinal") == i), devices[i] if i < len(devices) else {}
    )
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


def cell_places(
    m: Matrix,
    devices: Sequence[Mapping[str, Any]] = (),
    peer_links: Mapping[tuple[int, int], str] | None = None,
) -> list[CellPlace]:
    """Every applicable cell of ``m`` with its link type and its two ends."""
    hdr = _HEADER.search(m.description)
    row_role, arrow = (hdr[1], hdr[2]) if hdr else ("", "->")
    n_rows, n_cols = len(m.row_labels), len(m.column_labels)
    out = []
    for r, values in enumerate(m.values):
        for c, v in enumerate(values):
            if v is None:
                continue
            bidir = arrow == "<->"
            col = _gpu(devices, m.column_labels[c])
            if n_rows == 1 and row_role == "CPU":
                link, a, b = HOST, Endpoint("host"), col
            elif n_rows == 1 and "GPU(column)" in m.description:
                link, a, b = DEVICE, col, (col if row_role == "" else Endpoint("peers"))
            elif n_rows > 1 and n_rows == n_cols and row_role == "GPU":
                a, b = _gpu(devices, m.row_labels[r]), col
                link = LOCAL if m.row_labels[r] == m.column_labels[c] else PEER
            else:
                link, a, b = CELL, Endpoint("unknown"), Endpoint("unknown")
            if arrow == "<-":
                a, b = b, a
            group = link
            if link == PEER and peer_links is not None and a.index is not None:
                pair = (a.index, b.index if b.index is not None else -1)
                group = f"peer/{peer_links.get(pair) or peer_links.get(pair[::-1], '?')}"
            out.append(CellPlace(r, c, link, group, a, b, bidir))
    return out


# -- noise ----------------------------------------------------------------------------------


@attrs.frozen
class CellNoise:
    """Spread of one cell's samples: sample standard deviation and coefficient of variation
    (stdev / mean; None when there are fewer than 2 samples or the mean is 0)."""

    n: int
    mean: float
    stdev: float | None
    cv: float | None


def _noise(samples: Sequence[float] | None) -> CellNoise | None:
    if not samples:
        return None
    xs = [float(x) for x in samples]
    mean = statistics.fmean(xs)
    if len(xs) < 2:
        return CellNoise(len(xs), mean, None, None)
    sd = statistics.stdev(xs)
    return CellNoise(len(xs), mean, sd, sd / mean if mean else None)


def cell_noise(m: Matrix) -> tuple[tuple[CellNoise | None, ...], ...]:
    """Per cell of ``m`` (same shape as ``m.values``), the spread of its raw samples; None
    where the cell has no samples. Empty when the matrix kept no samples."""
    if not m.samples:
        return ()
    return tuple(tuple(_noise(s) for s in row) for row in m.samples)


# -- verdicts -------------------------------------------------------------------------------


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
        }


def _rule_matches(rule: Rule, key: str, m: Matrix, size: int | None, p: CellPlace) -> bool:
    if rule.testcase != key or (rule.matrix is not None and rule.matrix != m.key):
        return False
    if rule.quantity is not None and rule.quantity != m.unit:
        return False
    if rule.size is not None and rule.size != size:
        return False
    if rule.link is not None and rule.link != p.link:
        return False
    if rule.device is not None and rule.device not in (p.source.index, p.destination.index):
        return False
    if rule.row is not None and rule.row != m.row_labels[p.row]:
        return False
    return rule.column is None or rule.column == m.column_labels[p.column]


def evaluate(
    report: Report,
    expectations: Expectations | Mapping[str, Any] | None = None,
    outlier_pct: float | None = DEFAULT_OUTLIER_PCT,
    cv_threshold: float | None = DEFAULT_CV_THRESHOLD,
    *,
    peer_links: Mapping[tuple[int, int], str] | None = None,
    include_passed: bool = False,
) -> list[Verdict]:
    """Judge every applicable cell of every Passed testcase of ``report``.

    ``expectations``: floors/ceilings (an :class:`Expectations` or a document to validate);
    None: no file rules. ``outlier_pct``: the peer-outlier threshold in percent (None: off).
    ``cv_threshold``: a fraction; cells noisier than it get a NOISY warning (None: off).
    ``peer_links``: (i, j) -> link name (e.g. "nvlink", "pcie") to keep pairs of different
    links apart in the outlier rule. ``include_passed``: also return a PASS verdict for every
    cell a floor/ceiling or the outlier rule judged and passed. Verdicts come in report order.
    """
    if expectations is not None and not isinstance(expectations, Expectations):
        expectations = expectations_from_dict(expectations)
    if outlier_pct is not None and not 0 < outlier_pct <= 100:
        raise UsageError(f"outlier threshold {outlier_pct!r} %: expected a number in (0, 100]")
    if cv_threshold is not None and cv_threshold <= 0:
        raise UsageError(f"CV threshold {cv_threshold!r}: expected a positive fraction")
    rules = expectations.rules if expectations else ()
    out: list[Verdict] = []
    for t in report.testcases:
        if t.status is not Status.PASSED:
            continue
        for m in t.matrices:
            places = cell_places(m, report.devices, peer_links)
            noise = cell_noise(m)
            groups: dict[str, list[float]] = {}
            for p in places:
                groups.setdefault(p.group, []).append(_value(m, p))
            for p in places:
                nz = noise[p.row][p.column] if noise else None
                stdev, cv = (nz.stdev, nz.cv) if nz else (None, None)
                base = Verdict(  # the cell; each rule's verdict fills in the judgement
                    testcase=t.key,
                    matrix=m.key,
                    size=t.size,
                    row=m.row_labels[p.row],
                    column=m.column_labels[p.column],
                    link=p.link,
                    source=p.source,
                    destination=p.destination,
                    bidirectional=p.bidirectional,
                    unit=m.unit,
                    measured=_value(m, p),
                    expected=None,
                    reference=None,
                    rule=NOISY,
                    severity=WARN,
                    stdev=stdev,
                    cv=cv,
                )

                v = _value(m, p)
                lower_better = m.unit == LATENCY
                matching = [r for r in rules if _rule_matches(r, t.key, m, t.size, p)]
                top = max((r.specificity for r in matching), default=0)
                for r in (r for r in matching if r.specificity == top):
                    src = f"{expectations.name if expectations else ''} {r.pointer}".strip()
                    detail = f"{src}: {r.note}" if r.note else src
                    if r.min is not None:
                        limit = r.min * (1 - r.tolerance)
                        sev = FAIL if v < limit else PASS
                        if sev == FAIL or include_passed:
                            out.append(_judged(base, FLOOR, sev, limit, r.min, detail))
                    if r.max is not None:
                        limit = r.max * (1 + r.tolerance)
                        sev = FAIL if v > limit else PASS
                        if sev == FAIL or include_passed:
                            out.append(_judged(base, CEILING, sev, limit, r.max, detail))
                others = list(groups[p.group])
                others.remove(v)
                if outlier_pct is not None and others:
                    med = statistics.median(others)
                    frac = outlier_pct / 100
                    if med > 0:
                        limit = med / frac if lower_better else med * frac
                        bad = v > limit if lower_better else v < limit
                        detail = (
                            f"{outlier_pct:g} % of the median of {len(others)} other "
                            f"{p.group} cell{'s' if len(others) != 1 else ''} of this matrix"
                        )
                        if bad or include_passed:
                            sev = FAIL if bad else PASS
                            out.append(_judged(base, PEER_OUTLIER, sev, limit, med, detail))
                if cv_threshold is not None and cv is not None and cv > cv_threshold:
                    detail = f"samples' CV above {cv_threshold:.0%}"
                    out.append(_judged(base, NOISY, WARN, None, None, detail))
    return out


def _judged(
    base: Verdict, rule: str, sev: str, exp: float | None, ref: float | None, detail: str
) -> Verdict:
    return attrs.evolve(base, rule=rule, severity=sev, expected=exp, reference=ref, detail=detail)


def _value(m: Matrix, p: CellPlace) -> float:
    v = m.values[p.row][p.column]
    assert v is not None
    return float(v)


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
        word = {FLOOR: "floor", CEILING: "ceiling", PEER_OUTLIER: "outlier limit"}[v.rule]
        what = f"{measured}, {word} {_show(v.expected, v.unit)} ({v.detail})"
        if v.cv is not None:
            what += f", CV {v.cv:.1%}"
    return f"{v.severity.upper()} {v.testcase}{matrix}{size} {where}: {what}"


# -- an expectations file from a known-good run ---------------------------------------------


def expect_from(
    report: Report,
    tolerance: float = 0.05,
    *,
    peer_links: Mapping[tuple[int, int], str] | None = None,
) -> dict[str, Any]:
    """An expectations document (``gpubw-expect-v1``, valid against its schema) from a
    known-good run: for each Passed testcase, matrix, size and link type, a floor at the
    *worst* cell of that group in this run (bandwidth, in GB/s) or a ceiling at it (latency,
    in us), with ``tolerance`` (a fraction, 0.05 = 5 %) for the ordinary spread of runs. The
    run checked against its own file therefore passes."""
    if not 0 <= tolerance < 1:
        raise UsageError(f"tolerance {tolerance!r}: expected a fraction in [0, 1), e.g. 0.05")
    rules: list[dict[str, Any]] = []
    for t in report.testcases:
        if t.status is not Status.PASSED:
            continue
        for m in t.matrices:
            if m.unit not in _DISPLAY:
                continue
            unit = _DISPLAY[m.unit]
            scale = UNITS[unit][1]
            groups: dict[str, list[float]] = {}
            for p in cell_places(m, report.devices, peer_links):
                groups.setdefault(p.link, []).append(_value(m, p))
            for link, vals in groups.items():
                rule: dict[str, Any] = {"testcase": t.key, "matrix": m.key}
                if t.size is not None:
                    rule["size"] = t.size
                rule["link"] = link
                worst = (max if m.unit == LATENCY else min)(vals)
                # rounding must not tighten the limit: floor down, ceiling up (4 decimals)
                limit = worst / scale
                key = "max" if m.unit == LATENCY else "min"
                q = 10**4
                rounded = (-(-limit * q // 1) if key == "max" else (limit * q // 1)) / q
                rule[key] = rounded if rounded > 0 else limit
                rule["unit"] = unit
                rules.append(rule)
    names = sorted({str(d.get("name", "")) for d in report.devices if d.get("name")})
    when = f" on {report.started}" if report.started else ""
    doc: dict[str, Any] = {
        "format": FORMAT,
        "name": f"from {report.host or 'a run'}{when}",
        "description": (
            f"made by gpubw expect-from from a run of {report.tool} {report.tool_version}"
            f"{' (SIMULATED)' if report.simulated else ''} on {report.host or '?'}"
            f"{when}: each floor is the worst cell of its group in that run"
        ),
        "devices": names,
        "tolerance": tolerance,
        "rules": rules,
    }
    expectations_from_dict(doc, source="expect_from")  # what we write must load back
    return doc
