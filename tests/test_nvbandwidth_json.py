"""Reading nvbandwidth's own -j output (spec §7.2) into gpubw's report-like structure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpubw.model import nvbandwidth_json as nvj
from gpubw.model.errors import UsageError

# The spec's §7.2 example, with TABs as nvbandwidth writes them.
SPEC_EXAMPLE = """{
\t"nvbandwidth" : \n\t{
\t\t"CUDA Runtime Version" : 12080,
\t\t"Driver Version" : "570.124.06",
\t\t"GPU Device list" : \n\t\t[
\t\t\t"0: NVIDIA H200 (00000000:1b:00): (gpu-node-17)",
\t\t\t"1: NVIDIA H200 (00000000:43:00): (gpu-node-17)"
\t\t],
\t\t"git_version" : "v0.8",
\t\t"testcases" : \n\t\t[
\t\t\t{
\t\t\t\t"bandwidth_description" : "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
\t\t\t\t"bandwidth_matrix" : \n\t\t\t\t[
\t\t\t\t\t[
\t\t\t\t\t\t"54.8731",
\t\t\t\t\t\t"55.0212"
\t\t\t\t\t]
\t\t\t\t],
\t\t\t\t"name" : "host_to_device_memcpy_ce",
\t\t\t\t"status" : "Passed",
\t\t\t\t"sum" : 109.894303644
\t\t\t},
\t\t\t{
\t\t\t\t"name" : "device_to_device_memcpy_read_ce",
\t\t\t\t"status" : "Waived"
\t\t\t},
\t\t\t{
\t\t\t\t"name" : "bogus",
\t\t\t\t"status" : "ERROR"
\t\t\t}
\t\t],
\t\t"version" : "v0.8"
\t}
}

"""


def _doc(testcases: list[dict], **extra: object) -> dict:
    return {"nvbandwidth": {"version": "v0.8", "testcases": testcases, **extra}}


def test_spec_example() -> None:
    """The §7.2 example parses into devices, versions and three testcases in base units."""
    doc = nvj.loads(SPEC_EXAMPLE)
    assert doc["tool"] == "nvbandwidth" and doc["tool_version"] == "v0.8"
    assert doc["simulated"] is False
    assert doc["host"] == "gpu-node-17"
    assert doc["versions"] == {"cuda_driver": 12080, "driver": "570.124.06"}
    pci = "00000000:43:00"
    assert doc["devices"][1] == {
        "ordinal": 1, "name": "NVIDIA H200", "pci_short": pci, "pci_bus_id": pci
    }  # fmt: skip
    h2d, waived, bogus = doc["testcases"]
    assert h2d["status"] == "Passed"
    (m,) = h2d["matrices"]
    assert m["key"] == "host_to_device_memcpy_ce"
    assert m["unit"] == "bytes/s"
    assert (m["kind"], m["bytes_counting"]) == ("bandwidth", "once")
    assert m["values"] == [[pytest.approx(54.8731e9), pytest.approx(55.0212e9)]]
    assert m["sum"] == pytest.approx(109.894303644e9)
    assert m["description"] == "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)"
    assert waived == {
        "key": "device_to_device_memcpy_read_ce",
        "status": "Waived",
        "message": "",
        "matrices": [],
    }
    assert bogus["status"] == "Not Found" and "bogus" in bogus["message"]


def test_bidirectional_rows_split_into_three_matrices() -> None:
    """A 3N-row D2D bidirectional matrix becomes _read1, _read2 and _total matrices."""
    rows = [
        ["N/A", "389.4"],
        ["389.2", "N/A"],
        ["N/A", "389.8"],
        ["389.6", "N/A"],
        ["N/A", "779.2"],
        ["778.8", "N/A"],
    ]
    tc = {
        "name": "device_to_device_bidirectional_memcpy_read_ce",
        "status": "Passed",
        "bandwidth_matrix": rows,
        "bandwidth_description": "memcpy CE GPU(row) <-> GPU(column) Total bandwidth (GB/s)",
        "sum": 1558.0,
    }
    (t,) = nvj.parse(_doc([tc]))["testcases"]
    keys = [m["key"] for m in t["matrices"]]
    assert keys == [
        "device_to_device_bidirectional_memcpy_read_ce_read1",
        "device_to_device_bidirectional_memcpy_read_ce_read2",
        "device_to_device_bidirectional_memcpy_read_ce_total",
    ]
    r1, r2, total = t["matrices"]
    assert r1["values"] == [[None, pytest.approx(389.4e9)], [pytest.approx(389.2e9), None]]
    assert r1["sum"] == pytest.approx(778.6e9)
    assert r2["description"] == "memcpy CE GPU(row) <-> GPU(column) Read2 bandwidth (GB/s)"
    assert total["sum"] == pytest.approx(1558.0e9)


def test_bidirectional_write_suffixes() -> None:
    """Write tests split into _write1, _write2 and _total with Write headers."""
    tc = {
        "name": "device_to_device_bidirectional_memcpy_write_sm",
        "status": "Passed",
        "bandwidth_matrix": [["1"], ["2"], ["3"]],
        "bandwidth_description": "memcpy SM GPU(row) <-> GPU(column) Total bandwidth (GB/s)",
        "sum": 3,
    }
    (t,) = nvj.parse(_doc([tc]))["testcases"]
    assert [m["key"][-6:] for m in t["matrices"]] == ["write1", "write2", "_total"]
    assert "Write1" in t["matrices"][0]["description"]


def test_latency_in_seconds_and_special_numbers() -> None:
    """Latency cells in ns become seconds; %g exponents, N/A and 1e+9999 sums are handled."""
    text = json.dumps(
        _doc(
            [
                {
                    "name": "host_device_latency_sm",
                    "status": "Passed",
                    "bandwidth_matrix": [["1.2e+03", "N/A"]],
                    "bandwidth_description": "memory latency SM CPU(row) <-> GPU(column) (ns)",
                    "sum": 1200.0,
                }
            ]
        )
    ).replace("1200.0", "1e+9999")
    (t,) = nvj.loads(text)["testcases"]
    (m,) = t["matrices"]
    assert m["unit"] == "s"
    assert (m["kind"], m["bytes_counting"]) == ("latency", "none")
    assert m["values"] == [[pytest.approx(1.2e-6), None]]
    assert m["sum"] == float("inf")


def test_running_status_and_global_error() -> None:
    """A test left Running by a fatal error is an Error; the run's error and warning are kept."""
    doc = nvj.parse(
        _doc(
            [{"name": "device_local_copy", "status": "Running"}],
            error="[CUDA_ERROR_OUT_OF_MEMORY] out of memory in expression ...\n",
            warning="NOTE: You have chosen a buffer size that is smaller ...",
        )
    )
    (t,) = doc["testcases"]
    assert t["status"] == "Error" and "Running" not in t["message"]
    assert doc["error"].startswith("[CUDA_ERROR_OUT_OF_MEMORY]")
    assert doc["warnings"] == ["NOTE: You have chosen a buffer size that is smaller ..."]


def test_verbose_fields_and_testcases_helper(tmp_path) -> None:
    """min/max/average are kept in base units; testcases() accepts a path."""
    path = tmp_path / "nv.json"
    path.write_text(
        json.dumps(
            _doc(
                [
                    {
                        "name": "device_local_copy",
                        "status": "Passed",
                        "bandwidth_matrix": [["2094", "2091"]],
                        "bandwidth_description": "memcpy local GPU(column) bandwidth (GB/s)",
                        "sum": 4185.0,
                        "min": 2091.0,
                        "max": 2094.0,
                        "average": 4185.0 / 2,
                    }
                ]
            )
        )
    )
    (t,) = nvj.testcases(path)
    m = t["matrices"][0]
    assert m["min"] == pytest.approx(2091e9) and m["average"] == pytest.approx(2092.5e9)


def test_rejects_other_json() -> None:
    """A document without the nvbandwidth key, or not JSON at all, is a UsageError."""
    with pytest.raises(UsageError, match="no top-level"):
        nvj.parse({"tool": "gpubw"})
    with pytest.raises(UsageError, match="not nvbandwidth JSON"):
        nvj.loads("nvbandwidth Version: v0.8")


def test_to_report_builds_a_gpubw_report() -> None:
    """to_report turns nvbandwidth's document into a Report: statuses, devices, base-unit
    matrices with kind; a ragged row is padded with N/A; the benchmark file reads whole."""
    from gpubw.model.results import KIND_BANDWIDTH, Status

    rep = nvj.to_report(SPEC_EXAMPLE)
    assert rep.tool == "nvbandwidth" and not rep.simulated and rep.host == "gpu-node-17"
    assert [t.status for t in rep.testcases] == [Status.PASSED, Status.WAIVED, Status.NOT_FOUND]
    m = rep.testcases[0].matrices[0]
    assert m.kind == KIND_BANDWIDTH and m.values[0][0] == pytest.approx(54.8731e9)
    ragged = _doc(
        [
            {
                "name": "device_to_device_memcpy_read_ce",
                "status": "Passed",
                "bandwidth_description": "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)",
                "bandwidth_matrix": [["N/A", "394.1"], ["394.0"]],
            }
        ]
    )
    assert nvj.to_report(ragged).testcases[0].matrices[0].values[1] == (394.0e9, None)
    path = Path(__file__).parents[1] / "benchmarks/results/nvbandwidth-v0.8-h200x2-2026-11-29.json"
    full = nvj.to_report(path)
    assert len(full.testcases) == 35 and full.devices[1]["name"] == "NVIDIA H200"


def test_to_report_matrices_read_their_axes_from_nvbandwidths_headers() -> None:
    """nvbandwidth's JSON carries no axes: its headers give them (host links, GPU pairs, both
    ways, an all-to-one's one row of peers)."""
    from gpubw.model.results import Axes

    path = Path(__file__).parents[1] / "benchmarks/results/nvbandwidth-v0.8-h200x2-2026-11-29.json"
    axes = {m.key: m.axes for t in nvj.to_report(path).testcases for m in t.matrices}
    assert axes["host_to_device_memcpy_ce"] == Axes("host", "gpu", "row->column")
    assert axes["device_to_host_bidirectional_memcpy_ce"] == Axes("host", "gpu", "both")
    assert axes["device_to_device_memcpy_write_ce"] == Axes("gpu", "gpu", "column->row")
    assert axes["device_to_device_bidirectional_memcpy_read_ce_read1"] == Axes("gpu", "gpu", "both")
    assert axes["all_to_one_write_ce"] == Axes("peers", "gpu", "column->row")
