"""Tests of the result data: typed options, signal, exit code, export (gpubw.model.results)."""

from __future__ import annotations

import signal

import pytest

from gpubw.model.options import Invocation, RunOptions, options_from_record, options_record
from gpubw.model.results import (
    BANDWIDTH,
    Axes,
    Matrix,
    Report,
    Status,
    TestcaseResult,
    axes_from_header,
    exit_status,
)

MIB = 1 << 20


def report(**kw) -> Report:
    base = dict(
        tool="gpubw",
        tool_version="0.1.0",
        backend="simulated",
        simulated=True,
        system_name="h200x2",
        host="h",
        versions={},
        devices=(),
    )
    return Report(**{**base, **kw})


def test_exit_status_is_the_one_rule():
    """A signal gives 128 + its number, whatever else; errors 1; otherwise 0."""
    assert exit_status() == 0
    assert exit_status(failed=True) == 1
    assert exit_status(signal="SIGINT") == exit_status(signal=signal.SIGINT) == 130
    assert exit_status(signal="SIGTERM", failed=True) == 143
    assert exit_status(signal=int(signal.SIGHUP)) == 128 + int(signal.SIGHUP)


def test_report_exit_code_and_signal():
    """exit_code follows exit_status; a numeric signal is kept as its name."""
    ok = TestcaseResult("a", Status.PASSED)
    bad = TestcaseResult("b", Status.NOT_FOUND)
    assert report(testcases=[ok]).exit_code == 0
    assert report(testcases=[ok, bad]).exit_code == 1
    assert report(error="could not start").exit_code == 1
    stopped = report(testcases=[bad], signal=signal.SIGTERM)
    assert stopped.signal == "SIGTERM" and stopped.interrupted and stopped.exit_code == 143
    assert not report().interrupted and report().signal is None


def test_options_object_built_from_typed_fields():
    """Report.options is the JSON options object, in order, from run_options + invocation."""
    inv = Invocation(testcase=["0"], format="json", simulate="h200x2", argv=["-t", "0", "-j"])
    rep = report(run_options=RunOptions(buffer_sizes=[MIB, 3 * MIB]), invocation=inv)
    assert list(rep.options) == [
        "buffer_sizes",
        "buffer_size_mib",
        "samples",
        "loops",
        "statistic",
        "verify",
        "affinity",
        "verbose",
        "gate_timeout_s",
        "testcase",
        "testcase_prefixes",
        "format",
        "output",
        "simulate",
        "perf_formatter",
        "argv",
    ]
    assert rep.options["buffer_size_mib"] == [1.0, 3.0] and rep.options["argv"] == ["-t", "0", "-j"]
    stopped = report(signal="SIGINT").options
    assert (stopped["signal_exit"], stopped["signal"]) == (130, "SIGINT")
    assert "testcase" not in stopped  # no invocation: nothing recorded about one


def test_options_record_round_trip_and_defaults():
    """options_from_record reads back what options_record wrote; missing keys default."""
    run = RunOptions(samples=5, loops=2, statistic="mean", verbose=True, buffer_sizes=[MIB])
    inv = Invocation(testcase_prefixes=["host"], format="csv", output="x.csv", perf_formatter=True)
    assert options_from_record(options_record(run, inv, "SIGTERM")) == (run, inv, "SIGTERM")
    assert options_from_record({}) == (RunOptions(), None, None)
    assert options_from_record({"samples": 4}, interrupted=True) == (
        RunOptions(samples=4),
        None,
        "SIGINT",
    )


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"buffer_sizes": []}, ["at least one"]),
        ({"buffer_sizes": [0]}, ["buffer_sizes", "0"]),
        ({"samples": 0}, ["samples", "0"]),
        ({"statistic": "avg"}, ["statistic", "avg"]),
    ],
)
def test_run_options_refuse_bad_values(kwargs, words):
    """RunOptions validates what it holds, naming the field and the value."""
    with pytest.raises(ValueError) as info:
        RunOptions(**kwargs)
    for word in words:
        assert word in str(info.value)


def test_records_long_form():
    """records(): one row per cell of every matrix, N/A and NaN as None, Errors contribute none."""
    m = Matrix("k", "k (GB/s)", BANDWIDTH, ["0", "1"], ["0", "1"], [[None, 2.0], [float("nan"), 4]])
    rep = report(
        testcases=[
            TestcaseResult("k", Status.PASSED, size=MIB, matrices=[m]),
            TestcaseResult("e", Status.ERROR, message="boom"),
        ]
    )
    assert rep.records() == [
        {
            "testcase": "k",
            "size": MIB,
            "matrix": "k",
            "row": r,
            "column": c,
            "value": v,
            "unit": BANDWIDTH,
        }
        for r, c, v in [("0", "0", None), ("0", "1", 2.0), ("1", "0", None), ("1", "1", 4)]
    ]


def test_cell_stats_sample_stdev_and_cv():
    """Per-cell spread: sample stdev (n-1), cv = stdev/mean, None below 2 samples or no samples."""
    from gpubw.model.results import cell_stats

    m = Matrix(
        "k",
        "h",
        BANDWIDTH,
        ["0"],
        ["0", "1", "2"],
        [[2.0, 5.0, None]],
        samples=[[(1.0, 2.0, 3.0), (5.0,), None]],
    )
    stats = m.cell_stats()
    first = stats[0][0]
    assert first is not None and first.n == 3 and first.mean == 2.0
    assert first.stdev == pytest.approx(1.0) and first.cv == pytest.approx(0.5)
    one = stats[0][1]
    assert one is not None and (one.n, one.stdev, one.cv) == (1, None, None)
    assert stats[0][2] is None
    assert Matrix("k", "h", BANDWIDTH, ["0"], ["0"], [[1.0]]).cell_stats() == ()
    zero = cell_stats([0.0, 0.0])
    assert zero is not None and zero.stdev == 0.0 and zero.cv is None


# -- axes -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "n_rows", "axes"),
    [
        ("memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)", 1, ("host", "gpu", "row->column")),
        ("memcpy SM CPU(row) <- GPU(column) bandwidth (GB/s)", 1, ("host", "gpu", "column->row")),
        ("memory latency SM CPU(row) <-> GPU(column) (ns)", 1, ("host", "gpu", "both")),
        ("memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)", 8, ("gpu", "gpu", "column->row")),
        ("memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)", 1, ("peers", "gpu", "row->column")),
        ("memcpy CE CPU(row) <-> GPU(column) Read1 bandwidth (GB/s)", 4, ("gpu", "gpu", "both")),
        ("memcpy local GPU(column) bandwidth (GB/s)", 1, ("none", "gpu", "row->column")),
        ("stream_triad a = b + 3·c (fp32) GPU(column) bandwidth (GB/s)", 1, ("none", "gpu")),
        ("memcpy SM All Gpus <- GPU(column) total bandwidth (GB/s)", 1, ("none", "gpu")),
        ("Bisect benchmarking, simultaneous write CE BW", 8, ("none", "none")),
    ],
)
def test_axes_from_header_reads_nvbandwidth_headers(header, n_rows, axes):
    """Host, GPU pairs, an all-to-one's peers (one GPU(row)), nvbandwidth's multinode CPU(row)
    over several rows (GPUs), a GPU(column) of its own, and no recognised shape at all."""
    assert axes_from_header(header, n_rows) == Axes(*axes)


def _one_row(description: str, **kw) -> Matrix:
    return Matrix("k", description, BANDWIDTH, ["0"], ["0", "1"], [[1.0, 2.0]], **kw)


def test_matrix_axes_are_given_or_read_from_the_header():
    """Axes given to a Matrix win over its header; without them the header's are read."""
    header = "memcpy CE CPU(row) <- GPU(column) bandwidth (GB/s)"
    assert _one_row(header).axes == Axes("host", "gpu", "column->row")
    given = Axes("none", "rank")
    assert _one_row(header, axes=given).axes is given
    assert _one_row("my plugin's figures", axes=given).axes is given
    assert _one_row("my plugin's figures").axes == Axes("none", "none")


def test_axes_refuse_unknown_words():
    """An axis or direction outside the documented words is refused when built."""
    with pytest.raises(ValueError, match="'cpu'"):
        Axes("cpu", "gpu")
    with pytest.raises(ValueError, match="'->'"):
        Axes("host", "gpu", "->")
    with pytest.raises(TypeError):
        _one_row("x", axes=("host", "gpu"))
    assert Axes("host", "gpu", "both").arrow == "<->" and Axes("host", "gpu").arrow == "->"
    assert Axes("gpu", "gpu", "both").bidirectional and not Axes("gpu", "gpu").bidirectional
