"""Tests of gpubw.compare and the `gpubw compare` command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpubw.cli import main
from gpubw.compare import Figure, compare, figures_from


def _gpubw(**cells: float | None) -> dict[str, Any]:
    """A minimal gpubw report: one Passed testcase per key, its 1x2 matrix in bytes/s."""
    return {
        "simulated": False,
        "testcases": [
            {
                "key": key,
                "status": "Passed",
                "size_bytes": 1 << 29,
                "matrices": [
                    {
                        "key": key,
                        "unit": "bytes/s",
                        "display_unit": "GB/s",
                        "scale": 1e-9,
                        "values": [[value, None if value is None else value * 3]],
                    }
                ],
            }
            for key, value in cells.items()
        ],
    }


def _nvbandwidth(name: str, cells: list[str]) -> dict[str, Any]:
    """A minimal nvbandwidth -j document with one testcase."""
    return {
        "nvbandwidth": {
            "testcases": [
                {
                    "name": name,
                    "status": "Passed",
                    "bandwidth_description": "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
                    "bandwidth_matrix": [cells],
                    "sum": 0.0,
                }
            ],
            "version": "v0.8",
        }
    }


def test_gpubw_figure_is_the_mean_of_applicable_cells() -> None:
    """A gpubw matrix's figure is the mean of its non-null cells, in display units."""
    _, figs = figures_from(_gpubw(a=50e9))
    assert figs["a"] == Figure(pytest.approx(100.0), pytest.approx(100.0), "GB/s", "bandwidth")


def test_nvbandwidth_figures_are_read_from_string_cells() -> None:
    """nvbandwidth's %g string cells become GB/s figures; N/A cells are skipped."""
    label, figs = figures_from(_nvbandwidth("host_to_device_memcpy_ce", ["54", "N/A", "56"]))
    assert label == "nvbandwidth"
    assert figs["host_to_device_memcpy_ce"][0] == pytest.approx(55.0)


def test_flags_low_high_slower_and_missing() -> None:
    """Figures outside the threshold are flagged by direction; latency only when slower."""
    base = {
        "bw_low": Figure(100.0, 100.0, "GB/s"),
        "bw_high": Figure(100.0, 100.0, "GB/s"),
        "bw_ok": Figure(100.0, 100.0, "GB/s"),
        "lat_slow": Figure(800.0, 800.0, "ns", "latency"),
        "lat_fast": Figure(800.0, 800.0, "ns", "latency"),
        "gone": Figure(1.0, 1.0, "GB/s"),
    }
    cand = {
        "bw_low": Figure(96.0, 96.0, "GB/s"),
        "bw_high": Figure(104.0, 104.0, "GB/s"),
        "bw_ok": Figure(102.0, 102.0, "GB/s"),
        "lat_slow": Figure(830.0, 830.0, "ns", "latency"),
        "lat_fast": Figure(700.0, 700.0, "ns", "latency"),
    }
    lines, flagged = compare(cand, base, 3.0)
    flags = {line.split()[0]: line.split()[-1] for line in lines[1:]}
    assert flags["bw_low"] == "LOW"
    assert flags["bw_high"] == "HIGH"
    assert flags["lat_slow"] == "SLOWER"
    assert flags["gone"] == "MISSING"
    assert flags["bw_ok"] not in ("LOW", "HIGH")
    assert flags["lat_fast"] not in ("SLOWER",)
    assert flagged == 4


def test_latency_comes_from_kind_not_the_key() -> None:
    """A matrix's kind decides lower-is-better, whatever its key says; an older report
    without kind is read by its unit; nvbandwidth's ns matrices are latency."""
    doc = _gpubw(latency_named_bandwidth=50e9, plain=1e-6)
    doc["testcases"][0]["matrices"][0]["kind"] = "bandwidth"
    m = doc["testcases"][1]["matrices"][0]
    m.update(unit="s", display_unit="ns", scale=1e9)  # no "kind": an older report
    _, figs = figures_from(doc)
    assert figs["latency_named_bandwidth"].kind == "bandwidth"
    assert figs["plain"].kind == "latency" and figs["plain"].unit == "ns"
    nv = _nvbandwidth("host_device_latency_sm", ["800", "810"])
    nv["nvbandwidth"]["testcases"][0]["bandwidth_description"] = "latency (ns)"
    _, nv_figs = figures_from(nv)
    assert nv_figs["host_device_latency_sm"].kind == "latency"
    assert nv_figs["host_device_latency_sm"].low == pytest.approx(805.0)
    base = {"plain": figs["plain"]}  # 2000 ns: the mean of 1 and 3 us
    lines, flagged = compare({"plain": Figure(2100.0, 2100.0, "ns", "latency")}, base, 3.0)
    assert flagged == 1 and lines[1].split()[-1] == "SLOWER"


def test_reference_ranges_accept_values_inside() -> None:
    """A reference given as a range flags only values outside the range +/- threshold."""
    ref = {"testcases": [{"key": "x", "unit": "GB/s", "figures": {"x": [48.7, 50.5]}}]}
    _, base = figures_from(ref)
    assert compare({"x": Figure(50.5, 50.5, "GB/s")}, base, 0.0)[1] == 0
    assert compare({"x": Figure(48.0, 48.0, "GB/s")}, base, 1.0)[1] == 1


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """gpubw compare exits 0 when all agree, 1 when a figure is flagged, 2 on a bad file."""
    a = tmp_path / "a.json"
    b = tmp_path / "b.json"
    a.write_text(json.dumps(_gpubw(host_to_device_memcpy_ce=27.5e9)))
    b.write_text(json.dumps(_nvbandwidth("host_to_device_memcpy_ce", ["27.5", "82.5"])))
    assert main(["compare", str(a), str(b)]) == 0
    assert "host_to_device_memcpy_ce" in capsys.readouterr().out
    assert main(["compare", str(a), str(b), "--threshold", "0"]) == 0
    a.write_text(json.dumps(_gpubw(host_to_device_memcpy_ce=20e9)))
    assert main(["compare", str(a), str(b)]) == 1
    assert main(["compare", str(tmp_path / "missing.json"), str(b)]) == 2
    assert "cannot read report" in capsys.readouterr().err


# -- input robustness (issue 13 item 5) ----------------------------------------------------
def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    assert "Traceback" not in err and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0], err
    return lines[0]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"testcases": "x"}', "'testcases' must be a list of objects"),
        ('{"testcases": [1, 2]}', "'testcases' must be a list of objects"),
        ('{"testcases": [{"status": "Passed", "matrices": 5}]}', "'matrices' must be a list"),
        ('{"testcases": [{"status": "Passed", "matrices": [{"key": "a", "values": "x"}]}]}',
         "values must be a list of rows"),
        ('{"testcases": [{"status": "Passed", "matrices": [{"key": "a", "values": [["1"]]}]}]}',
         "not a number or null"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"testcases": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        ("{}", "holds no figure to compare"),
        ('{"testcases": []}', "holds no figure to compare"),
    ],
)  # fmt: skip
def test_bad_reports_are_one_line_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, words: str
) -> None:
    """A report of the wrong shape, an empty one or a deeply nested one: one line, exit 2
    (they were AttributeError / RecursionError tracebacks, or an empty comparison that
    passed)."""
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_gpubw(host_to_device_memcpy_ce=27.5e9)))
    for argv in ([str(bad), str(good)], [str(good), str(bad)]):
        assert main(["compare", *argv]) == 2
        assert words in _one_error_line(capsys)


@pytest.mark.parametrize("value", ["NaN", "0.0", "Infinity"])
def test_nan_zero_and_infinite_figures_are_flagged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    """A NaN, infinite or zero figure on either side is flagged INVALID, exit 1 (a NaN
    candidate once compared as 'within the threshold')."""
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_gpubw(host_to_device_memcpy_ce=27.5e9)))
    bad = tmp_path / "bad.json"
    doc = json.dumps(_gpubw(host_to_device_memcpy_ce=1.0)).replace("[[1.0, 3.0]]", f"[[{value}]]")
    bad.write_text(doc)
    assert main(["compare", str(bad), str(good)]) == 1
    assert "INVALID (candidate is NaN, infinite or 0)" in capsys.readouterr().out
    assert main(["compare", str(good), str(bad)]) == 1
    assert "INVALID (baseline is NaN, infinite or 0)" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["nan", "inf", "NaN"])
def test_non_finite_threshold_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    """--threshold nan/inf: a usage error (nan once flagged nothing, whatever the figures)."""
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_gpubw(host_to_device_memcpy_ce=27.5e9)))
    assert main(["compare", str(good), str(good), "--threshold", value]) == 2
    assert f"'{value}' must be a finite number" in capsys.readouterr().err


def test_comparing_nothing_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two reports without a matrix in common: exit 2, not '0 outside'."""
    a = tmp_path / "a.json"
    a.write_text(json.dumps(_gpubw(host_to_device_memcpy_ce=27.5e9)))
    b = tmp_path / "b.json"
    b.write_text(json.dumps(_gpubw(device_local_copy=1000e9)))
    assert main(["compare", str(a), str(b)]) == 2
    assert "have no matrix in common: nothing to compare" in _one_error_line(capsys)


@pytest.mark.parametrize(
    ("argv", "words"),
    [([], "the following arguments are required"), (["a", "b", "--threshold", "x"], "'x'")],
)
def test_bad_arguments_are_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], words: str
) -> None:
    """Missing files or a bad option value: one error line, exit 2 (was usage + error)."""
    assert main(["compare", *argv]) == 2
    line = _one_error_line(capsys)
    assert line.startswith("gpubw: error: gpubw compare: ") and words in line
