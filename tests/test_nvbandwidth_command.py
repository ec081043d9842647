"""The gpubw-nvbandwidth command (gpubw.cli.nvbandwidth): nvbandwidth's options, output and
exit codes, on a simulated system chosen by GPUBW_SIMULATE."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpubw.cli import nvbandwidth as nvb

FAST = ["-b", "1", "-i", "1", "--loopCount", "2"]
SYSTEM = "h200x2"


@pytest.fixture(autouse=True)
def simulated(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs on a simulated 2 x H200 outside any MPI launch."""
    monkeypatch.setenv(nvb.SIMULATE_ENV, SYSTEM)
    for name in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = nvb.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_run_is_nvbandwidths_text_and_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    """A run: nvbandwidth's text, marked simulated, unknown testcase as ERROR line, exit 0."""
    code, out, err = run(capsys, *FAST, "-t", "0", "34", "bogus")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[:2] == ["nvbandwidth Version: v0.8",
                         f"Built from Git version: gpubw-0.1.0 (SIMULATED {SYSTEM})"]  # fmt: skip
    assert "Driver Version: 580.159.04 (simulated)" in lines
    assert "ERROR: Testcase bogus not found!" in lines
    assert out.endswith("and system topology.\n\n")
    for gpubw_only in ("Backend:", "(unit ", "read_write", "SIMULATED SYSTEM"):
        assert gpubw_only not in out


@pytest.mark.parametrize("flag", [["-j"], ["-F", "json"], ["--format=json"]])
def test_json_output(capsys: pytest.CaptureFixture[str], flag: list[str]) -> None:
    """-j (or v0.10's -F json): nvbandwidth's document on standard output, nothing else."""
    code, out, err = run(capsys, *FAST, *flag, "-v", "-t", "0")
    assert code == 0, err
    nv = json.loads(out)["nvbandwidth"]
    assert nv["git_version"] == f"gpubw-0.1.0 (SIMULATED {SYSTEM})"
    (t,) = nv["testcases"]
    assert t["status"] == "Passed" and {"min", "max", "average"} <= set(t)


def test_invalid_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    """Bad arguments: nvbandwidth's block on stdout (text even with -j), reason on stderr, 1."""
    code, out, err = run(capsys, "-j", "-b", "x")
    assert code == 1
    assert "\nERROR: Invalid Arguments \nnvbandwidth -j -b x :\n\nnvbandwidth CLI:\n" in out
    assert out.endswith("\n\n")
    assert (
        err == "gpubw-nvbandwidth: error: the argument ('x') for option '--bufferSize' is invalid\n"
    )


def test_pair_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """v0.10's --pair: gpubw cannot honour it, so it says so in one line and exits 1."""
    code, out, err = run(capsys, "-t", "4", "--pair", "GPU-a", "GPU-b")
    assert (code, out) == (1, "")
    assert len(err.splitlines()) == 1 and err.startswith("gpubw-nvbandwidth: error: --pair ")


def test_help_list_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    """-h, -l, --version exit 0 (nothing with -j); -l: the single-node build and gpubw's own."""
    code, out, _ = run(capsys, "-h")
    assert code == 0 and out.splitlines()[3] == "nvbandwidth CLI:"
    assert run(capsys, "-h", "-j")[:2] == (0, "")
    assert run(capsys, "-l", "-j")[:2] == (0, "")
    assert run(capsys, "--version")[1].startswith("nvbandwidth Version: v0.8\n")
    code, out, _ = run(capsys, "-l")
    indexes = [int(line.split(",")[0]) for line in out.splitlines() if line[:1].isdigit()]
    assert code == 0 and indexes[:35] == list(range(35)) and 48 in indexes
    assert not set(range(35, 48)) & set(indexes)
    assert "Index, Name:\n\tDescription\n=======================\n0, host_to_device" in out


def test_testcase_with_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    """-t with -p: nvbandwidth's message (standard error, or the JSON's error), exit 1."""
    code, out, err = run(capsys, "-t", "0", "-p", "host")
    assert code == 1 and err == nvb.TWO_SELECTIONS + "\n"
    assert out.startswith("nvbandwidth Version")
    code, out, _ = run(capsys, "-j", "-t", "0", "-p", "host")
    assert code == 1 and json.loads(out)["nvbandwidth"]["error"] == nvb.TWO_SELECTIONS


def test_prefixes_without_a_match(capsys: pytest.CaptureFixture[str]) -> None:
    """A -p that matches nothing (multinode outside MPI included): exit 1."""
    for prefix in ("zzz", "multinode"):
        code, _, err = run(capsys, "-p", prefix)
        assert code == 1 and err == nvb.NO_PREFIX_MATCH + "\n"


def test_a_failing_testcase_ends_the_run(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A verification failure ends the run after its Running line, reason on stderr, exit 1."""
    system = tmp_path / "bad.json"
    system.write_text(json.dumps({"base": SYSTEM, "faults": {"corrupt_copy": True}}))
    monkeypatch.setenv(nvb.SIMULATE_ENV, str(system))
    code, out, err = run(capsys, *FAST, "-t", "0", "1")
    assert code == 1
    assert out.endswith("Running host_to_device_memcpy_ce.\n")
    assert err.startswith("gpubw-nvbandwidth: error: host_to_device_memcpy_ce: verification")
    code, out, _ = run(capsys, *FAST, "-j", "-t", "0", "1")
    nv = json.loads(out)["nvbandwidth"]
    assert code == 1 and [t["status"] for t in nv["testcases"]] == ["Running"]
    assert "verification failed" in nv["error"]


def test_values_gpubw_refuses(capsys: pytest.CaptureFixture[str]) -> None:
    """-i 0 parses (nvbandwidth would print zeros); gpubw refuses it: one line, exit 1."""
    code, out, err = run(capsys, "-i", "0", "-t", "0")
    assert (code, out) == (1, "")
    assert err.startswith("gpubw-nvbandwidth: error: argument -i/--samples") and "at least 1" in err


def test_options_become_gpubws() -> None:
    """Every option nvbandwidth has, as gpubw's; no -t/-p: the single-node build's testcases."""
    values = {"bufferSize": 64, "testSamples": 5, "loopCount": 4, "verbose": True,
              "skipVerification": True, "disableAffinity": True, "useMean": True,
              "useHugePages": True, "format": "perf"}  # fmt: skip
    args = nvb.translate(values, as_json=False, multinode=False)
    assert args[:3] == ["-q", "--format", "nvbandwidth"]
    for part in (["-b", "64"], ["-i", "5"], ["--loop-count", "4"], ["--simulate", SYSTEM]):
        assert " ".join(part) in " ".join(args)
    assert {"-v", "-s", "-d", "-m", "--host-huge-pages", "--perf-formatter"} <= set(args)
    keys = args[args.index("-t") + 1 :]
    assert keys[0] == "host_to_device_memcpy_ce" and "device_local_copy_sm" in keys
    assert not [k for k in keys if k.startswith("multinode_")]
    assert nvb.translate({}, as_json=True, multinode=True)[:3] == ["-q", "--format",
                                                                  "nvbandwidth-json"]  # fmt: skip


def test_target_num_pairs(capsys: pytest.CaptureFixture[str]) -> None:
    """-P is --sample-pairs under MPI; a single-node run ignores it with a warning (as v0.9)."""
    args = nvb.translate({"targetNumPairs": 8}, as_json=False, multinode=True)
    assert args[args.index("--sample-pairs") + 1] == "8"
    assert "--sample-pairs" not in nvb.translate({"targetNumPairs": 8}, False, False)
    code, out, _ = run(capsys, *FAST, "-P", "8", "-t", "0")
    assert code == 0 and nvb.PAIRS_IGNORED in out.splitlines()


def test_no_driver_says_how_to_simulate(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a driver (and GPUBW_SIMULATE): exit 1 and the variable to set instead."""
    import gpubw.backend.cuda as cuda_backend
    from gpubw.model.errors import NoDriverError

    def no_driver(self: Any, *a: Any, **k: Any) -> None:
        raise NoDriverError("no NVIDIA driver was found (--simulate h200x2 runs a model)")

    monkeypatch.setattr(cuda_backend.CudaBackend, "__init__", no_driver)
    monkeypatch.delenv(nvb.SIMULATE_ENV)
    code, out, err = run(capsys, "-t", "0")
    assert (code, out) == (1, "")
    assert "GPUBW_SIMULATE=h200x2 gpubw-nvbandwidth" in err


def test_a_bad_simulated_system_names_the_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPUBW_SIMULATE that names no system: one line naming the variable, exit 1."""
    monkeypatch.setenv(nvb.SIMULATE_ENV, "h300x4")
    code, out, err = run(capsys, "-t", "0")
    assert (code, out) == (1, "")
    assert err.startswith("gpubw-nvbandwidth: error: GPUBW_SIMULATE=h300x4: unknown simulated")


def test_a_link_named_nvbandwidth_is_the_command(tmp_path: Path) -> None:
    """A symlink named nvbandwidth to the script behaves as the binary: name, text, exit codes."""
    script = Path(sys.executable).with_name("gpubw-nvbandwidth")
    if not script.exists():
        pytest.skip(f"{script} is not installed (pip install -e .)")
    link = tmp_path / "nvbandwidth"
    link.symlink_to(script)
    env = {**os.environ, nvb.SIMULATE_ENV: SYSTEM}
    bad = subprocess.run(
        [str(link), "-x"], capture_output=True, encoding="utf-8", env=env, timeout=120
    )
    assert bad.returncode == 1 and f"\n{link} -x :\n" in bad.stdout
    ok = subprocess.run(
        [str(link), *FAST, "-t", "0"], capture_output=True, encoding="utf-8", env=env, timeout=120
    )
    assert ok.returncode == 0 and ok.stderr == ""
    assert ok.stdout.startswith("nvbandwidth Version: v0.8\n")
