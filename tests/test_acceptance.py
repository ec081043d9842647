"""Node acceptance end to end: --expect, gpubw check / expect-from, NVML facts, exit code 3."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest

from _cli import run_cli
from gpubw.acceptance import node as acceptance
from gpubw.acceptance.expect import Verdict, evaluate
from gpubw.backend.base import meminfo_huge_pages
from gpubw.backend.sim.backend import SimulatedBackend
from gpubw.backend.sim.facts import link_factor
from gpubw.backend.sim.presets import load_system, system_from_dict
from gpubw.model.errors import UsageError
from gpubw.model.options import EXIT_BELOW_EXPECTATION, RunOptions, exit_status
from gpubw.model.report_check import validate
from gpubw.model.report_io import dumps, report_from_dict
from gpubw.model.results import Report

H2D = "host_to_device_memcpy_ce"
FAST = ("-t", "0", "-b", "64MiB", "-i", "3")
#: as FAST at the size the built-in floors are for (--expect builtin refuses another)
BUILTIN_FAST = ("-t", "0", "-b", "512MiB", "-i", "3")
GPU = 5  # the GPU the faults are put on


def system_file(tmp_path: Path, doc: dict[str, Any], name: str = "sys.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def slow_host_link(tmp_path: Path, factor: float = 0.8) -> str:
    """h200x8 with GPU 5's host link at ``factor`` of the others'."""
    base = load_system("h200x8").host_links[0]
    link = {
        "h2d": {"ce": base.h2d.ce * factor, "sm": base.h2d.sm * factor},
        "d2h": {"ce": base.d2h.ce * factor, "sm": base.d2h.sm * factor},
    }
    ok = {"h2d": attrs.asdict(base.h2d), "d2h": attrs.asdict(base.d2h)}
    links = [link if i == GPU else ok for i in range(8)]
    return system_file(tmp_path, {"base": "h200x8", "host_links": links}, "slow.json")


def downtrained(tmp_path: Path) -> str:
    doc = {"base": "h200x8", "nvml": {"devices": {str(GPU): {"pcie": "gen4 x8 of gen5 x16"}}}}
    return system_file(tmp_path, doc, "down.json")


def json_report(capsys: Any, tmp_path: Path, *argv: str) -> tuple[int, dict[str, Any]]:
    out = tmp_path / "r.json"
    code, _, err = run_cli(capsys, *argv, "-j", "-o", str(out))
    assert "Traceback" not in err
    doc = json.loads(out.read_text())
    validate(doc)
    return code, doc


def failing(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [v for v in doc["verdicts"] if v["severity"] == "fail"]


# -- done means: the faulty GPU is named, exit 3; the healthy node exits 0 -------------------
def test_slow_host_link_names_the_gpu_and_exits_3(capsys, tmp_path):
    """GPU 5's host link at 80 %: --expect builtin fails that cell, names GPU 5 (index, bus
    id, UUID) and exits 3, in JSON and in text."""
    sim = slow_host_link(tmp_path)
    code, doc = json_report(
        capsys, tmp_path, "--simulate", sim, *BUILTIN_FAST, "--expect", "builtin"
    )
    assert code == EXIT_BELOW_EXPECTATION == doc["exit_code"] == 3
    bad = failing(doc)
    assert len(bad) == 2  # the built-in floor (512 MiB) and the peer-outlier rule
    dev = doc["devices"][GPU]
    for v in bad:
        dst = v["destination"]
        assert (dst["index"], dst["pci_bus_id"], dst["uuid"]) == (
            GPU, dev["pci_bus_id"], dev["uuid"])  # fmt: skip
    assert {v["rule"] for v in bad} == {"floor", "peer_outlier"}
    assert {v["testcase"] for v in bad} == {H2D}
    code, out, _ = run_cli(capsys, "--simulate", sim, *BUILTIN_FAST, "--expect", "builtin")
    assert code == 3
    assert f"FAIL {H2D} 512 MiB host -> GPU {GPU} ({dev['pci_bus_id']}, {dev['uuid']})" in out
    assert "BELOW EXPECTATION: 2 cells failed" in out


def test_downtrained_pcie_names_the_gpu_and_the_link(capsys, tmp_path):
    """A Gen4 x8 link in a Gen5 x16 slot: the host link runs at a quarter, the verdict names
    the GPU and says "PCIe Gen4 x8, max Gen5 x16"; exit 3."""
    code, doc = json_report(
        capsys, tmp_path, "--simulate", downtrained(tmp_path), *BUILTIN_FAST, "--expect", "builtin"
    )
    assert code == 3
    bads = failing(doc)  # the built-in floor and the peer-outlier rule
    assert {b["rule"] for b in bads} == {"floor", "peer_outlier"}
    bad = bads[0]
    assert all(b["destination"]["index"] == GPU for b in bads)
    assert bad["suspects"] == [f"GPU {GPU}: PCIe Gen4 x8, max Gen5 x16"]
    values = doc["testcases"][0]["matrices"][0]["values"][0]
    others = [v for i, v in enumerate(values) if i != GPU]
    assert values[GPU] == pytest.approx(min(others) / 4, rel=0.03)
    pcie = doc["devices"][GPU]["nvml"]["pcie"]
    assert pcie == {"gen": 4, "width": 8, "max_gen": 5, "max_width": 16}


def test_healthy_node_passes_with_exit_0(capsys, tmp_path):
    """The same run without a fault: no failed verdict, exit 0, a PASS line in text."""
    code, doc = json_report(
        capsys, tmp_path, "--simulate", "h200x8", *BUILTIN_FAST, "--expect", "builtin"
    )
    assert code == 0 and doc["exit_code"] == 0
    assert failing(doc) == []
    assert doc["expectations"]["source"] == "built-in h200-sxm.json"
    code, out, _ = run_cli(capsys, "--simulate", "h200x8", *BUILTIN_FAST, "--expect", "builtin")
    assert code == 0 and "PASS: every judged cell is as fast as expected" in out


def test_plain_run_is_not_judged(capsys, tmp_path):
    """Without --expect/--outlier-pct a run keeps nvbandwidth's exit codes: no verdicts."""
    code, doc = json_report(capsys, tmp_path, "--simulate", slow_host_link(tmp_path, 0.26), *FAST)
    assert code == 0 and "verdicts" not in doc and "expectations" not in doc


def test_outlier_pct_alone_judges_and_off_disables(capsys, tmp_path):
    """--outlier-pct alone turns judging on; at 70 the 80 % link passes; off: no outliers."""
    sim = slow_host_link(tmp_path)
    code, doc = json_report(capsys, tmp_path, "--simulate", sim, *FAST, "--outlier-pct", "90")
    assert code == 3 and doc["expectations"]["source"] == ""
    code, _, _ = run_cli(capsys, "--simulate", sim, *FAST, "--outlier-pct", "70")
    assert code == 0
    code, doc = json_report(capsys, tmp_path, "--simulate", sim, *FAST, "--outlier-pct", "off")
    assert code == 0 and doc["expectations"]["outlier_pct"] is None
    code, doc = json_report(capsys, tmp_path, "--simulate", sim, *FAST, "--outlier=95")
    assert code == 3 and doc["expectations"]["outlier_pct"] == 95  # an abbreviation counts
    assert doc["expectations"]["cv_threshold"] == 0.1


def test_floor_from_a_file(capsys, tmp_path):
    """A floor from an expectations file fails a cell below it even with outliers off."""
    exp = tmp_path / "e.json"
    exp.write_text(json.dumps({
        "format": "gpubw-expect-v1", "name": "strict",
        "rules": [{"testcase": H2D, "link": "host", "min": 60, "unit": "GB/s"}],
    }))  # fmt: skip
    args = ("--simulate", "h200x8", *FAST, "--expect", str(exp), "--outlier-pct", "off")
    code, doc = json_report(capsys, tmp_path, *args)
    assert code == 3
    assert {v["rule"] for v in failing(doc)} == {"floor"} and len(failing(doc)) == 8
    assert failing(doc)[0]["expected"] == pytest.approx(60e9)


def test_noisy_cells_are_warnings(capsys, tmp_path):
    """Samples with a large spread: noisy warnings with their CV, exit 0 (a warning)."""
    sim = system_file(tmp_path, {"base": "h200x2", "jitter": 0.5})
    args = ("--simulate", sim, *FAST, "--cv-threshold", "1%", "--outlier-pct", "off")
    code, doc = json_report(capsys, tmp_path, *args)
    noisy = [v for v in doc["verdicts"] if v["rule"] == "noisy"]
    assert code == 0 and noisy and all(v["severity"] == "warn" for v in noisy)
    m = doc["testcases"][0]["matrices"][0]
    assert noisy[0]["cv"] == pytest.approx(m["cv"][0][int(noisy[0]["column"])])
    assert all(c is None or c >= 0 for row in m["stdev"] for c in row)
    code, out, _ = run_cli(capsys, *args, "-v")
    assert f"CV (%) {H2D}" in out and "noisy: CV" in out


# -- exit codes ------------------------------------------------------------------------------
def test_exit_code_order():
    """130/143 beat 1, 1 beats 3, 3 beats 0."""
    assert exit_status(signal="SIGINT", failed=True, below_expectation=True) == 130
    assert exit_status(failed=True, below_expectation=True) == 1
    assert exit_status(below_expectation=True) == 3
    assert exit_status() == 0


def test_report_exit_code_with_a_failed_verdict_and_an_error(capsys, tmp_path):
    """A report with an Error testcase exits 1 even when a verdict failed too."""
    sim = slow_host_link(tmp_path)
    code, doc = json_report(capsys, tmp_path, "--simulate", sim, "-t", "0", "nope", "-b",
                            "512MiB", "--expect", "builtin")  # fmt: skip
    assert failing(doc) and code == 1 == doc["exit_code"]


# -- gpubw check and gpubw expect-from -------------------------------------------------------
def test_check_and_expect_from(capsys, tmp_path):
    """expect-from a healthy run; check the healthy run against it (0) and a slow one (3)."""
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    run_cli(capsys, "--simulate", "h200x8", *FAST, "-j", "-o", str(good))
    run_cli(capsys, "--simulate", slow_host_link(tmp_path), *FAST, "-j", "-o", str(bad))
    exp = tmp_path / "exp.json"
    code, _, err = run_cli(capsys, "expect-from", str(good), "--tolerance", "5%", "-o", str(exp))
    assert code == 0, err
    doc = json.loads(exp.read_text())
    assert doc["format"] == "gpubw-expect-v1" and doc["tolerance"] == 0.05
    code, out, _ = run_cli(capsys, "check", str(good), "--expect", str(exp))
    assert code == 0 and "PASS" in out
    off = ("--outlier-pct", "off")
    code, out, _ = run_cli(capsys, "check", str(bad), "--expect", str(exp), *off)
    assert code == 3 and f"GPU {GPU}" in out and "floor" in out
    code, out, _ = run_cli(capsys, "check", str(bad), "--expect", str(exp), *off, "-j")
    result = json.loads(out)
    assert result["exit_code"] == 3 and {v["rule"] for v in result["verdicts"]} == {"floor"}


@pytest.mark.parametrize(
    "command",
    [
        ["check", "{good}", "-o", "{good}"],
        ["check", "{good}", "--expect", "{exp}", "-o", "{exp}"],
        ["expect-from", "{good}", "-o", "{good}"],
        ["compare", "{good}", "{exp}", "-o", "{exp}"],
    ],
)
def test_output_naming_an_input_is_refused(capsys, tmp_path, command):
    """check, expect-from and compare with -o naming a file they read: exit 2, one line
    naming it, the file untouched (issue 33 item 10; before: it was overwritten)."""
    good, exp = tmp_path / "good.json", tmp_path / "exp.json"
    run_cli(capsys, "--simulate", "h200x2", *FAST, "-j", "-o", str(good))
    run_cli(capsys, "expect-from", str(good), "-o", str(exp))
    before = {p: p.read_bytes() for p in (good, exp)}
    argv = [a.format(good=good, exp=exp) for a in command]
    code, _, err = run_cli(capsys, *argv)
    assert code == 2 and "is the file" in err and "would replace it" in err, err
    assert {p: p.read_bytes() for p in (good, exp)} == before


def test_check_and_expect_from_read_nvbandwidth_json(capsys, tmp_path):
    """check and expect-from judge a real nvbandwidth -j run; failed cells name the GPU. The
    built-in floors (512 MiB) cannot judge it (its JSON has no size): refused, never PASS."""
    real = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
    run = str(real / "nvbandwidth-v0.8-h200x2-2026-12-01.json")
    code, out, err = run_cli(capsys, "check", run, "--expect", "builtin")
    assert code == 2 and "PASS" not in out and "only at 512 MiB" in err
    exp = tmp_path / "exp.json"
    code, _, err = run_cli(capsys, "expect-from", run, "-o", str(exp))
    assert code == 0, err
    doc = json.loads(exp.read_text())
    rule = next(r for r in doc["rules"] if r["testcase"] == H2D)
    rule["min"] *= 1.2  # a floor above what the run measured
    exp.write_text(json.dumps(doc))
    code, out, _ = run_cli(capsys, "check", run, "--expect", str(exp), "--outlier-pct", "off")
    assert code == 3
    assert f"FAIL {H2D} host -> GPU 1 (00000000:00:07):" in out
    assert "(GPU 0 (00000000:00:06); GPU 1 (00000000:00:07))" in out


def test_check_without_expectations_uses_the_outlier_rule(capsys, tmp_path):
    """gpubw check REPORT alone judges by the peer-outlier and noise rules."""
    bad = tmp_path / "bad.json"
    run_cli(capsys, "--simulate", slow_host_link(tmp_path), *FAST, "-j", "-o", str(bad))
    code, out, _ = run_cli(capsys, "check", str(bad))
    assert code == 3 and "outlier limit" in out


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"error": "incomplete report: written after 1 of 3 testcase steps"}, "did not complete"),
        ({"status": "Error"}, "testcase(s) did not pass"),
    ],
)
def test_check_never_accepts_an_incomplete_or_failed_run(capsys, tmp_path, change, said):
    """A partial report (an MPI run's -o rewritten after each testcase, the run then lost)
    or one with a failed testcase is not accepted however fast its cells: exit 1, saying
    why (it once judged such a report PASS, exit 0)."""
    path = tmp_path / "r.json"
    run_cli(capsys, "--simulate", "h200x2", *FAST, "-t", "0", "1", "-j", "-o", str(path))
    doc = json.loads(path.read_text())
    if "error" in change:
        doc["error"], doc["exit_code"] = change["error"], 1
    else:
        doc["testcases"][1].update(status="Error", message="boom", matrices=[])
        doc["exit_code"] = 1
    path.write_text(json.dumps(doc))
    code, out, _ = run_cli(capsys, "check", str(path))
    assert code == 1 and "NOT ACCEPTED" in out and said in out
    code, out, _ = run_cli(capsys, "check", str(path), "-j")
    result = json.loads(out)
    assert code == result["exit_code"] == 1 and said in result["report_problem"]


def test_verdicts_survive_the_json_round_trip(capsys, tmp_path):
    """report_from_dict rebuilds the verdicts, suspects included."""
    _code, doc = json_report(
        capsys, tmp_path, "--simulate", downtrained(tmp_path), *BUILTIN_FAST, "--expect", "builtin"
    )
    report = report_from_dict(doc)
    assert all(isinstance(v, Verdict) for v in report.verdicts)
    assert report.exit_code == 3
    assert json.loads(dumps(report))["verdicts"] == doc["verdicts"]


# -- bad expectations files and option values (docs/failures.md) -----------------------------
@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("{not json", ["is not JSON", "line 1"]),
        ('{"format": "gpubw-expect-v1", "rules": [{"testcase": "x", "min": 1, "color": 2}]}',
         ["not a valid gpubw expectations file", "/rules/0", "color", "allowed"]),
        ('{"format": "gpubw-expect-v1", "rules": [{"testcase": "x"}]}',
         ["a rule needs a floor 'min' or a ceiling 'max'"]),
        ('{"format": "gpubw-expect-v1", "rules": [{"testcase": "x", "min": 9, "max": 1}]}',
         ["min 9 is above max 1"]),
        ('{"format": "gpubw-expect-v2", "rules": []}', ["/format", "gpubw-expect-v1"]),
    ],
)  # fmt: skip
def test_bad_expectations_file_is_a_usage_error(capsys, tmp_path, content, words):
    """A bad --expect file: exit 2 before anything runs, naming the file and the problem."""
    path = tmp_path / "bad-exp.json"
    path.write_text(content)
    out_file = tmp_path / "r.json"
    code, out, err = run_cli(capsys, "--simulate", "h200x2", *FAST, "--expect", str(path),
                             "-o", str(out_file))  # fmt: skip
    assert code == 2 and out == "" and not out_file.exists()
    assert str(path) in err and all(w in err for w in words), err
    code, _, err2 = run_cli(capsys, "check", str(path), "--expect", str(path))
    assert code == 2 and "Traceback" not in err2


def test_missing_expectations_file(capsys, tmp_path):
    """An unreadable --expect path: exit 2 naming it."""
    code, _, err = run_cli(capsys, "--simulate", "h200x2", *FAST, "--expect", str(tmp_path / "no"))
    assert code == 2 and "cannot read expectations file" in err


def test_builtin_without_a_match_is_a_usage_error(capsys, tmp_path):
    """--expect builtin on devices no built-in file covers: exit 2, naming the devices and the
    built-ins, no report written."""
    out_file = tmp_path / "r.json"
    sim = tmp_path / "rtx.json"
    sim.write_text('{"base": "pcie4", "device": {"name": "NVIDIA RTX 4090"}}', encoding="utf-8")
    code, _out, err = run_cli(capsys, "--simulate", str(sim), *BUILTIN_FAST, "--expect", "builtin",
                             "-o", str(out_file))  # fmt: skip
    assert code == 2 and not out_file.exists()
    assert "no built-in expectations for NVIDIA RTX 4090" in err and "0x2335" in err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--outlier-pct", "0"], ["(0, 100]"]),
        (["--outlier-pct", "150"], ["(0, 100]"]),
        (["--outlier-pct", "lots"], ["not a percentage"]),
        (["--cv-threshold", "1.5"], ["below 100%"]),
        (["--cv-threshold", "-1%"], ["below 100%"]),
    ],
)
def test_bad_judge_options(capsys, argv, words):
    """Bad --outlier-pct / --cv-threshold values: exit 2 naming the value."""
    code, _, err = run_cli(capsys, "--simulate", "h200x2", *FAST, *argv)
    assert code == 2 and all(w in err for w in words), err


def test_expect_from_a_fleet_of_reports(capsys, tmp_path):
    """expect-from with three reports writes the median floors; each run passes check."""
    paths = []
    for seed in (1, 2, 3):
        path = tmp_path / f"good{seed}.json"
        run_cli(capsys, "--simulate", "h200x2", *FAST, "-j", "-o", str(path))
        paths.append(str(path))
    exp = tmp_path / "fleet.json"
    code, _, err = run_cli(capsys, "expect-from", *paths, "-o", str(exp))
    assert code == 0, err
    doc = json.loads(exp.read_text(encoding="utf-8"))
    assert doc["rules"] and all(r["note"].startswith("median of 3") for r in doc["rules"])
    code, out, _ = run_cli(capsys, "check", paths[0], "--expect", str(exp))
    assert code == 0 and "PASS" in out


def test_bad_tolerance_and_unusable_report(capsys, tmp_path):
    """expect-from: a tolerance of 100 % or more, and a report without a Passed testcase."""
    good = tmp_path / "g.json"
    run_cli(capsys, "--simulate", "h200x2", "-t", "nope", "-j", "-o", str(good))
    code, _, err = run_cli(capsys, "expect-from", str(good), "--tolerance", "100%")
    assert code == 2 and "below 100%" in err
    code, _, err = run_cli(capsys, "expect-from", str(good))
    assert code == 2 and "no Passed testcase" in err


# -- NVML facts in the report, other processes -----------------------------------------------
def test_nvml_facts_in_the_report(capsys, tmp_path):
    """devices[i].nvml (start) and nvml_end (end) carry PCIe, NVLink, ECC, clocks; -v prints
    them."""
    code, doc = json_report(capsys, tmp_path, "--simulate", "h200x2", *FAST)
    assert code == 0
    d = doc["devices"][1]
    assert d["nvml"]["pcie"] == {"gen": 5, "width": 16, "max_gen": 5, "max_width": 16}
    assert d["nvml"]["nvlink"]["links_active"] == 18 and d["nvml"]["nvlink"]["peers"] == [0]
    assert d["nvml_end"]["clocks"]["sm_mhz"] == 1980 and d["nvml"]["uuid"] == d["uuid"]
    assert doc["nvml"]["available"] and doc["nvml"]["simulated"]
    _code, out, _ = run_cli(capsys, "--simulate", "h200x2", *FAST, "-v")
    assert "  PCIe Gen5 x16" in out and "NVLink 18/18 links active" in out


def test_clock_reasons_are_suspects(capsys, tmp_path):
    """A power-capped GPU's failed verdict says so."""
    base = load_system("h200x8").host_links[0]
    slow = {"h2d": {"ce": base.h2d.ce * 0.5, "sm": base.h2d.sm * 0.5}}
    doc = {
        "base": "h200x8",
        "host_links": [slow if i == 2 else {} for i in range(8)],
        "nvml": {"devices": {"2": {"clocks": {"sm_mhz": 900, "reasons": ["sw_power_cap"]}}}},
    }
    sim = system_file(tmp_path, doc)  # fmt: skip
    code, rep = json_report(capsys, tmp_path, "--simulate", sim, *FAST, "--outlier-pct", "90")
    (bad,) = failing(rep)
    assert code == 3 and bad["suspects"] == ["GPU 2: clocks held down: sw_power_cap"]


def test_other_processes_warning(capsys, tmp_path):
    """Another program's process on a GPU: a warning naming the GPU and the pid, in JSON and
    text, also without judging."""
    sim = system_file(tmp_path, {"base": "h200x2", "other_processes": {"1": [4242, 77]}})
    code, doc = json_report(capsys, tmp_path, "--simulate", sim, *FAST)
    (w,) = [w for w in doc["warnings"] if "other compute process" in w]
    assert code == 0
    assert "GPU 1 (" in w and doc["devices"][1]["uuid"] in w and "pid 4242, 77" in w
    assert f"at the start of {H2D} (64 MiB)" in w and f"at the end of {H2D} (64 MiB)" in w
    assert doc["devices"][1]["nvml"]["processes"] == [
        {"pid": 4242, "used_bytes": None}, {"pid": 77, "used_bytes": None}]  # fmt: skip
    code, out, _ = run_cli(capsys, "--simulate", sim, *FAST)
    assert "WARNING: GPU 1" in out


def _started(watch: Any, system: Any) -> Any:
    """``system``, after the watch was told the run started on it."""
    watch.run_started(Report("gpubw", "", "", False, "", "", {}, devices=()), system)
    return system


def test_own_process_is_not_a_warning(monkeypatch):
    """gpubw's own pid among NVML's processes is not another program."""
    model = attrs.evolve(load_system("h200x2"), other_processes={"0": (1234,)})
    monkeypatch.setattr(acceptance, "process_ids", lambda: frozenset({1234}))
    from gpubw.backend.sim.backend import SimulatedBackend
    from gpubw.memory.system import System

    watch = acceptance.RunWatch()
    _started(watch, System(SimulatedBackend(model), RunOptions())).close()
    watch._check_processes("start of x")
    assert watch.process_warnings() == []


def test_the_runs_other_ranks_are_not_a_warning() -> None:
    """The pids of the run's other ranks on this host (the world's host_pids) among NVML's
    processes are the run itself, not another program; a stranger still is."""
    model = attrs.evolve(load_system("h200x2"), other_processes={"0": (5678, 91)})
    from gpubw.backend.sim.backend import SimulatedBackend
    from gpubw.memory.system import System
    from gpubw.world import SingleWorld

    world = SingleWorld()
    world.host_pids = world.host_pids | {5678}  # as an MPI world gathers them
    watch = acceptance.RunWatch()
    system = System(SimulatedBackend(model), RunOptions(), world=world)
    _started(watch, system).close()
    watch._check_processes("start of x")
    (warning,) = watch.process_warnings()
    assert "pid 91," in warning and "5678" not in warning


def test_a_process_seen_only_during_a_testcase_is_said_so() -> None:
    """The sampler's sighting reads "pid N, during X" (a call on the H200 printed "at the
    during X")."""
    model = attrs.evolve(load_system("h200x2"), other_processes={"0": (91,)})
    from gpubw.backend.sim.backend import SimulatedBackend
    from gpubw.memory.system import System

    watch = acceptance.RunWatch()
    _started(watch, System(SimulatedBackend(model), RunOptions())).close()
    watch._seen[(0, (91,))] = ["during x (64 MiB)"]
    (warning,) = watch.process_warnings()
    assert "pid 91, during x (64 MiB): figures" in warning and "at the during" not in warning


# -- the simulated model ---------------------------------------------------------------------
def test_link_factor_and_bad_system_file_keys():
    """Lane rates scale the host link; bad nvml / other_processes keys are usage errors."""
    assert link_factor("gen4 x8 of gen5 x16") == 0.25
    assert link_factor("gen5 x16") == 1.0
    assert link_factor("gen5 x8 of gen5 x16") == 0.5
    for doc, words in [
        ({"nvml": {"devices": {"9": {}}}}, "'0'..'1'"),
        ({"nvml": {"devices": {"0": {"pcie": "fast"}}}}, "genG xW"),
        ({"nvml": {"device": {"colour": 1}}}, "unknown fact"),
        ({"nvml": {"gpu": {}}}, "'device'"),
        ({"other_processes": {"0": ["x"]}}, "process ids"),
        ({"other_processes": {"5": [1]}}, "not a device index"),
        ({"huge_pages": {"free": -1}}, "huge_pages.free"),
    ]:
        with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(".", r"\.")):
            system_from_dict({"base": "h200x2", **doc})


# -- host huge pages -------------------------------------------------------------------------
def test_huge_pages_none_free_is_a_clear_error(capsys, tmp_path):
    """--host-huge-pages with no free huge pages: exit 1 before anything runs, saying so."""
    sim = system_file(tmp_path, {"base": "h200x2", "huge_pages": {"free": 0}})
    code, _out, err = run_cli(capsys, "--simulate", sim, *FAST, "--host-huge-pages")
    assert code == 1 and "0 huge pages" in err and "--host-huge-pages" in err


def test_huge_pages_run_and_run_out(capsys, tmp_path):
    """Enough huge pages: the run passes and records the option; too few for every buffer of
    a testcase: that testcase is an Error naming mmap(MAP_HUGETLB), the others run."""
    sim = system_file(tmp_path, {"base": "h200x2", "huge_pages": {"free": 4096}})
    code, doc = json_report(capsys, tmp_path, "--simulate", sim, *FAST, "--host-huge-pages")
    assert code == 0 and doc["options"]["host_huge_pages"] is True
    tight = system_file(tmp_path, {"base": "h200x2", "huge_pages": {"free": 40}}, "t.json")
    code, doc = json_report(
        capsys, tmp_path, "--simulate", tight, "-t", "0", "2", "-b", "64MiB", "--host-huge-pages"
    )
    statuses = [t["status"] for t in doc["testcases"]]
    assert code == 1 and "Error" in statuses
    assert any("MAP_HUGETLB" in t["message"] for t in doc["testcases"])


def test_huge_pages_freed_with_their_buffers():
    """The simulated backend gives huge pages back when a host buffer is freed."""
    b = SimulatedBackend(load_system("h200x1"))
    b.enable_host_huge_pages(64 << 20)
    before = b.huge_pages()
    p = b.alloc_host(64 << 20, 0)
    assert b.huge_pages() == (before[0], before[1] - 32)
    b.free_host(p)
    assert b.huge_pages() == before


def test_meminfo_huge_pages(tmp_path):
    """/proc/meminfo's Hugepagesize and HugePages_Free are read; a file without them: None."""
    f = tmp_path / "meminfo"
    f.write_text("MemTotal: 100 kB\nHugePages_Total: 8\nHugePages_Free: 3\nHugepagesize: 2048 kB\n")
    assert meminfo_huge_pages(str(f)) == (2 << 20, 3)
    f.write_text("MemTotal: 100 kB\n")
    assert meminfo_huge_pages(str(f)) is None


def test_judge_keeps_evaluate_verdicts():
    """judge() adds suspects and the record, nothing else: the same verdicts as evaluate."""
    from gpubw.api import run

    report = run(["0"], sizes=[64 << 20], simulate="h200x2")
    judged = acceptance.judge(report, None, 99.99, None)
    assert [v.as_dict()["measured"] for v in judged.verdicts] == [
        v.measured for v in evaluate(report, None, 99.99, None)
    ]
    assert judged.expectations == {"name": "", "source": "", "outlier_pct": 99.99,
                                   "cv_threshold": None}  # fmt: skip


def test_streamed_text_has_verdicts_after_each_matrix(capsys, tmp_path):
    """Printed as the run goes, each failed cell follows its matrix, then the summary repeats
    it; a report written to a file (-o) reads the same."""
    sim = downtrained(tmp_path)
    args = ("--simulate", sim, "-t", "0", "1", "-b", "512MiB", "--expect", "builtin", "-q")
    code, out, _ = run_cli(capsys, *args)
    fail = f"FAIL {H2D} 512 MiB host -> GPU {GPU}"
    assert code == 3 and out.count(fail) == 4  # floor and outlier, streamed and summed up
    assert out.index(fail) < out.index("Running device_to_host_memcpy_ce.") < out.index("Verdicts")
    target = tmp_path / "r.txt"
    run_cli(capsys, *args, "-o", str(target))
    assert target.read_text() == out


def test_end_facts_are_read_as_the_system_closes(monkeypatch):
    """The end-of-run facts are read first thing in System.close, while the backend (and its
    NVML session) is still open, and finish() uses them without asking again."""
    from gpubw.backend.sim.backend import SimulatedBackend
    from gpubw.memory.system import System

    backend = SimulatedBackend(load_system("h200x2"))
    calls = []
    facts = backend.node_facts
    monkeypatch.setattr(backend, "node_facts", lambda: calls.append(backend.closed) or facts())
    watch = acceptance.RunWatch()
    system = _started(watch, System(backend, RunOptions()))
    assert calls == [False] and watch.end is None
    system.close()
    assert calls == [False, False] and watch.end is not None  # read before the backend closed
    report = Report("gpubw", "", "", False, "", "", {}, devices=watch.devices)
    assert watch.finish(report).devices[0]["nvml_end"] and len(calls) == 2
