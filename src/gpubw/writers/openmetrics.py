"""The OpenMetrics writer (``gpubw --format openmetrics``): gauges for Prometheus.

Meant for node-exporter's textfile collector (write the report atomically into its folder:
``gpubw --format openmetrics -o /var/lib/node_exporter/textfile/gpubw.prom``) or a
Pushgateway (README, "Monitoring"). The exposition is made by ``prometheus-client`` (the
optional extra ``gpubw[metrics]``) in the OpenMetrics text format, with ``# UNIT`` lines;
Prometheus' text parser reads it too. No series has a ``host`` label (Prometheus' own
``instance`` says where it came from) and no label is empty: a label that does not apply
(the peer of a host link) is left out.

``--metrics-detail`` (an option this writer declares, :class:`gpubw.writers.WriterOption`)
chooses how much:

* ``cells`` (default): one series per matrix cell -- ``gpubw_bandwidth_bytes_per_second``
  or ``gpubw_latency_seconds`` with ``testcase``, ``matrix``, ``size`` (bytes; absent for a
  fixed-size testcase), ``row``, ``column``, ``gpu``/``uuid`` (the row's GPU, or the
  column's where the row is the host) and ``peer_gpu``/``peer_uuid`` (the column's GPU when
  the row is a GPU too); the spread of its samples; in a judged run
  ``gpubw_cell_below_expectation`` (1 when a rule failed the cell, 0 when it passed) and
  ``gpubw_cell_noisy``, and the limit of each failed or noisy cell. N x N series per
  testcase (5,112 on a 72-GPU rack).
* ``summary``: per testcase, size and GPU the ``min``/``median``/``max`` (label ``stat``)
  of the cells that GPU is an end of (``gpubw_gpu_bandwidth_bytes_per_second``,
  ``gpubw_gpu_latency_seconds``), per link type the same
  (``gpubw_link_bandwidth_bytes_per_second``, ``gpubw_link_latency_seconds``; ``link``:
  host, peer, local, device, cell), and cell counts (``gpubw_testcase_cells``; in a judged
  run ``gpubw_testcase_cells_below_expectation``, ``gpubw_testcase_cells_noisy`` and per GPU
  ``gpubw_gpu_cells_below_expectation``): O(N) series instead of O(N^2).

Both have the run's gauges (``gpubw_run_info``, ``gpubw_run_timestamp_seconds``,
``gpubw_run_duration_seconds``, ``gpubw_run_exit_code``) and ``gpubw_testcase_ok`` per
testcase and size. Series with the same labels (a testcase selected twice) keep the last
value: an exposition must not repeat a series. Values that are not finite are left out.
"""

from __future__ import annotations

import datetime
import math
import statistics
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TextIO

from gpubw.model.errors import UsageError
from gpubw.model.results import KIND_LATENCY, Matrix, Report, TestcaseResult
from gpubw.model.verdicts import FAIL, NOISY, cell_places
from gpubw.writers import Writer, WriterOption

INSTALL_HINT = "--format openmetrics needs prometheus-client: pip install 'gpubw[metrics]'"
CELLS, SUMMARY = "cells", "summary"
DETAIL = WriterOption(
    "--metrics-detail",
    "cells: a series per matrix cell (N x N per testcase); summary: per GPU and per link "
    "type min/median/max and verdict counts (O(N), for racks)",
    choices=(CELLS, SUMMARY),
    default=CELLS,
)
#: the statistics of --metrics-detail summary, as the ``stat`` label says them
STATS = (("min", min), ("median", statistics.median), ("max", max))
#: (testcase, size, matrix, row label, column label): where a verdict is
CellKey = tuple[str, Any, str, str, str]


def _finite(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _unix_time(stamp: str) -> float | None:
    try:
        return datetime.datetime.fromisoformat(stamp).timestamp()
    except (TypeError, ValueError):
        return None


def _get(obj: Any, name: str, default: Any = None) -> Any:
    """A field of a verdict, whether it is an object or its JSON dict."""
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


class _Family:
    """One gauge family: label set -> value, the last value kept for a repeated label set;
    labels without a value are left out of their series."""

    def __init__(self, name: str, help_text: str, unit: str = "") -> None:
        self.name, self.help, self.unit = name, help_text, unit
        self.series: dict[tuple[tuple[str, str], ...], float] = {}

    def set(self, labels: Mapping[str, Any], value: Any) -> None:
        v = _finite(value)
        if v is not None:
            kept = tuple((k, str(x)) for k, x in labels.items() if x is not None and x != "")
            self.series[kept] = v

    def metric(self) -> Any:
        from prometheus_client.core import GaugeMetricFamily
        from prometheus_client.samples import Sample

        family = GaugeMetricFamily(self.name, self.help, unit=self.unit)
        for labels, value in self.series.items():
            family.samples.append(Sample(family.name, dict(labels), value))
        return family


class _Families(dict[str, _Family]):
    """The families of one exposition, by name, in the order they were declared."""

    def add(self, name: str, help_text: str, unit: str = "") -> _Family:
        self[name] = _Family(name, help_text, unit)
        return self[name]


def _value_family(m: Matrix, scope: str = "", measure: str = "") -> str:
    """The family of a matrix's figures: ``gpubw_<scope>bandwidth_<measure>bytes_per_second``
    or ``gpubw_<scope>latency_<measure>seconds``."""
    kind, unit = (
        ("latency", "seconds") if m.kind == KIND_LATENCY else ("bandwidth", "bytes_per_second")
    )
    return f"gpubw_{scope}{kind}_{measure}{unit}"


def _size(t: TestcaseResult) -> str | None:
    return None if t.size is None else str(t.size)


def _run_families(report: Report, out: _Families) -> None:
    """The run's gauges and one ok gauge per testcase and size."""
    info = out.add("gpubw_run_info", "gpubw run: tool version, backend, simulated or measured")
    info.set(
        {
            "version": report.tool_version,
            "backend": report.backend,
            "simulated": str(report.simulated).lower(),
            "system_name": report.system_name,
        },
        1,
    )
    stamp = out.add("gpubw_run_timestamp_seconds", "start of the gpubw run (Unix time)", "seconds")
    stamp.set({}, _unix_time(report.started))
    out.add("gpubw_run_duration_seconds", "duration of the gpubw run", "seconds").set(
        {}, report.duration_s
    )
    out.add("gpubw_run_exit_code", "gpubw's exit code for the run").set({}, report.exit_code)
    ok = out.add("gpubw_testcase_ok", "1 if the testcase Passed or was Waived at this size, else 0")
    for t in report.testcases:
        ok.set({"testcase": t.key, "size": _size(t), "status": t.status.value}, 1 if t.ok else 0)


def _judged_cells(report: Report) -> tuple[set[CellKey], set[CellKey]] | None:
    """(cells a rule failed, noisy cells) of a judged run; None for a run not judged."""
    if report.expectations is None and not report.verdicts:
        return None
    failed: set[CellKey] = set()
    noisy: set[CellKey] = set()
    for v in report.verdicts:
        size = _get(v, "size", _get(v, "size_bytes"))
        key = (
            str(_get(v, "testcase", "")),
            None if size is None else int(size),
            str(_get(v, "matrix", "")),
            str(_get(v, "row", "")),
            str(_get(v, "column", "")),
        )
        severity = str(_get(v, "severity", "")).lower()
        if severity == FAIL:
            failed.add(key)
        elif str(_get(v, "rule", "")).lower() == NOISY:
            noisy.add(key)
    return failed, noisy


def _rank_labelled(report: Report, m: Matrix) -> bool:
    """Whether the matrix's labels are the ranks of a multi-rank run (0 .. size - 1)."""
    ranks = [str(i) for i in range(len((report.world or {}).get("processes") or ()))]
    return len(ranks) > 1 and ranks in (list(m.row_labels), list(m.column_labels))


def _gpu_ids(report: Report, m: Matrix, label: str) -> dict[str, Any] | None:
    """The labels naming the GPU of a row or column label: ``gpu`` and ``uuid`` (a device
    of this host); in a multi-rank run whose matrix is labelled by rank, ``rank``,
    ``gpu_host`` and ``gpu`` (that rank's device on its host), with ``uuid`` where the
    report describes the device."""
    ranked = _rank_labelled(report, m)
    if ranked:
        p = (report.world or {})["processes"][int(label)]
        ids = {"rank": label, "gpu_host": p.get("host"), "gpu": p.get("device")}
        if p.get("host") != report.host:
            return ids
        label = str(p.get("device"))
    d = next((d for d in report.devices if str(d.get("ordinal")) == label), None)
    if d is None:
        return ids if ranked else None
    return {**(ids if ranked else {}), "gpu": d.get("ordinal"), "uuid": d.get("uuid")}


def _ends(
    report: Report, m: Matrix, r: int, c: int
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The GPU labels of a cell: its first GPU (the row's, or the column's where the row is
    not a GPU) and its peer (the column's when the row is a GPU too), or None."""
    row = _gpu_ids(report, m, m.row_labels[r]) if "GPU(row)" in m.description else None
    column = _gpu_ids(report, m, m.column_labels[c]) if "GPU(column)" in m.description else None
    return (row, column) if row is not None else (column, None)


def _cell_labels(t: TestcaseResult, m: Matrix, r: int, c: int, report: Report) -> dict[str, Any]:
    """The labels of one cell's series."""
    first, peer = _ends(report, m, r, c)
    labels = {"testcase": t.key, "matrix": m.key, "size": _size(t)}
    labels.update(row=m.row_labels[r], column=m.column_labels[c])
    labels.update(first or {})
    labels.update({f"peer_{k}": v for k, v in (peer or {}).items()})
    return labels


def _cells(report: Report) -> Iterator[tuple[TestcaseResult, Matrix, int, int, float, Any]]:
    """Every applicable cell of the report: (result, matrix, row, column, value, the
    spread of its samples or None)."""
    for t in report.testcases:
        for m in t.matrices:
            stats = m.cell_stats()
            for r, values in enumerate(m.values):
                for c, value in enumerate(values):
                    if value is not None:
                        yield t, m, r, c, value, (stats[r][c] if stats else None)


def _cells_families(report: Report, out: _Families) -> None:
    """``--metrics-detail cells``: a series per cell, its spread, its verdict."""
    for kind, unit in (("bandwidth", "bytes_per_second"), ("latency", "seconds")):
        out.add(f"gpubw_{kind}_{unit}", f"{kind} of one matrix cell", unit)
        out.add(
            f"gpubw_{kind}_stdev_{unit}",
            f"sample standard deviation of one {kind} cell's samples",
            unit,
        )
    out.add("gpubw_cell_cv_ratio", "coefficient of variation (stdev / mean) of one cell", "ratio")
    below = out.add(
        "gpubw_cell_below_expectation",
        "1 if a rule of the judged run failed the cell (exit code 3), 0 if it passed",
    )
    noisy = out.add("gpubw_cell_noisy", "1 if the cell's samples vary more than --cv-threshold")
    judged = _judged_cells(report)
    for t, m, r, c, value, spread in _cells(report):
        labels = _cell_labels(t, m, r, c, report)
        out[_value_family(m)].set(labels, value)
        if spread is not None:
            out[_value_family(m, measure="stdev_")].set(labels, spread.stdev)
            out["gpubw_cell_cv_ratio"].set(labels, spread.cv)
        if judged is not None:
            key = (t.key, t.size, m.key, m.row_labels[r], m.column_labels[c])
            below.set(labels, int(key in judged[0]))
            noisy.set(labels, int(key in judged[1]))
    _limit_families(report, out)


def _limit_families(report: Report, out: _Families) -> None:
    """The limit each failed or noisy verdict judged its cell against."""
    families = {
        "bytes/s": out.add(
            "gpubw_cell_expected_bytes_per_second",
            "the limit a failed or noisy bandwidth cell was judged against",
            "bytes_per_second",
        ),
        "s": out.add(
            "gpubw_cell_expected_seconds",
            "the limit a failed or noisy latency cell was judged against",
            "seconds",
        ),
    }
    for v in report.verdicts:
        family = families.get(str(_get(v, "unit", "bytes/s")))
        if family is None:
            continue
        size = _get(v, "size", _get(v, "size_bytes"))
        labels = {
            "testcase": _get(v, "testcase"),
            "matrix": _get(v, "matrix"),
            "size": size,
            "row": _get(v, "row"),
            "column": _get(v, "column"),
            "rule": _get(v, "rule"),
        }
        family.set(labels, _get(v, "expected"))


def _summary_families(report: Report, out: _Families) -> None:
    """``--metrics-detail summary``: per testcase, size and GPU, and per link type, the
    min, median and max of the cells; cell counts; verdict counts per testcase and GPU."""
    cells = out.add("gpubw_testcase_cells", "applicable matrix cells of the testcase at this size")
    judged = _judged_cells(report)
    for t in report.testcases:
        for m in t.matrices:
            by_gpu, by_link = _grouped(report, m)
            base = {"testcase": t.key, "matrix": m.key, "size": _size(t)}
            _stats(
                out,
                _value_family(m, "gpu_"),
                f"{m.kind} of the cells a GPU is an end of",
                m,
                [({**base, **dict(ids)}, values) for ids, values in by_gpu.items()],
            )
            _stats(
                out,
                _value_family(m, "link_"),
                f"{m.kind} of the cells of a link type",
                m,
                [({**base, "link": link}, values) for link, values in by_link.items()],
            )
        count = sum(v is not None for m in t.matrices for row in m.values for v in row)
        cells.set({"testcase": t.key, "size": _size(t)}, count)
    if judged is not None:
        _verdict_counts(report, out, judged)


def _grouped(
    report: Report, m: Matrix
) -> tuple[dict[tuple[tuple[str, Any], ...], list[float]], dict[str, list[float]]]:
    """A matrix's applicable values by GPU (its labels) and by link type."""
    by_gpu: dict[tuple[tuple[str, Any], ...], list[float]] = {}
    for r, values in enumerate(m.values):
        for c, value in enumerate(values):
            if value is None:
                continue
            for ids in {tuple(e.items()) for e in _ends(report, m, r, c) if e is not None}:
                by_gpu.setdefault(ids, []).append(value)
    by_link: dict[str, list[float]] = {}
    for place in cell_places(m, report.devices):
        value = m.values[place.row][place.column]
        if value is not None:
            by_link.setdefault(place.link, []).append(value)
    return by_gpu, by_link


def _stats(
    out: _Families,
    name: str,
    what: str,
    m: Matrix,
    groups: Sequence[tuple[dict[str, Any], list[float]]],
) -> None:
    """min, median and max (label ``stat``) of each group's values into family ``name``."""
    if name not in out:
        unit = "seconds" if m.kind == KIND_LATENCY else "bytes_per_second"
        out.add(name, f"min, median, max (stat) of the {what}", unit)
    for labels, values in groups:
        for stat, f in STATS:
            out[name].set({**labels, "stat": stat}, f(values))


def _verdict_counts(
    report: Report, out: _Families, judged: tuple[set[CellKey], set[CellKey]]
) -> None:
    """Per testcase and size, the cells a rule failed and the noisy cells; per GPU, the
    failed cells it is an end of."""
    failed = out.add(
        "gpubw_testcase_cells_below_expectation",
        "cells of the testcase a rule of the judged run failed (exit code 3)",
    )
    noisy = out.add("gpubw_testcase_cells_noisy", "cells whose samples vary beyond --cv-threshold")
    per_gpu = out.add(
        "gpubw_gpu_cells_below_expectation",
        "cells of the testcase a rule failed that the GPU is an end of",
    )
    for t in report.testcases:
        base = {"testcase": t.key, "size": _size(t)}
        counts = {"failed": 0, "noisy": 0}
        gpus: dict[tuple[tuple[str, Any], ...], int] = {}
        for m in t.matrices:
            for r, values in enumerate(m.values):
                for c, value in enumerate(values):
                    if value is None:
                        continue
                    key = (t.key, t.size, m.key, m.row_labels[r], m.column_labels[c])
                    bad = key in judged[0]
                    counts["failed"] += bad
                    counts["noisy"] += key in judged[1]
                    for e in _ends(report, m, r, c):
                        if e is not None:
                            gpus[tuple(e.items())] = gpus.get(tuple(e.items()), 0) + bad
        failed.set(base, counts["failed"])
        noisy.set(base, counts["noisy"])
        for ids, n in gpus.items():
            per_gpu.set({**base, **dict(ids)}, n)


def families(report: Report, detail: str = CELLS) -> list[_Family]:
    """Every gauge family of ``report`` at ``detail`` (cells or summary), in exposition
    order, empty families left out."""
    if detail not in (CELLS, SUMMARY):
        raise ValueError(f"detail is {CELLS!r} or {SUMMARY!r}, not {detail!r}")
    out = _Families()
    _run_families(report, out)
    if detail == CELLS:
        _cells_families(report, out)
    else:
        _summary_families(report, out)
    return [f for f in out.values() if f.series]


class _Collector:
    def __init__(self, report: Report, detail: str) -> None:
        self.report, self.detail = report, detail

    def collect(self) -> Iterator[Any]:
        for family in families(self.report, self.detail):
            yield family.metric()


def _require_library() -> None:
    """Raise UsageError saying how to install prometheus-client when it is missing."""
    try:
        import prometheus_client  # noqa: F401
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] == "prometheus_client":
            raise UsageError(INSTALL_HINT) from None
        raise


def exposition(report: Report, detail: str = CELLS) -> str:
    """``report`` in the OpenMetrics text format (ends with ``# EOF``)."""
    _require_library()
    from prometheus_client import CollectorRegistry
    from prometheus_client.openmetrics.exposition import generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(report, detail))
    text: bytes = generate_latest(registry)  # type: ignore[no-untyped-call]
    return text.decode("utf-8")


class OpenMetricsWriter(Writer):
    """Gauges per cell or per GPU and link, per testcase, per verdict, for Prometheus."""

    name = "openmetrics"
    options = (DETAIL,)
    #: --metrics-detail: cells or summary
    metrics_detail: str = CELLS

    def __init__(self, *, verbose: bool = False, perf_formatter: bool = False) -> None:
        _require_library()  # before the run: a missing extra is a usage error up front
        super().__init__(verbose=verbose, perf_formatter=perf_formatter)

    def write(self, report: Report, stream: TextIO) -> None:
        stream.write(exposition(report, self.metrics_detail or CELLS))


__all__ = ["CELLS", "DETAIL", "SUMMARY", "OpenMetricsWriter", "exposition", "families"]
