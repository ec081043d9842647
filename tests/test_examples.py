"""The launch examples of examples/ (Slurm, Kubernetes) as far as a CPU machine can check
them: the manifests parse and name gpubw's real command line, the MPIJob follows the
Kubeflow MPI Operator's v2beta1 conventions (workers' sshd, a rank per GPU slot of its
hostfile, a report that outlives the pods), the CronJob is the Job's pod on a schedule, the
examples install gpubw from a wheel of the checkout, the Slurm script's ranks are seen as an
srun launch, and its command runs under mpiexec with srun's variables."""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpubw.cli.accept import check_parser
from gpubw.cli.args import SUBCOMMANDS, parse_command_line, writer_settings
from gpubw.cli.fleet import fleet_parser
from gpubw.runner.writer_registry import Writers
from gpubw.version import __version__
from gpubw.world import detect_launch
from gpubw.world.launch_env import devices_to_start
from test_world import _mpiexec, needs_mpi

EXAMPLES = Path(__file__).parents[1] / "examples"
SBATCH = EXAMPLES / "slurm.sbatch"
FLEET_SBATCH = EXAMPLES / "slurm-fleet.sbatch"
MANIFESTS = sorted((EXAMPLES / "kubernetes").glob("*.yaml"))


# -- a reader of the YAML the manifests use (block mappings and lists, plain and quoted
# -- scalars, {} and comments): pyyaml is not a dependency of gpubw ---------------------


def _scalar(text: str) -> Any:
    """A plain or quoted scalar."""
    if text[:1] in "\"'":
        assert text[-1:] == text[0], f"unterminated quote: {text}"
        return text[1:-1]
    if text == "{}":
        return {}
    if re.fullmatch(r"-?[0-9]+", text):
        return int(text)
    return {"true": True, "false": False, "null": None}.get(text, text)


def _lines(text: str) -> list[tuple[int, str]]:
    """(indent, content) of each line that is not blank or a comment."""
    out = []
    for line in text.splitlines():
        stripped = line.split(" #")[0].rstrip() if not line.lstrip().startswith("#") else ""
        if stripped.strip():
            assert "\t" not in line, f"a tab in YAML: {line!r}"
            out.append((len(stripped) - len(stripped.lstrip()), stripped.strip()))
    return out


def _block(lines: list[tuple[int, str]], i: int, indent: int) -> tuple[Any, int]:
    """The node at ``lines[i:]`` indented by ``indent``, and the index after it."""
    if lines[i][1].startswith("- "):
        items = []
        while i < len(lines) and lines[i][0] == indent and lines[i][1].startswith("- "):
            rest = lines[i][1][2:]
            if ":" in rest and not rest.startswith(("'", '"')):  # a mapping in a list
                lines[i] = (indent + 2, rest)
                node, i = _block(lines, i, indent + 2)
            else:
                node, i = _scalar(rest), i + 1
            items.append(node)
        return items, i
    mapping: dict[str, Any] = {}
    while i < len(lines) and lines[i][0] == indent and not lines[i][1].startswith("- "):
        key, _, value = lines[i][1].partition(":")
        assert key and key not in mapping, f"bad or repeated key {key!r}"
        if value.strip():
            mapping[key], i = _scalar(value.strip()), i + 1
        else:
            deeper = lines[i + 1][0]
            assert deeper > indent or lines[i + 1][1].startswith("- "), f"{key}: no value"
            mapping[key], i = _block(lines, i + 1, deeper)
    return mapping, i


def read_yaml(text: str) -> Any:
    """One YAML document of the subset above; AssertionError on anything else."""
    lines = _lines(text)
    node, end = _block(lines, 0, lines[0][0])
    assert end == len(lines), f"not read from line {lines[end]!r}"
    return node


def test_the_yaml_reader_reads_what_it_claims() -> None:
    """Nested mappings, lists of scalars and of mappings, quotes, numbers, {}."""
    doc = read_yaml(
        'a:\n  b: 1\n  c:\n    - x\n    - "2"\n  d:\n    - n: 1\n      m: {}\ne: true\n'
    )
    assert doc == {"a": {"b": 1, "c": ["x", "2"], "d": [{"n": 1, "m": {}}]}, "e": True}
    with pytest.raises(AssertionError):
        read_yaml("a: 1\na: 2\n")


# -- the command lines -----------------------------------------------------------------


def check_gpubw_args(args: list[str]) -> None:
    """``args`` (what follows ``gpubw``) is a command line gpubw's parsers accept."""
    if args and args[0] == "fleet":
        fleet_parser().parse_args(args[1:])
        return
    if args and args[0] in SUBCOMMANDS:
        assert args[0] == "check", args  # with fleet, the only sub-commands the examples use
        check_parser().parse_args(args[1:])
        return
    ns, rest = parse_command_line(args)
    fmt = ns.format or ("json" if ns.json else "text")
    writer_settings(Writers.discover().get(fmt), rest)  # a usage error if anything is left


def _containers(node: Any) -> list[dict[str, Any]]:
    """Every container spec in a manifest."""
    if isinstance(node, list):
        return [c for x in node for c in _containers(x)]
    if not isinstance(node, dict):
        return []
    found = list(node.get("containers", []))
    return found + [c for k, v in node.items() if k != "containers" for c in _containers(v)]


def _gpubw_args(command: list[str]) -> list[str]:
    """What follows ``gpubw`` in a container's command."""
    assert "gpubw" in command, command
    return command[command.index("gpubw") + 1 :]


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifests_parse_and_run_gpubw(path: Path) -> None:
    """Each manifest is a Kubernetes object whose gpubw command line (the container's own, or
    the MPIJob launcher's under mpirun) is one gpubw accepts."""
    doc = read_yaml(path.read_text(encoding="utf-8"))
    kind = doc["kind"]
    assert doc["apiVersion"] and kind in {"Job", "CronJob", "MPIJob"} and doc["metadata"]["name"]
    if kind == "MPIJob":  # the workers run sshd for the launcher's mpirun: checked below
        commands = [_container(doc, "Launcher")["command"]]
    else:
        commands = [c["command"] for c in _containers(doc) if "command" in c]
    assert commands, f"{path.name}: no container command"
    for command in commands:
        args = _gpubw_args(command)
        check_gpubw_args(args)
        if kind == "MPIJob":
            assert command[0] == "mpirun" and "-p" in args  # the multinode testcases
    assert [p.name for p in MANIFESTS] == [
        "cronjob.yaml",
        "fleet-collect.yaml",
        "fleet-job.yaml",
        "job.yaml",
        "mpijob.yaml",
    ]


# -- the MPIJob, as the Kubeflow MPI Operator's kubeflow.org/v2beta1 runs it: the operator
# -- makes an ssh key pair (a Secret mounted at sshAuthMountPath, /root/.ssh by default) and
# -- a hostfile (/etc/mpi/hostfile in the launcher, a line "<worker> slots=<slotsPerWorker>"
# -- per worker); the launcher's mpirun starts the ranks over ssh, so the workers run sshd
# -- (its own examples: examples/v2beta1/pi/pi.yaml) -------------------------------------

MPIJOB = EXAMPLES / "kubernetes" / "mpijob.yaml"
#: the Open MPI mpirun options a launcher may use, as in the operator's Open MPI examples,
#: and how many values each takes (one dash or two, as Open MPI 4 and 5 take them)
MPIRUN_OPTIONS = {"allow-run-as-root": 0, "hostfile": 1, "np": 1, "bind-to": 1, "map-by": 1, "x": 1}


def _container(doc: dict[str, Any], role: str) -> dict[str, Any]:
    """The one container of the MPIJob's ``role`` (Launcher, Worker)."""
    (container,) = doc["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["containers"]
    return dict(container)


def mpirun_options(command: list[str]) -> dict[str, list[str]]:
    """The options of ``mpirun ... gpubw ...`` before gpubw, by name without dashes, with
    their values; AssertionError on one this test does not know."""
    assert command[0] == "mpirun", command
    options: dict[str, list[str]] = {}
    i = 1
    while command[i] != "gpubw":
        name = command[i].lstrip("-")
        assert command[i].startswith("-") and name in MPIRUN_OPTIONS, f"mpirun {command[i]}?"
        count = MPIRUN_OPTIONS[name]
        options.setdefault(name, []).extend(command[i + 1 : i + 1 + count])
        i += 1 + count
    return options


def check_mpijob_workers_serve_ssh(doc: dict[str, Any]) -> None:
    """Every worker runs sshd in the foreground (-D: the container lives as long as it) and
    is Ready once port 22 answers, the launcher is made only then (no mpirun before the
    workers' sshd is up), and the operator mounts its keys in the home of the user mpirun
    runs as (root: --allow-run-as-root)."""
    worker = _container(doc, "Worker")
    command = worker.get("command", []) + worker.get("args", [])
    assert command and command[0].endswith("/sshd"), f"a worker runs {command}, not sshd"
    assert any(w.startswith("-") and "D" in w for w in command[1:]), command
    assert worker["readinessProbe"]["tcpSocket"]["port"] == 22
    assert doc["spec"]["launcherCreationPolicy"] == "WaitForWorkersReady"
    assert "allow-run-as-root" in mpirun_options(_container(doc, "Launcher")["command"])
    assert doc["spec"]["sshAuthMountPath"] == "/root/.ssh"


def check_mpijob_ranks_fill_the_hostfile(doc: dict[str, Any]) -> None:
    """mpirun reads the operator's hostfile, starts a rank per slot (-np = workers x
    slotsPerWorker), a slot is a GPU (slotsPerWorker = a worker's nvidia.com/gpu limit), the
    ranks are not bound to cores (gpubw places each rank's threads itself) and they get the
    launcher's PATH and LD_LIBRARY_PATH (a process sshd starts does not have the container's
    environment: gpubw in a virtual environment would not be found)."""
    spec = doc["spec"]
    options = mpirun_options(_container(doc, "Launcher")["command"])
    assert options.get("hostfile") == ["/etc/mpi/hostfile"], options
    slots, workers = spec["slotsPerWorker"], spec["mpiReplicaSpecs"]["Worker"]["replicas"]
    assert slots == _container(doc, "Worker")["resources"]["limits"]["nvidia.com/gpu"]
    assert options["np"] == [str(workers * slots)], (options["np"], workers, slots)
    assert options["bind-to"] == ["none"]
    assert {"PATH", "LD_LIBRARY_PATH"} <= set(options["x"]), options


def check_mpijob_report_outlives_the_pods(doc: dict[str, Any]) -> None:
    """The report lands where it is still there after the job: rank 0's standard output
    (-o -), which mpirun forwards to the launcher's log, or a file on a volume claim mounted
    in the workers (rank 0 runs on a worker). Never a worker's own folders or an emptyDir:
    cleanPodPolicy deletes the workers when the job ends."""
    ns, _ = parse_command_line(_gpubw_args(_container(doc, "Launcher")["command"]))
    if ns.output in ("-", "/dev/stdout"):
        return
    worker_pod = doc["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    kept = {v["name"] for v in worker_pod.get("volumes", []) if "persistentVolumeClaim" in v}
    mounts = _container(doc, "Worker").get("volumeMounts", [])
    on = [m for m in mounts if str(ns.output).startswith(m["mountPath"].rstrip("/") + "/")]
    assert on and on[0]["name"] in kept, f"-o {ns.output} is lost with the worker pod"


def _mpijob() -> dict[str, Any]:
    return dict(read_yaml(MPIJOB.read_text(encoding="utf-8")))


def test_the_mpijob_workers_serve_the_launchers_ssh() -> None:
    check_mpijob_workers_serve_ssh(_mpijob())


def test_the_mpijob_runs_a_rank_per_gpu_of_the_hostfile() -> None:
    check_mpijob_ranks_fill_the_hostfile(_mpijob())


def test_the_mpijob_report_outlives_the_pods() -> None:
    check_mpijob_report_outlives_the_pods(_mpijob())


def _report_on(volume: dict[str, Any]) -> dict[str, Any]:
    """The MPIJob with its report written to a file on ``volume``, mounted in the workers."""
    doc = copy.deepcopy(_mpijob())
    command = _container(doc, "Launcher")["command"]
    command[command.index("-o") + 1] = "/results/gpubw-rack.json"
    pod = doc["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    pod["volumes"] = [{"name": "results", **volume}]
    pod["containers"][0]["volumeMounts"] = [{"name": "results", "mountPath": "/results"}]
    return doc


def test_the_report_check_takes_a_claim_and_refuses_an_emptydir() -> None:
    """A report file on a PersistentVolumeClaim outlives the pods; on an emptyDir, or on no
    volume at all, it does not."""
    check_mpijob_report_outlives_the_pods(_report_on({"persistentVolumeClaim": {"claimName": "r"}}))
    with pytest.raises(AssertionError, match="lost with the worker pod"):
        check_mpijob_report_outlives_the_pods(_report_on({"emptyDir": {}}))
    doc = _report_on({"emptyDir": {}})
    _container(doc, "Launcher")["command"][-1] = "/tmp/gpubw-rack.json"
    with pytest.raises(AssertionError, match="lost with the worker pod"):
        check_mpijob_report_outlives_the_pods(doc)


# -- the one-node Job and its CronJob ------------------------------------------------------


def _pod(doc: dict[str, Any]) -> dict[str, Any]:
    """The pod spec of a Job or a CronJob."""
    job = doc["spec"]["jobTemplate"] if doc["kind"] == "CronJob" else doc
    return dict(job["spec"]["template"]["spec"])


def test_the_cronjob_runs_the_jobs_pod_on_a_schedule() -> None:
    """cronjob.yaml is job.yaml's pod (command, GPUs, textfile folder) as a batch/v1 CronJob
    with a five-field schedule that never runs two at once."""
    job = read_yaml((EXAMPLES / "kubernetes" / "job.yaml").read_text(encoding="utf-8"))
    cron = read_yaml((EXAMPLES / "kubernetes" / "cronjob.yaml").read_text(encoding="utf-8"))
    assert (cron["apiVersion"], cron["kind"]) == ("batch/v1", "CronJob")
    assert len(cron["spec"]["schedule"].split()) == 5
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    assert cron["spec"]["jobTemplate"]["spec"]["backoffLimit"] == 0
    assert _pod(cron) == _pod(job)


@pytest.mark.parametrize("name", ["job.yaml", "cronjob.yaml"])
def test_the_gpu_count_says_it_is_the_nodes(name: str) -> None:
    """The one-node manifests' nvidia.com/gpu limit is commented: it must be the node's GPU
    count, since gpubw measures every GPU the pod is given."""
    lines = (EXAMPLES / "kubernetes" / name).read_text(encoding="utf-8").splitlines()
    (at,) = [i for i, line in enumerate(lines) if "nvidia.com/gpu:" in line]
    comment = " ".join(line.strip() for line in lines[at - 3 : at] if line.strip()[:1] == "#")
    assert "the node's GPU count" in comment and "every GPU" in comment, comment


# -- installing: gpubw is not on a package index -------------------------------------------

WHEEL_BUILD = "python3 -m pip wheel --no-deps -w dist ."
#: the wheel that makes, by the checkout's version
WHEEL = f"gpubw-{__version__}-py3-none-any.whl"
INDEX_INSTALL = re.compile(r"pip install\s+['\"]?gpubw(\[|['\"\s]|$)")


@pytest.mark.parametrize("path", [*MANIFESTS, SBATCH, FLEET_SBATCH], ids=lambda p: p.name)
def test_the_examples_install_gpubw_from_a_wheel_of_the_checkout(path: Path) -> None:
    """Each example says how to install gpubw where it runs: a wheel built in a checkout,
    installed with its extras, never pip install 'gpubw[...]' from an index."""
    text = path.read_text(encoding="utf-8")
    assert not INDEX_INSTALL.search(text), INDEX_INSTALL.search(text)
    assert WHEEL_BUILD in text and f'pip install "dist/{WHEEL}[' in text


def test_the_readme_installs_gpubw_from_the_checkout_or_its_wheel() -> None:
    """The README installs gpubw from the checkout or a wheel built from it, never by name
    from an index, and its image recipe builds the wheel."""
    text = (EXAMPLES.parent / "README.md").read_text(encoding="utf-8")
    assert not INDEX_INSTALL.search(text), INDEX_INSTALL.search(text)
    assert WHEEL_BUILD in text


def sbatch_commands() -> list[list[str]]:
    """The gpubw command lines of the Slurm script, its variables filled in."""
    out = []
    for line in SBATCH.read_text().splitlines():
        if line.lstrip().startswith("#") or "gpubw " not in line:
            continue
        words = shlex.split(line.replace("${out}", "gpubw-7").split("||")[0])
        if "gpubw" in words:
            out.append(words[words.index("gpubw") + 1 :])
    return out


def test_the_slurm_script_runs_gpubw() -> None:
    """The script is bash, asks srun for PMIx (or PMI-2) and runs gpubw's real command
    lines: the run under srun, then check in the batch script's own process."""
    subprocess.run(["bash", "-n", str(SBATCH)], check=True)
    text = SBATCH.read_text()
    assert '--mpi="${GPUBW_MPI:-pmix}"' in text and "--gpu-bind=none" in text
    commands = sbatch_commands()
    assert [c[0] for c in commands] == ["--expect", "check"]
    for args in commands:
        check_gpubw_args(args)


def srun_environment(rank: int, nodes: int = 2, per_node: int = 4) -> dict[str, str]:
    """What srun --mpi=pmix sets for one rank of the script's job (2 nodes x 4 tasks)."""
    return {
        "SLURM_JOB_ID": "7",
        "SLURM_NNODES": str(nodes),
        "SLURM_NTASKS": str(nodes * per_node),
        "SLURM_NTASKS_PER_NODE": str(per_node),
        "SLURM_STEP_ID": "0",
        "SLURM_STEP_NUM_NODES": str(nodes),
        "SLURM_STEP_NUM_TASKS": str(nodes * per_node),
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank % per_node),
        "SLURM_NODEID": str(rank // per_node),
        "PMIX_RANK": str(rank),
    }


def test_srun_ranks_are_an_srun_launch_and_take_their_gpus() -> None:
    """Every rank of the script's srun step is one of 8 ranks of an srun launch; each node's
    first rank starts CUDA on its 4 GPUs, the others on their own; the batch script's own
    process (SLURM_NTASKS, no step) is no launch: gpubw check there is one process."""
    for rank in range(8):
        launch = detect_launch(srun_environment(rank))
        assert launch is not None and (launch.launcher, launch.size) == ("Slurm srun", 8)
    assert devices_to_start(4, srun_environment(4)) == (0, 1, 2, 3)
    assert devices_to_start(4, srun_environment(6)) == (2,)
    batch = {k: v for k, v in srun_environment(0).items() if "STEP" not in k}
    del batch["PMIX_RANK"], batch["SLURM_LOCALID"]
    assert detect_launch(batch) is None


#: each rank: srun's variables for its PMI rank, then gpubw's command line
RANK = """
import json, os, sys
from gpubw.world import detect_launch
rank, size = int(os.environ["PMI_RANK"]), int(os.environ["PMI_SIZE"])
os.environ.update(SLURM_JOB_ID="7", SLURM_NNODES="1", SLURM_NTASKS=str(size),
    SLURM_STEP_NUM_TASKS=str(size), SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank),
    SLURM_NODEID="0")
alone = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "MPI_"))}
launch = detect_launch(alone)
with open(f"launch-{rank}.json", "w") as f:
    json.dump([launch.launcher, launch.size], f)
from gpubw.cli import command
sys.exit(command.main(sys.argv[1:]))
"""


@needs_mpi
def test_the_slurm_command_runs_under_mpiexec_with_srun_variables(tmp_path: Path) -> None:
    """The script's gpubw run, on a simulated h200x2 (one multinode and one single-node
    testcase, small), under mpiexec -n 2 with srun's variables in each rank: each rank's
    environment without MPICH's variables is an srun launch of 2, and rank 0 writes a
    report of a 2-rank world."""
    (args,) = [c for c in sbatch_commands() if c[0] != "check"]
    args = [a.replace("gpubw-7", str(tmp_path / "r")) for a in args]
    # 512 MiB: the script judges with --expect builtin, whose floors are for that size only
    small = ["--simulate", "h200x2", "-t", "44", "38", "-b", "512MiB", "-i", "2", "-q"]
    argv = [_mpiexec() or "mpiexec", "-n", "2", sys.executable, "-c", RANK, *args, *small]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, encoding="utf-8", timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    for rank in range(2):
        assert json.loads((tmp_path / f"launch-{rank}.json").read_text()) == ["Slurm srun", 2]
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["world"]["size"] == 2 and doc["exit_code"] == 0 and doc["expectations"]
    assert {t["key"]: t["status"] for t in doc["testcases"]} == {
        "multinode_device_to_device_memcpy_read_ce": "Passed",
        "device_local_copy": "Passed",
    }
