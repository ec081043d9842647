"""Tests of gpubw.tools.compare and the `gpubw compare` command."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from gpubw.cli.command import main
from gpubw.model.errors import UsageError
from gpubw.tools.compare import Cell, Side, compare_sides, side_from

GIB = 1 << 30


def _matrix(key: str, row: list[float | None], **extra: Any) -> dict[str, Any]:
    return {
        "key": key,
        "description": "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
        "unit": "bytes/s",
        "display_unit": "GB/s",
        "scale": 1e-9,
        "row_labels": ["0"],
        "column_labels": [str(i) for i in range(len(row))],
        "values": [row],
        **extra,
    }


def _gpubw(size: int | None = 1 << 29, devices: int = 0, **cells: list[float | None]) -> dict:
    """A minimal gpubw report: one Passed testcase per key, its 1xN matrix in bytes/s."""
    return {
        "simulated": False,
        "devices": [
            {"ordinal": i, "name": "NVIDIA H200", "pci_bus_id": f"0000:{0x1B + i:02x}:00.0"}
            for i in range(devices)
        ],
        "testcases": [
            {"key": key, "status": "Passed", "size_bytes": size, "matrices": [_matrix(key, row)]}
            for key, row in cells.items()
        ],
    }


def _sweep(key: str, by_size: dict[int, list[float]]) -> dict[str, Any]:
    doc = _gpubw(**{key: []})
    doc["testcases"] = [
        {"key": key, "status": "Passed", "size_bytes": s, "matrices": [_matrix(key, row)]}
        for s, row in by_size.items()
    ]
    return doc


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
            "GPU Device list": ["0: NVIDIA H200 (00000000:1b:00): (node17)"],
        }
    }


def _side(*cells: Cell) -> Side:
    return Side("x.json", "gpubw", cells)


def _cell(key: str, v: float | None, kind: str = "bandwidth", col: str = "0") -> Cell:
    unit = "ns" if kind == "latency" else "GB/s"
    return Cell(key, None, "0", col, v, v, unit, kind, "host", f"GPU {col}")


def _write(path: Path, doc: dict[str, Any]) -> str:
    path.write_text(json.dumps(doc), encoding="utf-8")
    return str(path)


def test_gpubw_cells_are_read_one_by_one_in_display_units() -> None:
    """Every cell of a gpubw matrix is its own figure (GB/s), with its two ends named."""
    side = side_from(_gpubw(a=[50e9, None, 70e9]))
    got = [(c.column, c.low, c.source, c.destination) for c in side.cells]
    assert got == [
        ("0", pytest.approx(50.0), "host", "GPU 0"),
        ("1", None, "host", "GPU 1"),
        ("2", pytest.approx(70.0), "host", "GPU 2"),
    ]


def test_nvbandwidth_cells_are_read_from_string_cells() -> None:
    """nvbandwidth's %g string cells become GB/s figures; N/A cells are None; devices kept."""
    side = side_from(_nvbandwidth("host_to_device_memcpy_ce", ["54", "N/A", "56"]))
    assert side.label == "nvbandwidth" and not side.sized
    assert [c.low for c in side.cells] == [pytest.approx(54.0), None, pytest.approx(56.0)]
    assert side.devices[0]["name"] == "NVIDIA H200"


def test_flags_by_direction_and_fail_on() -> None:
    """Cells outside the threshold are flagged by direction; --fail-on picks which fail."""
    base = _side(
        _cell("bw", 100.0, col="0"),
        _cell("bw", 100.0, col="1"),
        _cell("bw", 100.0, col="2"),
        _cell("lat", 800.0, "latency", col="0"),
        _cell("lat", 800.0, "latency", col="1"),
        _cell("gone", 1.0),
    )
    cand = _side(
        _cell("bw", 96.0, col="0"),
        _cell("bw", 104.0, col="1"),
        _cell("bw", 102.0, col="2"),
        _cell("lat", 830.0, "latency", col="0"),
        _cell("lat", 700.0, "latency", col="1"),
    )
    flags = {
        fail_on: {
            (x.matrix, x.column): (x.flag, x.fails)
            for x in compare_sides(cand, base, 3.0, fail_on)[0]
        }
        for fail_on in ("low", "high", "both")
    }
    low = flags["low"]
    assert low[("bw", "0")] == ("LOW", True)
    assert low[("bw", "1")] == ("HIGH", False)  # faster is not a regression
    assert low[("bw", "2")] == ("", False)
    assert low[("lat", "0")] == ("SLOWER", True)
    assert low[("lat", "1")] == ("FASTER", False)
    assert low[("gone", "0")] == ("MISSING", True)
    assert flags["high"][("bw", "0")] == ("LOW", False)
    assert flags["high"][("bw", "1")] == ("HIGH", True)
    assert flags["high"][("lat", "1")] == ("FASTER", True)
    assert sum(f for _, f in flags["both"].values()) == 5


def test_worst_cells_come_first() -> None:
    """Failing cells are ordered from the slowest relative to the baseline, latency included."""
    base = _side(
        *(_cell("bw", 100.0, col=str(i)) for i in range(4)), _cell("lat", 100.0, "latency")
    )
    cand = _side(
        _cell("bw", 95.0, col="0"),
        _cell("bw", 70.0, col="1"),
        _cell("bw", 100.0, col="2"),
        _cell("bw", 90.0, col="3"),
        _cell("lat", 125.0, "latency"),  # 0.8 x the speed
    )
    rows, _, _ = compare_sides(cand, base, 3.0)
    assert [(x.matrix, x.column) for x in rows[:4]] == [
        ("bw", "1"),
        ("lat", "0"),
        ("bw", "3"),
        ("bw", "0"),
    ]


def test_latency_comes_from_kind_not_the_key() -> None:
    """A matrix's kind decides lower-is-better, whatever its key says; an older report
    without kind is read by its unit; nvbandwidth's ns matrices are latency."""
    doc = _gpubw(latency_named_bandwidth=[50e9], plain=[1e-6])
    doc["testcases"][0]["matrices"][0]["kind"] = "bandwidth"
    m = doc["testcases"][1]["matrices"][0]
    m.update(unit="s", display_unit="ns", scale=1e9)  # no "kind": an older report
    cells = {c.matrix: c for c in side_from(doc).cells}
    assert cells["latency_named_bandwidth"].kind == "bandwidth"
    assert cells["plain"].kind == "latency" and cells["plain"].unit == "ns"
    nv = _nvbandwidth("host_device_latency_sm", ["800", "810"])
    nv["nvbandwidth"]["testcases"][0]["bandwidth_description"] = "latency (ns)"
    nv_cells = side_from(nv).cells
    assert {c.kind for c in nv_cells} == {"latency"}
    assert nv_cells[0].low == pytest.approx(800.0)
    slower = _side(Cell("plain", 1 << 29, "0", "0", 1100.0, 1100.0, "ns", "latency"))
    rows, _, _ = compare_sides(slower, side_from(doc), 3.0)
    plain = [x for x in rows if x.matrix == "plain"]
    assert plain[0].flag == "SLOWER" and plain[0].fails


def test_reference_ranges_apply_to_every_cell() -> None:
    """A reference range is compared with every applicable cell of the candidate's matrix;
    N/A cells (a diagonal) are not MISSING."""
    ref = {"testcases": [{"key": "x", "unit": "GB/s", "figures": {"x": [48.7, 50.5]}}]}
    base = side_from(ref)
    ok = side_from(_gpubw(x=[50.5e9, None, 48.7e9]))
    assert not [x for x in compare_sides(ok, base, 0.0)[0] if x.fails]
    slow = side_from(_gpubw(x=[50.0e9, 48.0e9]))
    failing = [x for x in compare_sides(slow, base, 1.0)[0] if x.fails]
    assert [(x.column, x.flag) for x in failing] == [("1", "LOW")]


def test_sweeps_compare_size_by_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two sweeps are compared at every common size, so a slow small size is not hidden
    behind the last size."""
    a = _write(tmp_path / "a.json", _sweep("h2d", {1 << 20: [20e9], GIB: [55e9]}))
    b = _write(tmp_path / "b.json", _sweep("h2d", {1 << 20: [30e9], GIB: [55e9]}))
    assert main(["compare", a, b]) == 3
    out = capsys.readouterr().out
    assert "1 MiB" in out and "LOW" in out
    assert main(["compare", a, b, "--size", "1GiB"]) == 0
    assert main(["compare", a, b, "--size", "1G"]) == 0
    assert main(["compare", a, b, "--size", "1"]) == 3  # a plain number is MiB, as -b


def test_sweep_against_a_report_without_sizes_needs_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sweep compared with nvbandwidth's JSON names the sizes and asks for --size, instead
    of silently taking one; --size picks it; a size the sweep lacks is a usage error."""
    a = _write(
        tmp_path / "a.json", _sweep("host_to_device_memcpy_ce", {1 << 20: [20e9], GIB: [55e9]})
    )
    b = _write(tmp_path / "nv.json", _nvbandwidth("host_to_device_memcpy_ce", ["55"]))
    assert main(["compare", a, b]) == 2
    err = capsys.readouterr().err
    assert "--size" in err and "1 MiB, 1 GiB" in err
    assert main(["compare", a, b, "--size", "1GiB"]) == 0
    assert main(["compare", a, b, "--size", "2GiB"]) == 2
    assert "no result at that size" in capsys.readouterr().err
    assert main(["compare", a, b, "--size", "lots"]) == 2
    assert "--size: invalid buffer size 'lots'" in capsys.readouterr().err


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """gpubw compare exits 0 when all agree, 3 when a cell fails (a regression, as check's
    below expectation; it was 1), 2 on bad input."""
    a = tmp_path / "a.json"
    b = _write(tmp_path / "b.json", _nvbandwidth("host_to_device_memcpy_ce", ["27.5", "82.5"]))
    _write(a, _gpubw(host_to_device_memcpy_ce=[27.5e9, 82.5e9]))
    assert main(["compare", str(a), b]) == 0
    assert "host_to_device_memcpy_ce" in capsys.readouterr().out
    assert main(["compare", str(a), b, "--threshold", "0"]) == 0
    _write(a, _gpubw(host_to_device_memcpy_ce=[27.5e9, 60e9]))
    assert main(["compare", str(a), b]) == 3
    assert main(["compare", str(tmp_path / "missing.json"), b]) == 2
    assert "cannot read report" in capsys.readouterr().err
    for bad in (["--threshold", "-1"], ["--fail-on", "sideways"]):
        assert main(["compare", str(a), b, *bad]) == 2
        assert capsys.readouterr().err


def test_json_format_and_output_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--format json lists every cell worst first with its devices; -o writes the file
    (nothing on stdout) and refuses a directory before reading anything."""
    a = _write(tmp_path / "a.json", _gpubw(devices=2, h2d=[40e9, 55e9]))
    b = _write(tmp_path / "b.json", _gpubw(devices=2, h2d=[55e9, 55e9]))
    out = tmp_path / "cmp.json"
    assert main(["compare", a, b, "--format", "json", "-o", str(out)]) == 3
    assert capsys.readouterr().out == ""
    doc = json.loads(out.read_text())
    assert doc["failed"] == 1 and doc["exit_code"] == 3 and doc["fail_on"] == "low"
    first = doc["cells"][0]
    assert first["flag"] == "LOW" and first["fails"] and first["ratio"] == pytest.approx(40 / 55)
    assert first["destination_device"] == {
        "index": 0,
        "name": "NVIDIA H200",
        "pci_bus_id": "0000:1b:00.0",
    }
    assert first["source"] == "host" and first["source_device"] is None
    assert len(doc["cells"]) == 2
    assert main(["compare", a, b, "-o", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    text = tmp_path / "cmp.txt"
    assert main(["compare", a, b, "-o", str(text)]) == 3
    assert "GPU 0: NVIDIA H200, 0000:1b:00.0" in text.read_text()


def test_one_slow_host_link_of_eight_is_flagged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Simulated h200x8, GPU 3's host link at 80 %: compared per cell with the healthy run,
    GPU 3's cells (and only they) fail with its PCI bus id, exit 3; the mean of each matrix
    (the old comparison) is within 3 % and would have passed."""
    link = {
        "h2d": {"ce": 55.5e9, "sm": 51.4e9},
        "d2h": {"ce": 55.3e9, "sm": 52.6e9},
        "bidirectional_factor": 0.9,
    }
    slow = {
        "h2d": {"ce": 0.8 * 55.5e9, "sm": 0.8 * 51.4e9},
        "d2h": {"ce": 0.8 * 55.3e9, "sm": 0.8 * 52.6e9},
        "bidirectional_factor": 0.9,
    }
    system = tmp_path / "slow3.json"
    system.write_text(
        json.dumps(
            {
                "name": "h200x8-slow3",
                "base": "h200x8",
                "host_links": [link] * 3 + [slow] + [link] * 4,
            }
        )
    )
    tests = ["-t", "host_to_device_memcpy_ce", "-t", "device_to_host_memcpy_ce"]
    healthy, degraded = tmp_path / "healthy.json", tmp_path / "degraded.json"
    assert main(["--simulate", "h200x8", *tests, "-j", "-o", str(healthy)]) == 0
    assert main(["--simulate", str(system), *tests, "-j", "-o", str(degraded)]) == 0
    capsys.readouterr()

    assert main(["compare", str(degraded), str(healthy), "--format", "json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    failing = [c for c in doc["cells"] if c["fails"]]
    assert {(c["matrix"], c["source"], c["destination"]) for c in failing} == {
        ("host_to_device_memcpy_ce", "host", "GPU 3"),
        ("device_to_host_memcpy_ce", "GPU 3", "host"),
    }
    assert doc["cells"][:2] == failing  # worst first
    bus = json.loads(degraded.read_text())["devices"][3]["pci_bus_id"]
    assert [c["ratio"] for c in failing] == [pytest.approx(0.8, abs=0.01)] * 2
    assert all(
        bus in (c["destination_device"] or c["source_device"])["pci_bus_id"] for c in failing
    )

    assert main(["compare", str(degraded), str(healthy)]) == 3
    text = capsys.readouterr().out
    assert f"GPU 3: NVIDIA H200, {bus}" in text and "host -> GPU 3" in text

    def means(path: Path) -> dict[str, float]:
        rep = json.loads(path.read_text(encoding="utf-8"))
        return {
            m["key"]: statistics.fmean(v for row in m["values"] for v in row if v is not None)
            for t in rep["testcases"]
            for m in t["matrices"]
        }

    old, new = means(healthy), means(degraded)
    assert all(abs(new[k] / old[k] - 1) < 0.03 for k in old)  # the mean hides GPU 3


def test_cells_are_named_the_way_their_bytes_move(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A slow GPU 3 is "host <-> GPU 3" in a bidirectional host matrix (once named
    "host -> GPU 3") and "GPU 3 -> host" in a device-to-host one, in both lists."""
    headers = {
        "device_to_host_bidirectional_memcpy_ce": "memcpy CE CPU(row) <-> GPU(column) bandwidth "
        "(GB/s)",
        "device_to_host_memcpy_ce": "memcpy CE CPU(row) <- GPU(column) bandwidth (GB/s)",
    }

    def doc(row: list[float | None]) -> dict[str, Any]:
        d = _gpubw(devices=4, **dict.fromkeys(headers, row))
        for t in d["testcases"]:
            t["matrices"][0]["description"] = headers[t["key"]]
        return d

    cand = _write(tmp_path / "c.json", doc([55e9, 55e9, 55e9, 40e9]))
    assert main(["compare", cand, _write(tmp_path / "b.json", doc([55e9] * 4))]) == 3
    out = capsys.readouterr().out
    # each twice: the failing cell, then its matrix's worst cell
    assert out.count("host <-> GPU 3") == 2 and out.count("GPU 3 -> host") == 2
    assert "host -> GPU 3" not in out


def test_bad_report_shapes_are_usage_errors(tmp_path: Path) -> None:
    """A file of the wrong shape is a UsageError naming it, not a traceback."""
    from gpubw.tools.compare import load_side

    for doc in (
        [1, 2],
        {"testcases": 3},
        {"testcases": [{"status": "Passed", "matrices": [{"key": "k", "values": 5}]}]},
    ):
        path = _write(tmp_path / "bad.json", doc)  # type: ignore[arg-type]
        with pytest.raises(UsageError, match=r"bad\.json"):
            load_side(path)


def test_nothing_to_compare_and_reference_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A baseline without a single figure is a usage error, not a silent pass; a reference
    file can only be the baseline; -h describes the options."""
    a = _write(tmp_path / "a.json", _gpubw(h2d=[55e9]))
    empty = _write(tmp_path / "empty.json", {"simulated": False, "testcases": []})
    assert main(["compare", a, empty]) == 2
    assert "holds no figure to compare" in capsys.readouterr().err
    ref = _write(
        tmp_path / "ref.json",
        {"testcases": [{"key": "h2d", "unit": "GB/s", "figures": {"h2d": [55.0, 56.0]}}]},
    )
    assert main(["compare", a, ref]) == 0
    assert main(["compare", ref, a]) == 2
    assert "can only be the baseline" in capsys.readouterr().err
    assert main(["compare", "-h"]) == 0
    usage = capsys.readouterr().out
    assert "--fail-on {low,high,both}" in usage and "--size" in usage and "--format" in usage


def test_a_size_the_candidate_lacks_is_missing() -> None:
    """Sweeps: a baseline size the candidate did not run is MISSING (it fails); a size only
    the candidate ran has no counterpart and is counted apart."""
    base = side_from(_sweep("h2d", {1 << 20: [30e9], GIB: [55e9]}))
    cand = side_from(_sweep("h2d", {GIB: [55e9], 2 * GIB: [56e9]}))
    rows, extra, warnings = compare_sides(cand, base, 3.0)
    assert [(x.size, x.flag, x.fails) for x in rows] == [
        (1 << 20, "MISSING", True),
        (GIB, "", False),
    ]
    assert [(c.size, c.low) for c in extra] == [(2 * GIB, pytest.approx(56.0))]
    assert warnings == []


# -- input robustness (issue 13 item 5, the same checks as robust-input's) -------------------
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
        ('{"testcases": [{"status": "Passed", "matrices": [{"key": "a", "values": [[true]]}]}]}',
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
    """A report of the wrong shape, an empty one or a deeply nested one, on either side: one
    line, exit 2."""
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    good = _write(tmp_path / "good.json", _gpubw(host_to_device_memcpy_ce=[27.5e9]))
    for argv in ([str(bad), good], [good, str(bad)]):
        assert main(["compare", *argv]) == 2
        assert words in _one_error_line(capsys)


@pytest.mark.parametrize("value", ["NaN", "0.0", "Infinity"])
def test_nan_zero_and_infinite_figures_are_flagged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    """A NaN, infinite or zero cell on either side is INVALID and fails (exit 3, a failed
    cell), whatever --fail-on says."""
    good = _write(tmp_path / "good.json", _gpubw(host_to_device_memcpy_ce=[27.5e9]))
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(_gpubw(host_to_device_memcpy_ce=[1.0])).replace("[[1.0]]", f"[[{value}]]")
    )
    assert main(["compare", str(bad), good]) == 3
    assert "INVALID (candidate is NaN, infinite or 0)" in capsys.readouterr().out
    assert main(["compare", good, str(bad), "--fail-on", "high"]) == 3
    assert "INVALID (baseline is NaN, infinite or 0)" in capsys.readouterr().out
    assert main(["compare", str(bad), good, "--format", "json"]) == 3
    cell = json.loads(capsys.readouterr().out)["cells"][0]
    assert cell["flag"] == "INVALID" and cell["ratio"] is None


@pytest.mark.parametrize("value", ["nan", "inf", "NaN"])
def test_non_finite_threshold_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    """--threshold nan/inf: a usage error (nan would flag nothing, whatever the figures)."""
    good = _write(tmp_path / "good.json", _gpubw(host_to_device_memcpy_ce=[27.5e9]))
    assert main(["compare", good, good, "--threshold", value]) == 2
    assert f"'{value}' must be a finite number" in capsys.readouterr().err


def test_comparing_nothing_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two reports without a matrix in common: exit 2, not '0 failed'."""
    a = _write(tmp_path / "a.json", _gpubw(host_to_device_memcpy_ce=[27.5e9]))
    b = _write(tmp_path / "b.json", _gpubw(device_local_copy=[1000e9]))
    assert main(["compare", a, b]) == 2
    assert "have no matrix in common: nothing to compare" in _one_error_line(capsys)


@pytest.mark.parametrize(
    ("argv", "words"),
    [([], "the following arguments are required"), (["a", "b", "--threshold", "x"], "'x'")],
)
def test_bad_arguments_are_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], words: str
) -> None:
    """Missing files or a bad option value: one error line, exit 2."""
    assert main(["compare", *argv]) == 2
    line = _one_error_line(capsys)
    assert line.startswith("gpubw: error: gpubw compare: ") and words in line


def test_names_from_the_files_cannot_drive_the_terminal(tmp_path, capsys):
    """A device name with an escape sequence and a line break (from a report file) is shown
    escaped in compare's text, as in gpubw's other text outputs."""
    hostile = "NVIDIA H200\x1b[2J\r\nFAKE: all passed"
    cand = _gpubw(devices=2, d2h=[50e9, 40e9])
    base = _gpubw(devices=2, d2h=[50e9, 50e9])
    for doc in (cand, base):
        doc["devices"][1]["name"] = hostile
    code = main(["compare", _write(tmp_path / "c.json", cand), _write(tmp_path / "b.json", base)])
    out = capsys.readouterr().out
    assert code == 3
    assert "\x1b" not in out and "\r" not in out
    assert "NVIDIA H200\\x1b[2J\\r\\nFAKE: all passed" in out
