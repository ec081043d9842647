"""The OpenMetrics writer: gauges per cell (or per GPU and link type), testcase and verdict,
read back by prometheus-client's OpenMetrics and Prometheus text parsers."""

from __future__ import annotations

import io
import statistics
import sys

import attrs
import pytest

from _writer_reports import DEVICES, full_report, n_by_n, one_by_n, passed, report
from gpubw.cli import command as cli
from gpubw.model.errors import UsageError
from gpubw.model.results import BANDWIDTH, Matrix, Status, TestcaseResult
from gpubw.model.verdicts import Endpoint, Verdict
from gpubw.runner.writer_registry import writer
from gpubw.writers import make_writer
from gpubw.writers.openmetrics import DETAIL, OpenMetricsWriter, exposition

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.openmetrics.parser import text_string_to_metric_families  # noqa: E402
from prometheus_client.parser import (  # noqa: E402
    text_string_to_metric_families as prometheus_families,
)

H2D = "host_to_device_memcpy_ce"
D2D = "device_to_device_memcpy_read_ce"


def samples(text: str) -> dict[str, list]:
    """metric name -> its samples (name, labels, value), as OpenMetrics' parser reads them;
    Prometheus' text parser must read the same series."""
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge"
        out.setdefault(family.name, []).extend(family.samples)
    again = {f.name: len(f.samples) for f in prometheus_families(text)}
    assert again == {name: len(x) for name, x in out.items()}
    return out


def every_sample(text: str) -> list:
    return [x for xs in samples(text).values() for x in xs]


def test_registered_with_units_and_no_empty_or_host_label() -> None:
    """--format openmetrics is a registered writer; its text ends with # EOF, has a # UNIT
    line for every family with a unit, no host label (Prometheus' instance) and no empty
    label value."""
    assert writer("openmetrics") is OpenMetricsWriter
    text = exposition(full_report(verbose=True))
    assert text.endswith("# EOF\n")
    assert "# UNIT gpubw_bandwidth_bytes_per_second bytes_per_second" in text
    assert "# UNIT gpubw_latency_seconds seconds" in text
    assert "# UNIT gpubw_cell_cv_ratio ratio" in text
    units = {f.name: f.unit for f in text_string_to_metric_families(text)}
    assert units["gpubw_run_timestamp_seconds"] == "seconds"
    for x in every_sample(text):
        assert "host" not in x.labels
        assert all(v != "" for v in x.labels.values()), x


def test_one_gauge_per_applicable_cell_with_labels() -> None:
    """Every non-N/A cell is a series with gpu, uuid, testcase, size, row and column; a host
    link has no peer labels at all."""
    s = samples(exposition(full_report()))
    bw = s["gpubw_bandwidth_bytes_per_second"]
    h2d = [x for x in bw if x.labels["testcase"] == H2D]
    assert len(h2d) == 2
    first = h2d[0].labels
    assert first["size"] == str(512 << 20)
    assert (first["row"], first["column"], first["gpu"]) == ("0", "0", "0")
    assert "peer_gpu" not in first and "peer_uuid" not in first
    assert first["uuid"] == "GPU-00000000-0000-0000-0000-000000000000"
    assert h2d[0].value == pytest.approx(54.8731e9)
    d2d = [x for x in bw if x.labels["matrix"] == D2D]
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
    assert ok[H2D] == ("Passed", 1)
    assert ok["device_to_device_memcpy_write_ce"] == ("Waived", 1)
    assert ok["all_to_host_memcpy_ce"] == ("Error", 0)
    assert (
        "size"
        not in next(x for x in s["gpubw_testcase_ok"] if x.labels["testcase"] == "bogus").labels
    )


def test_stdev_and_cv_only_with_samples() -> None:
    """Sample spread gauges appear for cells with 2+ samples, in the matrix's unit family."""
    s = samples(exposition(full_report(verbose=True)))
    sd = s["gpubw_bandwidth_stdev_bytes_per_second"]
    assert {x.labels["matrix"] for x in sd} == {H2D}
    assert sd[0].value == pytest.approx(51_721_401, rel=1e-3)
    assert "gpubw_cell_cv_ratio" in s
    assert "gpubw_bandwidth_stdev_bytes_per_second" not in samples(exposition(full_report()))


def test_repeated_series_keep_the_last_value() -> None:
    """A testcase selected twice gives one series (an exposition must not repeat one)."""
    t1 = passed(D2D, [n_by_n()], 4)
    m2 = attrs.evolve(n_by_n(), values=[[None, 1e9], [2e9, None]])
    t2 = passed(D2D, [m2], 4)
    s = samples(exposition(report([t1, t2])))
    assert sorted(x.value for x in s["gpubw_bandwidth_bytes_per_second"]) == [1e9, 2e9]
    assert len(s["gpubw_testcase_ok"]) == 1


def test_label_values_are_escaped() -> None:
    """Quotes, backslashes and newlines in label values survive a parse."""
    odd = 'node "a"\\b\nc'
    rep = attrs.evolve(report([TestcaseResult("x\\y", Status.NOT_FOUND, "nope")]), system_name=odd)
    text = exposition(rep)
    s = samples(text)
    assert s["gpubw_run_info"][0].labels["system_name"] == odd
    assert s["gpubw_testcase_ok"][0].labels["testcase"] == "x\\y"
    assert len(text.splitlines()) == len(text.split("\n")) - 1  # no raw newline in a value


def _verdict(column: str, rule: str, severity: str, expected: float) -> Verdict:
    """A verdict on host -> GPU ``column`` of the host-to-device matrix."""
    gpu = Endpoint("gpu", int(column), uuid=DEVICES[int(column)]["uuid"])
    return Verdict(
        H2D, H2D, 512 << 20, "0", column, "host", Endpoint("host"), gpu, False, BANDWIDTH,
        40e9, expected, expected, rule, severity, "", None, None,
    )  # fmt: skip


def judged(verdicts: tuple[Verdict, ...]) -> object:
    """full_report judged: its verdicts and what they judged against."""
    return attrs.evolve(
        full_report(), verdicts=verdicts, expectations={"name": "t", "outlier_pct": 90.0}
    )


def test_cell_below_expectation_is_1_for_a_failed_cell_and_0_for_the_others() -> None:
    """In a judged run every applicable cell has gpubw_cell_below_expectation: 1 where a rule
    failed it, 0 where it passed; the failed cell's limit is gpubw_cell_expected_*. A run
    not judged has no such series."""
    s = samples(exposition(judged((_verdict("1", "floor", "fail", 50e9),))))
    below = {
        (x.labels["matrix"], x.labels["row"], x.labels["column"]): x.value
        for x in s["gpubw_cell_below_expectation"]
    }
    assert below[(H2D, "0", "1")] == 1
    assert below[(H2D, "0", "0")] == 0 and below[(D2D, "0", "1")] == 0
    assert sum(below.values()) == 1
    assert len(below) == len(s["gpubw_bandwidth_bytes_per_second"]) + len(
        s["gpubw_latency_seconds"]
    )
    (limit,) = s["gpubw_cell_expected_bytes_per_second"]
    assert limit.value == 50e9 and limit.labels["rule"] == "floor"
    assert "gpubw_cell_below_expectation" not in samples(exposition(full_report()))


def test_verdicts_from_gpubw_expect_name_the_slow_gpu() -> None:
    """Verdicts made by gpubw.acceptance.expect on a report with one slow host link make
    that GPU's cell below expectation (and the others 0)."""
    from gpubw.acceptance import expect

    h2d = attrs.evolve(one_by_n(), values=[[54.87e9, 40.0e9]])
    base = report([passed(H2D, [h2d], 0)])
    rep = attrs.evolve(base, verdicts=tuple(expect.evaluate(base)), expectations={})
    s = samples(exposition(rep))
    failed = [x for x in s["gpubw_cell_below_expectation"] if x.value == 1]
    assert [(x.labels["gpu"], x.labels["uuid"][:12]) for x in failed] == [("1", "GPU-00000001")]
    assert any(x.value == 0 and x.labels["gpu"] == "0" for x in s["gpubw_cell_below_expectation"])


def test_summary_is_per_gpu_and_link_with_verdict_counts() -> None:
    """--metrics-detail summary: min/median/max per testcase, size and GPU, per link type,
    the cell count and the verdict counts; no per-cell series."""
    rep = judged((_verdict("1", "floor", "fail", 50e9), _verdict("0", "noisy", "warn", 0.1)))
    s = samples(exposition(rep, "summary"))
    assert "gpubw_bandwidth_bytes_per_second" not in s
    gpu = {
        (x.labels["matrix"], x.labels["gpu"], x.labels["stat"]): x.value
        for x in s["gpubw_gpu_bandwidth_bytes_per_second"]
    }
    assert gpu[(D2D, "0", "min")] == pytest.approx(388.91e9)  # GPU 0 as source and target
    assert gpu[(D2D, "0", "max")] == pytest.approx(389.44e9)
    assert gpu[(H2D, "1", "median")] == pytest.approx(55.0212e9)
    link = {
        (x.labels["matrix"], x.labels["link"], x.labels["stat"])
        for x in s["gpubw_link_bandwidth_bytes_per_second"]
    }
    assert {(H2D, "host", "min"), (D2D, "peer", "median")} <= link
    cells = {x.labels["testcase"]: x.value for x in s["gpubw_testcase_cells"]}
    assert cells[H2D] == 2 and cells[D2D] == 2
    failed = {x.labels["testcase"]: x.value for x in s["gpubw_testcase_cells_below_expectation"]}
    assert failed[H2D] == 1 and failed[D2D] == 0
    noisy = {x.labels["testcase"]: x.value for x in s["gpubw_testcase_cells_noisy"]}
    assert noisy[H2D] == 1
    per_gpu = {
        x.labels["gpu"]: x.value
        for x in s["gpubw_gpu_cells_below_expectation"]
        if x.labels["testcase"] == H2D
    }
    assert per_gpu == {"0": 0, "1": 1}


def rack(n: int = 72, per_host: int = 4) -> object:
    """A simulated GB200 NVL72 run's report built directly: an N x N multinode matrix over
    72 ranks on 18 hosts of 4 (rank 0's host describes its 4 devices)."""
    hosts = [f"simhost{i // per_host:02d}" for i in range(n)]
    values = [[None if r == c else 370e9 + r * 1e6 + c for c in range(n)] for r in range(n)]
    m = Matrix(
        "multinode_device_to_device_memcpy_read_ce",
        "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)",
        BANDWIDTH,
        [str(i) for i in range(n)],
        [str(i) for i in range(n)],
        values,
    )
    devices = [{**DEVICES[0], "ordinal": i, "uuid": f"GPU-{i}"} for i in range(per_host)]
    world = {
        "size": n,
        "hosts": sorted(set(hosts)),
        "rank_hosts": [i // per_host for i in range(n)],
        "processes": [{"rank": i, "host": hosts[i], "device": i % per_host} for i in range(n)],
    }
    base = report([passed(m.key, [m], 35)], simulated=True)
    return attrs.evolve(
        base, devices=devices, world=world, host="simhost00", system_name="gb200nvl72"
    )


def test_a_rack_summary_is_o_n() -> None:
    """On a simulated gb200nvl72 (72 ranks, 5,112 cells per testcase) the summary has 3
    series per GPU and per link type, the GPUs named by rank, host and device (and UUID
    where the report describes it); cells mode has one series per cell. Both parse."""
    rep = rack()
    cells = samples(exposition(rep))
    assert len(cells["gpubw_bandwidth_bytes_per_second"]) == 72 * 71
    s = samples(exposition(rep, "summary"))
    gpu = s["gpubw_gpu_bandwidth_bytes_per_second"]
    assert len(gpu) == 72 * 3
    assert len(s["gpubw_link_bandwidth_bytes_per_second"]) == 3
    assert len(every_sample(exposition(rep, "summary"))) < 72 * 4 + 20
    r17 = {x.labels["stat"]: x for x in gpu if x.labels["rank"] == "17"}
    assert (r17["min"].labels["gpu_host"], r17["min"].labels["gpu"]) == ("simhost04", "1")
    assert "uuid" not in r17["min"].labels
    mine = [370e9 + 17e6 + c for c in range(72) if c != 17] + [
        370e9 + r * 1e6 + 17 for r in range(72) if r != 17
    ]
    assert r17["median"].value == pytest.approx(statistics.median(mine))
    r2 = next(x for x in gpu if x.labels["rank"] == "2")
    assert r2.labels["uuid"] == "GPU-2" and r2.labels["gpu_host"] == "simhost00"


def test_missing_library_is_a_usage_error(monkeypatch) -> None:
    """Without prometheus-client the writer says how to install it, before any run."""
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(UsageError, match=r"pip install 'gpubw\[metrics\]'"):
        OpenMetricsWriter()
    code = cli.main(["--simulate", "h200x2", "-t", "0", "--format", "openmetrics", "-q"])
    assert code == 2


def test_cli_openmetrics_run(capsys) -> None:
    """gpubw --format openmetrics on a simulated system prints a parseable exposition; the
    writer's own option --metrics-detail (or a unique prefix of it) chooses the summary."""
    assert cli.main(["--simulate", "h200x2", "-t", "0", "--format", "openmetrics", "-q"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    s = samples(out)
    assert s["gpubw_run_info"][0].labels["simulated"] == "true"
    assert len(s["gpubw_bandwidth_bytes_per_second"]) == 2
    argv = ["--simulate", "h200x2", "-t", "0", "--format", "openmetrics", "-q", "--metrics-d"]
    assert cli.main([*argv, "summary"]) == 0
    s = samples(capsys.readouterr().out)
    assert "gpubw_bandwidth_bytes_per_second" not in s
    assert len(s["gpubw_gpu_bandwidth_bytes_per_second"]) == 2 * 3
    buf = io.StringIO()
    OpenMetricsWriter().write(full_report(), buf)
    assert buf.getvalue() == exposition(full_report())


def test_writer_option_is_checked_and_only_for_its_writer(capsys) -> None:
    """A bad --metrics-detail value, the option with another format or given twice is a
    usage error before anything runs; make_writer sets the declared default."""
    run = ["--simulate", "h200x2", "-t", "0", "-q"]
    for argv, said in (
        (["--format", "openmetrics", "--metrics-detail", "all"], "invalid choice: 'all'"),
        (["-j", "--metrics-detail", "summary"], "unrecognized arguments: --metrics-detail"),
        (["--format", "openmetrics", "--metrics-detail", "cells", "--metrics-detail=cells"],
         "given more than once"),
    ):  # fmt: skip
        assert cli.main([*run, *argv]) == 2
        out, err = capsys.readouterr()
        assert out == "" and said in err, err
    assert cli.main(["-h"]) == 0
    assert "--metrics-detail cells|summary  (--format openmetrics)" in capsys.readouterr().out
    assert DETAIL.dest == "metrics_detail"
    assert make_writer(OpenMetricsWriter).metrics_detail == "cells"
    assert make_writer(
        OpenMetricsWriter, settings={"metrics_detail": "summary"}
    ).metrics_detail == ("summary")
