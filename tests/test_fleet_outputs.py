"""gpubw.fleet.text, .document, .metrics and .formats: the outputs of a fleet with two
faults: text worst first with the ids an operator drains by, JSON valid against
fleet-v1, OpenMetrics gauges per node and GPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from _fleet import simulated, slow_host_link, slow_pair, write_fleet
from gpubw.fleet.analysis import FleetReport, analyse
from gpubw.fleet.formats import FORMATTERS, FormatOptions
from gpubw.fleet.metrics import escape
from gpubw.model import schemas


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> FleetReport:
    """20 noisy h200x8 nodes; n004's GPU 3 host link at 80 %, n011's pair 0-6 at 70 %."""
    folder = tmp_path_factory.mktemp("fleet")
    healthy = simulated(folder / "base.json", host="base")
    (folder / "base.json").unlink()
    write_fleet(healthy, folder, 20, {"n004": slow_host_link(3), "n011": slow_pair(0, 6, 0.7)})
    return analyse([folder])


def test_text_lists_the_worst_finding_first_with_its_ids(report: FleetReport) -> None:
    """The pair at 70 % before the host link at 80 %, each with UUID and PCI bus id."""
    text = FORMATTERS["text"](report, FormatOptions())
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("  1. "))
    assert lines[first].startswith("  1. GPU pair 0 <-> 6 of node n011:")
    pair = report.all_findings[0]
    assert pair.device is not None and pair.peer_device is not None
    assert f"     GPU 0: NVIDIA H200, {pair.device.uuid}, {pair.device.pci_bus_id}" in lines
    assert (
        f"     GPU 6: NVIDIA H200, {pair.peer_device.uuid}, {pair.peer_device.pci_bus_id}" in lines
    )
    assert any(line.startswith("  2. GPU 3 of node n004: host link") for line in lines)
    assert "fleet 8x NVIDIA H200 (20 nodes), per testcase:" in lines
    assert any(line.lstrip().startswith("device_to_device_memcpy_read_ce ") for line in lines)
    worst = [line for line in lines if "worst: " in line]
    assert len(worst) == 2 and "ratio 0.7" in worst[0] and "fleet median" in worst[0]


def test_verbose_text_lists_every_figure(report: FleetReport) -> None:
    """-v: each low figure of a finding on its line."""
    text = FORMATTERS["text"](report, FormatOptions(verbose=True))
    shown = sum(len(f.figures) for f in report.all_findings)
    figures = [
        line for line in text.splitlines() if line.startswith("     ") and " fleet median " in line
    ]
    assert len(figures) == shown >= 4


def test_json_matches_its_schema_and_lists_every_figure(report: FleetReport) -> None:
    """schema_version, findings with every figure and both ends, every figure's stats."""
    doc = json.loads(FORMATTERS["json"](report, FormatOptions()))
    assert schemas.errors(schemas.FLEET, doc, closed=True) == []
    assert doc["schema_version"] == "1" and doc["exit_code"] == 3 and doc["nodes"] == 20
    pair = doc["findings"][0]
    assert (pair["scope"], pair["node"], pair["gpu"]["index"], pair["peer"]["index"]) == (
        "pair",
        "n011",
        0,
        6,
    )
    assert pair["low"] == len(pair["figures"]) and pair["worst"] == pair["figures"][0]
    [fleet] = doc["fleets"]
    assert len(fleet["nodes"]) == 20 and len(fleet["statistics"]) == len(report.fleets[0].slots)
    bad = dict(doc, exit_code=1)
    assert schemas.errors(schemas.FLEET, bad, closed=True) != []


def test_openmetrics_ratio_per_node_and_gpu(report: FleetReport) -> None:
    """gpubw_fleet_gpu_ratio per node and GPU (160 series), the slow GPU's below 0.85;
    findings per node and scope; # EOF last."""
    text = FORMATTERS["openmetrics"](report, FormatOptions())
    assert text.endswith("# EOF\n")
    gpu = [line for line in text.splitlines() if line.startswith("gpubw_fleet_gpu_ratio{")]
    assert len(gpu) == 160
    slow = next(line for line in gpu if 'node="n004"' in line and 'gpu="3"' in line)
    assert float(slow.rsplit(" ", 1)[1]) < 0.85 and 'uuid="GPU-' in slow
    assert 'gpubw_fleet_findings{node="n004",scope="host-link"} 1.0' in text
    assert "# UNIT gpubw_fleet_gpu_ratio ratio" in text
    assert "gpubw_fleet_exit_code 3.0" in text


def test_label_values_are_escaped() -> None:
    """Backslash, double quote and newline, as OpenMetrics says."""
    assert escape('a"b\\c\nd') == 'a\\"b\\\\c\\nd'


def test_every_format_is_a_formatter(report: FleetReport) -> None:
    """The seam: a dict of names to functions of the report and the options."""
    assert set(FORMATTERS) >= {"text", "json", "openmetrics"}
    assert all(isinstance(f(report, FormatOptions()), str) for f in FORMATTERS.values())


def test_nodes_set_apart_are_listed(tmp_path: Path, report: FleetReport) -> None:
    """The text and the JSON list the nodes set apart with why."""
    import attrs

    from gpubw.fleet.gather import Apart

    apart = attrs.evolve(report, apart=(Apart("odd", "/x/odd.json", "only 1 node(s) of ..."),))
    text = FORMATTERS["text"](apart, FormatOptions())
    assert "  odd: only 1 node(s) of ... (/x/odd.json)" in text.splitlines()
    doc: dict[str, Any] = json.loads(FORMATTERS["json"](apart, FormatOptions()))
    assert doc["apart"] == [
        {"node": "odd", "source": "/x/odd.json", "reason": "only 1 node(s) of ..."}
    ]
