"""gpubw fleet over real reports: six default-suite runs of gpubw on lent 1 x H200 machines
(benchmarks/results), each given its own host name as a fleet's nodes would have."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from gpubw.cli import command as cli
from gpubw.model import schemas

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
REAL = [
    *sorted(RESULTS.glob("full-h200x1-2026-12-0*.json")),
    RESULTS / "warm-h200x1-2026-12-01d.json",
]


def _as_node(doc: Any, host: str) -> Any:
    """The report with every ``host`` member set to ``host`` (the lent machines all say vm)."""
    if isinstance(doc, dict):
        return {
            k: host if k == "host" and isinstance(v, str) else _as_node(v, host)
            for k, v in doc.items()
        }
    if isinstance(doc, list):
        return [_as_node(v, host) for v in doc]
    return doc


def test_a_fleet_of_real_h200_reports(tmp_path: Path, capsys: Any) -> None:
    """Six real reports: one fleet of six nodes, a valid document, every finding's GPU one of
    the reports' real GPUs and its figure and fleet median those of the reports' cells."""
    if len(REAL) < 6 or not all(p.exists() for p in REAL):
        pytest.skip("the real 1 x H200 reports are not in benchmarks/results")
    uuids: set[str] = set()
    figures: dict[str, list[float | None]] = {}
    for i, path in enumerate(REAL):
        doc = json.loads(path.read_text(encoding="utf-8"))
        uuids |= {d["uuid"] for d in doc["devices"]}
        (tmp_path / f"real{i}.json").write_text(
            json.dumps(_as_node(doc, f"real{i}")), encoding="utf-8"
        )
        for t in doc["testcases"]:
            for m in t.get("matrices", []):
                figures.setdefault(m["key"], []).append(m["values"][0][0])
    out = tmp_path / "fleet.json"
    code = cli.main(["fleet", str(tmp_path), "--format", "json", "-o", str(out)])
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert schemas.errors(schemas.FLEET, doc, closed=True) == []
    assert code == doc["exit_code"] and code in (0, 3)
    assert doc["nodes"] == 6 and len(doc["fleets"]) == 1 and doc["apart"] == []
    for finding in doc["findings"]:
        assert finding["gpu"]["uuid"] in uuids
        worst = finding["worst"]
        seen = [v for v in figures[worst["matrix"]] if v is not None]
        assert any(abs(v / 1e9 - worst["value"]) < 1e-6 * worst["value"] for v in seen)
        assert worst["median"] == pytest.approx(statistics.median(seen) / 1e9, rel=1e-9)
