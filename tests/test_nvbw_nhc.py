"""Azure NHC's check_gpu_bw, run in bash as its own bats tests run it (``result=$(check_gpu_bw
1 1)``: it passes with status 0 and no ERROR line), over real nvbandwidth v0.8 and v0.10 output
and gpubw-nvbandwidth's in both emulated releases (simulated h200x1 and h200x2).

The check is tests/nhc_check_gpu_bw.sh, a port that names its sources, in two states:
``pr164`` (NHC's PR #164, which skips each testcase's SUM / COEFFICIENT_OF_VARIATION / NOTE
lines) and ``main`` (upstream main before it). Only the hardware is stubbed: ``nvidia-smi`` and
``lspci`` on PATH, the clock boost. ``$AZ_NHC_ROOT/bin/nvbandwidth`` is a link to
gpubw-nvbandwidth on a simulated system, or a script printing a recorded run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpubw.writers.text import NOTE_LINES

HERE = Path(__file__).resolve().parent
PORT = HERE / "nhc_check_gpu_bw.sh"
RESULTS = HERE.parent / "benchmarks" / "results"
DATA = HERE / "data" / "nvbandwidth"
#: the testcases NHC runs: `nvbandwidth -t H2D D2H [P2P] -i 10`, P2P where NVLink is up
NHC_TESTS = ("host_to_device_memcpy_ce", "device_to_host_memcpy_ce",
             "device_to_device_memcpy_read_ce")  # fmt: skip
#: nvidia-smi as check_gpu_bw asks it: a name per GPU; NVLink status lines with 2+ GPUs only
NVIDIA_SMI = """#!/bin/bash
case "$*" in
  *--query-gpu=name*) for ((i = 0; i < NHC_GPUS; i++)); do echo "NVIDIA H200"; done ;;
  *nvlink*) for ((i = 1; i < NHC_GPUS; i++)); do
              printf 'GPU %d: NVIDIA H200\\n\\t Link 0: 26.562 GB/s\\n' $i
            done ;;
esac
"""
GPUBW_NVBANDWIDTH = Path(sys.executable).with_name("gpubw-nvbandwidth")
LSPCI = '#!/bin/sh\necho "0000:1b:00.0 3D controller: NVIDIA Corporation Device 2335 (rev a1)"\n'
#: what bc is handed of the NOTE lines when NHC reads them as matrix rows (awk's $2..$NF)
NOTE_WORDS = sorted(w for line in NOTE_LINES for w in line.split()[1:])
_CELL = re.compile(r"dbg: (H2D|D2H|P2P)_GPU_\d+(_\d+)?: (\S+) GB/s")
_BAD = re.compile(r"failed\. Bandwidth (\S+) is less than")

pytestmark = pytest.mark.skipif(
    not (shutil.which("bash") and shutil.which("bc") and shutil.which("awk")),
    reason="Azure NHC's check runs in bash with awk and bc, and one of them is missing",
)


@dataclass(frozen=True)
class Verdict:
    """What check_gpu_bw said: its exit status and its output lines."""

    status: int
    lines: list[str]

    @property
    def passed(self) -> bool:
        """Upstream's "Pass case: check_gpu_bw": status 0 and no ERROR in the output."""
        return self.status == 0 and not any("ERROR" in line for line in self.lines)

    @property
    def cells(self) -> list[str]:
        """The figures of the matrix cells it compared (a dbg line each; words it took for
        cells left out)."""
        read = [m.group(3) for line in self.lines if (m := _CELL.fullmatch(line))]
        return [figure for figure in read if re.fullmatch(r"\d+\.\d+", figure)]

    @property
    def failed_figures(self) -> list[str]:
        """What it compared and failed: a cell's figure, or a word it took for one."""
        return [m.group(1) for line in self.lines if (m := _BAD.search(line))]


#: upstream's bats pass case, over the port: $2 is "PCIE_GBPS P2P_GBPS"
CHECK = 'source "$1"; result=$(check_gpu_bw $2); status=$?; echo "$result"; exit $status'
#: NHC's result_lines_array after its split of the text in file $2, NUL-separated
SPLIT = (
    'source "$1"; _nhc_split_output "$(<"$2")";'
    ' for k in "${!result_lines_array[@]}";'
    ' do printf "%s=%s\\0" "$k" "${result_lines_array[$k]}"; done'
)


class Nhc:
    """A place to run the check: stub commands on PATH and an $AZ_NHC_ROOT/bin."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "stubs").mkdir()
        (root / "nhc" / "bin").mkdir(parents=True)
        for name, text in (("nvidia-smi", NVIDIA_SMI), ("lspci", LSPCI)):
            (root / "stubs" / name).write_text(text)
            (root / "stubs" / name).chmod(0o755)
        self.nvbandwidth = root / "nhc" / "bin" / "nvbandwidth"

    def _bash(self, script: str, arg: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        env = {**env, "PATH": f"{self.root / 'stubs'}:{os.environ['PATH']}"}
        env["AZ_NHC_ROOT"] = str(self.root / "nhc")
        argv = ["bash", "-c", script, "nhc", str(PORT), arg]
        return subprocess.run(argv, env=env, capture_output=True, encoding="utf-8", timeout=120)

    def _check(self, gpus: int, parse: str, figures: str, env: dict[str, str]) -> Verdict:
        proc = self._bash(CHECK, figures, {**env, "NHC_GPUS": str(gpus), "NHC_PARSE": parse})
        return Verdict(proc.returncode, proc.stdout.splitlines())

    def replay(self, text: str, gpus: int, parse: str, figures: str = "1 1") -> Verdict:
        """The check over a recorded run: nvbandwidth prints it, whatever it is asked."""
        self.nvbandwidth.unlink(missing_ok=True)
        (self.root / "run.txt").write_text(text, encoding="utf-8")
        self.nvbandwidth.write_text(f"#!/bin/sh\ncat '{self.root / 'run.txt'}'\n")
        self.nvbandwidth.chmod(0o755)
        return self._check(gpus, parse, figures, dict(os.environ))

    def split(self, text: str, parse: str) -> dict[str, str]:
        """NHC's result_lines_array for a text: each testcase's kept lines, as it stores them."""
        (self.root / "split.txt").write_text(text, encoding="utf-8")
        proc = self._bash(SPLIT, str(self.root / "split.txt"), {**os.environ, "NHC_PARSE": parse})
        assert proc.returncode == 0, proc.stderr
        return dict(item.split("=", 1) for item in proc.stdout.split("\0") if item)

    def gpubw(self, system: str, release: str, parse: str, figures: str = "1 1") -> Verdict:
        """The check with gpubw-nvbandwidth as nvbandwidth, on a simulated system."""
        self.nvbandwidth.unlink(missing_ok=True)
        self.nvbandwidth.symlink_to(GPUBW_NVBANDWIDTH)
        return self._check(int(system[-1]), parse, figures, _gpubw_env(system, release))


def _gpubw_env(system: str, release: str) -> dict[str, str]:
    """The environment of a gpubw-nvbandwidth run: the system, and the release unless default."""
    env = {k: v for k, v in os.environ.items() if k != "GPUBW_NVBANDWIDTH_VERSION"}
    env["GPUBW_SIMULATE"] = system
    if release != "default":
        env["GPUBW_NVBANDWIDTH_VERSION"] = release
    return env


@pytest.fixture
def nhc(tmp_path: Path) -> Nhc:
    if not GPUBW_NVBANDWIDTH.exists():
        pytest.skip("the gpubw-nvbandwidth script is not installed (pip install -e .)")
    return Nhc(tmp_path)


def nhc_view(text: str, tests: Sequence[str]) -> str:
    """What nvbandwidth prints for NHC's ``-t TESTS -i 10``, cut verbatim from a recorded run
    of more testcases: the run's header (the lines before its first Running), the asked
    testcases' blocks (a Running line up to the next Running, Waived or NOTE line) and the
    closing NOTE lines (to the end), where the recording has them."""
    lines = text.splitlines(keepends=True)
    first = next(n for n, line in enumerate(lines) if line.startswith("Running "))
    notes = [n for n, line in enumerate(lines) if line.startswith("NOTE:")]
    note = lines[notes[-1] :] if notes and notes[-1] > first else []
    blocks: dict[str, list[str]] = {}
    key = ""
    for line in lines[first:]:
        if line.startswith("Running "):
            key = line[len("Running ") :].strip().rstrip(".")
        elif line.startswith(("Waived", "NOTE:")):
            key = ""
        if key:
            blocks.setdefault(key, []).append(line)
    return "".join(lines[:first] + [x for t in tests for x in blocks.get(t, [])] + note)


def _real_v08() -> str:
    """NVIDIA's nvbandwidth v0.8 on one H200 (a default run), as NHC's one-GPU command."""
    text = (RESULTS / "nvbandwidth-v0.8-h200x1-2026-12-01.txt").read_text(encoding="utf-8")
    assert "Built from Git version: fa0cc22" in text  # NVIDIA's binary, not gpubw
    return nhc_view(text, NHC_TESTS[:2])


def _sheet_runs() -> dict[str, str]:
    """The H100 sheet's single-testcase v0.10.0 runs (8 GPUs), each whole, by testcase."""
    text = (DATA / "h100-8gpu-sheet-nvbandwidth_v0.10.0.txt").read_text(encoding="utf-8")
    runs = re.split(r"^#+\n", text, flags=re.MULTILINE)
    return {m.group(1): run for run in runs if (m := re.search(r"^Running (\w+)\.$", run, re.M))}


def _real_v010() -> dict[str, tuple[str, int]]:
    """Real v0.10 text as NHC would get it, by source: (text, GPU count)."""
    sheet = _sheet_runs()
    dell = (DATA / "dell-xe9780-b300-7gpu-nvbandwidth_v0.10.0.txt").read_text(encoding="utf-8")
    gke = (DATA / "gke-g4-confidential-nvbandwidth_v0.10.0.txt").read_text(encoding="utf-8")
    azure = (DATA / "azurehpc-nvbandwidth_v0.10_output.txt").read_text(encoding="utf-8")
    return {
        **{f"h100-sheet-{t}": (sheet[t], 8) for t in NHC_TESTS},
        # the capture was cut before its NOTE lines; the run is the last one of the file
        "dell-b300": (nhc_view(dell[dell.rindex("nvbandwidth Version:") :], NHC_TESTS), 7),
        "gke-g4-cc": (nhc_view(gke, NHC_TESTS[:2]), 1),  # its README's excerpt has no NOTE
        "azurehpc-fixture": (azure, 2),  # NHC's own hand-made test data
    }


def _cells(text: str) -> list[str]:
    """Every figure of NHC's testcases' matrices in a text (N/A left out)."""
    return [c for key, block in _blocks(text).items() if key in NHC_TESTS
            for row in block for c in row.split()[1:] if c != "N/A"]  # fmt: skip


def _blocks(text: str) -> dict[str, list[str]]:
    """The matrix rows of each testcase of a text (an index, then figures or N/A)."""
    out: dict[str, list[str]] = {}
    key = ""
    for line in text.splitlines():
        if line.startswith("Running "):
            key = line[len("Running ") :].rstrip(".")
        elif key and re.fullmatch(r"\s*\d+(\s+(\d+\.\d+|N/A))+\s*", line):
            out.setdefault(key, []).append(line)
    return out


@pytest.mark.parametrize("name", list(_real_v010()))
def test_nhc_passes_real_v010_text(nhc: Nhc, name: str) -> None:
    """NHC with PR #164 passes real v0.10 text and reads every cell of it; before it, NHC
    passes only a capture without NOTE lines (two are cut before them)."""
    text, gpus = _real_v010()[name]
    verdict = nhc.replay(text, gpus, "pr164")
    assert verdict.passed, verdict.lines
    assert sorted(verdict.cells) == sorted(_cells(text))
    assert nhc.replay(text, gpus, "main").passed == ("NOTE:" not in text)


@pytest.mark.parametrize("system", ["h200x1", "h200x2"])
@pytest.mark.parametrize("release", ["default", "0.8"])
def test_nhc_passes_gpubw_text(nhc: Nhc, system: str, release: str) -> None:
    """NHC with PR #164 passes gpubw-nvbandwidth's v0.10 (default) and v0.8 text: every cell
    read (1 1), and every cell, nothing else, failed where the figures are out of reach."""
    verdict = nhc.gpubw(system, release, "pr164")
    assert verdict.passed, verdict.lines
    gpus = int(system[-1])
    assert len(verdict.cells) == 2 * gpus + gpus * (gpus - 1)
    assert all(re.fullmatch(r"\d+\.\d\d", c) for c in verdict.cells)
    failing = nhc.gpubw(system, release, "pr164", figures="5000 5000")
    assert not failing.passed
    assert sorted(failing.failed_figures) == sorted(verdict.cells)


def test_nhc_passes_real_v08_text(nhc: Nhc) -> None:
    """NHC with PR #164 passes NVIDIA's v0.8 text too (its NOTE lines are skipped)."""
    verdict = nhc.replay(_real_v08(), 1, "pr164")
    assert verdict.passed, verdict.lines
    assert sorted(verdict.cells) == sorted(_cells(_real_v08()))


@pytest.mark.parametrize("release", ["0.8", "0.10"])
def test_nhc_reads_gpubw_text_from_a_real_h100(nhc: Nhc, release: str) -> None:
    """gpubw-nvbandwidth's default run on a real H100 (benchmarks/results, call b of
    2026-12-06; gpubw's text, not NVIDIA's): PR #164 passes it, main fails on its NOTE words."""
    text = (RESULTS / f"nvbw-v{release}-h100-2026-12-06b.txt").read_text(encoding="utf-8")
    assert "Built from Git version: gpubw-" in text
    view = nhc_view(text, NHC_TESTS[:2])
    verdict = nhc.replay(view, 1, "pr164")
    assert verdict.passed, verdict.lines
    assert sorted(verdict.cells) == sorted(_cells(view)) and len(verdict.cells) == 2
    assert sorted(nhc.replay(view, 1, "main").failed_figures) == NOTE_WORDS


def test_nhc_before_pr164_fails_real_and_gpubw_v08_text_alike(nhc: Nhc) -> None:
    """NHC before PR #164 reads v0.8's closing NOTE lines as rows of its last testcase and
    fails on their words, with NVIDIA's text and gpubw's v0.8 text alike, message for message."""
    real = nhc.replay(_real_v08(), 1, "main")
    ours = nhc.gpubw("h200x1", "0.8", "main")
    assert not real.passed and not ours.passed
    assert sorted(real.failed_figures) == NOTE_WORDS
    errors = [line for line in real.lines if line.startswith("ERROR")]
    assert [line for line in ours.lines if line.startswith("ERROR")] == errors
    assert len(real.cells) == len(ours.cells) == 2  # the H2D and D2H cells pass in both


@pytest.mark.parametrize("release", ["default", "0.8"])
def test_nhc_before_pr164_fails_v010_text_as_v08(nhc: Nhc, release: str) -> None:
    """Before PR #164 the NOTE lines fail v0.10 text as well (real and gpubw's): it is NHC's
    parse, not the release, that decides; the cells themselves all pass."""
    real = nhc.replay(_sheet_runs()["host_to_device_memcpy_ce"], 8, "main")
    ours = nhc.gpubw("h200x2", release, "main")
    for verdict in (real, ours):
        assert not verdict.passed
        assert sorted(verdict.failed_figures) == NOTE_WORDS  # no cell among them
    assert len(ours.cells) == 6 and len(real.cells) == 8


def test_nhc_pr164_keeps_the_rows_its_bats_tests_expect(nhc: Nhc) -> None:
    """The pr164 state keeps, of NHC's own fixture, the rows the merged PR's bats test wants;
    of gpubw's v0.10 text, the same shapes."""
    fixture = (DATA / "azurehpc-nvbandwidth_v0.10_output.txt").read_text(encoding="utf-8")
    assert nhc.split(fixture, "pr164") == {
        "host_to_device_memcpy_ce": "0     26.03     25.94",
        "device_to_host_memcpy_ce": "0     25.97     26.00",
        "device_to_device_memcpy_read_ce": "0       N/A    276.07\n1    276.19       N/A",
    }
    argv = [str(GPUBW_NVBANDWIDTH), "-t", *NHC_TESTS, "-i", "10"]
    env = _gpubw_env("h200x2", "default")
    ours = subprocess.run(argv, env=env, capture_output=True, encoding="utf-8", timeout=120)
    kept = nhc.split(ours.stdout, "pr164")
    shapes = {k: [len(row.split()) for row in v.splitlines()] for k, v in kept.items()}
    assert shapes == {NHC_TESTS[0]: [3], NHC_TESTS[1]: [3], NHC_TESTS[2]: [3, 3]}
