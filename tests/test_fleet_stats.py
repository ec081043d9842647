"""gpubw.fleet.stats: fleets of one SKU and the same options; medians, MADs, ratios and
robust z per figure; small or mismatched groups set apart, never mixed in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _fleet import simulated, write_fleet
from gpubw.fleet.gather import gather
from gpubw.fleet.stats import MAD_SCALE, Settings, fleets


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A healthy simulated h200x8 report of the fleet tests' suite."""
    return simulated(tmp_path_factory.mktemp("healthy") / "h.json", host="healthy")


def test_median_mad_ratio_and_z_per_figure(tmp_path: Path, healthy: dict[str, Any]) -> None:
    """Each figure's median and MAD over the nodes; ratio and z of each node from them."""
    write_fleet(healthy, tmp_path, 9, noise=0.03)
    [fleet], apart = fleets(gather([tmp_path]).entries, Settings())
    assert apart == [] and len(fleet.entries) == 9 and fleet.sku == "8x NVIDIA H200"
    j = next(j for j, s in enumerate(fleet.slots) if s.kind == "bandwidth" and s.column == 3)
    column = fleet.values[:, j]
    median = float(np.median(column))
    mad = float(np.median(np.abs(column - median)))
    assert fleet.median[j] == pytest.approx(median) and fleet.mad[j] == pytest.approx(mad)
    assert fleet.ratio[:, j] == pytest.approx(column / median)
    assert fleet.z[:, j] == pytest.approx((column - median) / max(MAD_SCALE * mad, 0.01 * median))
    lat = next(j for j, s in enumerate(fleet.slots) if s.kind == "latency")
    values = fleet.values[:, lat]
    assert fleet.ratio[:, lat] == pytest.approx(fleet.median[lat] / values)
    assert np.all((fleet.z[:, lat] < 0) == (values > fleet.median[lat]))


def _with(doc: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(doc))
    for key, value in changes.items():
        if key == "loops":
            out["options"]["loops"] = value
        elif key == "model":
            for d in out["devices"]:
                d["name"] = value
        else:
            out[key] = value
    return out


def test_other_options_and_small_groups_are_set_apart(
    tmp_path: Path, healthy: dict[str, Any]
) -> None:
    """Two nodes run with other loops, three of another SKU, two simulated against real:
    set apart with the reason; the six-node fleet is judged alone."""
    write_fleet(healthy, tmp_path, 6)
    for i in range(2):
        (tmp_path / f"loops{i}.json").write_text(
            json.dumps(_with(healthy, host=f"loops{i}", loops=7))
        )
    for i in range(3):
        doc = _with(healthy, host=f"l40s{i}", model="NVIDIA L40S")
        (tmp_path / f"l40s{i}.json").write_text(json.dumps(doc))
    for i in range(2):
        doc = _with(healthy, host=f"real{i}", simulated=False)
        (tmp_path / f"real{i}.json").write_text(json.dumps(doc))
    found, apart = fleets(gather([tmp_path]).entries, Settings())
    assert [len(f.entries) for f in found] == [6]
    reasons = {a.node: a.reason for a in apart}
    assert set(reasons) == {"loops0", "loops1", "l40s0", "l40s1", "l40s2", "real0", "real1"}
    assert reasons["loops0"].startswith("options differ from the 6-node fleet of 8x NVIDIA H200")
    assert "loops 7" in reasons["loops0"] and ", real," in reasons["real0"]
    assert reasons["l40s0"].startswith("only 3 node(s) of 8x NVIDIA L40S")
    assert "--min-nodes" in reasons["l40s0"]
    found, apart = fleets(gather([tmp_path]).entries, Settings(min_nodes=3))
    assert sorted(len(f.entries) for f in found) == [3, 6]


def test_a_figure_of_too_few_nodes_is_not_judged(tmp_path: Path, healthy: dict[str, Any]) -> None:
    """A testcase only four of six nodes ran is not judged (min_nodes 5), however low."""
    write_fleet(healthy, tmp_path, 6, noise=0.0)
    for i in range(2):
        path = tmp_path / f"n{i:03d}.json"
        doc = json.loads(path.read_text())
        doc["testcases"] = [t for t in doc["testcases"] if t["key"] != "device_local_copy"]
        path.write_text(json.dumps(doc))
    path = tmp_path / "n005.json"
    doc = json.loads(path.read_text())
    for t in doc["testcases"]:
        if t["key"] == "device_local_copy":
            t["matrices"][0]["values"][0][0] /= 2
    path.write_text(json.dumps(doc))
    [fleet], _ = fleets(gather([tmp_path]).entries, Settings())
    local = [j for j, s in enumerate(fleet.slots) if s.testcase == "device_local_copy"]
    assert set(fleet.count[local].tolist()) == {4} and not fleet.judged[local].any()
    assert not fleet.low.any()
