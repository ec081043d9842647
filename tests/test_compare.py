"""Tests of gpubw.compare and the `gpubw compare` command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpubw.cli import main
from gpubw.compare import compare, figures_from


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
    assert figs["a"] == pytest.approx((100.0, 100.0, "GB/s"))


def test_nvbandwidth_figures_are_read_from_string_cells() -> None:
    """nvbandwidth's %g string cells become GB/s figures; N/A cells are skipped."""
    label, figs = figures_from(_nvbandwidth("host_to_device_memcpy_ce", ["54", "N/A", "56"]))
    assert label == "nvbandwidth"
    assert figs["host_to_device_memcpy_ce"][0] == pytest.approx(55.0)


def test_flags_low_high_slower_and_missing() -> None:
    """Figures outside the threshold are flagged by direction; latency only when slower."""
    base = {
        "bw_low": (100.0, 100.0, "GB/s"),
        "bw_high": (100.0, 100.0, "GB/s"),
        "bw_ok": (100.0, 100.0, "GB/s"),
        "lat_slow": (800.0, 800.0, "ns"),
        "lat_fast": (800.0, 800.0, "ns"),
        "gone": (1.0, 1.0, "GB/s"),
    }
    cand = {
        "bw_low": (96.0, 96.0, "GB/s"),
        "bw_high": (104.0, 104.0, "GB/s"),
        "bw_ok": (102.0, 102.0, "GB/s"),
        "lat_slow": (830.0, 830.0, "ns"),
        "lat_fast": (700.0, 700.0, "ns"),
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


def test_reference_ranges_accept_values_inside() -> None:
    """A reference given as a range flags only values outside the range +/- threshold."""
    ref = {"testcases": [{"key": "x", "unit": "GB/s", "figures": {"x": [48.7, 50.5]}}]}
    _, base = figures_from(ref)
    assert compare({"x": (50.5, 50.5, "GB/s")}, base, 0.0)[1] == 0
    assert compare({"x": (48.0, 48.0, "GB/s")}, base, 1.0)[1] == 1


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
