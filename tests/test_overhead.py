"""benchmarks/overhead.py: a traced report's steps split into timed copies and the rest."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import gpubw
from gpubw.model.report_io import report_to_dict

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "overhead.py"


def _overhead() -> ModuleType:
    spec = importlib.util.spec_from_file_location("overhead", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


overhead = _overhead()


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    report = gpubw.run(
        [
            "host_to_device_memcpy_ce",
            "host_to_device_bidirectional_memcpy_ce",
            "device_local_copy_sm",
            "device_to_device_latency_sm",
        ],
        sizes=["64MiB"],
        simulate="h200x2",
        trace=True,
    )
    return json.loads(json.dumps(report_to_dict(report)))


def test_the_breakdown_adds_up_to_each_steps_wall_within_2_percent(doc):
    """timed + every untimed category = wall, and what no span covered is under 2 %."""
    data = overhead.breakdown(doc)
    assert data["clock"] == "simulated" and len(data["steps"]) == 4
    for s in data["steps"]:
        parts = s["timed_s"] + sum(s["categories"].values())
        assert parts == pytest.approx(s["wall_s"], rel=1e-9)
        assert abs(s["categories"]["other"]) <= 0.02 * s["wall_s"], s
        assert s["untimed_s"] == pytest.approx(s["wall_s"] - s["timed_s"])


def test_the_totals_are_the_sums_of_the_steps(doc):
    """TOTAL: wall, timed and each category summed; the percentage from those sums."""
    data = overhead.breakdown(doc)
    t = data["totals"]
    assert t["wall_s"] == pytest.approx(sum(s["wall_s"] for s in data["steps"]))
    assert t["timed_s"] == pytest.approx(sum(s["timed_s"] for s in data["steps"]))
    assert t["warmup"] == pytest.approx(sum(s["categories"]["warmup"] for s in data["steps"]))
    assert t["untimed_pct_of_timed"] == pytest.approx(100 * t["untimed_s"] / t["timed_s"])


def test_the_text_names_every_step_and_category(doc, capsys, tmp_path):
    """The command prints one row per step, TOTAL, and the columns of the categories."""
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert overhead.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "clock: simulated" in out and "TOTAL" in out
    for key in ("host_to_device_bidirectional_memcpy_ce (64 MiB)", "device_to_device_latency_sm"):
        assert key in out
    for col in ("alloc", "pin", "fill", "warm", "interf", "verify", "kernels", "nvml", "other"):
        assert f" {col}" in out.splitlines()[1]


def test_without_a_trace_timed_is_estimated_from_the_figures(doc):
    """No trace: timed = samples x loops x bytes / figure, as the traced timed of a FIRST cell."""
    traced = overhead.breakdown(doc)["steps"][0]
    plain = {k: v for k, v in doc.items() if k != "trace"}
    estimated = overhead.breakdown(plain)
    assert estimated["clock"] is None and estimated["steps"][0]["categories"] is None
    # the figures are the medians: the estimate is samples x the median sample's time
    assert estimated["steps"][0]["timed_s"] == pytest.approx(traced["timed_s"], rel=0.02)


def test_a_file_that_is_no_report_is_one_line(capsys, tmp_path):
    """Not JSON, or JSON that is no report: exit 2 and one line naming the file."""
    bad = tmp_path / "bad.json"
    bad.write_text("[]", encoding="utf-8")
    assert overhead.main([str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a gpubw JSON report" in err
