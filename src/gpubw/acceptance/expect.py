"""Is every GPU and every link as fast as it should be? Expectations, and verdicts on each cell.

Three rules judge the cells of a :class:`~gpubw.model.results.Report` (only testcases that Passed):

* **floor / ceiling** -- from an expectations file (:mod:`gpubw.acceptance.expectations`) or a
  built-in
  one: a cell below ``min x (1 - tolerance)`` or above ``max x (1 + tolerance)`` fails.
* **peer outlier** -- needs no file: a cell below ``outlier_pct`` % (default 90) of the median
  of the *other comparable cells* of the same matrix fails. For latency (lower is better) the
  ratio is turned round: a cell fails when the median is below ``outlier_pct`` % of it.
* **noisy** -- a cell whose samples' coefficient of variation (sample standard deviation /
  mean) exceeds ``cv_threshold`` (default 10 %) is a warning: the figure is not to be trusted.

**Comparable cells.** Two cells of one matrix are comparable when they have the same *link
type*, read from the matrix's shape and its axes (:class:`~gpubw.model.results.Axes`: given by
the testcase, else read from its header, ``CPU(row) -> GPU(column)``, ...; a rank is read as
its GPU):

* ``host`` -- a one-row matrix whose row is the host: each column is one GPU's host link (all
  host links of a node are compared with each other; gpubw puts each GPU's host buffer on that
  GPU's NUMA node, so they should match);
* ``device`` -- a one-row matrix whose row is no end or the column's peers: one figure per GPU
  (device-local copies, all-to-one and one-to-all totals, a plugin's ``GPU(column)`` figures);
* ``peer`` -- an off-diagonal cell of an N x N GPU matrix (N > 1): one GPU pair; with
  ``peer_links`` (e.g. from :func:`gpubw.hw.nvml.peer_link_types`) pairs over NVLink and pairs
  over PCIe are two separate groups, since a mixed topology would otherwise flag every PCIe
  pair;
* ``local`` -- a diagonal cell of such a matrix (a GPU with itself);
* ``cell`` -- anything else (a shape gpubw does not recognise): all its cells are compared.

A group of one cell has nothing to compare with, and no outlier verdict. The median is taken
over the *other* cells of the group, so with two GPUs the slower one is flagged when it is
below 90 % of the faster, and one slow GPU of eight does not drag its own reference down.

The expectations file format is described in :mod:`gpubw.acceptance.expectations`.

API: :func:`evaluate` (-> :class:`Verdict` list), :func:`failed`, :func:`worst_first`,
:func:`format_verdict`, :func:`expect_from`, :func:`cell_places`; the file
side (:func:`load_expectations`, :func:`builtin_for`, ...) is re-exported from
:mod:`gpubw.acceptance.expectations`.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from gpubw.acceptance.expectations import (
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
from gpubw.model import schemas
from gpubw.model.errors import UsageError
from gpubw.model.options import DEFAULT_CV_THRESHOLD, DEFAULT_OUTLIER_PCT, EXIT_BELOW_EXPECTATION
from gpubw.model.results import BANDWIDTH, LATENCY, Matrix, Report, Status, TestcaseResult
from gpubw.model.sizes import format_size
from gpubw.model.verdicts import (
    CEILING,
    DEVICE,
    FAIL,
    FLOOR,
    HOST,
    LOCAL,
    NOISY,
    PASS,
    PEER,
    PEER_OUTLIER,
    WARN,
    CellPlace,
    Endpoint,
    Verdict,
    cell_places,
    failed,
    format_verdict,
    worst_first,
)

__all__ = [
    "CEILING",
    "DEVICE",
    "EXIT_BELOW_EXPECTATION",
    "FAIL",
    "FLOOR",
    "FORMAT",
    "HOST",
    "LOCAL",
    "NOISY",
    "PASS",
    "PEER",
    "PEER_OUTLIER",
    "WARN",
    "CellPlace",
    "Coverage",
    "Endpoint",
    "Expectations",
    "Rule",
    "Verdict",
    "builtin_expectations",
    "builtin_for",
    "cell_places",
    "coverage",
    "evaluate",
    "expect_from",
    "expectations_from_dict",
    "failed",
    "format_verdict",
    "load_expectations",
    "median_without",
    "schema",
    "worst_first",
]


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
    judge = _Judge(expectations or None, outlier_pct, cv_threshold, include_passed)
    out: list[Verdict] = []
    for t in report.testcases:
        if t.status is not Status.PASSED:
            continue
        for m in t.matrices:
            places = cell_places(m, report.devices, peer_links)
            noise = m.cell_stats()
            groups: dict[str, list[float]] = {}
            for p in places:
                groups.setdefault(p.group, []).append(_value(m, p))
            for vals in groups.values():
                vals.sort()  # once per group: each cell's median of the others is O(log n)
            for p in places:
                nz = noise[p.row][p.column] if noise else None
                base = _cell(t, m, p, nz)
                out += judge.limits(t, m, p, base)
                out += judge.outlier(m, p, base, groups[p.group])
                out += judge.noisy(base)
    return out


def median_without(ordered: Sequence[float], value: float) -> float | None:
    """``statistics.median`` of ``ordered`` (sorted) less one occurrence of ``value`` (one of
    its items), in O(log n) instead of a copy and a sort per cell; None when nothing is
    left. The same float as ``statistics.median`` gives (the same items, the same sum)."""
    n = len(ordered) - 1
    if n <= 0:
        return None
    gone = bisect.bisect_left(ordered, value)

    def at(k: int) -> float:  # the k-th item once ``value`` is gone
        return ordered[k if k < gone else k + 1]

    half = n // 2
    return at(half) if n % 2 else (at(half - 1) + at(half)) / 2


@attrs.frozen
class Coverage:
    """Which Passed testcases an expectations file judged nothing of (:func:`coverage`)."""

    #: ``key (size)`` of each Passed testcase with cells that no rule applies to
    not_judged: tuple[str, ...] = ()
    #: those of them whose testcase the file has rules for, only at other sizes (or the
    #: report has no size: nvbandwidth's JSON), and that no size of the report judged
    wrong_size: tuple[str, ...] = ()
    #: the sizes the file's rules are for (bytes), for the message
    rule_sizes: tuple[int, ...] = ()


def coverage(
    report: Report,
    expectations: Expectations,
    peer_links: Mapping[tuple[int, int], str] | None = None,
) -> Coverage:
    """What ``expectations`` could not judge in ``report``: a testcase it has no rule for,
    or rules at another buffer size only (the built-in floors are for 512 MiB)."""
    missing: list[tuple[str, str]] = []
    judged: set[str] = set()
    for t in report.testcases:
        if t.status is not Status.PASSED:
            continue
        cells = [(m, p) for m in t.matrices for p in cell_places(m, report.devices, peer_links)]
        if any(_rule_matches(r, t.key, m, t.size, p) for m, p in cells for r in expectations.rules):
            judged.add(t.key)
        elif cells:
            missing.append((t.key, t.key + (f" ({format_size(t.size)})" if t.size else "")))
    keys = {r.testcase for r in expectations.rules}
    return Coverage(
        not_judged=tuple(name for _, name in missing),
        wrong_size=tuple(name for k, name in missing if k in keys and k not in judged),
        rule_sizes=tuple(sorted({r.size for r in expectations.rules if r.size is not None})),
    )


def _cell(t: TestcaseResult, m: Matrix, p: CellPlace, nz: Any) -> Verdict:
    """The cell as a verdict not yet judged: each rule's verdict fills in the judgement."""
    stdev, cv = (nz.stdev, nz.cv) if nz else (None, None)
    return Verdict(
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


@attrs.frozen
class _Judge:
    """The rules of one :func:`evaluate` call, applied to one cell at a time."""

    expectations: Expectations | None
    outlier_pct: float | None
    cv_threshold: float | None
    include_passed: bool

    def limits(self, t: TestcaseResult, m: Matrix, p: CellPlace, base: Verdict) -> list[Verdict]:
        """The floors and ceilings of the most specific matching expectation rules."""
        rules = self.expectations.rules if self.expectations else ()
        matching = [r for r in rules if _rule_matches(r, t.key, m, t.size, p)]
        top = max((r.specificity for r in matching), default=0)
        v, out = base.measured, []
        for r in (r for r in matching if r.specificity == top):
            src = f"{self.expectations.name if self.expectations else ''} {r.pointer}".strip()
            detail = f"{src}: {r.note}" if r.note else src
            if r.min is not None:
                limit = r.min * (1 - r.tolerance)
                sev = FAIL if v < limit else PASS
                if sev == FAIL or self.include_passed:
                    out.append(_judged(base, FLOOR, sev, limit, r.min, detail))
            if r.max is not None:
                limit = r.max * (1 + r.tolerance)
                sev = FAIL if v > limit else PASS
                if sev == FAIL or self.include_passed:
                    out.append(_judged(base, CEILING, sev, limit, r.max, detail))
        return out

    def outlier(
        self, m: Matrix, p: CellPlace, base: Verdict, group: Sequence[float]
    ) -> list[Verdict]:
        """The peer-outlier rule: the cell against the median of the other cells of its
        group (``group``: every value of the group, sorted) in the matrix."""
        if self.outlier_pct is None:
            return []
        med = median_without(group, base.measured)
        if med is None or med <= 0:
            return []
        count = len(group) - 1
        lower_better = m.unit == LATENCY
        v, frac = base.measured, self.outlier_pct / 100
        limit = med / frac if lower_better else med * frac
        bad = v > limit if lower_better else v < limit
        if not (bad or self.include_passed):
            return []
        detail = (
            f"{self.outlier_pct:g} % of the median of {count} other "
            f"{p.group} cell{'s' if count != 1 else ''} of this matrix"
        )
        return [_judged(base, PEER_OUTLIER, FAIL if bad else PASS, limit, med, detail)]

    def noisy(self, base: Verdict) -> list[Verdict]:
        """A NOISY warning where the samples' CV is above the threshold."""
        if self.cv_threshold is None or base.cv is None or base.cv <= self.cv_threshold:
            return []
        return [
            _judged(base, NOISY, WARN, None, None, f"samples' CV above {self.cv_threshold:.0%}")
        ]


def _judged(
    base: Verdict, rule: str, sev: str, exp: float | None, ref: float | None, detail: str
) -> Verdict:
    return attrs.evolve(base, rule=rule, severity=sev, expected=exp, reference=ref, detail=detail)


def _value(m: Matrix, p: CellPlace) -> float:
    v = m.values[p.row][p.column]
    assert v is not None
    return float(v)


_DISPLAY = {BANDWIDTH: "GB/s", LATENCY: "us"}


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
        "schema_version": schemas.VERSIONS[schemas.EXPECT],
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


def expect_from_reports(
    reports: Sequence[Report],
    tolerance: float = 0.05,
    *,
    peer_links: Sequence[Mapping[tuple[int, int], str] | None] | None = None,
) -> dict[str, Any]:
    """An expectations document from a fleet's known-good runs of one kind of node: each
    rule's limit is the *median* over the reports of that group's worst cell
    (:func:`expect_from` of each), so one unusually fast or slow node does not set it;
    ``tolerance`` then allows for the spread. A group some reports lack is taken from those
    that have it (its ``note`` says how many). One report gives :func:`expect_from`'s
    document. UsageError when the reports are of different GPUs."""
    if not reports:
        raise ValueError("expect_from_reports needs at least one report")
    links = list(peer_links) if peer_links is not None else [None] * len(reports)
    docs = [expect_from(r, tolerance, peer_links=pl) for r, pl in zip(reports, links)]
    if len(docs) == 1:
        return docs[0]
    kinds = {tuple(d["devices"]) for d in docs}
    if len(kinds) > 1:
        shown = "; ".join(", ".join(k) or "?" for k in sorted(kinds))
        raise UsageError(
            f"the reports are of different GPUs ({shown}); make one expectations file per "
            "kind of node"
        )
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for d in docs:
        for rule in d["rules"]:
            key = (rule["testcase"], rule["matrix"], rule.get("size"), rule["link"])
            groups.setdefault(key, []).append(rule)
    rules = []
    for found in groups.values():
        limit = "max" if "max" in found[0] else "min"
        rule = dict(found[0])
        rule[limit] = statistics.median(r[limit] for r in found)
        rule["note"] = f"median of {len(found)} of {len(docs)} reports' worst cells"
        rules.append(rule)
    hosts = sorted({r.host for r in reports if r.host})
    doc = dict(docs[0])
    doc["name"] = f"from {len(reports)} runs ({', '.join(hosts) or 'unnamed hosts'})"
    doc["description"] = (
        f"made by gpubw expect-from from {len(reports)} runs on {', '.join(hosts) or '?'}"
        f"{' (SIMULATED)' if any(r.simulated for r in reports) else ''}: each limit is the "
        "median over the runs of the worst cell of its group"
    )
    doc["rules"] = rules
    expectations_from_dict(doc, source="expect_from")  # what we write must load back
    return doc
