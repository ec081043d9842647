"""The OpenMetrics writer: gauges per cell, testcase and verdict, read back by prometheus-client."""

from __future__ import annotations

import io
import sys

import attrs
import pytest

from _writer_reports import full_report, n_by_n, one_by_n, passed, report
from gpubw.cli import command as cli
from gpubw.model.errors import UsageError
from gpubw.model.results import Report, Status, TestcaseResult
from gpubw.runner.registry import writer
from gpubw.writers.openmetrics import OpenMetricsWriter, exposition

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.openmetrics.parser import text_string_to_metric_families  # noqa: E402
from prometheus_client.parser import (  # noqa: E402
    text_string_to_metric_families as prometheus_families,
)


def samples(text: str) -> dict[str, list]:
    """metric name -> its samples (name, labels, value), as OpenMetrics' parser reads them."""
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge"
        out.setdefault(family.name, []).extend(family.samples)
    return out


def test_registered_and_ends_with_eof() -> None:
    """--format openmetrics is a registered writer; its text ends with # EOF and Prometheus'
    own text parser reads it too (node-exporter's textfile collector)."""
    assert writer("openmetrics") is OpenMetricsWriter
    text = exposition(full_report())
    assert text.endswith("# EOF\n")
    assert {f.name for f in prometheus_families(text)} >= {"gpubw_bandwidth_bytes_per_second"}


def test_one_gauge_per_applicable_cell_with_labels() -> None:
    """Every non-N/A cell is a series with host, gpu, uuid, testcase, size, row and column."""
    s = samples(exposition(full_report()))
    bw = s["gpubw_bandwidth_bytes_per_second"]
    h2d = [x for x in bw if x.labels["testcase"] == "host_to_device_memcpy_ce"]
    assert len(h2d) == 2
    first = h2d[0].labels
    assert first["host"] == "gpu-node-17" and first["size"] == str(512 << 20)
    assert (first["row"], first["column"], first["gpu"], first["peer_gpu"]) == ("0", "0", "0", "")
    assert first["uuid"] == "GPU-00000000-0000-0000-0000-000000000000"
    assert h2d[0].value == pytest.approx(54.8731e9)
    d2d = [x for x in bw if x.labels["matrix"] == "device_to_device_memcpy_read_ce"]
    assert len(d2d) == 2  # the N/A diagonal is left out
    assert {(x.labels["gpu"], x.labels["peer_gpu"]) for x in d2d} == {("0", "1"), ("1", "0")}
    lat = s["gpubw_latency_seconds"]
    assert lat and all(x.value < 1e-5 for x in lat)  # seconds, not ns


def test_run_and_testcase_gauges() -> None:
    """Run info (simulated or not), start time, exit code and one ok gauge per testcase."""
    s = samples(exposition(full_report(simulated=True)))
    (info,) = s["gpubw_run_info"]
    assert info.labels["simulated"] == "true" and info.labels["backend"] == "simulated"
    assert s["gpubw_run_timestamp_seconds"][0].value == 1795946400.0  # 2026-11-29T10:00Z
    assert s["gpubw_run_exit_code"][0].value == 1  # the report has an Error testcase
    ok = {x.labels["testcase"]: (x.labels["status"], x.value) for x in s["gpubw_testcase_ok"]}
    assert ok["host_to_device_memcpy_ce"] == ("Passed", 1)
    assert ok["device_to_device_memcpy_write_ce"] == ("Waived", 1)
    assert ok["all_to_host_memcpy_ce"] == ("Error", 0)


def test_stdev_and_cv_only_with_samples() -> None:
    """Sample spread gauges appear for cells with 2+ samples, in the matrix's unit family."""
    s = samples(exposition(full_report(verbose=True)))
    sd = s["gpubw_bandwidth_stdev_bytes_per_second"]
    assert {x.labels["matrix"] for x in sd} == {"host_to_device_memcpy_ce"}
    assert sd[0].value == pytest.approx(51_721_401, rel=1e-3)
    assert "gpubw_cell_cv_ratio" in s
    assert "gpubw_bandwidth_stdev_bytes_per_second" not in samples(exposition(full_report()))


def test_repeated_series_keep_the_last_value() -> None:
    """A testcase selected twice gives one series (an exposition must not repeat one)."""
    t1 = passed("device_to_device_memcpy_read_ce", [n_by_n()], 4)
    m2 = attrs.evolve(n_by_n(), values=[[None, 1e9], [2e9, None]])
    t2 = passed("device_to_device_memcpy_read_ce", [m2], 4)
    s = samples(exposition(report([t1, t2])))
    assert sorted(x.value for x in s["gpubw_bandwidth_bytes_per_second"]) == [1e9, 2e9]
    assert len(s["gpubw_testcase_ok"]) == 1


def test_label_values_are_escaped() -> None:
    """Quotes, backslashes and newlines in label values survive a parse."""
    odd = 'node "a"\\b\nc'
    rep = attrs.evolve(report([TestcaseResult("x\\y", Status.NOT_FOUND, "nope")]), host=odd)
    text = exposition(rep)
    s = samples(text)
    assert s["gpubw_run_info"][0].labels["host"] == odd
    assert s["gpubw_testcase_ok"][0].labels["testcase"] == "x\\y"
    assert len(text.splitlines()) == len(text.split("\n")) - 1  # no raw newline in a value


@attrs.frozen
class JudgedReport(Report):
    """A report as the lead will make it once verdicts are wired in."""

    verdicts: tuple = ()


def test_verdicts_become_gauges() -> None:
    """Each verdict is a gpubw_verdict series (1 = FAIL) naming the GPU, with its limit."""
    from types import SimpleNamespace as NS

    gpu1 = NS(kind="gpu", index=1, uuid="GPU-00000001-0000-0000-0000-000000000000")
    slow = NS(
        testcase="host_to_device_memcpy_ce",
        matrix="host_to_device_memcpy_ce",
        size=512 << 20,
        row="0",
        column="1",
        source=NS(kind="host", index=None, uuid=""),
        destination=gpu1,
        rule="FLOOR",
        severity="FAIL",
        expected=50e9,
    )
    fine = {  # the JSON form of a verdict works as well
        "testcase": "device_to_device_memcpy_read_ce",
        "matrix": "device_to_device_memcpy_read_ce",
        "size_bytes": 512 << 20,
        "row": "0",
        "column": "1",
        "source": {"kind": "gpu", "index": 0, "uuid": "GPU-0"},
        "destination": {"kind": "gpu", "index": 1, "uuid": "GPU-1"},
        "rule": "PEER_OUTLIER",
        "severity": "PASS",
        "expected": 300e9,
    }
    base = full_report()
    rep = JudgedReport(**{f.name: getattr(base, f.name) for f in attrs.fields(Report)})
    rep = attrs.evolve(rep, verdicts=(slow, fine))
    s = samples(exposition(rep))
    by_rule = {x.labels["rule"]: x for x in s["gpubw_verdict"]}
    assert by_rule["FLOOR"].value == 1 and by_rule["PEER_OUTLIER"].value == 0
    floor = by_rule["FLOOR"].labels
    assert (floor["gpu"], floor["uuid"], floor["peer_gpu"]) == ("1", gpu1.uuid, "")
    assert floor["size"] == str(512 << 20) and floor["severity"] == "FAIL"
    peer = by_rule["PEER_OUTLIER"].labels
    assert (peer["gpu"], peer["peer_gpu"], peer["peer_uuid"]) == ("0", "1", "GPU-1")
    limits = {x.labels["rule"]: x.value for x in s["gpubw_verdict_expected"]}
    assert limits == {"FLOOR": 50e9, "PEER_OUTLIER": 300e9}
    assert "gpubw_verdict" not in samples(exposition(base))  # no verdicts: no gauges


def test_missing_library_is_a_usage_error(monkeypatch) -> None:
    """Without prometheus-client the writer says how to install it, before any run."""
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(UsageError, match=r"pip install 'gpubw\[metrics\]'"):
        OpenMetricsWriter()
    code = cli.main(["--simulate", "h200x2", "-t", "0", "--format", "openmetrics", "-q"])
    assert code == 2


def test_cli_openmetrics_run(capsys) -> None:
    """gpubw --format openmetrics on a simulated system prints a parseable exposition."""
    assert cli.main(["--simulate", "h200x2", "-t", "0", "--format", "openmetrics", "-q"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    s = samples(out)
    assert s["gpubw_run_info"][0].labels["simulated"] == "true"
    assert len(s["gpubw_bandwidth_bytes_per_second"]) == 2
    buf = io.StringIO()
    OpenMetricsWriter().write(full_report(), buf)
    assert buf.getvalue() == exposition(full_report())


def test_verdicts_from_gpubw_expect_name_the_slow_gpu() -> None:
    """Verdicts made by gpubw.acceptance.expect on a report with one slow host link become a failed
    gpubw_verdict gauge naming that GPU (and passed ones a 0)."""
    from gpubw.acceptance import expect

    h2d = attrs.evolve(one_by_n(), values=[[54.87e9, 40.0e9]])
    base = report([passed("host_to_device_memcpy_ce", [h2d], 0)])
    verdicts = expect.evaluate(base, include_passed=True)
    rep = JudgedReport(**{f.name: getattr(base, f.name) for f in attrs.fields(Report)})
    s = samples(exposition(attrs.evolve(rep, verdicts=tuple(verdicts))))
    failed = [x for x in s["gpubw_verdict"] if x.value == 1]
    assert [(x.labels["gpu"], x.labels["uuid"][:12], x.labels["severity"]) for x in failed] == [
        ("1", "GPU-00000001", expect.FAIL)
    ]
    assert failed[0].labels["testcase"] == "host_to_device_memcpy_ce"
    assert any(x.value == 0 and x.labels["gpu"] == "0" for x in s["gpubw_verdict"])
