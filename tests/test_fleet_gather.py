"""gpubw.fleet.gather: paths to report files; each node once with its newest report; a
file read twice counts once; a folder's stray file is set apart, a named one refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from _fleet import node_copy, simulated
from gpubw.fleet.gather import collect, gather, read_all, report_files
from gpubw.model.errors import UsageError


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A simulated h200x2 report of the fleet tests' suite."""
    return simulated(tmp_path_factory.mktemp("healthy") / "h.json", "h200x2", host="h")


def test_newest_report_of_a_node_counts_and_copies_once(
    tmp_path: Path, healthy: dict[str, Any]
) -> None:
    """Two reports of n1 (the older set apart, named with its time), one file twice."""
    old, new = node_copy(healthy, "n1", 10), node_copy(healthy, "n1", 20)
    (tmp_path / "a.json").write_text(json.dumps(new))
    (tmp_path / "b.json").write_text(json.dumps(old))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a-copy.json").write_text(json.dumps(new))
    got = gather([tmp_path, tmp_path / "a.json"])
    assert got.files == 4 and [e.key.source for e in got.entries] == [str(tmp_path / "a.json")]
    assert [(a.node, a.source) for a in got.apart] == [("n1", str(tmp_path / "b.json"))]
    assert got.apart[0].reason == "older report of the node (2026-12-06T00:00:10+00:00)"


def test_a_stray_file_in_a_folder_is_set_apart(tmp_path: Path, healthy: dict[str, Any]) -> None:
    """A folder's file that is no report is listed apart with why; named, it is refused."""
    (tmp_path / "n1.json").write_text(json.dumps(node_copy(healthy, "n1", 1)))
    stray = tmp_path / "fleet-result.json"
    stray.write_text('{"schema_version": "1", "tool": "gpubw fleet"}')
    got = gather([tmp_path])
    assert [e.node for e in got.entries] == ["n1"]
    assert [(a.node, a.source) for a in got.apart] == [("fleet-result", str(stray))]
    assert "not a report gpubw fleet can read" in got.apart[0].reason
    with pytest.raises(UsageError, match=r"fleet-result\.json: not a report"):
        gather([stray])


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda p: p / "missing", "missing: no such file or folder"),
        (lambda p: p, "folder holds no report"),
    ],
)
def test_paths_that_hold_no_report_are_refused(tmp_path: Path, make: Any, words: str) -> None:
    """A path that does not exist, a folder without a .json file: one line naming it."""
    with pytest.raises(UsageError, match=words):
        report_files([make(tmp_path)])


def test_worker_processes_read_as_this_one(tmp_path: Path, healthy: dict[str, Any]) -> None:
    """Read in two processes, the tables are those read here, in the files' order."""
    items = []
    for i in range(50):
        path = tmp_path / f"n{i:02d}.json"
        path.write_text(json.dumps(node_copy(healthy, f"n{i:02d}", i)))
        items.append((path, True))
    pooled = collect(read_all(items, workers=2), len(items))
    here = collect(read_all(items, workers=1), len(items))
    assert [e.node for e in pooled.entries] == [f"n{i:02d}" for i in range(50)]
    assert pooled == here
