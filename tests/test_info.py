"""gpubw info: devices, PCI bus ids, NVML facts and the peer-access / link matrix."""

from __future__ import annotations

import json
from typing import Any

import pytest

from _cli import run_cli
from gpubw.acceptance import node as acceptance
from gpubw.api import open_system
from gpubw.cli.accept import info_lines
from gpubw.model.errors import NoDriverError


def test_info_text_on_nvswitch(capsys):
    """h200x8: every device with its bus id and facts, an NV18 link between every pair."""
    code, out, err = run_cli(capsys, "info", "--simulate", "h200x8")
    assert code == 0, err
    assert out.startswith("SIMULATED SYSTEM h200x8")
    assert "Device 7: NVIDIA H200 (00000000:df:00, 0000:df:00.0)" in out
    assert out.count("  PCIe Gen5 x16") == 8
    rows = [line for line in out.splitlines() if line.startswith("GPU")]
    assert len(rows) == 8 and rows[3].split() == ["GPU3", *(["NV18"] * 3), "X", *(["NV18"] * 4)]


def test_info_pcie_peers_and_no_peer_access(capsys):
    """pcie4: peer access over PCIe only between 0<->1 and 2<->3, "-" elsewhere."""
    code, out, _ = run_cli(capsys, "info", "--simulate", "pcie4")
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line[:3] == "GPU"}
    assert code == 0
    assert rows["GPU0"] == ["X", "PCIe", "-", "-"] and rows["GPU3"] == ["-", "-", "PCIe", "X"]
    assert "NVLink: none" in out and "PCIe Gen4 x16" in out


def test_info_json(capsys, tmp_path):
    """-j: devices with their nvml facts, the link matrix, node facts; -o writes it."""
    target = tmp_path / "info.json"
    code, out, _ = run_cli(capsys, "info", "--simulate", "h200x2", "-j", "-o", str(target))
    doc = json.loads(target.read_text())
    assert code == 0 and out == ""
    assert doc["simulated"] and doc["links"] == [["X", "NV18"], ["NV18", "X"]]
    assert doc["devices"][0]["nvml"]["pcie"]["max_width"] == 16
    assert doc["nvml"]["available"] and doc["nvml"]["driver_version"].endswith("(simulated)")


def test_info_shows_faults(capsys, tmp_path):
    """A downtrained link, links down, power capping and another process all show."""
    sim = tmp_path / "s.json"
    sim.write_text(json.dumps({
        "base": "h200x2",
        "nvml": {"devices": {"1": {
            "pcie": "gen5 x8 of gen5 x16",
            "nvlink": {"links_active": 16, "links_total": 18},
            "clocks": {"sm_mhz": 1100, "sm_max_mhz": 1980, "reasons": ["sw_power_cap"]}}}},
        "other_processes": {"1": [999]},
    }))  # fmt: skip
    code, out, _ = run_cli(capsys, "info", "--simulate", str(sim))
    assert code == 0
    assert "PCIe Gen5 x8, max Gen5 x16 (DEGRADED" in out
    assert "NVLink 16/18 links active" in out and "NV16" in out
    assert "SM 1100/1980 MHz" in out and "clock reasons: sw_power_cap" in out
    assert "compute processes: pid 999" in out


def test_info_bad_simulate_and_no_driver(capsys, monkeypatch):
    """An unknown preset is a usage error (2); no driver exits 1 with the --simulate hint."""
    code, _, err = run_cli(capsys, "info", "--simulate", "nope")
    assert code == 2 and "--simulate" in err and "nope" in err

    def no_driver(simulate: Any = None) -> Any:
        def opener(options: Any) -> Any:
            raise NoDriverError("no NVIDIA driver was found")

        return opener

    monkeypatch.setattr("gpubw.api.system_opener", no_driver)
    code, _, err = run_cli(capsys, "info")
    assert code == 1 and "no NVIDIA driver" in err and "--simulate" in err


def test_info_without_nvml_still_lists_devices(monkeypatch):
    """NVML missing: the devices and the peer matrix still show, with the reason."""
    from gpubw.hw.nvml import NodeFacts

    with open_system("h200x2") as system:
        monkeypatch.setattr(system.backend, "node_facts", lambda: NodeFacts(False, "no pynvml"))
        node = acceptance.info(system)
    lines = info_lines(node)
    assert "NVML: not available (no pynvml)" in lines
    assert node.links[(0, 1)] == "PCIe"  # peer access, link type unknown without NVML
    assert all("nvml" not in d for d in node.devices)


@pytest.mark.parametrize("argv", [["-x"], ["--simulate"]])
def test_info_bad_arguments(capsys, argv):
    """Unknown or incomplete arguments: exit 2, no traceback."""
    code, _, err = run_cli(capsys, "info", *argv)
    assert code == 2 and "gpubw info" in err and "Traceback" not in err
