"""Tests of what the gpubw command imports on a one-testcase run's way to CUDA (issue 36)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

#: ``gpubw ARGV`` in a fresh process, up to its first CUDA call: the prestart is left out (no
#: CUDA on the test machine, none touched on a GPU one), and the real backend's constructor,
#: where the run's first driver call is, writes the modules loaded then to MODULES_OUT and
#: ends the process
_UP_TO_CUDA = """
import json, os, sys
from gpubw.backend import cuda, cuda_start

def first_cuda_call(self):
    with open(os.environ["MODULES_OUT"], "w") as f:
        json.dump(sorted(sys.modules), f)
    os._exit(0)

cuda_start.prestart = lambda *a, **k: False
cuda.CudaBackend.__init__ = first_cuda_call
from gpubw.cli.command import main
sys.exit(main(sys.argv[1:]))
"""

#: what a plain one-testcase run (JSON to a file) has no use for before CUDA starts: the
#: schema checker (imported when the report is written), the simulated system and numpy, MPI,
#: the progress bar, NVML (read once the System is open), the expectations and the soak rule
#: (a judged run's, a soak's), the tools and the fleet, the other writers and testcases
NOT_BEFORE_CUDA = (
    "jsonschema",
    "numpy",
    "gpubw.backend.sim",
    "mpi4py",
    "rich",
    "pynvml",
    "cuda.core",
    "gpubw.acceptance.expect",
    "gpubw.acceptance.expectations",
    "gpubw.acceptance.soak",
    "gpubw.tools",
    "gpubw.fleet",
    "gpubw.writers.text",
    "gpubw.writers.csv",
    "gpubw.writers.openmetrics",
    "gpubw.writers.nvbandwidth",
    "gpubw.testcases.host",
    "gpubw.testcases.peer",
)


def _modules_up_to_cuda(tmp_path: Path, *argv: str) -> set[str]:
    out = tmp_path / "modules.json"
    env = {**os.environ, "MODULES_OUT": str(out), "GPUBW_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, "-c", _UP_TO_CUDA, *argv], env=env, capture_output=True, encoding="utf-8"
    )
    assert proc.returncode == 0 and out.exists(), proc.stderr
    return set(json.loads(out.read_text()))


def _loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def test_one_testcase_imports_nothing_heavy_before_cuda(tmp_path: Path) -> None:
    """``gpubw -t device_local_copy -b 64 -q -j -o FILE`` reaches its first CUDA call without
    importing anything of :data:`NOT_BEFORE_CUDA`, and with its testcase's module and the
    JSON writer's loaded."""
    modules = _modules_up_to_cuda(
        tmp_path, "-t", "device_local_copy", "-b", "64", "-q", "-j", "-o", str(tmp_path / "r")
    )
    assert {"gpubw.testcases.local", "gpubw.writers.json"} <= modules
    assert _loaded(modules, NOT_BEFORE_CUDA) == []


def test_a_judged_run_loads_its_expectations(tmp_path: Path) -> None:
    """With ``--expect FILE`` the expectations are read before CUDA starts (a bad file is a
    usage error before the run), so their module is loaded by then."""
    import gpubw.acceptance

    expect = Path(gpubw.acceptance.__file__).parent / "expectations" / "a100-pcie-40gb.json"
    modules = _modules_up_to_cuda(
        tmp_path, "-t", "device_local_copy", "-b", "64", "-q", "--expect", str(expect)
    )
    assert "gpubw.acceptance.expect" in modules
