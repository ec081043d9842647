"""Text, CSV and writer-registry tests, with golden files for the text layout."""

from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path

import attrs
import pytest

from _writer_reports import (
    bidirectional,
    full_report,
    latency,
    n_by_n,
    one_by_n,
    passed,
    report,
    sweep_results,
)
from gpubw.model.errors import UsageError
from gpubw.model.report_io import dumps, report_from_dict
from gpubw.model.results import BANDWIDTH, Axes, Matrix, Status, TestcaseResult
from gpubw.runner.writer_registry import Writers, writer
from gpubw.writers.csv import CsvWriter
from gpubw.writers.text import TextWriter, matrix_lines

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("GPUBW_UPDATE_GOLDEN") == "1"


def render(rep, **options) -> str:
    buf = io.StringIO()
    TextWriter(**options).write(rep, buf)
    return buf.getvalue()


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}; run with GPUBW_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name} differs from the golden file"


def test_text_golden_full() -> None:
    """1×N, N×N with N/A, 3-matrix, latency, waived, error and not-found match the golden."""
    check_golden("text_full.txt", render(full_report()))


def test_text_golden_verbose() -> None:
    """Verbose adds sample lines and MIN/MAX/AVG, as in the golden file."""
    check_golden("text_full_verbose.txt", render(full_report(verbose=True), verbose=True))


def test_text_golden_sweep_simulated() -> None:
    """A size sweep prints its size table; a simulated report is labelled at top and end."""
    check_golden("text_sweep_simulated.txt", render(report(sweep_results(), simulated=True)))


def test_text_nvbandwidth_matrix_layout() -> None:
    """Matrix lines match nvbandwidth's §7.1 example byte for byte."""
    lines = matrix_lines(n_by_n())
    assert lines[:6] == [
        "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)",
        "           0         1",
        " 0       N/A    389.44",
        " 1    388.91       N/A",
        "",
        "SUM device_to_device_memcpy_read_ce 778.35",
    ]
    assert lines[-1] == ""


def test_text_wide_row_labels() -> None:
    """Row labels wider than 2 widen the label column (bisect-style labels)."""
    m = Matrix(
        key="multinode_bisect_write_ce",
        description="Bisect benchmarking, simultaneous write CE BW",
        unit=BANDWIDTH,
        row_labels=["0->2", "1->3"],
        column_labels=["0"],
        values=[[1e9], [2e9]],
    )
    assert matrix_lines(m)[1:4] == [" " * 13 + "0", "0->2      1.00", "1->3      2.00"]


def test_text_latency_in_ns() -> None:
    """Latency matrices print in ns (seconds × 1e9)."""
    text = "\n".join(matrix_lines(latency()))
    assert "   830.12" in text
    assert "SUM device_to_device_latency_sm 1659.62" in text


def test_text_perf_formatter() -> None:
    """--perfFormatter replaces SUM with &&&& PERF lines (+GB/s, -ns)."""
    text = render(full_report(), perf_formatter=True)
    assert "&&&& PERF host_to_device_memcpy_ce 109.89 +GB/s" in text
    assert "&&&& PERF device_to_device_latency_sm 1659.62 -ns" in text
    assert "\nSUM " not in text


def test_text_waived_names_key_and_reason() -> None:
    """A waived testcase keeps nvbandwidth's prefix and adds the key and reason."""
    text = render(full_report())
    assert (
        "Waived: device_to_device_memcpy_write_ce: needs 2 devices with peer access; "
        "none can access another\n" in text
    )
    assert "Running device_to_device_memcpy_write_ce." not in text


def test_text_states_bytes_counted() -> None:
    """Every matrix is followed by a line saying unit, statistic and how bytes were counted."""
    text = render(report([passed("host_to_device_memcpy_ce", [one_by_n()], 0)]))
    assert (
        "(unit GB/s; statistic median; initiator CE; bytes counted: once per copy "
        "(size x loops))" in text
    )


def test_text_simulated_marked_top_and_bottom() -> None:
    """Simulated text output starts and ends with the SIMULATED banner."""
    lines = render(full_report(simulated=True)).splitlines()
    banner = "SIMULATED SYSTEM dgx-h200-2: these figures are modelled, not measured"
    assert lines[0] == banner
    assert lines[-1] == banner


def test_text_not_simulated_has_no_banner() -> None:
    """A real-hardware report never says SIMULATED."""
    assert "SIMULATED" not in render(full_report())


def test_text_run_error_skips_note() -> None:
    """A run-level error is printed and, as in nvbandwidth, the final NOTE is not."""
    import attrs

    rep = attrs.evolve(report([]), error="no NVIDIA driver found")
    text = render(rep)
    assert "ERROR: no NVIDIA driver found" in text
    assert "NOTE:" not in text


def test_text_nan_average() -> None:
    """AVG of a matrix with no positive cell prints nan, as printf does."""
    m = Matrix("k", "h", BANDWIDTH, ["0"], ["0"], [[None]])
    assert "AVG k nan" in matrix_lines(m, verbose=True)


def test_text_from_json_round_trip() -> None:
    """A report rebuilt from its JSON prints the same text."""
    import json

    rep = full_report(verbose=True)
    again = report_from_dict(json.loads(dumps(rep)))
    assert again.run_options == rep.run_options
    assert render(again, verbose=True) == render(rep, verbose=True)


def test_csv_long_format() -> None:
    """CSV has one row per cell, empty N/A cells, and the simulated flag on every row."""
    buf = io.StringIO()
    CsvWriter().write(full_report(simulated=True), buf)
    rows = list(csv.DictReader(io.StringIO(buf.getvalue())))
    assert all(r["simulated"] == "true" for r in rows)
    d2d = [r for r in rows if r["matrix"] == "device_to_device_memcpy_read_ce"]
    assert len(d2d) == 4
    assert d2d[0]["value"] == ""
    assert math.isclose(float(d2d[1]["display_value"]), 389.44)
    assert d2d[1]["display_unit"] == "GB/s"
    waived = [r for r in rows if r["status"] == "Waived"]
    assert waived and waived[0]["matrix"] == ""
    assert len([r for r in rows if r["key"].startswith("device_to_device_bidir")]) == 12


def test_registry_lists_builtin_writers() -> None:
    """text, json and csv are registered in gpubw.writers and load by name."""
    assert {"text", "json", "csv"} <= set(Writers.discover().names)
    assert writer("text") is TextWriter
    with pytest.raises(UsageError, match="unknown output format"):
        writer("nope")


def test_error_with_partial_results() -> None:
    """An Error testcase still prints what it measured, then the error."""
    t = TestcaseResult(
        key="device_to_device_bidirectional_memcpy_read_ce",
        status=Status.ERROR,
        matrices=bidirectional()[:1],
        message="verification failed",
    )
    text = render(report([t]))
    assert text.index("Running device_to") < text.index("SUM ") < text.index("ERROR: verif")


def test_text_sweep_states_sizes_exactly() -> None:
    """A size that is not a whole binary unit (-b 1GB) is printed exactly, not rounded."""
    results = sweep_results()
    odd = attrs.evolve(results[-1], size=10**9)
    text = render(report([*results[:-1], odd]))
    assert "Buffer size: 1000000000 B" in text
    assert "954 MiB" not in text


def test_bandwidth_notes_are_shown_in_gb_per_s() -> None:
    """A note holding a bandwidth (bytes/s) is shown in GB/s, as the table around it."""
    from gpubw.writers.text import _note_text

    assert _note_text("nominal_memory_bandwidth", (4.8143e12, 320e9)) == (
        "nominal_memory_bandwidth=[4814,320] GB/s"
    )
    assert _note_text("nominal_memory_bandwidth", 4.8143e12) == "nominal_memory_bandwidth=4814 GB/s"
    assert _note_text("percent_of_nominal", 82.25) == "percent_of_nominal=82.25"


# -- results as they happen (begin / testcase / end) ------------------------------------------
def streamed(w, rep) -> list[str]:
    """What ``w`` writes at begin, after each testcase and at end (the run's order)."""
    buf, pieces = io.StringIO(), []
    w.begin(attrs.evolve(rep, testcases=()), buf)
    pieces.append(buf.getvalue())
    for t in rep.testcases:
        w.testcase(t, buf)
        pieces.append(buf.getvalue()[sum(map(len, pieces)) :])
    w.end(rep, buf)
    pieces.append(buf.getvalue()[sum(map(len, pieces)) :])
    return pieces


def swept_report():
    from gpubw import RunOptions

    sizes = [16 * 1 << 20, 256 * 1 << 20, 1024 * 1 << 20]
    return attrs.evolve(
        report(sweep_results(), simulated=True), run_options=RunOptions(buffer_sizes=sizes)
    )


@pytest.mark.parametrize(
    ("rep", "flags"),
    [
        (full_report(), {}),
        (full_report(verbose=True), {"verbose": True}),
        (full_report(simulated=True), {"perf_formatter": True}),
        (swept_report(), {}),
        (attrs.evolve(full_report(), signal="SIGINT"), {}),
    ],
    ids=["full", "verbose", "perf", "sweep", "interrupted"],
)
def test_text_streamed_equals_whole_report(rep, flags) -> None:
    """Text written testcase by testcase is byte for byte the whole-report text."""
    pieces = streamed(TextWriter(**flags), rep)
    assert "".join(pieces) == render(rep, **flags)


def test_text_streams_each_testcase_when_it_finishes() -> None:
    """The header comes at begin, each testcase's lines after it, the NOTE only at end."""
    rep = full_report()
    pieces = streamed(TextWriter(), rep)
    assert pieces[0].startswith("gpubw Version: 0.1.0\n") and "Device 1: NVIDIA H200" in pieces[0]
    assert "Running" not in pieces[0]
    assert pieces[1].startswith("Running host_to_device_memcpy_ce.\n") and "SUM " in pieces[1]
    assert pieces[5] == "Waived: device_to_device_memcpy_write_ce: " + (
        "needs 2 devices with peer access; none can access another\n"
    )
    assert all("NOTE:" not in p for p in pieces[:-1]) and pieces[-1].startswith("NOTE:")


def test_text_late_warning_is_printed_at_the_end() -> None:
    """A warning that appears after the header was printed (e.g. freeing failed) is not lost."""
    rep = full_report()
    w, buf = TextWriter(), io.StringIO()
    w.begin(attrs.evolve(rep, testcases=()), buf)
    for t in rep.testcases:
        w.testcase(t, buf)
    w.end(attrs.evolve(rep, warnings=("freeing the system's resources failed: boom",)), buf)
    tail = buf.getvalue().split("ERROR: Testcase nope not found!")[-1]
    assert "freeing the system's resources failed: boom\n\nNOTE:" in tail


def test_text_end_without_begin_writes_the_whole_report() -> None:
    """A run that never started a testcase (could not start) is written whole by end()."""
    rep = attrs.evolve(report([]), error="could not start: no devices")
    buf = io.StringIO()
    TextWriter().end(rep, buf)
    assert buf.getvalue() == render(rep)


def test_the_two_writer_protocols() -> None:
    """A writer with write() alone is a ReportWriter, not a StreamingWriter; text and CSV are
    both; write_whole uses write() where there is one, else begin/testcase/end."""
    from gpubw.writers import ReportWriter, StreamingWriter, Writer, write_whole

    class Whole(Writer):
        def write(self, rep, stream):
            stream.write(f"{len(rep.testcases)} testcases\n")

    class Rows:
        def begin(self, header, stream):
            stream.write("begin\n")

        def testcase(self, result, stream):
            stream.write(f"{result.key}\n")

        def end(self, report, stream):
            stream.write("end\n")

    rep = full_report()
    assert isinstance(Whole(), ReportWriter) and not isinstance(Whole(), StreamingWriter)
    assert all(isinstance(w, (ReportWriter, StreamingWriter)) for w in (TextWriter(), CsvWriter()))
    assert not isinstance(Rows(), ReportWriter) and isinstance(Rows(), StreamingWriter)
    buf = io.StringIO()
    write_whole(Rows(), rep, buf)
    assert buf.getvalue() == "".join(["begin\n", *(f"{t.key}\n" for t in rep.testcases), "end\n"])
    buf = io.StringIO()
    write_whole(Whole(), rep, buf)
    assert buf.getvalue() == f"{len(rep.testcases)} testcases\n"


def test_csv_streamed_equals_whole_report() -> None:
    """CSV rows written as testcases finish equal the whole-report CSV."""
    rep = full_report(verbose=True)
    buf = io.StringIO()
    CsvWriter().write(rep, buf)
    pieces = streamed(CsvWriter(), rep)
    assert "".join(pieces) == buf.getvalue()
    assert pieces[0].count("\n") == 1  # the header row, at begin


def test_csv_fleet_columns() -> None:
    """CSV rows name the host, the run's start, the cell's devices, and stdev/CV of samples."""
    buf = io.StringIO()
    CsvWriter().write(full_report(verbose=True), buf)
    rows = list(csv.DictReader(io.StringIO(buf.getvalue())))
    assert {r["host"] for r in rows} == {"gpu-node-17"}
    assert {r["timestamp"] for r in rows} == {"2026-11-29T10:00:00+00:00"}
    h2d = [r for r in rows if r["matrix"] == "host_to_device_memcpy_ce"]
    assert [(r["row_device"], r["column_device"]) for r in h2d] == [("", "NVIDIA H200")] * 2
    assert [r["column_uuid"][:12] for r in h2d] == ["GPU-00000000", "GPU-00000001"]
    # samples 54.80, 54.8731, 54.90 GB/s: stdev 0.0517... GB/s
    xs = [54.80e9, 54.8731e9, 54.90e9]
    mean = sum(xs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / 2)
    assert math.isclose(float(h2d[0]["stdev"]), sd) and math.isclose(float(h2d[0]["cv"]), sd / mean)
    d2d = [r for r in rows if r["matrix"] == "device_to_device_memcpy_read_ce"]
    assert (d2d[1]["row_device"], d2d[1]["column_uuid"][:12]) == ("NVIDIA H200", "GPU-00000001")
    assert d2d[1]["stdev"] == "" and d2d[1]["cv"] == ""  # no samples kept
    waived = next(r for r in rows if r["status"] == "Waived")
    assert waived["host"] == "gpu-node-17" and waived["row_device"] == ""


def test_cell_devices_reads_the_axes() -> None:
    """A cell's row/column devices are those of its GPU or rank axes (a matrix without axes:
    its header's, GPU(row)/GPU(column)); the host, no end and pair labels: None."""
    from gpubw.writers import cell_devices

    devs = full_report().devices
    assert cell_devices(one_by_n(), 0, 1, devs) == (None, devs[1])
    assert cell_devices(n_by_n(), 1, 0, devs) == (devs[1], devs[0])
    m = Matrix("b", "Bisect GPU(row) -> GPU(column)", BANDWIDTH, ["0->1"], ["7"], [[1.0]])
    assert cell_devices(m, 0, 0, devs) == (None, None)
    ranks = attrs.evolve(n_by_n(), description="ranks", axes=Axes("rank", "rank"))
    assert cell_devices(ranks, 1, 0, devs) == (devs[1], devs[0])
    to_host = attrs.evolve(n_by_n(), axes=Axes("gpu", "host"))
    assert cell_devices(to_host, 1, 0, devs) == (devs[1], None)
    local = attrs.evolve(one_by_n(), axes=Axes("none", "gpu"))
    assert cell_devices(local, 0, 1, devs) == (None, devs[1])


@pytest.mark.parametrize(
    ("axes", "where"),
    [
        (None, "Host -> Device 1"),
        (("host", "gpu", "column->row"), "Device 1 -> Host"),
        (("host", "gpu", "both"), "Host <-> Device 1"),
        (("none", "gpu"), "Device 1"),
        (("none", "none"), "row 0, column 1"),
    ],
)
def test_verbose_samples_name_the_cell_by_its_axes(axes: tuple | None, where: str) -> None:
    """-v names each sample's cell from the matrix's axes, whatever its header says."""
    from gpubw.writers.text import sample_lines

    m = one_by_n(samples=True)
    if axes is not None:
        m = attrs.evolve(m, axes=Axes(*axes))
    assert sample_lines(m)[3] == f"\tSample 0: {where}: 55.00 GB/s"


def test_text_says_the_size_of_a_failed_sweep_step_streamed_or_whole() -> None:
    """In a run at several sizes every sized testcase says its size, also when only one size
    of it passed; streamed and whole text agree."""
    from gpubw import RunOptions

    ok, failed = (
        sweep_results()[0],
        attrs.evolve(
            sweep_results()[1], status=Status.ERROR, matrices=(), message="verification failed"
        ),
    )
    rep = attrs.evolve(
        report([ok, failed]), run_options=RunOptions(buffer_sizes=[ok.size, failed.size])
    )
    text = render(rep)
    assert "Running device_local_copy.\nBuffer size: 16 MiB\n" in text
    assert "Running device_local_copy.\nBuffer size: 256 MiB\nERROR: verification failed" in text
    assert "Size sweep" not in text  # one Passed size is no size table
    assert "".join(streamed(TextWriter(), rep)) == text
