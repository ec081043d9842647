"""gpubw.cli.fleet: ``gpubw fleet``'s options, output file and exit codes (0 within, 3
findings, 2 bad input, 1 an error)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from _fleet import simulated, slow_host_link, write_fleet
from gpubw.cli import command as cli
from gpubw.model import schemas


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A healthy fleet of 8 h200x2 nodes, and one with n002's GPU 1 host link at 80 %."""
    root = tmp_path_factory.mktemp("fleets")
    doc = simulated(root / "base.json", "h200x2", host="base")
    write_fleet(doc, root / "good", 8, noise=0.003)
    write_fleet(doc, root / "bad", 8, {"n002": slow_host_link(1)}, noise=0.003)
    return root / "good", root / "bad"


def _run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["fleet", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_healthy_fleet_exits_0(capsys: Any, folders: tuple[Path, Path]) -> None:
    """Every node within: 0, and the text says so."""
    code, out, _ = _run(capsys, str(folders[0]))
    assert code == 0 and "0 finding(s): every node within its fleet" in out


def test_findings_exit_3(capsys: Any, folders: tuple[Path, Path]) -> None:
    """A slow host link: 3, the finding named."""
    code, out, _ = _run(capsys, str(folders[1]))
    assert code == 3 and "  1. GPU 1 of node n002: host link:" in out


def test_thresholds_are_options(capsys: Any, folders: tuple[Path, Path]) -> None:
    """--threshold 25% and --z -30: the 20 % drop is within; 0.1 and 10% are the same."""
    assert _run(capsys, str(folders[1]), "--threshold", "25%", "--z", "-30")[0] == 0
    assert (
        _run(capsys, str(folders[1]), "--threshold", "0.1")[1]
        == _run(capsys, str(folders[1]), "--threshold", "10%")[1]
    )


def test_json_to_a_file(capsys: Any, folders: tuple[Path, Path], tmp_path: Path) -> None:
    """-o FILE: nothing on stdout, the file valid against fleet-v1, the exit code its own."""
    target = tmp_path / "fleet.json"
    code, out, _ = _run(capsys, str(folders[1]), "--format", "json", "-o", str(target))
    assert (code, out) == (3, "")
    doc = json.loads(target.read_text())
    assert schemas.errors(schemas.FLEET, doc, closed=True) == [] and doc["exit_code"] == 3


def test_openmetrics_to_stdout(capsys: Any, folders: tuple[Path, Path]) -> None:
    """--format openmetrics: gauges, # EOF."""
    code, out, _ = _run(capsys, str(folders[0]), "--format", "openmetrics")
    assert code == 0 and out.endswith("# EOF\n") and "gpubw_fleet_gpu_ratio{" in out


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--threshold", "150%"], "argument --threshold: '150%' must be in (0, 1)"),
        (["--threshold", "ten"], "argument --threshold: 'ten' is not a fraction"),
        (["--z", "4"], "argument --z: '4' must be a negative number"),
        (["--z", "nan"], "argument --z: 'nan' must be a finite number"),
        (["--min-nodes", "2"], "argument --min-nodes: '2' must be at least 3"),
        (["--format", "xml"], "argument --format: invalid choice: 'xml'"),
    ],
)
def test_bad_options_are_one_line_exit_2(
    capsys: Any, folders: tuple[Path, Path], argv: list[str], words: str
) -> None:
    """Each bad value: exit 2, one line naming it."""
    code, _, err = _run(capsys, str(folders[0]), *argv)
    assert code == 2 and words in err and err.count("\n") == 1


def test_bad_paths_exit_2(capsys: Any, tmp_path: Path) -> None:
    """A missing path, a named file that is no report: exit 2 naming it."""
    code, _, err = _run(capsys, str(tmp_path / "nope"))
    assert code == 2 and "nope: no such file or folder" in err
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    code, _, err = _run(capsys, str(bad))
    assert code == 2 and f"{bad}: not a report gpubw fleet can read" in err


def test_output_over_an_input_is_refused(capsys: Any, folders: tuple[Path, Path]) -> None:
    """-o naming one of the reports read: exit 2, nothing replaced."""
    victim = folders[0] / "n000.json"
    before = victim.read_bytes()
    code, _, err = _run(capsys, str(victim), str(folders[0]), "-o", str(victim))
    assert code == 2 and "n000.json" in err and victim.read_bytes() == before


def test_an_output_that_cannot_be_written_exits_1(capsys: Any, folders: tuple[Path, Path]) -> None:
    """-o /dev/full (the write fails): exit 1, an error, one line naming -o."""
    code, out, err = _run(capsys, str(folders[0]), "-o", "/dev/full")
    assert (code, out) == (1, "") and "gpubw fleet: -o /dev/full: No space left on device" in err


def test_fleet_has_completion(capsys: Any) -> None:
    """The bash completion knows the sub-command and its options."""
    assert cli.main(["completion", "bash"]) == 0
    out = capsys.readouterr().out
    assert "fleet" in out and "--min-nodes" in out


def test_nothing_to_judge_exits_2(capsys: Any, folders: tuple[Path, Path]) -> None:
    """One report (a fleet needs 5 nodes): exit 2 naming why, never a silent 0."""
    code, out, err = _run(capsys, str(folders[0] / "n000.json"))
    assert (code, out) == (2, "")
    assert "nothing to judge: no fleet of 5 node(s) (--min-nodes)" in err
    assert "n000: only 1 node(s) of 2x NVIDIA H200" in err


def test_a_fleet_of_nvbandwidth_reports(capsys: Any, tmp_path: Path) -> None:
    """nvbandwidth v0.8 JSON without host names: judged, the nodes named after the files
    and the text says so; one slow host link found."""
    source = (
        Path(__file__).parents[1] / "benchmarks/results/nvbandwidth-v0.8-h200x2-2026-11-29.json"
    )
    doc = json.loads(source.read_text(encoding="utf-8"))
    nv = doc["nvbandwidth"]
    nv["GPU Device list"] = [d.rsplit(": (", 1)[0] for d in nv["GPU Device list"]]
    h2d = next(t for t in nv["testcases"] if t["name"] == "host_to_device_memcpy_ce")
    first = float(h2d["bandwidth_matrix"][0][1])
    for i in range(6):
        h2d["bandwidth_matrix"][0][1] = f"{first * (0.7 if i == 4 else 1 + i / 1000):g}"
        (tmp_path / f"gpu{i:02d}.json").write_text(json.dumps(doc), encoding="utf-8")
    code, out, _ = _run(capsys, str(tmp_path))
    assert code == 3
    assert "note: 6 node(s) named after their report file (nvbandwidth's JSON names no host)" in out
    assert "  1. GPU 1 of node gpu04: host link: 1 of " in out


def test_names_from_the_files_cannot_drive_the_terminal(
    capsys: Any, folders: tuple[Path, Path], tmp_path: Path
) -> None:
    """A host name with ESC and CR LF is shown escaped in the text, on stdout and in -o."""
    for path in folders[1].iterdir():
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc["host"] == "n002":
            doc["host"] = "n002\x1b[2J\r\nn999"
        (tmp_path / path.name).write_text(json.dumps(doc), encoding="utf-8")
    code, out, _ = _run(capsys, str(tmp_path))
    assert code == 3 and "node n002\\x1b[2J\\r\\nn999: host link" in out and "\x1b" not in out
    target = tmp_path.parent / f"{tmp_path.name}.txt"
    assert _run(capsys, str(tmp_path), "-o", str(target))[0] == 3
    assert "\x1b" not in target.read_text(encoding="utf-8")
