"""The fleet launch examples (examples/slurm-fleet.sbatch, examples/kubernetes/fleet-*.yaml)
as far as a CPU machine checks them: the Slurm script submits a job array and a collector
that depends on it (afterany), its array tasks write one report per node with the node in
the file name and its collector runs gpubw fleet on them (run here with a stand-in sbatch
and simulated nodes); the Indexed Job puts one pod per node, each writing its report under
its node's name into a shared claim that the collector Job reads."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from test_examples import EXAMPLES, FLEET_SBATCH, _gpubw_args, check_gpubw_args, read_yaml

FLEET_JOB = EXAMPLES / "kubernetes" / "fleet-job.yaml"
FLEET_COLLECT = EXAMPLES / "kubernetes" / "fleet-collect.yaml"

#: a stand-in sbatch: logs its arguments, answers --parsable with a job id
SBATCH = """#!/bin/sh
echo "$@" >> "$SBATCH_LOG"
echo "4242;cluster"
"""

#: gpubw on a simulated node: the node's name as its host name, a small h200x2 run
GPUBW = f"""#!{sys.executable}
import os, socket, sys
socket.gethostname = lambda: os.environ["SLURMD_NODENAME"]
from gpubw.cli import command
argv = sys.argv[1:]
if argv[:1] != ["fleet"]:
    argv += ["--simulate", "h200x2", "-b", "4MiB", "-i", "2",
             "-t", "host_to_device_memcpy_ce", "device_to_device_memcpy_read_ce"]
sys.exit(command.main(argv))
"""


def _script(folder: Path, name: str, text: str) -> None:
    path = folder / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _bash(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(FLEET_SBATCH), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        encoding="utf-8",
        timeout=300,
    )


def _environment(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir, "sbatch", SBATCH)
    _script(bin_dir, "gpubw", GPUBW)
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join(sys.path),
        "SBATCH_LOG": str(tmp_path / "sbatch.log"),
        "GPUBW_FLEET_DIR": str(tmp_path / "fleet"),
    }


def fleet_sbatch_commands() -> list[list[str]]:
    """The gpubw command lines of the fleet script, its variables filled in."""
    fill = {"${report}": "r/gpubw-n1-7_0.json", "${reports}": "r", "${dir}": "."}
    out = []
    for line in FLEET_SBATCH.read_text().replace("\\\n", " ").splitlines():
        words = line.split("||")[0].split()
        if line.lstrip().startswith("#") or not words or words[0] != "gpubw":
            continue
        for old, new in fill.items():
            words = [w.replace('"', "").replace(old, new) for w in words]
        out.append(words[1:])
    return out


def test_the_fleet_script_is_bash_and_runs_gpubw_command_lines() -> None:
    """bash -n passes, and the script's gpubw command lines (a run per task, three fleet
    commands in the collector) are ones gpubw accepts."""
    subprocess.run(["bash", "-n", str(FLEET_SBATCH)], check=True)
    commands = fleet_sbatch_commands()
    assert [c[0] for c in commands] == ["-j", "fleet", "fleet", "fleet"], commands
    for args in commands:
        check_gpubw_args(args)


def test_submit_makes_an_array_and_a_collector_after_any(tmp_path: Path) -> None:
    """``submit``: sbatch --array for the script, then the script's collect mode with
    --dependency=afterany on the array's job id (without the cluster suffix)."""
    env = _environment(tmp_path)
    done = _bash("submit", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    array, collector = (tmp_path / "sbatch.log").read_text().splitlines()
    assert array.startswith("--parsable --array=0-499 ") and array.endswith("slurm-fleet.sbatch")
    assert "--dependency=afterany:4242 " in collector and collector.endswith(" collect")


def test_the_array_tasks_and_collector_judge_a_simulated_fleet(tmp_path: Path) -> None:
    """Five array tasks on five (simulated) nodes write five reports named by node into the
    shared folder; the collector judges them (exit 0: a fleet of healthy nodes), keeps
    them in the history and writes the text, the trends' JSON and the page."""
    env = _environment(tmp_path)
    for task in range(5):
        node_env = {**env, "SLURMD_NODENAME": f"gpu{task:02d}", "SLURM_ARRAY_JOB_ID": "7"}
        done = _bash(env={**node_env, "SLURM_ARRAY_TASK_ID": str(task)}, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    reports = sorted(p.name for p in (tmp_path / "fleet" / "reports").iterdir())
    assert reports == [f"gpubw-gpu{t:02d}-7_{t}.json" for t in range(5)]
    done = _bash("collect", env=env, cwd=tmp_path)
    assert done.returncode == 0, (done.stdout, done.stderr)
    folder = tmp_path / "fleet"
    assert "5 node(s) judged" in (folder / "fleet.txt").read_text()
    assert '"history"' in (folder / "fleet-history.json").read_text()
    assert (folder / "fleet.html").read_text().count("data:image/png;base64,") == 1
    assert _bash("bogus", env=env, cwd=tmp_path).returncode == 2


def _pod(doc: dict[str, Any]) -> dict[str, Any]:
    return dict(doc["spec"]["template"]["spec"])


def test_the_indexed_job_writes_a_report_per_node_into_the_shared_claim() -> None:
    """The Job is Indexed with a pod per node (completions = parallelism, a required
    anti-affinity on its own pods' label by host name); each pod's report lands on the
    claim's mount under its node's name, which the downward API gives."""
    doc = read_yaml(FLEET_JOB.read_text(encoding="utf-8"))
    spec, pod = doc["spec"], _pod(doc)
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"]
    (rule,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    labels = doc["spec"]["template"]["metadata"]["labels"]
    assert rule["topologyKey"] == "kubernetes.io/hostname"
    assert rule["labelSelector"]["matchLabels"] == labels
    (container,) = pod["containers"]
    (env,) = container["env"]
    assert env["name"] == "NODE_NAME"
    assert env["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    args = _gpubw_args(container["command"])
    output = args[args.index("-o") + 1]
    (mount,) = container["volumeMounts"]
    assert output.startswith(mount["mountPath"] + "/") and "$(NODE_NAME)" in output
    assert re.fullmatch(r".*\.json", output) and "-j" in args
    (volume,) = pod["volumes"]
    assert volume["name"] == mount["name"] and "persistentVolumeClaim" in volume


def test_the_collector_reads_the_claim_the_pods_wrote() -> None:
    """The collector Job mounts the same claim and runs gpubw fleet on its mount, with the
    history and the page on the same volume."""
    job = _pod(read_yaml(FLEET_JOB.read_text(encoding="utf-8")))
    collect = _pod(read_yaml(FLEET_COLLECT.read_text(encoding="utf-8")))
    claim = job["volumes"][0]["persistentVolumeClaim"]["claimName"]
    assert collect["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim
    (container,) = collect["containers"]
    mount = container["volumeMounts"][0]["mountPath"]
    args = _gpubw_args(container["command"])
    assert args[:2] == ["fleet", mount]
    assert args[args.index("--db") + 1].startswith(mount + "/")
    assert args[args.index("-o") + 1].startswith(mount + "/")
    assert "nvidia.com/gpu" not in str(container.get("resources", {}))
