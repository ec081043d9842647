"""The multinode testcases and multi-rank runs over real MPI (MPICH's mpiexec, on the CPU,
the simulated backend in each rank's process), each under a hard subprocess timeout."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpubw.backend.base import MULTICAST_OFF
from gpubw.model.report_check import validate
from test_world import NO_CLEANUP, _mpiexec, needs_mpi

pytestmark = needs_mpi

FAST = ["--simulate", "h200x2", "-b", "1MiB", "-i", "1", "--loop-count", "2"]
MULTICAST = ("multinode_device_to_device_broadcast_one_to_all_sm",
             "multinode_device_to_device_broadcast_all_to_all_sm")  # fmt: skip

#: each rank's script: gpubw's CLI after the fault named by $FAULT is injected into rank 1
RANK_SCRIPT = Path(__file__).with_name("mpi_fault_rank.py")
MEMCPY_READ = "multinode_device_to_device_memcpy_read_ce"


def mpirun(
    tmp_path: Path,
    args: list[str],
    fault: str = "",
    flags: tuple[str, ...] = (),
    limit: float = 90,
    env: dict[str, str] | None = None,
    ranks: int = 2,
) -> tuple[int, str, str, float]:
    """mpiexec -n RANKS (the wrapper) gpubw ARGS; the whole process group killed past
    ``limit``."""
    mpiexec = _mpiexec()
    assert mpiexec is not None
    argv = [mpiexec, *flags, "-n", str(ranks), sys.executable, str(RANK_SCRIPT), *args]
    env = {**os.environ, "FAULT": fault, **(env or {})}
    start = time.monotonic()
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        encoding="utf-8",
        start_new_session=True,
        cwd=tmp_path,
        env=env,
    )
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"mpiexec did not end within {limit} s: {argv}")
    return proc.returncode, out, err, time.monotonic() - start


def report(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    validate(doc)
    return doc


def by_key(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["key"]: t for t in doc["testcases"]}


def test_two_ranks_run_every_multinode_testcase(tmp_path: Path) -> None:
    """mpiexec -n 2 gpubw --simulate h200x2 -p multinode -j -o r.json: 11 Passed, the two
    multicast ones Waived, rank 0 alone writes, world metadata says MPICH and posix-fd."""
    rc, out, err, _ = mpirun(tmp_path, [*FAST, "-p", "multinode", "-j", "-o", "r.json"])
    assert rc == 0, err
    assert out == ""  # -o: nothing on stdout, from any rank
    doc = report(tmp_path / "r.json")
    status = {k: t["status"] for k, t in by_key(doc).items()}
    assert [s for k, s in status.items() if k not in MULTICAST] == ["Passed"] * 11
    assert [status[k] for k in MULTICAST] == ["Waived"] * 2
    world = doc["world"]
    assert world["size"] == 2 and world["rank_hosts"] == [0, 0]
    assert world["handle_type"] == "posix-fd" and world["mpi_library"].startswith("MPICH")
    assert [p["device"] for p in world["processes"]] == [0, 1]


def test_two_processes_share_a_multicast_object(tmp_path: Path) -> None:
    """mpiexec -n 2 gpubw --simulate gb200nvl72 with multicast allowed: each process sees
    only its own member of a multicast object, and both multicast testcases pass."""
    allowed = {name: "" for name, _ in MULTICAST_OFF}
    args = ["--simulate", "gb200nvl72", *FAST[2:], "-t", *MULTICAST, "-j", "-o", "r.json"]
    rc, _, err, _ = mpirun(tmp_path, args, env=allowed)
    assert rc == 0, err
    doc = report(tmp_path / "r.json")
    assert [t["status"] for t in doc["testcases"]] == ["Passed"] * 2
    assert doc["world"]["size"] == 2 and doc["world"]["handle_type"] == "fabric"


def test_the_command_itself_leaves_through_mpi_finalize(tmp_path: Path) -> None:
    """mpiexec -n 2 python -m gpubw (the command, not cli.main): every rank ends through
    Python's own exit, so mpi4py's MPI_Finalize runs, never by the command's quick
    os._exit; exit 0 and the report from rank 0."""
    from test_startup import _PROBE

    (tmp_path / "sitecustomize.py").write_text(_PROBE)
    mpiexec = _mpiexec()
    assert mpiexec is not None
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    }
    argv = [
        mpiexec,
        "-n",
        "2",
        sys.executable,
        "-m",
        "gpubw",
        *FAST,
        "-t",
        "44",
        "-j",
        "-o",
        "r.json",
    ]
    proc = subprocess.run(
        argv, capture_output=True, encoding="utf-8", cwd=tmp_path, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("ATEXIT") == 2 and "FAST" not in proc.stderr, proc.stderr
    assert (
        by_key(report(tmp_path / "r.json"))["multinode_device_to_device_memcpy_read_ce"]["status"]
        == "Passed"
    )


def test_text_output_has_the_mpi_lines(tmp_path: Path) -> None:
    """Text from rank 0 only: MPI version, one Process line per rank, the matrix once."""
    rc, out, err, _ = mpirun(tmp_path, [*FAST, "-t", "44"])
    assert rc == 0, err
    lines = out.splitlines()
    assert sum(line.startswith("MPI version: MPICH") for line in lines) == 1
    processes = [line for line in lines if line.startswith("Process ")]
    assert [re.sub(r"\(.*?\)", "()", p) for p in processes] == [
        "Process 0 (): device 0: NVIDIA H200 ()",
        "Process 1 (): device 1: NVIDIA H200 ()",
    ]
    assert sum(line == "Running multinode_device_to_device_memcpy_read_ce." for line in lines) == 1


def test_single_node_testcases_run_on_the_host_leader_only(tmp_path: Path) -> None:
    """Under mpiexec a single-node testcase runs once per host (here: one host), on all its
    GPUs, and is reported once."""
    rc, out, err, _ = mpirun(tmp_path, [*FAST, "-t", "4", "-j"])
    assert rc == 0, err
    doc = json.loads(out)
    (t,) = doc["testcases"]
    assert t["key"] == "device_to_device_memcpy_read_ce" and t["status"] == "Passed"
    assert len(t["matrices"][0]["values"]) == 2 and "hosts" not in doc


def test_only_the_host_leader_touches_every_gpu(tmp_path: Path) -> None:
    """Under mpiexec, the command's rank 1 (not its host's first) makes contexts on its own
    GPU alone (kernels, size check, host memory, streams); rank 0 on both: a single-node
    and a multinode testcase in one run."""
    rc, _, err, _ = mpirun(tmp_path, [*FAST, "-t", "4", "44", "-j", "-o", "r.json"], "devices")
    assert rc == 0, err
    notes = [(tmp_path / f"touched-{rank}").read_text() for rank in (0, 1)]
    assert notes == ["rank 0 touched [0, 1]\n", "rank 1 touched [1]\n"], err


def test_one_rank_failing_a_testcase_fails_it_everywhere(tmp_path: Path) -> None:
    """Rank 1 fails the SM testcases: they are Error with rank 1's message, the CE ones
    Passed, the run goes on; exit code 1 from every rank."""
    rc, _, err, _ = mpirun(tmp_path, [*FAST, "-t", "44", "48", "45", "-j", "-o", "r.json"], "sm")
    assert rc == 1, err
    tcs = report(tmp_path / "r.json")["testcases"]
    assert [t["status"] for t in tcs] == ["Passed", "Error", "Passed"]
    assert tcs[1]["message"] == "rank 1: injected failure on rank 1"


def test_a_killed_rank_leaves_a_valid_partial_report(tmp_path: Path) -> None:
    """Rank 1 killed in the third testcase: hydra ends every rank; the -o file rank 0 wrote
    after each testcase is a valid report of the first two."""
    args = [*FAST, "-t", "44", "45", "46", "47", "-j", "-o", "r.json"]
    rc, _, _, seconds = mpirun(tmp_path, args, "kill")
    assert rc != 0 and seconds < 60
    doc = report(tmp_path / "r.json")
    assert [t["status"] for t in doc["testcases"]] == ["Passed", "Passed"]
    # a partial report never looks like a success: it says what is missing, and when
    assert doc["exit_code"] == 1 and doc["interrupted"] is False and doc["started"]
    assert doc["error"].startswith("incomplete report: written after 2 of 4 testcase steps")


def test_a_hung_rank_is_bounded_by_the_world_timeout(tmp_path: Path) -> None:
    """Rank 1 hangs in the third testcase: rank 0's collective times out after
    --world-timeout, that testcase is Error naming the wait, nothing further runs, rank 0
    writes the report and the run ends with 1: its MPI_Abort ends the hung rank, with
    hydra's own clean-up off (``NO_CLEANUP``, test_world)."""
    args = [*FAST, "-t", "44", "45", "46", "47", "-j", "-o", "r.json", "--world-timeout", "2"]
    rc, _, err, seconds = mpirun(tmp_path, args, "hang", flags=NO_CLEANUP)
    assert rc == 1, err
    assert seconds < 50  # well under the hung rank's 120 s, on a loaded 2-core machine too
    tcs = report(tmp_path / "r.json")["testcases"]
    assert [t["status"] for t in tcs] == ["Passed", "Passed", "Error"]
    assert "did not complete within 2 s" in tcs[2]["message"]
    assert "the world is broken" not in tcs[2]["message"]  # the timeout said once


def test_a_rank_hung_mid_handshake_is_bounded_by_the_world_timeout(tmp_path: Path) -> None:
    """Rank 1 connects to rank 0's descriptor server (POSIX-fd handles: SCM_RIGHTS over a
    Unix socket) and hangs there: rank 0's agreement times out after --world-timeout, the
    testcase is Error naming the wait, rank 0 writes the report and the run ends with 1
    (its MPI_Abort ends the hung rank, as above)."""
    args = [*FAST, "-t", "44", "45", "-j", "-o", "r.json", "--world-timeout", "2"]
    rc, _, err, seconds = mpirun(tmp_path, args, "fdhang", flags=NO_CLEANUP)
    assert rc == 1, err
    assert seconds < 50  # as test_a_hung_rank_is_bounded_by_the_world_timeout
    tcs = report(tmp_path / "r.json")["testcases"]
    assert [t["status"] for t in tcs] == ["Error"]
    assert "agree did not complete within 2 s" in tcs[0]["message"]


def test_ctrl_c_to_the_launcher_writes_the_interrupted_report(tmp_path: Path) -> None:
    """SIGINT to mpiexec (forwarded to every rank) while rank 0 waits for rank 1: rank 0
    writes the interrupted report and the run exits 130."""
    mpiexec = _mpiexec()
    assert mpiexec is not None
    args = [*FAST, "-t", "44", "45", "46", "47", "-j", "-o", "r.json", "--world-timeout", "30"]
    proc = subprocess.Popen(
        [mpiexec, "-n", "2", sys.executable, str(RANK_SCRIPT), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        encoding="utf-8",
        start_new_session=True,
        cwd=tmp_path,
        env={**os.environ, "FAULT": "hang"},
    )
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:  # the first two testcases are on disk
            path = tmp_path / "r.json"
            if path.exists() and len(json.loads(path.read_text())["testcases"]) == 2:
                break
            time.sleep(0.2)
        time.sleep(1.0)  # rank 0 waits in the third testcase's first collective
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=40)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("mpiexec did not end after SIGINT")
    assert proc.returncode == 130, err
    doc = report(tmp_path / "r.json")
    assert doc["interrupted"] is True and doc["exit_code"] == 130
    assert [t["status"] for t in doc["testcases"]][:2] == ["Passed", "Passed"]


def test_a_rank_broken_alone_at_the_end_does_not_hold_the_job(tmp_path: Path) -> None:
    """Issue 33 item 1: a signal to the launcher that reaches rank 1 mid-collective and rank
    0 between two breaks rank 1's world only; the job still ends at once after rank 0's
    report, not after the whole --world-timeout (before: in about 4 of 10 tries, rank 0
    waited the bound in its last barrier while rank 1 waited for rank 0's abort)."""
    args = [*FAST, "-t", MEMCPY_READ, "-j", "-o", "r.json", "--world-timeout", "60"]
    rc, _, err, seconds = mpirun(tmp_path, args, "lastbroken", flags=NO_CLEANUP, limit=120)
    assert seconds < 45, err  # far below the bound of 60 s, on a loaded 2-core machine too
    assert rc == 0, err
    assert report(tmp_path / "r.json")["testcases"][0]["status"] == "Passed"


# -- ranks start together or not at all (issue 24 item 1) ----------------------------------
def _two_command_lines(
    tmp_path: Path, rank0: list[str], rank1: list[str], fault: str = ""
) -> tuple[int, str, float]:
    """mpiexec -n 2 with a different gpubw command line on each rank (``ARGS_<rank>``)."""
    env_args = {"ARGS_0": json.dumps(rank0), "ARGS_1": json.dumps(rank1)}
    rc, _, err, seconds = mpirun(tmp_path, [], fault or "args", env=env_args, limit=60)
    return rc, err, seconds


@pytest.mark.parametrize(
    ("rank1", "said"),
    [
        (["--simulate", "h200x2", "-b", "1MiB", "-b", "2MiB"], "rank 1: argument -b/--buffer-size"),
        (["--simulate", "h200x2", "-b", "1MiB", "-o", "missing/r.json"], "rank 1: -o/--output"),
        (["--simulate", "nope.json", "-b", "1MiB"], "rank 1: --simulate: cannot read"),
    ],
)
def test_a_usage_error_on_one_rank_ends_every_rank(
    tmp_path: Path, rank1: list[str], said: str
) -> None:
    """One rank's unusable command line (before MPI starts, or a bad --simulate file after):
    every rank ends with exit 2 within the world's bound, rank 0 saying which rank and why
    (before, the other rank spun in MPI_Init for ever, or waited 60 s and said nothing)."""
    base = ["-i", "1", "-t", "44", "-j"]
    rank0 = ["--simulate", "h200x2", "-b", "1MiB", *base]
    rc, err, seconds = _two_command_lines(tmp_path, rank0, [*rank1, *base])
    assert rc == 2 and seconds < 60, err
    errors = [line for line in err.splitlines() if line.startswith("gpubw: error:")]
    assert len(errors) == 1 and said in errors[0], err


def test_ranks_asked_for_different_runs_refuse_together(tmp_path: Path) -> None:
    """Different --loop-count on the two ranks: one line on rank 0 naming the option and
    which rank has which value, exit 2 everywhere (before: mixed figures, or a hang)."""
    base = ["--simulate", "h200x2", "-b", "1MiB", "-i", "1", "-t", "44", "-j"]
    rc, err, _ = _two_command_lines(tmp_path, base, [*base, "--loop-count", "8"])
    assert rc == 2, err
    assert "--loop-count differs between the ranks: 16 on rank 0; 8 on rank 1" in err


@pytest.mark.parametrize(
    ("option", "said"),
    [
        (["--soak", "1s"], "--soak differs between the ranks: None on rank 0; 1.0 on rank 1"),
        (["--pair", "0,1"], "--devices, --pair differs between the ranks: 'all' on rank 0; "),
        (["--devices", "1"], "'--devices 1' on rank 1"),
        (["--host-numa", "0"], "--host-numa differs between the ranks"),
        (["--wait-idle", "5"], "--wait-idle differs between the ranks"),
    ],
)
def test_ranks_given_different_node_options_refuse_together(
    tmp_path: Path, option: list[str], said: str
) -> None:
    """Issue 33 item 4: an option that changes what a rank measures (--soak, --pair,
    --devices, --host-numa, --wait-idle) joins the start agreement: a difference is one line
    on rank 0, exit 2 everywhere (before: a 60-s stall reported as exit 0, a "protocol bug"
    message, or silent acceptance)."""
    base = ["--simulate", "h200x2", "-b", "1MiB", "-i", "1", "-t", MEMCPY_READ, "-j"]
    rc, err, _ = _two_command_lines(tmp_path, base, [*base, *option])
    assert rc == 2, err
    errors = [line for line in err.splitlines() if line.startswith("gpubw: error:")]
    assert len(errors) == 1 and said in errors[0], err


@pytest.mark.parametrize(
    ("args1", "env1", "said"),
    [
        (["-t", MEMCPY_READ, "--bogus"], {}, "rank 1: "),
        (["-t", MEMCPY_READ, "--pair", "GPU-a", "GPU-b"], {}, "rank 1: --pair"),
        (["-t", MEMCPY_READ], {"GPUBW_SIMULATE": "nope"}, "rank 1: GPUBW_SIMULATE=nope"),
        (["-t", MEMCPY_READ], {"GPUBW_NVBANDWIDTH_VERSION": "0.9"}, "rank 1: GPUBW_NVBANDWIDTH"),
        (["-t", "0", "-p", "host"], {}, "rank 1: You cannot specify both"),
        (["-p", "zzz"], {}, "rank 1: Specified list of testcase prefixes"),
    ],
)
def test_a_refusal_on_one_nvbandwidth_rank_ends_every_rank(
    tmp_path: Path, args1: list[str], env1: dict[str, str], said: str
) -> None:
    """Issue 33 item 1: gpubw-nvbandwidth's refusals before the run (a bad option, --pair, a
    bad GPUBW_SIMULATE, an invalid selection) on one rank end every rank with exit 1 at
    once, rank 0 saying which rank and why (before: the other ranks and the launcher spun
    in MPI_Init for ever)."""
    base = ["-b", "1", "-i", "1"]
    env = {
        "ARGS_0": json.dumps([*base, "-t", MEMCPY_READ]),
        "ARGS_1": json.dumps([*base, *args1]),
        "ENV_0": json.dumps({"GPUBW_SIMULATE": "h200x2"}),
        "ENV_1": json.dumps({"GPUBW_SIMULATE": "h200x2", **env1}),
    }
    rc, _, err, seconds = mpirun(tmp_path, [], "nvargs", env=env, limit=60)
    assert rc == 1 and seconds < 60, err
    errors = [line for line in err.splitlines() if line.startswith("gpubw-nvbandwidth: error:")]
    assert len(errors) == 1 and said in errors[0], err


def test_a_signal_before_mpi_starts_gives_the_interrupted_report(tmp_path: Path) -> None:
    """SIGINT reaches rank 1 while it is still starting (before MPI_Init): it goes on to
    meet rank 0, and every rank stops before the first testcase; rank 0 writes the
    interrupted report, exit 130 (before: rank 1 left at once and rank 0 waited in
    MPI_Init for ever)."""
    args = [*FAST, "-t", "44", "45", "-j", "-o", "r.json"]
    rc, _, err, seconds = mpirun(tmp_path, args, "early", limit=60)
    assert rc == 130 and seconds < 60, err
    doc = report(tmp_path / "r.json")
    assert doc["interrupted"] is True and doc["exit_code"] == 130 and doc["testcases"] == []
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_four_ranks_measure_every_cell_in_groups_over_mpi(tmp_path: Path) -> None:
    """mpiexec -n 4 (--simulate h200x8): an N x N testcase of lone cells and one of two-rank
    cells, each cell agreeing among its ranks and rank 0 on MPI's group communicator, hand-
    overs between them: every off-diagonal cell measured, both Passed, exit 0."""
    keys = [
        "multinode_device_to_device_memcpy_read_ce",
        "multinode_device_to_device_bidirectional_memcpy_write_ce",
    ]
    fast = ["--simulate", "h200x8", *FAST[2:]]
    rc, _, err, _ = mpirun(tmp_path, [*fast, "-t", *keys, "-j", "-o", "r.json"], ranks=4)
    assert rc == 0, err
    tests = by_key(report(tmp_path / "r.json"))
    for key in keys:
        assert tests[key]["status"] == "Passed", tests[key]["message"]
        values = tests[key]["matrices"][0]["values"]
        measured = [(r, c) for r, row in enumerate(values) for c, v in enumerate(row) if v]
        assert measured == [(r, c) for r in range(4) for c in range(4) if r != c], key
