"""Worlds of ranks: layout, bounded collectives, status agreement, launch detection, real MPI."""

from __future__ import annotations

import _thread
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpubw.model.errors import GpubwError
from gpubw.world import (
    MORE_RANKS_THAN_GPUS,
    Agreement,
    Launch,
    SingleWorld,
    WorldError,
    WorldTimeoutError,
    detect_launch,
    device_assignment,
    world_from_environment,
)
from gpubw.world.base import OUT_OF_STEP
from gpubw.world.simulated import SimulatedCluster, SimulatedWorld

# -- simulated ranks --------------------------------------------------------------------------


def test_simulated_layout_counts_ranks_per_host_in_order() -> None:
    """Ranks are placed host by host; local rank/size, host index and leaders follow."""
    worlds = SimulatedCluster([2, 3]).worlds()
    assert [w.rank for w in worlds] == [0, 1, 2, 3, 4]
    assert [w.local_rank for w in worlds] == [0, 1, 0, 1, 2]
    assert [w.local_size for w in worlds] == [2, 2, 3, 3, 3]
    assert [w.host_index for w in worlds] == [0, 0, 1, 1, 1]
    assert worlds[3].host_name == "simhost01"
    assert worlds[0].host_count == 2
    assert worlds[0].host_leaders() == (0, 2)
    assert worlds[4].ranks_on_host(1) == (2, 3, 4)
    assert worlds[0].is_root and not worlds[1].is_root
    assert "rank 3 of 5 (simulated), host 1 'simhost01', local rank 1 of 3" in worlds[3].describe()


def test_simulated_collectives() -> None:
    """barrier, bcast, gather, allgather, allreduce (max/min/sum) give MPI's answers."""

    def protocol(w: SimulatedWorld) -> dict:
        w.barrier()
        return {
            "bcast": w.bcast(f"handle-{w.rank}", root=2),
            "gather": w.gather(w.rank * 10, root=1),
            "allgather": w.allgather((w.rank, w.host_index)),
            "max": w.allreduce(w.rank * 1.5, "max"),
            "min": w.allreduce(w.rank - 2, "min"),
            "sum": w.allreduce(w.rank, "sum"),
        }

    outcomes = SimulatedCluster([2, 2], timeout_s=10).run(protocol)
    assert all(o.ok for o in outcomes), outcomes
    for o in outcomes:
        assert o.value is not None
        assert o.value["bcast"] == "handle-2"
        assert o.value["gather"] == ([0, 10, 20, 30] if o.rank == 1 else None)
        assert o.value["allgather"] == [(0, 0), (1, 0), (2, 1), (3, 1)]
        assert (o.value["max"], o.value["min"], o.value["sum"]) == (4.5, -2, 6)


def test_on_step_runs_once_per_collective_while_every_rank_waits() -> None:
    """The step hook sees each completed collective once, before any rank leaves it."""
    steps: list[tuple[int, str]] = []
    inside: list[int] = []
    counter = [0]
    lock = threading.Lock()

    def on_step(step: int, name: str) -> None:
        steps.append((step, name))
        inside.append(counter[0])

    def protocol(w: SimulatedWorld) -> None:
        for _ in range(3):
            w.barrier()
            with lock:
                counter[0] += 1  # a rank past the step; the hook ran before any did
        w.allreduce(1, "sum")

    outcomes = SimulatedCluster(3, timeout_s=10, on_step=on_step).run(protocol)
    assert all(o.ok for o in outcomes)
    assert steps == [(0, "barrier"), (1, "barrier"), (2, "barrier"), (3, "allreduce(sum)")]
    assert inside == [0, 3, 6, 9]


@settings(max_examples=20, deadline=None)
@given(
    hosts=st.lists(st.integers(1, 3), min_size=1, max_size=3),
    root_seed=st.integers(0, 1000),
    values=st.lists(st.integers(-100, 100), min_size=9, max_size=9),
)
def test_simulated_collectives_match_their_definition(
    hosts: list[int], root_seed: int, values: list[int]
) -> None:
    """For any cluster shape, root and values: the collectives' answers by definition."""
    size = sum(hosts)
    root = root_seed % size
    mine = values[:size]

    def protocol(w: SimulatedWorld) -> tuple:
        v = mine[w.rank]
        return (
            w.bcast(v, root=root),
            w.gather(v, root=root),
            w.allgather(v),
            w.allreduce(v, "max"),
            w.allreduce(v, "min"),
            w.allreduce(v, "sum"),
        )

    outcomes = SimulatedCluster(hosts, timeout_s=10).run(protocol)
    for o in outcomes:
        assert o.ok, o
        expected_gather = mine if o.rank == root else None
        assert o.value == (mine[root], expected_gather, mine, max(mine), min(mine), sum(mine))


def test_simulated_values_are_copies_as_over_mpi() -> None:
    """A rank never holds another rank's object: values travel pickled."""
    shared = {"x": [1]}

    def protocol(w: SimulatedWorld) -> bool:
        got = w.bcast(shared, root=0)
        got["x"].append(w.rank)
        w.barrier()
        return got is shared

    outcomes = SimulatedCluster(3, timeout_s=10).run(protocol)
    assert [o.value for o in outcomes] == [False, False, False]
    assert shared == {"x": [1]}


def test_status_agreement_names_the_failing_rank() -> None:
    """agree(): ok only if every rank succeeded; else the lowest failing rank and message."""

    def protocol(w: SimulatedWorld) -> tuple[Agreement, Agreement]:
        good = w.agree(None)
        error = {1: "CUDA_ERROR_NOT_PERMITTED", 3: RuntimeError("boom")}.get(w.rank)
        return good, w.agree(error)

    outcomes = SimulatedCluster(4, timeout_s=10).run(protocol)
    for o in outcomes:
        assert o.value is not None
        good, bad = o.value
        assert good.ok and good.failed_rank is None and good.describe() == "every rank succeeded"
        assert not bad.ok
        assert bad.failures == ((1, "CUDA_ERROR_NOT_PERMITTED"), (3, "boom"))
        assert (bad.failed_rank, bad.message) == (1, "CUDA_ERROR_NOT_PERMITTED")
        assert bad.describe() == "rank 1: CUDA_ERROR_NOT_PERMITTED (and 1 more rank(s) failed)"


def test_agree_names_an_exception_without_text_by_its_type() -> None:
    """An exception with an empty message is reported by its type name."""
    assert SingleWorld().agree(KeyError()).message == "KeyError"


def test_rank_that_never_arrives_times_out_within_the_bound() -> None:
    """A hung rank makes the others raise WorldTimeoutError (collective, rank, bound, who)
    once the bound has passed, not before, not much after."""
    elapsed: dict[int, float] = {}
    lock = threading.Lock()
    others_done = threading.Event()

    def protocol(w: SimulatedWorld) -> None:
        if w.rank == 1:
            others_done.wait(30)  # hangs until both others have given up on it
            return
        start = time.monotonic()
        try:
            w.allreduce(1.0, "max", timeout_s=0.5)
        finally:
            with lock:
                elapsed[w.rank] = time.monotonic() - start
                if len(elapsed) == 2:
                    others_done.set()

    outcomes = SimulatedCluster(3, timeout_s=10).run(protocol, join_timeout_s=20)
    assert outcomes[1].ok
    for rank in (0, 2):
        assert 0.5 <= elapsed[rank] < 5
        error = outcomes[rank].error
        assert isinstance(error, WorldTimeoutError) and isinstance(error, GpubwError)
        assert (error.collective, error.rank, error.timeout_s) == ("allreduce(max)", rank, 0.5)
        assert str(error) == (
            f"rank {rank}: allreduce(max) did not complete within 0.5 s "
            "(no contribution from rank(s) 1)"
        )


def test_broken_world_refuses_at_once() -> None:
    """After a timeout every later collective fails immediately, naming the first failure."""
    worlds = SimulatedCluster(2, timeout_s=0.2).worlds()
    with pytest.raises(WorldTimeoutError):
        worlds[0].barrier()
    assert worlds[0].broken is not None and "barrier did not complete" in worlds[0].broken
    worlds[0].timeout_s = 120.0  # a refusal that waited for a bound would take minutes now
    start = time.monotonic()
    with pytest.raises(WorldError, match=r"bcast refused: the world is broken \(rank 0: barrier"):
        worlds[0].bcast(1)
    assert time.monotonic() - start < 60  # at once, not after another bound


def test_rank_that_fails_ends_the_others_collectives_at_once() -> None:
    """A rank whose function raised has left: the others fail at once, naming it."""

    def protocol(w: SimulatedWorld) -> None:
        if w.rank == 2:
            raise RuntimeError("cuMemCreate failed")
        w.barrier()

    start = time.monotonic()
    outcomes = SimulatedCluster(3, timeout_s=30).run(protocol)
    assert time.monotonic() - start < 5
    assert isinstance(outcomes[2].error, RuntimeError)
    for rank in (0, 1):
        assert isinstance(outcomes[rank].error, WorldError)
        assert str(outcomes[rank].error) == (
            f"rank {rank}: barrier cannot complete: rank 2 left the world "
            "(RuntimeError: cuMemCreate failed)"
        )


def test_abort_ends_the_rank_and_frees_the_others() -> None:
    """abort() raises SystemExit on its rank; the others learn it left."""

    def protocol(w: SimulatedWorld) -> None:
        if w.rank == 0:
            w.abort(3)
        w.barrier()

    outcomes = SimulatedCluster(2, timeout_s=30).run(protocol, join_timeout_s=5)
    assert isinstance(outcomes[0].error, SystemExit) and outcomes[0].error.code == 3
    assert "rank 0 left the world (aborted with exit code 3)" in str(outcomes[1].error)


def test_close_is_a_bounded_last_barrier() -> None:
    """close() waits for the other ranks, but not forever: a hung rank breaks the world and
    the closing rank leaves it (MPI would abort); closing twice does nothing."""
    done = threading.Event()

    def protocol(w: SimulatedWorld) -> str | None:
        if w.rank == 1:
            done.wait(30)  # hangs until rank 0 has closed
            return None
        w.close(4)
        w.close(4)
        done.set()
        return w.broken

    outcomes = SimulatedCluster(2, timeout_s=0.3).run(protocol, join_timeout_s=10)
    assert outcomes[0].value == (
        "rank 0: barrier did not complete within 0.3 s (no contribution from rank(s) 1)"
    )
    healthy = SimulatedCluster(3, timeout_s=10).run(lambda w: w.close())
    assert all(o.ok for o in healthy)


def test_ranks_calling_different_collectives_is_a_protocol_error() -> None:
    """One rank in bcast while another is in barrier is reported, not mismatched."""

    def protocol(w: SimulatedWorld) -> None:
        if w.rank == 0:
            w.bcast(1)
        else:
            w.barrier()

    outcomes = SimulatedCluster(2, timeout_s=10).run(protocol)
    for o in outcomes:
        assert "called different collectives at step 0 (rank 0 bcast, rank 1 barrier)" in str(
            o.error
        )


def test_ctrl_c_reaches_every_rank_at_its_collectives() -> None:
    """An interrupt of the thread running the cluster is raised in every rank (breaking
    its world), then re-raised by run(), promptly."""
    seen: dict[int, tuple[str, str | None]] = {}

    def protocol(w: SimulatedWorld) -> None:
        if w.rank == 1:
            _thread.interrupt_main()  # as if SIGINT arrived in the main thread
        else:
            time.sleep(0.3)
        try:
            w.barrier()
        except KeyboardInterrupt as exc:
            seen[w.rank] = (type(exc).__name__, w.broken)
            raise

    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        SimulatedCluster(2, timeout_s=10).run(protocol)
    assert time.monotonic() - start < 5
    assert set(seen) == {0, 1}
    for rank, (kind, broken) in seen.items():
        assert kind == "KeyboardInterrupt"
        assert broken is not None and broken.startswith(f"rank {rank}: barrier interrupted")


def test_hung_rank_is_reported_not_waited_for() -> None:
    """run() returns after its join bound; a rank still running is marked hung."""
    release = threading.Event()
    outcomes = SimulatedCluster(2, timeout_s=10).run(
        lambda w: release.wait(30) if w.rank == 1 else None, join_timeout_s=1
    )
    release.set()
    assert outcomes[0].ok and outcomes[1].hung and not outcomes[1].ok


def test_unpicklable_value_fails_on_its_rank() -> None:
    """Values must travel pickled, as over MPI; a lambda does not."""

    def protocol(w: SimulatedWorld) -> None:
        try:
            w.bcast((lambda: 0) if w.rank == 0 else None)
        finally:
            if w.rank == 0:  # this rank is out of step with the others now
                assert w.broken is not None and w.broken.startswith("rank 0: bcast interrupted")

    outcomes = SimulatedCluster(2, timeout_s=10).run(protocol)
    assert outcomes[0].error is not None and "pickle" in str(outcomes[0].error).lower()
    assert "rank 0 left the world" in str(outcomes[1].error)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda w: w.bcast(1, root=2), r"root must be a rank in \[0, 2\), got 2"),
        (lambda w: w.gather(1, root=-1), "root must be a rank"),
        (lambda w: w.allreduce(1, "prod"), r"op must be one of \['max', 'min', 'sum'\]"),
        (lambda w: w.barrier(timeout_s=0), "timeout_s must be > 0"),
    ],
)
def test_bad_collective_arguments(call, match: str) -> None:
    """Wrong roots, ops and bounds are refused with the value and what is allowed."""
    with pytest.raises(ValueError, match=match):
        call(SimulatedCluster(2).worlds()[0])


@pytest.mark.parametrize("hosts", [[], [0], [2, -1]])
def test_bad_cluster_shapes(hosts: list[int]) -> None:
    """A cluster needs hosts of one or more ranks."""
    with pytest.raises(ValueError, match="hosts must be one or more rank counts"):
        SimulatedCluster(hosts)


def test_single_world_collectives_return_at_once() -> None:
    """Size 1: every collective is its own answer; the host is this machine."""
    w = SingleWorld(host_name="node7")
    assert (w.rank, w.size, w.local_rank, w.local_size, w.host_name) == (0, 1, 0, 1, "node7")
    w.barrier()
    assert w.bcast("h") == "h"
    assert w.gather(3) == [3] and w.allgather(3) == [3]
    assert w.allreduce(2.5, "sum") == 2.5
    assert w.agree().ok and w.agree("bad").failures == ((0, "bad"),)
    w.close()


# -- rank to GPU ------------------------------------------------------------------------------


def test_device_assignment_wraps_and_warns_once_per_host() -> None:
    """local rank mod GPU count, with nvbandwidth's warning on the host's first rank."""
    worlds = SimulatedCluster([3, 2]).worlds()
    got = [device_assignment(w, 2) for w in worlds]
    assert [a.device for a in got] == [0, 1, 0, 0, 1]
    warning = (
        "Warning: there are more processes than GPUs on simhost00. "
        "Please reduce number of processes to match GPU count."
    )
    assert MORE_RANKS_THAN_GPUS.format(host="simhost00") == warning
    assert [a.warning for a in got] == [warning, None, None, None, None]
    with pytest.raises(WorldError, match="rank 0 on simhost00: no CUDA device visible"):
        device_assignment(worlds[0], 0)


# -- launch detection -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        ({"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "1"}, ("Open MPI", 4)),
        ({"PMI_SIZE": "2", "PMI_RANK": "0", "MPI_LOCALNRANKS": "2"}, ("PMI", 2)),
        ({"SLURM_STEP_NUM_TASKS": "8", "SLURM_PROCID": "3", "SLURM_NTASKS": "8"}, ("Slurm", 8)),
        ({"SLURM_NTASKS": "8", "SLURM_JOB_ID": "12"}, None),  # inside sbatch, no srun
        ({"PMIX_RANK": "0", "PMIX_NAMESPACE": "prterun-x"}, ("PMIx", None)),
    ],
)
def test_detect_launch(environ: dict[str, str], expected: tuple | None) -> None:
    """Open MPI, PMI (hydra), srun and PMIx launches are recognised; sbatch alone is not."""
    launch = detect_launch(environ)
    if expected is None:
        assert launch is None
    else:
        assert isinstance(launch, Launch)
        assert launch.launcher.startswith(expected[0]) and launch.size == expected[1]


def test_detect_launch_refuses_garbage() -> None:
    """A launcher variable that is not a rank count is named."""
    with pytest.raises(WorldError, match="PMI_SIZE='two' in the environment is not a rank"):
        detect_launch({"PMI_SIZE": "two"})


def test_no_launch_or_one_rank_is_a_single_world() -> None:
    """No launcher, or a launcher of one rank: a SingleWorld with the asked bound."""
    for environ in ({}, {"PMI_SIZE": "1"}, {"OMPI_COMM_WORLD_SIZE": "1"}):
        world = world_from_environment(environ, timeout_s=7)
        assert isinstance(world, SingleWorld) and world.timeout_s == 7


def _python(code: str, env: dict[str, str] | None = None, timeout: float = 60):
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        encoding="utf-8",
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def test_single_process_runs_never_import_mpi4py() -> None:
    """gpubw -l, a simulated run and a one-rank launch leave mpi4py unimported."""
    done = _python(
        """
        import contextlib, io, sys
        from gpubw.cli.command import main
        from gpubw.world import SingleWorld, world_from_environment
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["-l"]) == 0
            assert main(["--simulate", "h200x1", "-t", "0"]) == 0
        assert isinstance(world_from_environment(), SingleWorld)
        assert isinstance(world_from_environment({"PMI_SIZE": "1"}), SingleWorld)
        assert "mpi4py" not in sys.modules, "mpi4py was imported"
        print("clean")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "clean"


# -- real MPI ---------------------------------------------------------------------------------


def _mpiexec() -> str | None:
    beside = Path(sys.executable).with_name("mpiexec")
    return str(beside) if beside.exists() else shutil.which("mpiexec")


def _mpi_unready() -> str | None:
    """Why the real-MPI tests cannot run here, or None. They drive MPICH's hydra mpiexec (the
    one the ``mpich`` wheel of the test extra installs) and its flags."""
    mpiexec = _mpiexec()
    if mpiexec is None:
        return "no mpiexec (pip install mpich)"
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed (pip install 'gpubw[mpi]')"
    version = subprocess.run(
        [mpiexec, "--version"], capture_output=True, encoding="utf-8", timeout=30
    )
    if "HYDRA" not in version.stdout:
        return f"{mpiexec} is not MPICH's hydra (pip install mpich)"
    return None


_UNREADY = _mpi_unready()
#: hydra's clean-up off: a rank that exits no longer ends the others, so a hung rank ends
#: only through gpubw's MPI_Abort (what these tests are about)
NO_CLEANUP = ("-disable-auto-cleanup",)
needs_mpi = pytest.mark.skipif(_UNREADY is not None, reason=str(_UNREADY))

_PRELUDE = """
import json, os, sys, time
from gpubw.world import WorldError, world_from_environment
world = world_from_environment(timeout_s=float(sys.argv[1]))
def say(**fields):  # one file per rank: mpiexec merges the ranks' streams in chunks
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"said-{world.rank}.jsonl")
    with open(path, "a") as said:
        said.write(json.dumps({"rank": world.rank, **fields}) + "\\n")
"""


def _said(folder: Path) -> list[dict]:
    """What the ranks said (``say``), rank by rank, each rank's lines in order: read from
    their own files, never from mpiexec's merged output, where two ranks' lines can share a
    line or be cut in two. A line still being written (no newline yet) is left out."""
    return [
        json.loads(line)
        for path in sorted(folder.glob("said-*.jsonl"))
        for line in path.read_text().split("\n")[:-1]
    ]


def _run_mpi(
    tmp_path: Path, body: str, timeout_s: float, ranks: int = 2, flags: tuple[str, ...] = ()
) -> tuple[int, list[dict], str, float]:
    """mpiexec -n ranks python script timeout_s; killed (all of it) after 90 s at most."""
    script = tmp_path / "ranks.py"
    script.write_text(_PRELUDE + textwrap.dedent(body))
    argv = [_mpiexec(), *flags, "-n", str(ranks), sys.executable, str(script), str(timeout_s)]
    start = time.monotonic()
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        encoding="utf-8",
        start_new_session=True,
    )
    try:
        _out, err = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"mpiexec did not end within 90 s: {argv}")
    return proc.returncode, _said(tmp_path), err, time.monotonic() - start


@needs_mpi
def test_mpi_ranks_know_each_others_process_ids(tmp_path: Path) -> None:
    """Over real MPI: every rank's host_pids holds the pid of every rank on its host (the
    run's own processes, which NVML lists beside other programs')."""
    rc, lines, err, _ = _run_mpi(
        tmp_path,
        """
        say(pid=os.getpid(), host_pids=sorted(world.host_pids))
        world.close()
        """,
        timeout_s=20,
    )
    assert rc == 0, err
    pids = {line["pid"] for line in lines}
    assert len(pids) == 2 and all(pids <= set(line["host_pids"]) for line in lines), lines


@needs_mpi
def test_mpi_two_ranks_collectives(tmp_path: Path) -> None:
    """Over real MPI: shared-memory split layout, bcast/gather/allgather/allreduce/agree."""
    rc, lines, err, _ = _run_mpi(
        tmp_path,
        """
        assert world.kind == "mpi", world.kind
        big = world.bcast(b"h" * 200_000 if world.rank == 0 else None, root=0)
        say(
            size=world.size, local=[world.local_rank, world.local_size],
            hosts=[list(world.rank_hosts), len(world.host_names)],
            bcast=len(big), from1=world.bcast(world.rank, root=1),
            gather=world.gather(world.rank * 10, root=1),
            allgather=world.allgather(world.rank),
            reduced=[world.allreduce(world.rank + 0.5, op) for op in ("max", "min", "sum")],
            agree=world.agree("bad gpu" if world.rank == 1 else None).describe(),
            library=world.library.split()[0],
        )
        world.barrier()
        world.close()
        """,
        timeout_s=20,
    )
    assert rc == 0, err
    by_rank = {line["rank"]: line for line in lines}
    assert sorted(by_rank) == [0, 1]
    for rank, line in by_rank.items():
        assert line["size"] == 2 and line["local"] == [rank, 2]
        assert line["hosts"] == [[0, 0], 1]
        assert line["bcast"] == 200_000 and line["from1"] == 1
        assert line["gather"] == ([0, 10] if rank == 1 else None)
        assert line["allgather"] == [0, 1]
        assert line["reduced"] == [1.5, 0.5, 2.0]
        assert line["agree"] == "rank 1: bad gpu"


@needs_mpi
def test_mpi_ranks_calling_different_collectives_is_a_protocol_error(tmp_path: Path) -> None:
    """Over MPI too, a rank receiving another collective's message says so."""
    rc, lines, err, _ = _run_mpi(
        tmp_path,
        """
        try:
            if world.rank == 0:
                world.bcast("x", root=0)
            else:
                world.gather("y", root=1)
        except WorldError as exc:
            say(error=str(exc))
        world.close(3)
        """,
        timeout_s=5,
    )
    assert rc == 3, err
    assert {
        "rank": 1,
        "error": "rank 1: the ranks called different collectives: rank 1 gather (step 1), "
        f"rank 0 bcast (step 1): {OUT_OF_STEP}",
    } in lines


_LOSE_RANK_1 = """
world.barrier()
if world.rank == 1:
    {fault}
start = time.monotonic()
try:
    world.allreduce(1, "sum")
    say(result="completed")
except WorldError as exc:
    say(error=str(exc), elapsed=time.monotonic() - start)
world.close(5)  # broken world: MPI_Abort, never a hang in MPI_Finalize
"""


@needs_mpi
@pytest.mark.parametrize(
    "fault", ["time.sleep(120)", "os._exit(0)"], ids=["rank-hangs", "rank-exits-early"]
)
def test_mpi_lost_rank_gives_a_clear_error_not_a_hang(tmp_path: Path, fault: str) -> None:
    """Rank 1 hangs or leaves: rank 0 raises WorldTimeoutError after 1 s, then aborts."""
    # Hydra's clean-up off: when rank 1 exits, it would kill rank 0 before rank 0 says
    # anything (tested below); when rank 1 hangs, rank 0's MPI_Abort alone must end it.
    rc, lines, err, elapsed = _run_mpi(
        tmp_path, _LOSE_RANK_1.format(fault=fault), timeout_s=1, flags=NO_CLEANUP
    )
    assert elapsed < 50  # well under the hung rank's 120 s, on a loaded 2-core machine too
    _aborted(rc, err, 5)
    [line] = [x for x in lines if x["rank"] == 0]
    assert line["error"] == (
        "rank 0: allreduce(sum) did not complete within 1 s (nothing from rank(s) 1)"
    )
    assert 0.95 < line["elapsed"] < 10


def _aborted(rc: int, err: str, code: int) -> None:
    """Rank 0 called MPI_Abort with ``code`` and mpiexec failed: with that code, or with the
    SIGKILL (9) hydra sent the hung rank, whichever it records first (9 seen once, with
    three test suites on a 2-core machine; as when a rank dies, below). That the hung rank
    ended at all is the callers' time bound: with hydra's clean-up off only the abort can
    end it. MPICH's own "MPI_Abort(...)" line is not required: hydra may kill rank 0 before
    forwarding it (seen under load: rc 5, empty stderr); where it came, it names
    MPI_COMM_WORLD, never gpubw's duplicate (whose abort only messages the other ranks)."""
    assert rc in (code, 9), err
    if "MPI_Abort" in err:
        assert re.search(rf"MPI_Abort\(MPI_COMM_WORLD, {code}\) - process 0", err), err


@needs_mpi
def test_mpi_close_never_waits_for_a_hung_rank(tmp_path: Path) -> None:
    """Healthy until the end, then rank 1 hangs: rank 0's close() aborts after its bound
    instead of waiting in MPI_Finalize (which waits for every rank, measured)."""
    rc, _lines, err, elapsed = _run_mpi(
        tmp_path,
        """
        world.barrier()
        if world.rank == 1:
            time.sleep(120)
        world.close(6)
        """,
        timeout_s=1,
        flags=NO_CLEANUP,  # the abort alone ends the hung rank, not hydra noticing rank 0
    )
    _aborted(rc, err, 6)
    assert elapsed < 50  # well under the hung rank's 120 s


@needs_mpi
def test_mpi_launcher_ends_the_run_when_a_rank_dies(tmp_path: Path) -> None:
    """With hydra's default clean-up, a rank dying ends every rank at once (long before the
    30 s collective bound), and mpiexec fails: with the dead rank's code, or with the
    SIGKILL (9) it sent the others, whichever it records first (both seen)."""
    rc, _lines, _err, elapsed = _run_mpi(
        tmp_path, _LOSE_RANK_1.format(fault="os._exit(7)"), timeout_s=30
    )
    assert rc in (7, 9)
    assert elapsed < 20


@needs_mpi
def test_mpi_one_rank_launch_is_a_single_world(tmp_path: Path) -> None:
    """mpiexec -n 1: a SingleWorld, and mpi4py is never imported."""
    rc, lines, err, _ = _run_mpi(
        tmp_path, 'say(kind=world.kind, mpi4py="mpi4py" in sys.modules)', timeout_s=5, ranks=1
    )
    assert rc == 0, err
    assert lines == [{"rank": 0, "kind": "single", "mpi4py": False}]


@needs_mpi
def test_mpi_library_not_the_launchers_is_a_clear_error() -> None:
    """Launcher says 2 ranks, MPI sees 1 (another MPI's mpirun): an error, not 2 solo runs."""
    done = _python(
        """
        from gpubw.world import WorldError, world_from_environment
        try:
            world_from_environment()
        except WorldError as exc:
            print(exc)
        """,
        env={"OMPI_COMM_WORLD_SIZE": "2"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("the launcher started 2 ranks but MPI sees 1: mpi4py uses")


@needs_mpi
def test_mpi_ctrl_c_to_the_launcher_breaks_the_world_and_aborts_with_130(tmp_path: Path) -> None:
    """SIGINT to mpiexec reaches every rank; one interrupted in a collective aborts with 130."""
    script = tmp_path / "interrupted.py"
    script.write_text(
        _PRELUDE
        + textwrap.dedent(
            """
            world.barrier()
            say(ready=True)
            try:
                if world.rank == 1:
                    time.sleep(30)
                world.barrier()
            except KeyboardInterrupt:
                say(broken=world.broken)
                world.close(130)
            """
        )
    )
    argv = [_mpiexec(), "-n", "2", sys.executable, str(script), "30"]
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        encoding="utf-8",
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while sum(said.get("ready", False) for said in _said(tmp_path)) < 2:
            assert proc.poll() is None, "mpiexec ended before both ranks were ready"
            assert time.monotonic() < deadline, "the ranks were not ready within 60 s"
            time.sleep(0.05)
        time.sleep(0.3)  # let rank 0 enter its barrier
        proc.send_signal(signal.SIGINT)
        out, _err = proc.communicate(timeout=30)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    assert proc.returncode == 130
    broken = {"rank": 0, "broken": "rank 0: barrier interrupted (KeyboardInterrupt: )"}
    assert broken in _said(tmp_path), out


def test_a_whole_run_waits_for_rank_0_beyond_the_collective_bound() -> None:
    """join_timeout_s=inf (a whole simulated run) waits for rank 0 however long it works
    between collectives; the default join would have called it hung after twice the bound."""
    import math

    def body(world: SimulatedWorld) -> str:
        if world.rank == 0:
            time.sleep(0.6)  # three times the 0.2 s collective bound, between collectives
        world.barrier()
        return "done"

    short = SimulatedCluster([2], timeout_s=0.2).run(body)
    assert short[0].hung
    long = SimulatedCluster([2], timeout_s=2.0).run(body, join_timeout_s=math.inf)
    assert [o.value for o in long] == ["done", "done"]
    waits = SimulatedCluster([2], timeout_s=0.2).run(
        lambda w: time.sleep(0.6) or "done" if w.rank == 0 else "other",
        join_timeout_s=math.inf,
    )
    assert [o.value for o in waits] == ["done", "other"]


def test_the_mpi_library_text_loses_its_nul() -> None:
    """The library text as Open MPI 4.1.6 returned it (a trailing NUL) is kept without it."""
    from gpubw.world.mpi import library_version

    raw = "Open MPI v4.1.6, package: Debian OpenMPI, ident: 4.1.6\x00"
    assert library_version(raw) == "Open MPI v4.1.6, package: Debian OpenMPI, ident: 4.1.6"
    assert library_version("  MPICH Version: 4.2\n") == "MPICH Version: 4.2"


# -- groups of ranks ---------------------------------------------------------------------------
@pytest.mark.parametrize("cooperative", [False, True], ids=["threads", "tasks"])
def test_groups_agree_among_their_members_only(cooperative: bool) -> None:
    """Groups of ranks run their own collectives, interleaved with the world's: the values
    in group order, failures naming world ranks, other ranks never waiting for them."""

    def fn(w: SimulatedWorld) -> tuple:
        odd = tuple(r for r in range(w.size) if r % 2 == w.rank % 2)
        first = w.group_allgather(w.rank * 10, odd)
        pair = w.group_agree("bad" if w.rank == 3 else None, (1, 3)) if w.rank in (1, 3) else None
        total = w.allreduce(w.rank, "sum")
        again = w.group_allgather(-w.rank, odd)
        alone = w.group_allgather("me", (w.rank,))
        return first, pair and pair.describe(), total, again, alone

    outcomes = SimulatedCluster([2, 2], timeout_s=10, cooperative=cooperative).run(fn)
    assert [o.value for o in outcomes] == [
        ([0, 20], None, 6, [0, -2], ["me"]),
        ([10, 30], "rank 3: bad", 6, [-1, -3], ["me"]),
        ([0, 20], None, 6, [0, -2], ["me"]),
        ([10, 30], "rank 3: bad", 6, [-1, -3], ["me"]),
    ]


@pytest.mark.parametrize("cooperative", [False, True], ids=["threads", "tasks"])
def test_a_group_member_that_left_fails_the_group_at_once(cooperative: bool) -> None:
    """A member that left fails its group's collective at once, naming it; a rank outside
    the group is not held."""

    def fn(w: SimulatedWorld) -> str:
        if w.rank == 1:
            return "left"
        if w.rank == 2:
            return "outside"
        try:
            w.group_allgather(w.rank, (0, 1))
        except WorldError as exc:
            return str(exc)
        return "completed"

    outcomes = SimulatedCluster(3, timeout_s=600, cooperative=cooperative).run(fn)
    assert outcomes[0].value == (
        "rank 0: group allgather cannot complete: rank 1 left the world (it finished)"
    )
    assert [o.value for o in outcomes[1:]] == ["left", "outside"]


def test_a_group_member_that_never_arrives_times_out_within_the_bound() -> None:
    """A member that hangs makes the group's collective expire after its bound."""
    gate = threading.Event()

    def fn(w: SimulatedWorld) -> str:
        if w.rank == 1:
            gate.wait(30)
            return "late"
        start = time.monotonic()
        try:
            w.group_allgather(0, (0, 1), timeout_s=0.5)
        except WorldTimeoutError as exc:
            return f"{exc} after {time.monotonic() - start >= 0.5}"
        finally:
            gate.set()
        return "completed"

    outcomes = SimulatedCluster(2, timeout_s=10).run(fn)
    assert outcomes[0].value == (
        "rank 0: group allgather did not complete within 0.5 s "
        "(no contribution from rank(s) 1) after True"
    )


@pytest.mark.parametrize(
    "group", [(1, 2), (0, 0, 1), (1, 0), (0, 5)], ids=["not-a-member", "twice", "order", "range"]
)
def test_bad_groups_are_refused(group: tuple[int, ...]) -> None:
    """A group must hold this rank, distinct ranks of the world in increasing order."""
    world = SimulatedCluster(3).worlds()[0]
    with pytest.raises(ValueError, match=r"group must be distinct ranks in \[0, 3\)"):
        world.group_allgather(None, group)


@needs_mpi
def test_mpi_groups(tmp_path: Path) -> None:
    """Over real MPI, 3 ranks: groups' collectives interleaved with the world's, and a
    group member calling another collective is a protocol error."""
    rc, lines, err, _ = _run_mpi(
        tmp_path,
        """
        mine = world.group_allgather(world.rank, (0, 2)) if world.rank != 1 else None
        said = None
        if world.rank < 2:
            said = world.group_agree("no" if world.rank == 1 else None, (0, 1))
        total = world.allreduce(world.rank, "sum")
        big = world.group_allgather(b"x" * 100_000 * world.rank, (1, 2)) if world.rank else [b""]
        say(mine=mine, said=said and said.describe(), total=total, big=[len(b) for b in big])
        world.barrier()  # every line is written before rank 0's MPI_Abort below can end rank 2
        try:
            if world.rank == 0:
                world.group_allgather("x", (0, 1))
            elif world.rank == 1:
                world.group_agree(None, (0, 1))
        except WorldError as exc:
            say(error=str(exc))
        world.close(3)
        """,
        timeout_s=5,
        ranks=3,
    )
    assert rc == 3, err
    said = sorted((x for x in lines if "total" in x), key=lambda x: x["rank"])
    assert [(x["mine"], x["said"], x["total"], x["big"]) for x in said] == [
        ([0, 2], "rank 1: no", 3, [0]),
        (None, "rank 1: no", 3, [100_000, 200_000]),
        ([0, 2], None, 3, [100_000, 200_000]),
    ]
    [error] = [x["error"] for x in lines if x["rank"] == 0 and "error" in x]
    assert error.startswith(
        "rank 0: the ranks called different collectives: rank 0 group allgather (step ((0, 1), 1)),"
        " rank 1 group agree (step ((0, 1), 1))"
    ), error


@needs_mpi
def test_pmix_rank_alone_with_an_mpi_without_pmix_is_one_line(tmp_path: Path) -> None:
    """PMIX_RANK alone (a PMIx launcher) while mpi4py loads an MPICH built without PMIx:
    one error line naming both, exit 1 (issue 33 item 12; before: MPICH's many-line abort
    from MPI_Init)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI", "OMPI_", "SLURM_"))}
    env["PMIX_RANK"] = "0"
    argv = ["--simulate", "h200x2", "-t", "0", "-b", "1MiB", "-i", "1", "-j"]
    proc = subprocess.run(
        [sys.executable, "-m", "gpubw", *argv, "-o", str(tmp_path / "r.json")],
        capture_output=True,
        encoding="utf-8",
        env=env,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "PMIX_RANK is set" in lines[0] and "not built for PMIx" in lines[0]
