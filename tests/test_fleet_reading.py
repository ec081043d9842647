"""gpubw.fleet.reading and gpubw.fleet.cells: one report file as its key and cells."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from _fleet import simulated
from gpubw.fleet.cells import Cell, read_cells
from gpubw.fleet.reading import read_tables
from gpubw.model.errors import UsageError

NVBW_V08 = Path(__file__).parents[1] / "benchmarks/results/nvbandwidth-v0.8-h200x2-2026-11-29.json"


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A simulated h200x8 report of the fleet tests' suite."""
    path = tmp_path_factory.mktemp("fleet") / "n1.json"
    return path, simulated(path, host="n1")


def _figures(doc: dict[str, Any]) -> int:
    return sum(
        v is not None
        for t in doc["testcases"]
        if t["status"] == "Passed"
        for m in t["matrices"]
        for row in m["values"]
        for v in row
    )


def test_a_gpubw_report_gives_a_cell_per_figure(small: tuple[Path, dict[str, Any]]) -> None:
    """Every figure is a cell in GB/s or ns, with its link type and both ends' ids."""
    path, doc = small
    key, cells = read_cells(path)
    assert key.node == "n1" and key.options.simulated and key.options.sizes == (1 << 20,)
    # host links 2 x 8, pairs 56, all-to-one 8, local copies 2 x 8, pair latency 56
    assert len(cells) == _figures(doc) == 16 + 56 + 8 + 16 + 56
    assert {c.link for c in cells} == {"host", "nvlink", "peers", "local"}
    devices = {d["ordinal"]: d for d in doc["devices"]}
    h2d = next(c for c in cells if c.testcase == "host_to_device_memcpy_ce" and c.row == 3)
    raw = doc["testcases"][0]["matrices"][0]["values"][0][3]
    assert h2d.value == pytest.approx(raw * 1e-9) and h2d.unit == "GB/s" and h2d.higher_is_better
    assert (h2d.uuid, h2d.pci_bus_id) == (devices[3]["uuid"], devices[3]["pci_bus_id"])
    assert h2d.column is None and h2d.peer_uuid is None
    pair = next(c for c in cells if c.testcase == "device_to_device_memcpy_read_ce" and c.column)
    assert pair.peer_uuid == devices[pair.column]["uuid"] and pair.link == "nvlink"
    lat = next(c for c in cells if c.kind == "latency")
    assert lat.unit == "ns" and not lat.higher_is_better and 100 < lat.value < 10_000


def test_the_same_bytes_give_the_same_key(
    small: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """The digest is the file's: a copy has the same one, another report another."""
    path, doc = small
    twin = tmp_path / "elsewhere.json"
    twin.write_bytes(path.read_bytes())
    assert read_tables(twin)[0].digest == read_tables(path)[0].digest
    doc2 = copy.deepcopy(doc)
    doc2["host"] = "n2"
    other = tmp_path / "n2.json"
    other.write_text(json.dumps(doc2))
    assert read_tables(other)[0].digest != read_tables(path)[0].digest


def _without_host(doc: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    nv = out["nvbandwidth"]
    nv["GPU Device list"] = [d.rsplit(": (", 1)[0] for d in nv["GPU Device list"]]
    return out


def test_nvbandwidth_v08_json_is_named_after_its_file(tmp_path: Path) -> None:
    """nvbandwidth's JSON without host names: the file's name, or its folder's when the
    name is generic, is the node; the key says so."""
    doc = _without_host(json.loads(NVBW_V08.read_text()))
    named = tmp_path / "node17.json"
    named.write_text(json.dumps(doc))
    key, cells = read_cells(named)
    assert (key.node, key.node_from, key.options.tool) == ("node17", "file", "nvbandwidth")
    assert cells and {c.node for c in cells} == {"node17"}
    assert {c.link for c in cells} >= {"host", "peer", "local"}  # no NVLink facts: "peer"
    (tmp_path / "n18").mkdir()
    generic = tmp_path / "n18" / "nvbandwidth.json"
    generic.write_text(json.dumps(doc))
    assert read_cells(generic)[0].node == "n18"


def test_nvbandwidth_v010_json_names_its_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The drop-in's nvbandwidth v0.10 JSON names the host in its device list."""
    from gpubw.cli import nvbandwidth as nvb

    monkeypatch.setenv(nvb.SIMULATE_ENV, "h200x2")
    monkeypatch.delenv(nvb.VERSION_ENV, raising=False)
    capsys.readouterr()
    assert nvb.main(["-t", "0", "1", "-j", "-b", "1", "-i", "1", "--loopCount", "2"]) == 0
    path = tmp_path / "whatever.json"
    path.write_text(capsys.readouterr().out)
    key, cells = read_cells(path)
    assert key.options.version.startswith("v0.10") and key.node_from == "report"
    assert len(cells) == 4 and all(c.link == "host" and c.gpu_model for c in cells)


def _mpi(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` (two GPUs) as an MPI run of 4 ranks on hosts a and b, with a testcase
    across the ranks."""
    out = copy.deepcopy(doc)
    out["host"] = "a"
    procs = [
        {"rank": r, "host": h, "device": r % 2, "name": "NVIDIA H200", "pci": f"0000:0{r}:00"}
        for r, h in enumerate("aabb")
    ]
    out["world"] = {"size": 4, "hosts": ["a", "b"], "rank_hosts": [0, 0, 1, 1], "processes": procs}
    out["hosts"] = [{"host": "b", "testcases": copy.deepcopy(doc["testcases"])}]
    labels = ["0", "1", "2", "3"]
    values = [[None if r == c else 1e11 * (1 + r + c) for c in range(4)] for r in range(4)]
    across = copy.deepcopy(doc["testcases"][0])
    across["key"] = "multinode_device_to_device_memcpy_read_ce"
    across["matrices"][0].update(
        key=across["key"],
        description="memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)",
        row_labels=labels,
        column_labels=labels,
        values=values,
        samples=[],
    )
    out["testcases"].append(across)
    return out


def test_an_mpi_report_keys_cells_by_their_devices_hosts(tmp_path: Path) -> None:
    """One report, two hosts: each host's own figures under its name; a pair across the
    ranks under its row's host, the column's host as its peer node."""
    base = tmp_path / "base.json"
    doc = simulated(base, "h200x2")
    path = tmp_path / "mpi.json"
    path.write_text(json.dumps(_mpi(doc)))
    key, cells = read_cells(path)
    assert key.node == "a"
    assert {c.node for c in cells} == {"a", "b"}
    own = [c for c in cells if c.link != "multinode"]
    assert len([c for c in own if c.node == "a"]) == len([c for c in own if c.node == "b"])
    across = [c for c in cells if c.link == "multinode"]
    assert len(across) == 12
    c = next(c for c in across if c.node == "a" and c.row == 1 and c.peer_node == "b")
    assert c.column in (0, 1) and c.peer_pci_bus_id and c.peer_pci_bus_id.startswith("0000:0")
    b_cells = [c for c in own if c.node == "b"]
    assert b_cells[0].uuid == "" and b_cells[0].pci_bus_id.startswith("0000:0")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("not json", "is not JSON"),
        ('{"schema_version": "1", "tool": "gpubw compare"}', "neither gpubw's JSON"),
        ("[1, 2]", "neither gpubw's JSON"),
        ('{"tool": "gpubw", "host": "x"}', "KeyError"),
    ],
)
def test_a_file_that_is_no_report_is_one_line_naming_it(
    tmp_path: Path, text: str, words: str
) -> None:
    """Not JSON, another JSON, a report without its members: a UsageError naming the file."""
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(UsageError, match=words) as info:
        read_cells(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_a_figure_that_is_no_number_is_refused(
    small: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """A cell holding a string or an infinity names the matrix and the cell."""
    _, doc = small
    for bad in ("55.5", float("inf")):
        broken = copy.deepcopy(doc)
        broken["testcases"][0]["matrices"][0]["values"][0][2] = bad
        path = tmp_path / "broken.json"
        path.write_text(json.dumps(broken))
        with pytest.raises(UsageError, match=r"host_to_device_memcpy_ce: cell 0,2"):
            read_cells(path)


def test_cell_is_the_record_part_b_builds_on() -> None:
    """The field names the history database stores."""
    import attrs

    names = [f.name for f in attrs.fields(Cell)]
    assert names[:16] == [
        "node", "testcase", "matrix", "kind", "unit", "row", "column", "link", "gpu_model",
        "uuid", "pci_bus_id", "peer_uuid", "peer_pci_bus_id", "size", "value", "report",
    ]  # fmt: skip
