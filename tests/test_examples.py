"""The launch examples of examples/ (Slurm, Kubernetes) as far as a CPU machine can check
them: the manifests parse and name gpubw's real command line, the Slurm script's ranks are
seen as an srun launch, and its command runs under mpiexec with srun's variables."""

from __future__ import annotations

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
from gpubw.runner.registry import Writers
from gpubw.world import detect_launch
from gpubw.world.launch_env import devices_to_start
from test_world import _mpiexec, needs_mpi

EXAMPLES = Path(__file__).parents[1] / "examples"
SBATCH = EXAMPLES / "slurm.sbatch"
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
    if args and args[0] in SUBCOMMANDS:
        assert args[0] == "check", args  # the only sub-command the examples use
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


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifests_parse_and_run_gpubw(path: Path) -> None:
    """Each manifest is a Kubernetes object whose container runs gpubw (directly or under
    mpirun) with a command line gpubw accepts."""
    doc = read_yaml(path.read_text(encoding="utf-8"))
    assert doc["apiVersion"] and doc["kind"] in {"Job", "MPIJob"} and doc["metadata"]["name"]
    commands = [c["command"] for c in _containers(doc) if "command" in c]
    assert commands, f"{path.name}: no container command"
    for command in commands:
        assert "gpubw" in command, command
        args = command[command.index("gpubw") + 1 :]
        check_gpubw_args(args)
        if doc["kind"] == "MPIJob":
            assert command[0] == "mpirun" and "-p" in args  # the multinode testcases
    assert len(MANIFESTS) == 2


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
    small = ["--simulate", "h200x2", "-t", "35", "34", "-b", "1MiB", "-i", "2", "-q"]
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
