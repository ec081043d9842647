"""Tests of gpubw.cli.compare: the text and JSON of `gpubw compare`."""

from __future__ import annotations

import json

from gpubw.cli.compare import Outcome, device_record, json_doc, text_lines
from gpubw.tools.compare import Cell, Side, compare_sides

DEVICES = (
    {"ordinal": 0, "name": "NVIDIA H200", "pci_bus_id": "0000:1b:00.0"},
    {"ordinal": 1, "name": "NVIDIA H200", "pci_bus_id": "0000:43:00.0"},
)


def _peer(v: float, r: str = "0", c: str = "1") -> Cell:
    return Cell("d2d", 1 << 29, r, c, v, v, "GB/s", "bandwidth", f"GPU {r}", f"GPU {c}")


def _compare(limit: int = 25) -> tuple[list[str], dict]:
    cand = Side("new.json", "gpubw", (_peer(300.0), _peer(394.0, "1", "0")), DEVICES)
    base = Side("old.json", "gpubw", (_peer(394.0), _peer(394.0, "1", "0")), DEVICES)
    rows, extra, warnings = compare_sides(cand, base, 3.0)
    outcome = Outcome(cand, base, rows, extra, warnings, 3.0, "low", None)
    return text_lines(outcome, limit=limit), json_doc(outcome)


def test_text_names_both_ends_of_a_failing_pair() -> None:
    """A failing GPU pair is listed with both GPUs' names and PCI bus ids, then per matrix."""
    lines, _ = _compare()
    text = "\n".join(lines)
    assert "GPU 0 -> GPU 1" in text and "LOW" in text
    assert "  GPU 0: NVIDIA H200, 0000:1b:00.0" in lines
    assert "  GPU 1: NVIDIA H200, 0000:43:00.0" in lines
    assert lines[-1].startswith("1 cell(s) failed")
    assert "GPU 1 -> GPU 0" not in text.split("per matrix")[0]  # it passed


def test_text_is_limited_and_json_is_whole() -> None:
    """The text lists at most `limit` cells and says how many more; JSON has every cell."""
    lines, doc = _compare(limit=0)
    assert "... and 1 more (--format json lists every cell)" in lines
    assert [c["flag"] for c in doc["cells"]] == ["LOW", ""]
    assert doc["cells"][0]["source_device"]["pci_bus_id"] == "0000:1b:00.0"
    json.dumps(doc, allow_nan=False)  # plain JSON


def test_device_record_only_for_gpus_the_report_describes() -> None:
    """host, 'its peers' and unknown GPUs have no device record."""
    assert device_record(DEVICES, "GPU 1") == {
        "index": 1,
        "name": "NVIDIA H200",
        "pci_bus_id": "0000:43:00.0",
    }
    assert device_record(DEVICES, "host") is None
    assert device_record(DEVICES, "its peers") is None
    assert device_record(DEVICES, "GPU 7") is None
