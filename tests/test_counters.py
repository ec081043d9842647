"""Health counters: sysfs AER, counters that rose, and a risen one named as a suspect."""

from __future__ import annotations

from _node import json_run, run_cli, system_file
from gpubw.hw import counters


def test_aer_totals_are_read_from_sysfs(tmp_path):
    """The TOTAL_ERR_* lines of the three aer_dev_* files; missing files give nothing."""
    dev = tmp_path / "0000:1b:00.0"
    dev.mkdir()
    (dev / "aer_dev_correctable").write_text("RxErr 2\nTOTAL_ERR_COR 7\n", encoding="ascii")
    (dev / "aer_dev_fatal").write_text("TOTAL_ERR_FATAL 0\n", encoding="ascii")
    assert counters.read_aer("0000:1b:00.0", tmp_path) == {"aer_correctable": 7, "aer_fatal": 0}
    assert counters.read_aer("0000:99:00.0", tmp_path) == {}


def test_rises_and_risen_links_name_what_went_up():
    """Only counters higher at the end, in display order; links whose rows rose."""
    start = {"nvlink_replay": 1, "pcie_replay": 0, "remap_pending": 0}
    end = {"nvlink_replay": 4, "pcie_replay": 2, "remap_pending": 0}
    assert counters.rises(start, end) == [("pcie_replay", 0, 2), ("nvlink_replay", 1, 4)]
    assert counters.risen_links(((0, 0, 0, 0), (0, 0, 1, 0)), ((0, 0, 0, 0), (0, 0, 4, 0))) == [1]
    assert (
        counters.rise_words("pcie_replay", 0, 2) == "PCIe replays rose from 0 to 2 during the run"
    )
    assert counters.counter_line({"pcie_replay": 0}) == "all 1 at 0"


def test_a_counter_that_rose_is_a_suspect_of_the_failed_cell(capsys, tmp_path):
    """GPU 3's host link slow and its PCIe replays rising: the failed cell names the rise."""
    sim = system_file(tmp_path, {
        "base": "h200x8",
        "nvml_end": {"devices": {"3": {"counters": {"pcie_replay": 14}}}},
        "throttle": {"after_s": 0, "factor": 0.5, "devices": [3]},
    })  # fmt: skip
    code, doc, err = json_run(capsys, tmp_path, "--simulate", sim, "-t", "0", "-b", "512MiB",
                              "-i", "3", "--expect", "builtin")  # fmt: skip
    assert code == 3, err
    fails = [v for v in doc["verdicts"] if v["severity"] == "fail"]  # floor and outlier
    assert {v["column"] for v in fails} == {"3"}
    assert {v["rule"] for v in fails} == {"floor", "peer_outlier"}
    fail = fails[0]
    assert "GPU 3: PCIe replays rose from 0 to 14 during the run" in fail["suspects"]
    assert doc["devices"][3]["nvml_end"]["counters"]["pcie_replay"] == 14


def test_info_shows_the_counters_and_the_links_with_errors(capsys, tmp_path):
    """gpubw info: a counters line per device; a link with NVLink replays named."""
    errors = [[0, 0, 0, 0]] * 17 + [[0, 0, 9, 0]]
    sim = system_file(tmp_path, {"base": "h200x2", "nvml": {"devices": {"1": {
        "nvlink": {"links_active": 18, "links_total": 18, "speed_mbps": 26562, "errors": errors},
    }}}})  # fmt: skip
    code, out, err = run_cli(capsys, "info", "--simulate", sim)
    assert code == 0, err
    assert "health counters: all 12 at 0" in out
    assert "health counters: NVLink replays 9" in out and "NVLink link 17: replay 9" in out
