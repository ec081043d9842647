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
from gpubw.errors import UsageError
from gpubw.registry import Writers, writer
from gpubw.report_io import dumps, report_from_dict
from gpubw.results import BANDWIDTH, Matrix, Status, TestcaseResult
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
