"""The proof is the consumers' own parsing: DCGM, Azure NHC and superbench (their parsers
ported in nvbw_consumers.py) read real nvbandwidth v0.8 and v0.10 output and
gpubw-nvbandwidth's in both emulated releases (simulated h200x1, h200x2, h200x8, and a 2-rank
MPI run) alike, every cell with a value. Real v0.10 text is tests/data/nvbandwidth/.

Each gpubw output is made the way its consumer makes it: the consumer's own command line,
run through a symlink named ``nvbandwidth``. Real JSON is benchmarks/results'
nvbandwidth-v0.8-*.json; real text is compared wherever benchmarks/results holds
nvbandwidth-v0.8-*.txt (benchmarks/gpu_check.sh's nvbwcompat step makes it).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpubw.writers.text import NOTE_LINES
from nvbw_consumers import (
    NHC_TESTS,
    NhcParseError,
    dcgm_read,
    nhc_blocks,
    nhc_check,
    nhc_rows,
    nhc_v010_rows,
    superbench_list,
    superbench_read,
)
from test_world import _mpiexec, needs_mpi

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
V010_DATA = Path(__file__).resolve().parent / "data" / "nvbandwidth"
REAL_JSON = {f.name: f for f in sorted(RESULTS.glob("nvbandwidth-v0.8-*.json"))}
REAL_TEXT = {f.name: f for f in sorted(RESULTS.glob("nvbandwidth-v0.8-*.txt"))}
#: the testcases of a simulated h200x8 run (every shape: 1 x N, N x N, 3 x N x N, totals,
#: latency, device-local, gpubw's own), by name as DCGM and superbench give them
X8 = ["host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "device_to_device_memcpy_read_ce",
      "device_to_device_bidirectional_memcpy_read_ce", "all_to_one_write_ce",
      "device_to_device_memcpy_read_sm", "host_device_latency_sm", "device_to_device_latency_sm",
      "device_local_copy", "device_local_copy_sm"]  # fmt: skip
#: the testcases of the 2-rank MPI run (single-node ones on the first rank, multinode ones)
MPI = ["host_to_device_memcpy_ce", "device_to_device_memcpy_read_ce",
       "multinode_device_to_device_memcpy_read_ce",
       "multinode_device_to_device_bidirectional_memcpy_read_ce",
       "multinode_device_to_device_all_to_one_write_sm", "multinode_bisect_write_ce"]  # fmt: skip
#: superbench metric names that its parser makes from any v0.8 output (its issue #748): a
#: 3-matrix testcase's 2nd and 3rd SUM lines, and the latency testcase whose header it misses
SB_QUIRKS = re.compile(r"_sum_None$")


class Outputs:
    """gpubw-nvbandwidth's standard output per (system, consumer), made once per session."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.link = root / "nvbandwidth"
        self.link.symlink_to(Path(sys.executable).with_name("gpubw-nvbandwidth"))
        self._made: dict[tuple[str, str, str], str] = {}
        #: standard error of each ``--list`` (superbench takes any as "no testcases")
        self.list_stderr: dict[tuple[str, str], str] = {}

    def argv(self, system: str, consumer: str) -> list[str]:
        subset = {"h200x8": X8, "mpi": MPI}.get(system)
        if consumer == "dcgm":  # nvvs runs -j -v, one -t per configured testcase
            return ["-j", "-v", *(a for t in subset or () for a in ("-t", t))]
        if consumer == "superbench":  # its defaults: 64 MiB, 3 samples; --testcase when given
            return ["--bufferSize", "64", *(["--testcase", *subset] if subset else []),
                    "--testSamples", "3"]  # fmt: skip
        if consumer == "list":
            return ["--list"]
        # the health check adds the peer testcase where NVLink is up (not on one GPU)
        tests = [t for t in NHC_TESTS if system != "h200x1" or "device_to_device" not in t]
        return ["-t", *tests, "-i", "10"]

    def get(self, system: str, consumer: str, release: str = "0.8") -> str:
        """The output of ``consumer``'s command line as nvbandwidth ``release``."""
        if (system, consumer, release) not in self._made:
            argv = self.argv(system, consumer)
            self._made[system, consumer, release] = self._run(system, argv, consumer, release)
        return self._made[system, consumer, release]

    def _run(self, system: str, argv: list[str], consumer: str, release: str) -> str:
        env = {**os.environ, "GPUBW_SIMULATE": "h200x2" if system == "mpi" else system,
               "GPUBW_NVBANDWIDTH_VERSION": release}  # fmt: skip
        cmd = [str(self.link), *argv]
        if system == "mpi":
            cmd = [str(_mpiexec()), "-n", "2", *cmd]
        # DCGM merges standard error into standard output; the others read stdout only
        merged = subprocess.STDOUT if consumer == "dcgm" else subprocess.PIPE
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=merged, encoding="utf-8",
                              env=env, timeout=300, cwd=self.root)  # fmt: skip
        assert proc.returncode == 0, (cmd, (proc.stderr or proc.stdout)[-2000:])
        if consumer == "list":
            self.list_stderr[system, release] = proc.stderr
        return proc.stdout


@pytest.fixture(scope="session")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> Outputs:
    if not Path(sys.executable).with_name("gpubw-nvbandwidth").exists():
        pytest.skip("the gpubw-nvbandwidth script is not installed (pip install -e .)")
    return Outputs(tmp_path_factory.mktemp("nvbw"))


SYSTEMS = ["h200x1", "h200x2", "h200x8", pytest.param("mpi", marks=needs_mpi)]


def _dcgm_cells(output: str) -> dict[str, list[list[float]]]:
    """DCGM's reading: no error, and every cell of every testcase a number (NaN: "N/A")."""
    failed, result = dcgm_read(output)
    assert result is not None and not failed
    cells = {t.name: t.matrix for t in result.testcases}
    for name, matrix in cells.items():
        assert all(isinstance(v, float) for row in matrix for v in row), name
    return cells


def _same_shapes(real: dict[str, list[list[float]]], ours: dict[str, list[list[float]]]) -> None:
    both = set(real) & set(ours)
    assert len(both) >= 18
    for name in both:
        assert [len(r) for r in ours[name]] == [len(r) for r in real[name]], name
        nan = [[math.isnan(v) for v in row] for row in real[name]]
        assert [[math.isnan(v) for v in row] for row in ours[name]] == nan, name


@pytest.mark.parametrize("path", REAL_JSON.values(), ids=list(REAL_JSON))
def test_dcgm_reads_real_nvbandwidth_json(path: Path) -> None:
    """NVIDIA's own -j output: DCGM finds the object, every field and every cell."""
    cells = _dcgm_cells(path.read_text(encoding="utf-8"))
    assert len(cells) == 35


@pytest.mark.parametrize("system", SYSTEMS)
def test_dcgm_reads_gpubw_json(outputs: Outputs, system: str) -> None:
    """DCGM reads gpubw's -j -v as a real run of the system: statuses, shapes, N/A cells."""
    out = outputs.get(system, "dcgm")
    ours = _dcgm_cells(out)
    _, result = dcgm_read(out)
    assert result is not None and "SIMULATED" in result.git_version
    assert all({"sum", "min", "max", "average"} <= set(t.stats) for t in result.testcases
               if t.status == "passed")  # fmt: skip
    real = [p for name, p in REAL_JSON.items() if f"-{system}-" in name]
    if real:
        _, nv = dcgm_read(real[-1].read_text())
        assert nv is not None
        statuses = {t.name: t.status for t in nv.testcases}
        assert {t.name: t.status for t in result.testcases if t.name in statuses} == statuses
        _same_shapes(_dcgm_cells(real[-1].read_text()), ours)


def _structure(value: object) -> object:
    """Keys, types and nesting with the values left out."""
    if isinstance(value, dict):
        return {k: _structure(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_structure(v) for v in value]
    return type(value).__name__


@pytest.mark.parametrize("system", ["h200x1", "h200x2"])
def test_json_structure_is_nvbandwidths(outputs: Outputs, system: str) -> None:
    """Keys, types and nesting as real v0.8 JSON for every testcase both ran (-v's aside)."""
    (real,) = [json.loads(p.read_text())["nvbandwidth"] for n, p in REAL_JSON.items()
               if f"-{system}-" in n][-1:]  # fmt: skip
    ours = json.loads(outputs.get(system, "dcgm"))["nvbandwidth"]
    assert set(ours) == set(real)
    top = [k for k in real if k != "testcases"]
    assert {k: _structure(ours[k]) for k in top} == {k: _structure(real[k]) for k in top}
    by_name = {t["name"]: t for t in ours["testcases"]}
    for t in real["testcases"]:
        mine = {k: v for k, v in by_name[t["name"]].items() if k not in ("min", "max", "average")}
        assert _structure(mine) == _structure(t), t["name"]


def _superbench(outputs: Outputs, system: str) -> tuple[object, str]:
    listed = superbench_list(outputs.get("h200x2" if system == "mpi" else system, "list"))
    asked = {"h200x8": X8, "mpi": MPI}.get(system, listed)
    text = outputs.get(system, "superbench")
    return superbench_read(text, asked), text


_SB_CELL = re.compile(r"[^_]*\d+_[^_]*\d+_(bw|lat)")


@pytest.mark.parametrize("system", SYSTEMS)
def test_superbench_reads_gpubw_text(outputs: Outputs, system: str) -> None:
    """superbench: every testcase, a metric per cell and the SUM (or its _sum_None quirk)."""
    sb, _ = _superbench(outputs, system)
    assert sb.metrics and not sb.unsupported
    devices = 8 if system == "h200x8" else 2 if system in ("h200x2", "mpi") else 1
    for test in sb.executed:
        mine = [m[len(test) + 1 :] for m in sb.metrics if m.startswith(f"{test}_")]
        cells = [m for m in mine if _SB_CELL.fullmatch(m)]
        if f"{test}_sum_None" in sb.metrics:  # superbench's quirk: it missed the header
            assert cells == [], test
            continue
        assert {f"{test}_sum_bw", f"{test}_sum_lat"} & set(sb.metrics), test
        assert len(cells) in (devices, devices * (devices - 1)), (test, cells)
    odd = [m for m in sb.metrics if SB_QUIRKS.search(m) and m != "_sum_None"]
    assert all(m.removesuffix("_sum_None") in sb.executed for m in odd), odd
    expected = "INVALID_ARGUMENT" if system == "h200x1" else "SUCCESS"  # x1 waives peer tests
    assert sb.return_code == expected


@pytest.mark.parametrize("system", ["h200x1", "h200x2", "h200x8"])
def test_nhc_reads_gpubw_text(outputs: Outputs, system: str) -> None:
    """NHC reads every cell; as with real v0.6+ text, the final NOTE lines fail its last test."""
    text = outputs.get(system, "nhc")
    blocks = nhc_blocks(text)
    devices = int(system[-1])
    assert list(blocks) == [t for t in NHC_TESTS if devices > 1 or "device_to_device" not in t]
    last = list(blocks)[-1]
    assert blocks[last][-2:] == list(NOTE_LINES)
    for test, lines in blocks.items():
        rows = nhc_rows(lines[:-2] if test == last else lines)
        assert [len(r) for r in rows] == [devices] * len(rows)
        assert len(rows) == (devices if "device_to_device" in test else 1)
        assert all(re.fullmatch(r"\d+\.\d\d|N/A", c) for row in rows for c in row), rows
    said = nhc_check(text, pcie_gbps=40.0, p2p_gbps=200.0)
    matrix_rows = devices if "device_to_device" in last else 1
    peers = [int(re.search(r" peer (\d+):", s).group(1)) for s in said]  # type: ignore[union-attr]
    assert said and all(s.startswith(f"die: {last} ") for s in said)
    assert min(peers) == matrix_rows  # only the NOTE rows fail, never a cell


def _blocks(text: str) -> dict[str, list[str]]:
    """Each testcase's lines of a text output, numbers masked, blank runs collapsed."""
    out: dict[str, list[str]] = {}
    key = ""
    for line in text.splitlines():
        if line.startswith("Running "):
            key = line[len("Running ") : -1]
        elif (
            line
            and not line[:1].isdigit()
            and not line.startswith(
                (" ", "\t", "memcpy", "memory", "Device to", "SUM", "MIN", "MAX", "AVG", "Bisect")
            )
        ):
            key = ""
        if key:
            out.setdefault(key, []).append(re.sub(r"\d+(\.\d+)?", "#", " ".join(line.split())))
    return out


@pytest.mark.skipif(not REAL_TEXT, reason=f"no real text yet: {RESULTS}/nvbandwidth-v0.8-*.txt")
@pytest.mark.parametrize("path", REAL_TEXT.values(), ids=list(REAL_TEXT))
def test_real_text_and_gpubw_text_read_alike(outputs: Outputs, path: Path) -> None:
    """Real text and gpubw's: same masked skeleton, superbench metrics and NHC rows."""
    system = next(s for s in ("h200x1", "h200x2", "h200x8") if f"-{s}-" in path.name)
    real_text = path.read_text(encoding="utf-8")
    ours_text = outputs.get(system, "superbench")
    real, ours = _blocks(real_text), _blocks(ours_text)
    both = set(real) & set(ours)
    assert len(both) >= 18
    for key in both:
        assert ours[key] == real[key], key
    listed = superbench_list(outputs.get(system, "list"))
    real_sb, ours_sb = superbench_read(real_text, listed), superbench_read(ours_text, listed)
    names = {m for m in real_sb.metrics if any(m.startswith(f"{k}_") for k in both)}
    assert names <= set(ours_sb.metrics)
    real_blocks, ours_blocks = nhc_blocks(real_text), nhc_blocks(ours_text)
    # NHC reads the NOTE lines after the last matrix as rows of whichever testcase ran last
    # (nvbandwidth's own output too): that block is compared by neither text
    last = {list(real_blocks)[-1], list(ours_blocks)[-1]}
    real_rows = {k: nhc_rows(v) for k, v in real_blocks.items() if k in both and k not in last}
    ours_rows = {k: nhc_rows(v) for k, v in ours_blocks.items() if k in both and k not in last}
    shape = {k: [len(r) for r in v] for k, v in real_rows.items()}
    assert {k: [len(r) for r in v] for k, v in ours_rows.items() if k in shape} == shape


# -- v0.10 -------------------------------------------------------------------------------------

REAL_V010 = {f.name: f for f in sorted(V010_DATA.glob("*nvbandwidth_v0.10*.txt"))}
#: real v0.10 runs (not the hand-made NHC fixture, not the help excerpt)
REAL_V010_RUNS = [f for n, f in REAL_V010.items() if not n.startswith("azurehpc")]
_MASK = re.compile(r"\d+(\.\d+)?")


def _kind(line: str) -> str:
    """A line of nvbandwidth's text, numbers masked and a matrix row or header one kind."""
    stripped = line.strip()
    if re.fullmatch(r"(\d+\s+)*\d+", stripped):
        return "<columns>"
    if re.fullmatch(r"\d+(\s+(\d+\.\d+|N/A))+", stripped):
        return "<row>"
    return _MASK.sub("#", " ".join(line.split()))


def _skeleton(text: str) -> dict[str, list[str]]:
    """Each testcase's block (Running .. the line before the next Running/NOTE) as line
    kinds, consecutive rows as one."""
    out: dict[str, list[str]] = {}
    key = ""
    for line in text.splitlines():
        if line.startswith("Running "):
            key = line[len("Running ") : -1]
            out[key] = []
        elif line.startswith(("NOTE", "#####", "dell@", "Waived")):
            key = ""
        if key:
            kind = _kind(line)
            if not (kind == "<row>" and out[key][-1:] == ["<row>"]):
                out[key].append(kind)
    return out


def _header_labels(text: str) -> list[str]:
    """The version and CUDA lines of the first header: labels, then the numbers' shape."""
    start = text.rindex("nvbandwidth Version:")  # the last run's (Dell's first is --version)
    lines = [line for line in text[start:].splitlines() if not line.startswith("NOTE:")][:7]
    return [_MASK.sub("#", line.split(": ")[0]) + (":" if ": " in line else "") for line in lines]


@pytest.mark.parametrize("path", REAL_V010_RUNS, ids=lambda p: p.name)
def test_v010_text_matches_real_v010_logs(outputs: Outputs, path: Path) -> None:
    """gpubw-nvbandwidth's v0.10 text (simulated 2 GPUs) and real v0.10 logs, block by block."""
    real_text = path.read_text(encoding="utf-8")
    ours_text = outputs.get("h200x2", "superbench", "0.10")
    if "nvbandwidth Version:" in real_text:
        assert _header_labels(ours_text) == _header_labels(real_text)
        cuda = re.findall(r"CUDA .*: \d+\.\d+ \(\d+\)", ours_text)
        assert len(cuda) == 2
    real, ours = _skeleton(real_text), _skeleton(ours_text)
    both = set(real) & set(ours)
    assert both
    cut = "device_to_device_bidirectional_memcpy_write_ce"  # the Dell capture ends inside it
    for key in both - {cut} if "dell" in path.name else both:
        assert ours[key] == real[key], key


def test_v010_cv_lines_follow_the_last_sum(outputs: Outputs) -> None:
    """CV after each bandwidth testcase's last SUM (bidirectional: the _total), none for latency."""
    ours = outputs.get("h200x2", "superbench", "0.10")
    lines = ours.splitlines()
    for n, line in enumerate(lines):
        if line.startswith("COEFFICIENT_OF_VARIATION "):
            assert lines[n - 1].startswith("SUM " + line.split()[1] + " ")
            assert "latency" not in line and not line.split()[1].endswith(("_read1", "_write1"))
    assert "COEFFICIENT_OF_VARIATION device_to_device_bidirectional_memcpy_read_ce_total" in ours


@pytest.mark.parametrize("release", ["0.10", "0.8"])
def test_superbench_takes_the_list_and_nothing_on_stderr(outputs: Outputs, release: str) -> None:
    """--list: the release's testcases, and no stderr (superbench would take none at all)."""
    listed = superbench_list(outputs.get("h200x2", "list", release))
    assert outputs.list_stderr["h200x2", release] == ""
    assert len(listed) == (44 if release == "0.10" else 35)
    assert superbench_list("0, a:\n", stderr="a warning\n") == []


@pytest.mark.parametrize("system", ["h200x1", "h200x2", "h200x8"])
@pytest.mark.parametrize("release", ["0.10", "0.8"])
def test_nhc_v010_parse_reads_gpubw_text(outputs: Outputs, system: str, release: str) -> None:
    """NHC's newest parse: exactly the data rows of each asked testcase, none missing."""
    ngpus = int(system[-1])
    keys = [k for k in NHC_TESTS if ngpus > 1 or "device_to_device" not in k]
    rows = nhc_v010_rows(outputs.get(system, "nhc", release), ngpus, keys)
    assert len(rows["host_to_device_memcpy_ce"].splitlines()) == 1
    assert len(rows["host_to_device_memcpy_ce"].split()) == ngpus + 1
    if ngpus > 1:
        p2p = [r.split() for r in rows["device_to_device_memcpy_read_ce"].splitlines()]
        assert [len(r) for r in p2p] == [ngpus + 1] * ngpus
        assert all(r[1 + i] == "N/A" for i, r in enumerate(p2p))


def test_nhc_v010_parse_of_its_fixture_and_real_output() -> None:
    """The port gives NHC's own fixture's expected rows; a missing row is refused."""
    fixture = REAL_V010["azurehpc-nvbandwidth_v0.10_output.txt"].read_text(encoding="utf-8")
    rows = nhc_v010_rows(fixture, 2, list(NHC_TESTS))
    assert rows["host_to_device_memcpy_ce"] == "0     26.03     25.94"
    assert rows["device_to_device_memcpy_read_ce"] == "0       N/A    276.07\n1    276.19       N/A"
    with pytest.raises(NhcParseError):
        nhc_v010_rows(fixture.replace("1    276.19       N/A\n", ""), 2, list(NHC_TESTS))
    dell = REAL_V010["dell-xe9780-b300-7gpu-nvbandwidth_v0.10.0.txt"].read_text(encoding="utf-8")
    assert len(nhc_v010_rows(dell, 7, list(NHC_TESTS))["device_to_device_memcpy_read_ce"]
               .splitlines()) == 7  # fmt: skip


@pytest.mark.parametrize("release", ["0.10", "0.8"])
def test_dcgm_reads_gpubw_json_of_either_release(outputs: Outputs, release: str) -> None:
    """DCGM (stderr merged): an int CUDA version, known statuses, a value in every cell."""
    output = outputs.get("h200x2", "dcgm", release)
    failed, result = dcgm_read(output)
    assert result is not None and not failed
    assert isinstance(result.cuda_runtime_version, int)
    assert {t.status for t in result.testcases} <= {"passed", "waived", "not found"}
    assert len(result.testcases) == (44 if release == "0.10" else 35) or any(
        t.status == "not found" for t in result.testcases
    )


@pytest.mark.parametrize("path", REAL_V010_RUNS, ids=lambda p: p.name)
def test_superbench_reads_real_v010_and_gpubw_v010_alike(outputs: Outputs, path: Path) -> None:
    """superbench's metrics of real v0.10 text are among those of gpubw's v0.10 text."""
    real_text = path.read_text(encoding="utf-8")
    ours_text = outputs.get("h200x2", "superbench", "0.10")
    listed = superbench_list(outputs.get("h200x2", "list", "0.10"))
    real_sb, ours_sb = superbench_read(real_text, listed), superbench_read(ours_text, listed)
    ran = set(_skeleton(real_text)) & set(_skeleton(ours_text))
    names = {m.split("_cpu_")[0].split("_gpu")[0] for m in real_sb.metrics}
    assert ran and names
    ours_names = {m.split("_cpu_")[0].split("_gpu")[0] for m in ours_sb.metrics}
    assert {n for n in names if any(n.startswith(k) for k in ran)} <= ours_names
