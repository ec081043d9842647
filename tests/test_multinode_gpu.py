"""The multinode testcases on a real GPU under a real MPI launcher (two ranks on one host)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpubw.testcases import MULTINODE

#: the multicast testcases: waived here (never create multicast objects on a shared host)
MULTICAST = {"multinode_device_to_device_broadcast_one_to_all_sm",
             "multinode_device_to_device_broadcast_all_to_all_sm"}  # fmt: skip
#: what keeps every NVLink multicast path off (gpu_check.sh sets the same)
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1", "GPUBW_DISABLE_MULTICAST": "1"}  # fmt: skip


def _launcher() -> list[str]:
    """mpirun (Open MPI, as root where the image runs so) or mpiexec, or a skip."""
    try:
        from gpubw.backend.cuda import CudaBackend

        CudaBackend().close()
    except Exception as exc:  # NoDriverError and the like
        pytest.skip(f"no NVIDIA GPU/driver ({type(exc).__name__})")
    pytest.importorskip("mpi4py", reason="mpi4py is not installed")
    mpirun = shutil.which("mpirun") or shutil.which("mpiexec")
    if mpirun is None:
        pytest.skip("no mpirun or mpiexec on PATH")
    extra = ["--allow-run-as-root", "--oversubscribe"] if os.geteuid() == 0 else []
    return [mpirun, *extra, "-np", "2"]


@pytest.mark.gpu
def test_two_ranks_measure_every_multinode_cell(tmp_path: Path) -> None:
    """mpirun -np 2 -p multinode at 64 MiB: every testcase but the multicast ones passes,
    each N x N cell off the diagonal has a positive figure, and the run exits 0."""
    out = tmp_path / "mn.json"
    env = {**os.environ, **NO_MULTICAST}
    forward = [a for name in (*NO_MULTICAST, "PYTHONPATH", "GPUBW_CACHE_DIR") if name in env
               for a in ("-x", name)]  # fmt: skip
    command = [*_launcher(), *forward, sys.executable, "-m", "gpubw", "-p", "multinode",
               "-b", "64MiB", "-j", "-o", str(out)]  # fmt: skip
    done = subprocess.run(
        command, env=env, capture_output=True, encoding="utf-8", errors="replace", timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["world"]["size"] == 2
    statuses = {t["key"]: t["status"] for t in report["testcases"]}
    assert set(statuses) == {key for key, _ in MULTINODE}
    assert {k for k, s in statuses.items() if s != "Passed"} == MULTICAST, statuses
    for testcase in report["testcases"]:
        for matrix in testcase["matrices"]:
            values = matrix["values"]
            if len(values) == 2 and len(values[0]) == 2:  # the N x N ones
                assert values[0][1] > 0 and values[1][0] > 0, (testcase["key"], values)
