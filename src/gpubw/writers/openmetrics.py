"""The OpenMetrics writer (``gpubw --format openmetrics``): gauges for Prometheus.

Meant for node-exporter's textfile collector: write the report atomically into its folder
(``gpubw --format openmetrics -o /var/lib/node_exporter/textfile/gpubw.prom``) after each
run. The exposition is made by ``prometheus-client`` (the optional extra ``gpubw[metrics]``),
in the OpenMetrics text format, which Prometheus' text parser also reads.

Metrics (every series has a ``host`` label):

* ``gpubw_run_info`` (1; tool version, backend, simulated, system name),
  ``gpubw_run_timestamp_seconds`` (start, Unix time), ``gpubw_run_duration_seconds``,
  ``gpubw_run_exit_code`` (gpubw's exit code for the run);
* ``gpubw_testcase_ok`` per testcase and size (1 Passed or Waived, else 0; ``status``);
* per applicable matrix cell: ``gpubw_bandwidth_bytes_per_second`` or
  ``gpubw_latency_seconds``, with ``testcase``, ``matrix``, ``size`` (bytes, "" for a
  fixed-size testcase), ``row``, ``column``, ``gpu``/``uuid`` (the row's GPU, or the
  column's where the row is the host) and ``peer_gpu``/``peer_uuid`` (the column's GPU when
  the row is a GPU too); the same labels on ``gpubw_bandwidth_stdev_bytes_per_second`` or
  ``gpubw_latency_stdev_seconds`` (the sample standard deviation) and
  ``gpubw_cell_cv_ratio`` (stdev / mean) where the cell has 2 samples or more;
* per verdict of the report's ``verdicts`` (when the run judged its cells against
  expectations): ``gpubw_verdict`` (1 when its severity is "fail", else 0) with the cell's
  labels plus ``rule`` and ``severity``, and ``gpubw_verdict_expected`` (the limit).

Series with the same labels (a testcase selected twice) keep the last value: an exposition
must not repeat a series. Values that are not finite are left out.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TextIO

from gpubw.model.errors import UsageError
from gpubw.model.results import KIND_LATENCY, Matrix, Report
from gpubw.writers import Writer, cell_devices

INSTALL_HINT = "--format openmetrics needs prometheus-client: pip install 'gpubw[metrics]'"

CELL_LABELS = (
    "host",
    "testcase",
    "matrix",
    "size",
    "row",
    "column",
    "gpu",
    "uuid",
    "peer_gpu",
    "peer_uuid",
)
VERDICT_LABELS = (*CELL_LABELS, "rule", "severity")


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
    """One gauge family: label values -> value, the last value kept for repeated labels."""

    def __init__(self, name: str, help_text: str, labels: Sequence[str]) -> None:
        self.name, self.help, self.labels = name, help_text, tuple(labels)
        self.series: dict[tuple[str, ...], float] = {}

    def set(self, labels: Sequence[Any], value: Any) -> None:
        v = _finite(value)
        if v is not None:
            self.series[tuple("" if x is None else str(x) for x in labels)] = v

    def metric(self) -> Any:
        from prometheus_client.core import GaugeMetricFamily

        family = GaugeMetricFamily(self.name, self.help, labels=self.labels)
        for labels, value in self.series.items():
            family.add_metric(labels, value)
        return family


def _device_labels(
    m: Matrix, r: int, c: int, devices: Sequence[Mapping[str, Any]]
) -> tuple[str, str, str, str]:
    """gpu, uuid, peer_gpu, peer_uuid of one cell."""
    row, column = cell_devices(m, r, c, devices)
    first, peer = (row, column) if row is not None else (column, None)

    def ids(d: Mapping[str, Any] | None) -> tuple[str, str]:
        return ("", "") if d is None else (str(d.get("ordinal", "")), str(d.get("uuid", "")))

    return (*ids(first), *ids(peer))


def families(report: Report) -> list[_Family]:
    """Every gauge family of ``report``, in exposition order (empty families left out)."""
    host = report.host
    run_info = _Family(
        "gpubw_run_info",
        "gpubw run: tool version, backend, simulated or measured",
        ("host", "version", "backend", "simulated", "system_name"),
    )
    run_info.set(
        (
            host,
            report.tool_version,
            report.backend,
            str(report.simulated).lower(),
            report.system_name,
        ),
        1,
    )
    started = _Family(
        "gpubw_run_timestamp_seconds", "start of the gpubw run (Unix time)", ("host",)
    )
    started.set((host,), _unix_time(report.started))
    duration = _Family("gpubw_run_duration_seconds", "duration of the gpubw run", ("host",))
    duration.set((host,), report.duration_s)
    exit_code = _Family("gpubw_run_exit_code", "gpubw's exit code for the run", ("host",))
    exit_code.set((host,), report.exit_code)
    ok = _Family(
        "gpubw_testcase_ok",
        "1 if the testcase Passed or was Waived at this size, else 0",
        ("host", "testcase", "size", "status"),
    )
    bandwidth = _Family(
        "gpubw_bandwidth_bytes_per_second", "bandwidth of one matrix cell", CELL_LABELS
    )
    latency = _Family("gpubw_latency_seconds", "latency of one matrix cell", CELL_LABELS)
    bandwidth_sd = _Family(
        "gpubw_bandwidth_stdev_bytes_per_second",
        "sample standard deviation of one bandwidth cell's samples",
        CELL_LABELS,
    )
    latency_sd = _Family(
        "gpubw_latency_stdev_seconds",
        "sample standard deviation of one latency cell's samples",
        CELL_LABELS,
    )
    cv = _Family(
        "gpubw_cell_cv_ratio", "coefficient of variation (stdev / mean) of one cell", CELL_LABELS
    )
    for t in report.testcases:
        size = "" if t.size is None else str(t.size)
        ok.set((host, t.key, size, t.status.value), 1 if t.ok else 0)
        for m in t.matrices:
            is_latency = m.kind == KIND_LATENCY
            target, stdev = (latency, latency_sd) if is_latency else (bandwidth, bandwidth_sd)
            stats = m.cell_stats()
            for r, values in enumerate(m.values):
                for c, value in enumerate(values):
                    if value is None:
                        continue
                    labels = (
                        host,
                        t.key,
                        m.key,
                        size,
                        m.row_labels[r],
                        m.column_labels[c],
                        *_device_labels(m, r, c, report.devices),
                    )
                    target.set(labels, value)
                    s = stats[r][c] if stats else None
                    if s is not None:
                        stdev.set(labels, s.stdev)
                        cv.set(labels, s.cv)
    verdict, expected = _verdict_families(report)
    every = [run_info, started, duration, exit_code, ok, bandwidth, latency]
    every += [bandwidth_sd, latency_sd, cv, verdict, expected]
    return [f for f in every if f.series]


def _endpoint_ids(end: Any) -> tuple[str, str]:
    if end is None or _get(end, "kind") != "gpu":
        return "", ""
    index = _get(end, "index")
    return ("" if index is None else str(index)), str(_get(end, "uuid", "") or "")


def _verdict_families(report: Report) -> tuple[_Family, _Family]:
    """Gauges for the report's verdicts (``report.verdicts``, when it has them): objects or
    dicts with testcase, matrix, size, row, column, source/destination endpoints (kind,
    index, uuid), rule, severity and expected."""
    verdict = _Family(
        "gpubw_verdict",
        "1 if the cell failed its expectation (severity 'fail'), else 0",
        VERDICT_LABELS,
    )
    expected = _Family(
        "gpubw_verdict_expected", "the limit a verdict judged the cell against", VERDICT_LABELS
    )
    for v in getattr(report, "verdicts", None) or ():
        ends = [_endpoint_ids(_get(v, "source")), _endpoint_ids(_get(v, "destination"))]
        gpus = [e for e in ends if e[0] or e[1]]
        if len(gpus) == 2 and gpus[0] == gpus[1]:  # a device's own memory: one GPU
            gpus.pop()
        first, peer = [*gpus, ("", ""), ("", "")][:2]
        size = _get(v, "size", _get(v, "size_bytes"))
        severity = str(_get(v, "severity", ""))
        labels = (
            report.host,
            _get(v, "testcase", ""),
            _get(v, "matrix", ""),
            "" if size is None else size,
            _get(v, "row", ""),
            _get(v, "column", ""),
            *first,
            *peer,
            _get(v, "rule", ""),
            severity,
        )
        verdict.set(labels, 1 if severity.lower() == "fail" else 0)
        expected.set(labels, _get(v, "expected"))
    return verdict, expected


class _Collector:
    def __init__(self, report: Report) -> None:
        self.report = report

    def collect(self) -> Iterator[Any]:
        for family in families(self.report):
            yield family.metric()


def _require_library() -> None:
    """Raise UsageError saying how to install prometheus-client when it is missing."""
    try:
        import prometheus_client  # noqa: F401
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] == "prometheus_client":
            raise UsageError(INSTALL_HINT) from None
        raise


def exposition(report: Report) -> str:
    """``report`` in the OpenMetrics text format (ends with ``# EOF``)."""
    _require_library()
    from prometheus_client import CollectorRegistry
    from prometheus_client.openmetrics.exposition import generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(report))
    return generate_latest(registry).decode("utf-8")


class OpenMetricsWriter(Writer):
    """Gauges per cell, per testcase, per verdict, for Prometheus (node-exporter textfile)."""

    name = "openmetrics"

    def __init__(self, *, verbose: bool = False, perf_formatter: bool = False) -> None:
        _require_library()  # before the run: a missing extra is a usage error up front
        super().__init__(verbose=verbose, perf_formatter=perf_formatter)

    def write(self, report: Report, stream: TextIO) -> None:
        stream.write(exposition(report))
