"""gpubw.fleet.findings: each injected fault is found and named as what it is (a host
link, an NVLink pair, a whole node, a GPU); noise alone is no finding."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from _fleet import (
    node_copy,
    pair_override,
    simulated,
    slow_host_link,
    slow_node,
    slow_pair,
    system_file,
    write_fleet,
)
from gpubw.fleet.analysis import FleetReport, analyse
from gpubw.fleet.findings import Finding


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A healthy simulated h200x8 report of the fleet tests' suite."""
    return simulated(tmp_path_factory.mktemp("healthy") / "h.json", host="healthy")


def _real_fleet(folder: Path, healthy: dict[str, Any], bad: dict[str, Any]) -> FleetReport:
    """Six healthy nodes (the same simulated run under six names: the simulation is
    deterministic, a rerun gives the same figures) and the run with the fault as "bad"."""
    for i in range(6):
        (folder / f"h{i}.json").write_text(json.dumps(dict(healthy, host=f"h{i}")))
    (folder / "bad.json").write_text(json.dumps(dict(bad, host="bad")))
    return analyse([folder])


def _only(report: FleetReport) -> Finding:
    found = report.all_findings
    assert len(found) == 1, [f.describe() for f in found]
    assert report.exit_code == 3
    return found[0]


def test_a_real_slow_host_link_is_found(tmp_path: Path, healthy: dict[str, Any]) -> None:
    """A simulated node whose GPU 3 trained its PCIe link at x8: GPU 3's host link."""
    system = system_file(tmp_path, "x8", nvml={"devices": {"3": {"pcie": "gen5 x8 of gen5 x16"}}})
    bad = simulated(tmp_path / "bad-run.json", str(system))
    (tmp_path / "fleet").mkdir()
    f = _only(_real_fleet(tmp_path / "fleet", healthy, bad))
    assert (f.scope, f.node, f.gpu) == ("host-link", "bad", 3)
    assert f.device is not None and f.device.uuid == bad["devices"][3]["uuid"]
    assert f.device.pci_bus_id == bad["devices"][3]["pci_bus_id"]
    assert {x.slot.link for x in f.figures} == {"host"} and f.worst.ratio < 0.6
    assert f.describe() == "GPU 3 of node bad: host link"


def test_a_real_slow_nvlink_pair_is_found(tmp_path: Path, healthy: dict[str, Any]) -> None:
    """A simulated node whose pair 1-5 runs at 300 of 394.5 GB/s: that pair, both ends."""
    system = system_file(tmp_path, "pair", peers=pair_override(1, 5, 300e9, 280e9))
    bad = simulated(tmp_path / "bad-run.json", str(system))
    (tmp_path / "fleet").mkdir()
    f = _only(_real_fleet(tmp_path / "fleet", healthy, bad))
    assert (f.scope, f.node, f.gpu, f.peer) == ("pair", "bad", 1, 5)
    assert f.device is not None and f.peer_device is not None
    assert (f.device.uuid, f.peer_device.uuid) == (
        bad["devices"][1]["uuid"],
        bad["devices"][5]["uuid"],
    )
    assert f.worst.slot.link == "nvlink"
    assert f.describe() == "GPU pair 1 <-> 5 of node bad"


def test_a_real_slow_node_is_found(tmp_path: Path, healthy: dict[str, Any]) -> None:
    """A simulated node throttled to 70 % from the start: the whole node, one finding."""
    throttle = {"after_s": 0, "factor": 0.7, "reason": "hw_thermal_slowdown"}
    bad = simulated(tmp_path / "bad-run.json", str(system_file(tmp_path, "hot", throttle=throttle)))
    (tmp_path / "fleet").mkdir()
    f = _only(_real_fleet(tmp_path / "fleet", healthy, bad))
    assert (f.scope, f.node, f.gpu) == ("node", "bad", None)
    assert len(f.figures) >= f.judged / 2 and f.worst.ratio == pytest.approx(0.7, abs=0.03)


def test_a_fleet_of_real_identical_runs_has_no_finding(
    tmp_path: Path, healthy: dict[str, Any]
) -> None:
    """Seven healthy nodes: exit 0."""
    report = _real_fleet(tmp_path, healthy, healthy)
    assert report.all_findings == [] and report.exit_code == 0


def test_noise_alone_is_no_finding(tmp_path: Path, healthy: dict[str, Any]) -> None:
    """200 nodes with 1 % noise on every figure (about 30,000 figures): exit 0."""
    write_fleet(healthy, tmp_path, 200, noise=0.01)
    report = analyse([tmp_path])
    assert report.nodes == 200 and report.all_findings == [] and report.exit_code == 0


def test_each_fault_in_a_noisy_fleet_is_named(tmp_path: Path, healthy: dict[str, Any]) -> None:
    """Three faults among 100 noisy nodes: three findings, each what it is."""
    faults = {"n010": slow_host_link(6), "n020": slow_pair(2, 7), "n030": slow_node(0.85)}
    write_fleet(healthy, tmp_path, 100, faults, noise=0.01)
    found = {(f.node, f.scope, f.gpu, f.peer) for f in analyse([tmp_path]).all_findings}
    assert found == {
        ("n010", "host-link", 6, None),
        ("n020", "pair", 2, 7),
        ("n030", "node", None, None),
    }


def test_a_slow_gpu_is_one_finding(tmp_path: Path, healthy: dict[str, Any]) -> None:
    """Every figure of GPU 4 (host link, pairs, memory) low: one GPU finding with every
    one of its low figures under it, not a finding per pair."""

    def gpu4(testcase: str, axes: Any, latency: bool, row: str, column: str) -> float:
        ends = {column} if axes.rows != "gpu" else {row, column}
        return 0.8 if "4" in ends and not latency else 1.0

    write_fleet(healthy, tmp_path, 40, {"n005": gpu4}, noise=0.005)
    found = analyse([tmp_path]).all_findings
    assert [(f.node, f.scope, f.gpu) for f in found] == [("n005", "gpu", 4)]
    assert len(found[0].figures) == 2 + 14 + 1 + 2  # host links, pairs, all-to-one, local


def test_a_lone_figure_low_by_z_alone_is_no_finding(
    tmp_path: Path, healthy: dict[str, Any]
) -> None:
    """One figure 5 % low in a fleet with 0.5 % noise: z about -5 but within 10 %, and
    alone: chance, not a finding; two such figures of one link are one."""

    def one(testcase: str, axes: Any, latency: bool, row: str, column: str) -> float:
        return 0.95 if testcase == "host_to_device_memcpy_ce" and column == "2" else 1.0

    def two(testcase: str, axes: Any, latency: bool, row: str, column: str) -> float:
        hit = testcase in ("host_to_device_memcpy_ce", "device_to_host_memcpy_ce")
        return 0.95 if hit and column == "2" else 1.0

    write_fleet(healthy, tmp_path, 30, {"n001": one, "n002": two}, noise=0.005)
    found = analyse([tmp_path]).all_findings
    assert [(f.node, f.scope, f.gpu, len(f.figures)) for f in found] == [
        ("n002", "host-link", 2, 2)
    ]


def test_latency_higher_is_slower(healthy: dict[str, Any], tmp_path: Path) -> None:
    """A pair whose latency is 30 % higher is low (ratio median / value below 1)."""

    def slow(testcase: str, axes: Any, latency: bool, row: str, column: str) -> float:
        return 0.7 if latency and {row, column} == {"0", "1"} else 1.0

    write_fleet(healthy, tmp_path, 10, {"n003": slow}, noise=0.002)
    found = analyse([tmp_path]).all_findings
    assert [(f.node, f.scope, f.gpu, f.peer) for f in found] == [("n003", "pair", 0, 1)]
    assert all(x.slot.kind == "latency" and x.value > x.median for x in found[0].figures)
    assert node_copy(healthy, "x", 1)["host"] == "x"


def test_nearly_identical_figures_do_not_make_a_tiny_difference_a_finding(
    tmp_path: Path, healthy: dict[str, Any]
) -> None:
    """0.01 % noise (a MAD near 0) and one host link 0.5 % slower: the spread's floor (1 %
    of the median) keeps its z near -0.5, no finding; 5 % slower on two figures is one."""
    write_fleet(healthy, tmp_path, 12, {"n004": slow_host_link(2, 0.995)}, noise=0.0001)
    assert analyse([tmp_path]).all_findings == []
    write_fleet(healthy, tmp_path, 12, {"n004": slow_host_link(2, 0.95)}, noise=0.0001)
    assert [(f.node, f.scope, f.gpu) for f in analyse([tmp_path]).all_findings] == [
        ("n004", "host-link", 2)
    ]
