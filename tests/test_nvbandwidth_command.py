"""The gpubw-nvbandwidth command (gpubw.cli.nvbandwidth): nvbandwidth's options, output and
exit codes, of v0.10 (the default) and v0.8 (GPUBW_NVBANDWIDTH_VERSION=0.8), on a simulated
system chosen by GPUBW_SIMULATE."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpubw.cli import nvbandwidth as nvb
from gpubw.model.nvbandwidth_versions import (
    MULTINODE_TESTCASES,
    V010,
    V010_TESTCASES,
    V08,
    V08_TESTCASES,
    VERSION_ENV,
    unknown_token,
)

FAST = ["-b", "1", "-i", "1", "--loopCount", "2"]
SYSTEM = "h200x2"


@pytest.fixture(autouse=True)
def simulated(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs on a simulated 2 x H200 outside any MPI launch."""
    monkeypatch.setenv(nvb.SIMULATE_ENV, SYSTEM)
    monkeypatch.delenv(VERSION_ENV, raising=False)
    for name in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = nvb.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def v08(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test runs as nvbandwidth v0.8 (GPUBW_NVBANDWIDTH_VERSION=0.8)."""
    monkeypatch.setenv(VERSION_ENV, "0.8")


@pytest.mark.usefixtures("v08")
def test_a_run_is_nvbandwidths_text_and_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    """A v0.8 run: its text, marked simulated, -t 34 its device_local_copy, unknown: ERROR, 0."""
    code, out, err = run(capsys, *FAST, "-t", "0", "34", "bogus", "40")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[:2] == ["nvbandwidth Version: v0.8",
                         f"Built from Git version: gpubw-0.1.0 (SIMULATED {SYSTEM})"]  # fmt: skip
    assert lines[4:6] == ["CUDA Runtime Version: 13000", "CUDA Driver Version: 13000"]
    assert "Driver Version: 580.159.04 (simulated)" in lines
    assert "Running device_local_copy." in lines and "COEFFICIENT" not in out
    assert "ERROR: Testcase index 40 out of bound!" in lines
    assert "ERROR: Testcase bogus not found!" in lines
    assert out.endswith("and system topology.\n\n")
    for gpubw_only in ("Backend:", "(unit ", "read_write", "SIMULATED SYSTEM"):
        assert gpubw_only not in out


def test_a_v010_run(capsys: pytest.CaptureFixture[str]) -> None:
    """v0.10 (the default): its header, CV lines, -t 38 its device_local_copy, unknown ERROR."""
    code, out, err = run(
        capsys, *FAST, "-t", "0", "6", "38", "33", "44", "multinode_bisect_write_ce"
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "nvbandwidth Version: v0.10.0"
    assert [line for line in lines if line.startswith("CUDA ")] == [
        "CUDA Runtime Version: 13.0 (13000)",
        "CUDA Driver Version (API): 13.0 (13000)",
    ]
    cv = [line.rsplit(" ", 1)[0] for line in lines if line.startswith("COEFFICIENT_OF_VARIATION")]
    keys = ("host_to_device_memcpy_ce", "device_to_device_bidirectional_memcpy_read_ce_total",
            "device_local_copy")  # fmt: skip
    assert cv == [f"COEFFICIENT_OF_VARIATION {k}" for k in keys]
    assert "Running device_local_copy." in lines and "Running device_to_device_latency_sm." in lines
    assert "ERROR: Testcase index 44 out of bound!" in lines
    assert "ERROR: Testcase multinode_bisect_write_ce not found!" in lines


@pytest.mark.parametrize(("release", "keys"), [(V010, V010_TESTCASES), (V08, V08_TESTCASES)])
def test_the_default_run_is_the_releases_list(
    monkeypatch: pytest.MonkeyPatch, release: Any, keys: tuple[str, ...]
) -> None:
    """No -t/-p: exactly the release's list in its order (44 / 35), under MPI + 13 multinode."""
    monkeypatch.setenv(VERSION_ENV, release.name)
    args = nvb.translate({}, False, False, nvb.emulated())
    assert args[args.index("-t") + 1 :] == list(keys) and len(keys) in (44, 35)
    args = nvb.translate({}, False, True, nvb.emulated())
    assert args[args.index("-t") + 1 :] == [*keys, *MULTINODE_TESTCASES]
    assert args[args.index("--nvbandwidth-version") + 1] == release.name


def test_indexes_and_keys_are_the_releases() -> None:
    """-t by the release's indexes; beyond its list, or multinode outside MPI: not found."""
    values = {"testcase": ["34", "38", "43", "44", " +1", "host_to_device_pageable_memcpy_ce"]}
    assert nvb.selection(values, False, V08) == [
        "device_local_copy", *(unknown_token(t) for t in ("38", "43", "44")),
        "device_to_host_memcpy_ce", "host_to_device_pageable_memcpy_ce"]  # fmt: skip
    assert nvb.selection(values, False, V010)[:4] == [
        "device_to_device_memcpy_read_tma", "device_local_copy", "device_local_copy_tma",
        unknown_token("44")]  # fmt: skip
    assert nvb.selection(values, True, V010)[3] == MULTINODE_TESTCASES[0]
    assert nvb.selection({"testcase": [MULTINODE_TESTCASES[0]]}, False, V010) == [
        unknown_token(MULTINODE_TESTCASES[0])]  # fmt: skip
    pageable = nvb.selection({"testcasePrefixes": ["host_to_device"]}, False, V010)
    assert pageable[-1] == "host_to_device_pageable_memcpy_ce"


@pytest.mark.parametrize("value", ["0.9", "1.0", "latest"])
def test_a_bad_release_names_the_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """GPUBW_NVBANDWIDTH_VERSION that names no release gpubw emulates: one line, exit 1."""
    monkeypatch.setenv(VERSION_ENV, value)
    code, out, err = run(capsys, "-t", "0")
    assert (code, out) == (1, "")
    assert err == (f"gpubw-nvbandwidth: error: GPUBW_NVBANDWIDTH_VERSION {value!r}: not an "
                   "nvbandwidth release gpubw emulates (0.10, 0.8)\n")  # fmt: skip


@pytest.mark.parametrize("flag", [["-j"], ["-F", "json"], ["--format=json"]])
def test_json_output(capsys: pytest.CaptureFixture[str], flag: list[str]) -> None:
    """-j (or v0.10's -F json): nvbandwidth's document on standard output, nothing else."""
    code, out, err = run(capsys, *FAST, *flag, "-v", "-t", "0")
    assert code == 0, err
    nv = json.loads(out)["nvbandwidth"]
    assert nv["git_version"] == f"gpubw-0.1.0 (SIMULATED {SYSTEM})"
    (t,) = nv["testcases"]
    assert t["status"] == "Passed" and {"min", "max", "average"} <= set(t)


@pytest.mark.usefixtures("v08")
def test_invalid_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    """v0.8, bad arguments: its block on stdout (text even with -j), reason on stderr, 1."""
    code, out, err = run(capsys, "-j", "-b", "x")
    assert code == 1
    assert "\nERROR: Invalid Arguments \nnvbandwidth -j -b x :\n\nnvbandwidth CLI:\n" in out
    assert out.endswith("\n\n")
    assert (
        err == "gpubw-nvbandwidth: error: the argument ('x') for option '--bufferSize' is invalid\n"
    )


@pytest.mark.parametrize("argv", [["--nope"], ["-x"], ["-b"], ["-j", "--pair", "GPU-a", "b"]])
def test_v010_invalid_arguments(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    """v0.10, bad arguments: argparse's reason then the help on standard error, exit 1."""
    code, out, err = run(capsys, *argv)
    assert (code, out) == (1, "")
    reason, help_start = err.splitlines()[:2]
    assert help_start == "Usage: nvbandwidth [options]" and err.endswith("(by UUID)\n")
    if argv[0] in ("--nope", "-x"):
        assert reason == f"Unknown argument: {argv[0]}"


U1, U2 = (f"GPU-{n}{n[0] * 7}-aaaa-bbbb-cccc-0123456789ab" for n in ("1", "2"))


def test_pair_on_the_simulated_system(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--pair of two simulated GPUs: only their two cells hold values, the rest N/A."""
    monkeypatch.setenv(nvb.SIMULATE_ENV, "h200x8")
    from gpubw.api import open_system

    with open_system(simulate="h200x8") as system:
        uuids = [d.uuid for d in system.devices]
    code, out, err = run(capsys, *FAST, "-t", "4", "--pair", uuids[1], uuids[6])
    assert code == 0, err
    rows = [line.split()[1:] for line in out.splitlines() if line[:2].strip().isdigit()]
    assert len(rows) == 8 and all(len(r) == 8 for r in rows)
    measured = {(r, c) for r, row in enumerate(rows) for c, v in enumerate(row) if v != "N/A"}
    assert measured == {(1, 6), (6, 1)}


@pytest.mark.parametrize("pair", [["GPU-a", "GPU-b"], [U1, U1], ["0", "1"]])
def test_a_bad_pair_is_refused(capsys: pytest.CaptureFixture[str], pair: list[str]) -> None:
    """--pair takes two different GPU-... UUIDs; anything else is refused (exit 1)."""
    code, out, err = run(capsys, "-t", "4", "--pair", *pair)
    assert (code, out) == (1, "")
    assert err.startswith("--pair ") and "Usage: nvbandwidth" in err


@pytest.mark.usefixtures("v08")
def test_v08_refuses_the_newer_options(capsys: pytest.CaptureFixture[str]) -> None:
    """v0.8 has no --pair, -F, -P, -H, --version: Invalid Arguments, exit 1."""
    for argv in (["--pair", U1, U2], ["-F", "json"], ["-P", "2"], ["-H"], ["--version"]):
        code, out, _ = run(capsys, *argv)
        assert code == 1 and "ERROR: Invalid Arguments" in out


@pytest.mark.usefixtures("v08")
def test_help_list_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    """v0.8: -h, -l exit 0 (nothing with -j); -l: exactly its list, with its rule line."""
    code, out, _ = run(capsys, "-h")
    assert code == 0 and out.splitlines()[3] == "nvbandwidth CLI:"
    assert run(capsys, "-h", "-j")[:2] == (0, "")
    assert run(capsys, "-l", "-j")[:2] == (0, "")
    code, out, err = run(capsys, "-l")
    keys = [line.split(", ")[1].rstrip(":") for line in out.splitlines() if line[:1].isdigit()]
    assert code == 0 and keys == list(V08_TESTCASES) and err == ""
    assert "Index, Name:\n\tDescription\n=======================\n0, host_to_device" in out
    assert "\n\n1, device_to_host_memcpy_ce:\n" in out


def test_v010_help_list_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    """v0.10: --version, argparse's -h, -l without the rule and blank lines; nothing on stderr."""
    code, out, _ = run(capsys, "--version")
    assert (code, out) == (0, f"nvbandwidth Version: v0.10.0\nBuilt from Git version: "
                              f"gpubw-0.1.0 (SIMULATED {SYSTEM})\n\n")  # fmt: skip
    code, out, _ = run(capsys, "-h")
    assert code == 0 and out.startswith("Usage: nvbandwidth [options]\n")
    code, out, err = run(capsys, "-l")
    keys = [line.split(", ")[1].rstrip(":") for line in out.splitlines() if line[:1].isdigit()]
    assert code == 0 and keys == list(V010_TESTCASES) and err == ""
    assert "Index, Name:\n\tDescription\n0, host_to_device_memcpy_ce:\n\t\t" in out
    assert (
        "=" * 23 not in out
        and "\n\n1, " not in out
        and out.endswith(":\n\t\t" + out.split("\t\t")[-1])
    )
    assert out.endswith("\n\n")


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
    args = nvb.translate(values, as_json=False, multinode=False, release=V010)
    assert args[:5] == ["-q", "--format", "nvbandwidth", "--nvbandwidth-version", "0.10"]
    for part in (["-b", "64"], ["-i", "5"], ["--loop-count", "4"], ["--simulate", SYSTEM]):
        assert " ".join(part) in " ".join(args)
    assert {"-v", "-s", "-d", "-m", "--host-huge-pages", "--perf-formatter"} <= set(args)
    keys = args[args.index("-t") + 1 :]
    assert keys == list(V010_TESTCASES)
    assert nvb.translate({}, as_json=True, multinode=True, release=V08)[:5] == [
        "-q", "--format", "nvbandwidth-json", "--nvbandwidth-version", "0.8"]  # fmt: skip


def test_target_num_pairs(capsys: pytest.CaptureFixture[str]) -> None:
    """-P is --sample-pairs under MPI; a single-node run ignores it with a warning (as v0.9)."""
    args = nvb.translate({"targetNumPairs": 8}, as_json=False, multinode=True, release=V010)
    assert args[args.index("--sample-pairs") + 1] == "8"
    assert "--sample-pairs" not in nvb.translate({"targetNumPairs": 8}, False, False, V010)
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
    assert "--simulate" not in err  # this command has no --simulate


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
    env = {**os.environ, nvb.SIMULATE_ENV: SYSTEM, VERSION_ENV: "0.8"}
    bad = subprocess.run(
        [str(link), "-x"], capture_output=True, encoding="utf-8", env=env, timeout=120
    )
    assert bad.returncode == 1 and f"\n{link} -x :\n" in bad.stdout
    ok = subprocess.run(
        [str(link), *FAST, "-t", "0"], capture_output=True, encoding="utf-8", env=env, timeout=120
    )
    assert ok.returncode == 0 and ok.stderr == ""
    assert ok.stdout.startswith("nvbandwidth Version: v0.8\n")
