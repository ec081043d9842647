"""The 13 multinode testcases (#44-#56) over simulated ranks in one process."""

from __future__ import annotations

import io
import json
import os
import struct
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from _golden import figures_differ
from _ranked import model, ranked_report, run_ranks
from gpubw.backend.sim.faults import Faults
from gpubw.measure import measurement, series
from gpubw.measure.initiators import CE
from gpubw.measure.measurement import CellMeasurement, Copy, MemcpyOperation
from gpubw.measure.rank_gate import RankGate
from gpubw.measure.sampling import sample_columns
from gpubw.measure.series import RankCopy, measure_ranks, measure_series
from gpubw.memory.buffers import DeviceBuffer, HostBuffer
from gpubw.memory.shared import SharedBuffer
from gpubw.memory.sharing import RemoteRankError
from gpubw.memory.system import System
from gpubw.model.errors import GpubwError, UsageError
from gpubw.model.options import RunOptions
from gpubw.model.report_io import dumps
from gpubw.model.results import BANDWIDTH, Axes, Matrix, Report, Status, axes_from_header
from gpubw.runner.registry import Registry
from gpubw.testcases import BUILTINS, MULTINODE
from gpubw.testcases.multinode_shapes import FIGURES_NOTE, ONE_RANK, bisect_labels
from gpubw.testcases.shapes import sampled_cells
from gpubw.world.simulated import SimulatedCluster
from gpubw.writers.text import TextWriter, matrix_lines

GOLDEN = Path(__file__).parent / "golden"
SMALL = RunOptions(samples=1, loops=2, buffer_sizes=(1 << 20,))
KEYS = [key for key, _ in MULTINODE]
MULTICAST = ("multinode_device_to_device_broadcast_one_to_all_sm",
             "multinode_device_to_device_broadcast_all_to_all_sm")  # fmt: skip


def entry(key: str) -> Any:
    found = Registry.discover().by_key(key)
    assert found is not None
    return found


def text(report: Report) -> str:
    out = io.StringIO()
    TextWriter().write(report, out)
    return out.getvalue()


def statuses(report: Report) -> dict[str, str]:
    return {t.key: t.status.value for t in report.testcases}


def check_golden(name: str, actual: str) -> None:
    path = GOLDEN / name
    if os.environ.get("GPUBW_WRITE_GOLDEN") == "1":  # pragma: no cover - a deliberate refresh
        path.write_text(actual)
    if not path.exists():  # a missing golden file is a failure, never silently written
        pytest.fail(f"{path} is missing (GPUBW_WRITE_GOLDEN=1 writes it; check it by hand)")
    difference = figures_differ(actual, path.read_text())  # modelled figures: within 1e-6
    assert difference is None, f"{name}: {difference}"


# -- registry and filters --------------------------------------------------------------------
def test_indexes_are_nvbandwidths_multinode_build() -> None:
    """-t 44 .. 56 name the multinode testcases, after v0.10's 44; gpubw's own follow at 57."""
    registry = Registry.discover()
    by_index = {e.index: e.key for e in registry.entries}
    assert [by_index[i] for i in range(44, 57)] == KEYS
    assert by_index[57] == "host_to_device_pageable_memcpy_ce"
    assert [k for k, _ in BUILTINS].index("multinode_bisect_write_ce") == 56


@pytest.mark.parametrize("key", KEYS)
def test_waived_in_a_run_of_one_rank(sim_system: Any, key: str) -> None:
    """Without a launcher (world size 1) every multinode testcase is waived, saying why."""
    system = sim_system("h200x2")
    tc = entry(key).create(system)
    assert tc.filter() is False
    assert tc.waive_reason == ONE_RANK == "needs an MPI run of 2 or more ranks (world size is 1)"


def _filters(preset: str, hosts: list[int], key: str, lacking: int | None = None) -> list[Any]:
    def fn(system: System) -> tuple[bool, str]:
        if system.world.rank == lacking:
            system.devices = tuple(
                attrs.evolve(d, multicast_supported=False) for d in system.devices
            )
        tc = entry(key).create(system)
        return tc.filter(), tc.waive_reason

    outcomes = run_ranks(preset, hosts, fn, SMALL)
    assert all(o.ok for o in outcomes), [o.error for o in outcomes]
    return [o.value for o in outcomes]


@pytest.mark.parametrize(
    "setting",
    [
        "NCCL_NVLS_ENABLE=0",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST=1",
        "NVSHMEM_DISABLE_NVLS=1",
        "GPUBW_DISABLE_MULTICAST=1",
    ],
)
def test_multicast_waived_where_the_environment_disables_it(
    monkeypatch: pytest.MonkeyPatch, setting: str
) -> None:
    """#54/#55 are waived on every rank, naming the variable, before any device call."""
    for name in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS",
                 "GPUBW_DISABLE_MULTICAST"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    name, value = setting.split("=")
    monkeypatch.setenv(name, value)
    for ok, reason in _filters("gb200nvl72", [2], MULTICAST[0]):
        assert not ok and setting in reason and "rank" not in reason


def test_multicast_waived_where_local_devices_lack_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """On h200x2 (no multicast) both ranks waive #55 with the same reason."""
    monkeypatch.delenv("GPUBW_DISABLE_MULTICAST", raising=False)
    monkeypatch.delenv("NCCL_NVLS_ENABLE", raising=False)
    results = _filters("h200x2", [2], MULTICAST[1])
    assert results == [(False, results[0][1])] * 2
    assert "multicast support" in results[0][1]


def test_multicast_waiver_is_agreed_when_one_rank_lacks_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One rank's devices without multicast waive #54 on every rank, naming that rank."""
    for name in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS",
                 "GPUBW_DISABLE_MULTICAST"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    results = _filters("gb200nvl72", [2, 2], MULTICAST[0], lacking=3)
    reasons = {r for _, r in results}
    assert [ok for ok, _ in results] == [False] * 4 and len(reasons) == 1
    assert reasons.pop().startswith("rank 3: needs devices with NVLink multicast support")
    assert all(ok for ok, _ in _filters("gb200nvl72", [2, 2], MULTICAST[0]))


# -- combination -------------------------------------------------------------------------------
def test_first_sum_vector_from_values_that_differ_per_rank(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every rank ends with the whole cell: each pair's samples from its exec rank, in
    global pair order, so FIRST is the first rank's pair, SUM the sum over ranks' pairs,
    VECTOR each pair's."""
    pairs_ranks = [2, 0, 1, 2]  # pair i is issued by rank pairs_ranks[i]

    def own(op: MemcpyOperation, pairs: list[RankCopy], rank_gate: Any) -> tuple:
        rank = op.system.world.rank
        indexes = [i for i, p in enumerate(pairs) if p.rank == rank]
        samples = {i: (100, (1e9 * (rank + 1) + i, 3e9 * (rank + 1) + i)) for i in indexes}
        return samples, {i: f"pair {i}" for i in indexes}

    monkeypatch.setattr(series, "measure_own_pairs", own)

    class Fake:
        def __init__(self, world: Any) -> None:
            self.world = world
            self.options = SMALL

    def body(world: Any) -> CellMeasurement:
        op = MemcpyOperation.__new__(MemcpyOperation)
        op.system, op.loops, op.kind = Fake(world), 2, measurement.Kind.VECTOR  # type: ignore[assignment]
        pairs = [RankCopy(r, None) for r in pairs_ranks]  # (the buffers are not used)
        return measure_ranks(op, pairs, rank_gate=None)  # type: ignore[arg-type]

    outcomes = SimulatedCluster([3], timeout_s=10).run(body)
    cells = [o.value for o in outcomes]
    assert all(o.ok for o in outcomes) and cells[0] == cells[1] == cells[2]
    cell = cells[0]
    assert cell is not None
    median = [2e9 * (r + 1) + i for i, r in enumerate(pairs_ranks)]
    assert cell.vector() == pytest.approx(median)
    assert cell.value(measurement.Kind.FIRST) == pytest.approx(2e9 * 3)
    assert cell.value(measurement.Kind.SUM) == pytest.approx(sum(median))
    assert cell.counted_bytes == (100,) * 4
    assert cell.pair_labels == ("pair 0", "pair 1", "pair 2", "pair 3")


# -- golden text -------------------------------------------------------------------------------
def test_two_ranks_on_h200x2_golden(monkeypatch: pytest.MonkeyPatch) -> None:
    """-p multinode on 2 simulated ranks of h200x2: 11 Passed, #54/#55 Waived, posix-fd."""
    monkeypatch.delenv("GPUBW_DISABLE_MULTICAST", raising=False)
    report = ranked_report("h200x2", [2], SMALL, prefixes=["multinode"])
    assert [s for k, s in statuses(report).items() if k not in MULTICAST] == ["Passed"] * 11
    assert report.world is not None and report.world["handle_type"] == "posix-fd"
    check_golden("multinode_h200x2_2ranks.txt", text(report))
    doc = json.loads(dumps(report))
    assert doc["world"]["size"] == 2 and doc["world"]["rank_hosts"] == [0, 0]
    three = doc["testcases"][2]["matrices"]
    assert [m["key"][-6:] for m in three] == ["_read1", "_read2", "_total"]


#: the axes (rows, columns, direction) of every multinode matrix, by the first of these
#: words in its testcase's key
RANKS = {
    "bidirectional": ("rank", "rank", "both"),
    "all_to_one": ("none", "rank", "row->column"),
    "all_from_one": ("none", "rank", "row->column"),
    "one_to_all": ("none", "rank", "row->column"),
    "all_to_all": ("none", "none", "row->column"),
    "bisect": ("none", "none", "row->column"),
    "read": ("rank", "rank", "row->column"),
    "write": ("rank", "rank", "column->row"),
}


def test_multinode_matrices_are_built_with_rank_axes(monkeypatch: pytest.MonkeyPatch) -> None:
    """N x N matrices are rank x rank (also where nvbandwidth's header says CPU(row)), the
    1 x N totals one figure per rank; read back, their headers name the same, ranks as GPUs."""
    monkeypatch.delenv("GPUBW_DISABLE_MULTICAST", raising=False)
    report = ranked_report("h200x2", [2], SMALL, prefixes=["multinode"])
    seen = 0
    for t in report.testcases:
        word = next(w for w in RANKS if f"_{w}_" in f"{t.key}_")
        for m in t.matrices:
            seen += 1
            assert m._axes is not None and attrs.astuple(m.axes) == RANKS[word], m.key
            gpus = {"rank": "gpu"}
            read_back = [gpus.get(side, side) for side in (m.axes.rows, m.axes.columns)]
            assert axes_from_header(m.description, len(m.row_labels)) == Axes(
                *read_back, m.axes.direction
            )
    assert seen >= 13


def test_cross_rank_figures_equal_the_single_node_ones(sim_system: Any) -> None:
    """A multinode copy between two ranks of one host is the single-node copy between their
    devices (one engine: the same links), for CE and SM."""
    multi = ranked_report("h200x2", [2], SMALL, testcases=[KEYS[0], KEYS[4]])
    for t, key in zip(multi.testcases, ("device_to_device_memcpy_read_ce",
                                         "device_to_device_memcpy_read_sm")):  # fmt: skip
        system = sim_system(model("h200x2"), options=SMALL)
        (single,) = entry(key).create(system).run(1 << 20, 2)
        got = t.matrices[0].values
        assert got[0][1] == pytest.approx(single.values[0][1], rel=0.01)
        assert got[1][0] == pytest.approx(single.values[1][0], rel=0.01)


def test_eight_ranks_on_two_hosts_golden(monkeypatch: pytest.MonkeyPatch) -> None:
    """8 ranks on 2 hosts of gb200nvl72 with --sample-pairs 8 --seed 1: fabric handles,
    every testcase, 8 measured cells per N x N matrix, the #56 labels."""
    for name in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS",
                 "GPUBW_DISABLE_MULTICAST"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    options = attrs.evolve(SMALL, sample_pairs=8, seed=1)
    report = ranked_report("gb200nvl72", [4, 4], options, prefixes=["multinode"], timeout_s=60)
    assert set(statuses(report).values()) == {"Passed"}, report.testcases
    first = report.testcases[0].matrices[0]
    assert sum(v is not None for row in first.values for v in row) == 8
    assert dict(first.notes)["sampled"] == {"cells": 56, "measured": 8, "seed": 1}
    bisect = report.testcases[-1].matrices[0]
    assert bisect.row_labels == bisect_labels(8) and bisect.column_labels == ("0",)
    check_golden("multinode_gb200nvl72_8ranks.txt", text(report))
    headers = {t.key: [m.description for m in t.matrices] for t in report.testcases}
    assert headers == SPEC_HEADERS


def _three(word: str, engine: str = "CE", what: str = "CPU") -> list[str]:
    return [
        f"memcpy {engine} {what}(row) <-> GPU(column) {w} bandwidth (GB/s)"
        for w in (f"{word}1", f"{word}2", "Total")
    ]


#: the headers of nvbandwidth's multinode build, transcribed from the spec (reference
#: nvbandwidth-behaviour.md §6), copy-paste errors included (v0.8's indexes; gpubw's are 9
#: more): #37/#38/#41 say CPU(row), #38 repeats #37's Read words, #39 says CE though it is an
#: SM testcase
SPEC_HEADERS = {
    "multinode_device_to_device_memcpy_read_ce": [
        "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)"
    ],
    "multinode_device_to_device_memcpy_write_ce": [
        "memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)"
    ],
    "multinode_device_to_device_bidirectional_memcpy_read_ce": _three("Read"),
    "multinode_device_to_device_bidirectional_memcpy_write_ce": _three("Read"),
    "multinode_device_to_device_memcpy_read_sm": [
        "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)"
    ],
    "multinode_device_to_device_memcpy_write_sm": [
        "memcpy SM GPU(row) <- GPU(column) bandwidth (GB/s)"
    ],
    "multinode_device_to_device_bidirectional_memcpy_read_sm": _three("Read", "SM"),
    "multinode_device_to_device_bidirectional_memcpy_write_sm": _three("Write", "SM"),
    "multinode_device_to_device_all_to_one_write_sm": [
        "memcpy SM All Gpus -> GPU(column) total bandwidth (GB/s)"
    ],
    "multinode_device_to_device_all_from_one_read_sm": [
        "memcpy SM All Gpus <- GPU(column) total bandwidth (GB/s)"
    ],
    "multinode_device_to_device_broadcast_one_to_all_sm": [
        "multicast SM GPU(column) -> All Gpus total bandwidth (GB/s)"
    ],
    "multinode_device_to_device_broadcast_all_to_all_sm": [
        "multicast SM All -> All Gpus total bandwidth (GB/s)"
    ],
    "multinode_bisect_write_ce": ["Bisect benchmarking, simultaneous write CE BW"],
}


@pytest.mark.parametrize(
    ("n", "first", "last"), [(8, "0->4", "7->3"), (12, " 0-> 6", "11-> 5"), (2, "0->1", "1->0")]
)
def test_bisect_labels(n: int, first: str, last: str) -> None:
    """Row i is ``i->p``, p = (i + N/2) mod N, numbers padded to the digits of N - 1."""
    labels = bisect_labels(n)
    assert (labels[0], labels[-1], len(labels)) == (first, last, n)
    m = Matrix(
        key="multinode_bisect_write_ce",
        description="Bisect benchmarking, simultaneous write CE BW",
        unit=BANDWIDTH,
        row_labels=labels,
        column_labels=("0",),
        values=[[1e9 * (i + 1)] for i in range(n)],
    )
    lines = matrix_lines(m)
    width = max(2, len(labels[0]))
    assert lines[1] == " " * width + f"{'0':>10}"
    assert lines[2] == f"{labels[0]:>{width}}{'1.00':>10}"


# -- sampling ----------------------------------------------------------------------------------
def test_sample_pairs_on_a_72_gpu_rack_is_deterministic() -> None:
    """--sample-pairs 0.1 --seed 3 on 72 devices: 512 of 5,112 cells, every device a source
    and a destination, the same cells every time."""

    class Fake:
        class system:
            options = RunOptions(sample_pairs=0.1, seed=3)

        @staticmethod
        def selected(index: int) -> bool:  # no --devices: every GPU
            return True

    cells, notes = sampled_cells(Fake, 72)  # type: ignore[arg-type]
    assert len(cells) == 512 and cells == sampled_cells(Fake, 72)[0]  # type: ignore[arg-type]
    assert dict(notes)["sampled"] == {"cells": 5112, "measured": 512, "seed": 3}
    assert {r for r, _ in cells} == {c for _, c in cells} == set(range(72))


def test_single_node_n_by_n_is_sampled_too(sim_system: Any) -> None:
    """A single-node N x N testcase measures only the sample; the rest are None, counted."""
    options = attrs.evolve(SMALL, sample_pairs=10, seed=7)
    key = "device_to_device_memcpy_read_ce"
    got = []
    for _ in range(2):
        system = sim_system("h200x8", options=options)
        (m,) = entry(key).create(system).run(1 << 20, 2)
        got.append([[v is not None for v in row] for row in m.values])
        assert dict(m.notes)["sampled"] == {"cells": 56, "measured": 10, "seed": 7}
    assert got[0] == got[1] and sum(map(sum, got[0])) == 10


# -- faults ------------------------------------------------------------------------------------
def test_one_rank_failing_a_testcase_fails_it_on_every_rank(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An error on rank 1 during the SM testcases' samples makes them Error on every rank
    with rank 1's message; the CE ones still pass; the run goes on."""
    queue = MemcpyOperation._queue

    def failing(self: MemcpyOperation, *args: Any) -> None:
        if self.system.world.rank == 1 and self.initiator.name == "SM":
            raise GpubwError("injected failure on rank 1")
        queue(self, *args)

    monkeypatch.setattr(MemcpyOperation, "_queue", failing)
    report = ranked_report("h200x2", [2], SMALL, testcases=[KEYS[0], KEYS[4], KEYS[1]])
    assert [t.status for t in report.testcases] == [Status.PASSED, Status.ERROR, Status.PASSED]
    assert report.testcases[1].message == "rank 1: injected failure on rank 1"
    assert report.exit_code == 1


def test_a_bad_copy_on_one_rank_fails_the_cell_on_every_rank_in_step() -> None:
    """A copy of mismatched sizes issued by rank 1 is rank 1's usage error, raised on every
    rank; the ranks stay in step, so the next (good) cell measures on both."""

    def fn(system: System) -> tuple[str, int]:
        op = MemcpyOperation(system, CE, loops=2)
        me, device = system.world.rank, system.rank_device
        with RankGate.create(system) as gate:
            bad = good = None
            if me == 1:
                a = DeviceBuffer.allocate(system, device, 1 << 20)
                bad = Copy(a, DeviceBuffer.allocate(system, device, 2 << 20))
                good = Copy(a, DeviceBuffer.allocate(system, device, 1 << 20))
            with pytest.raises(RemoteRankError) as info:
                measure_ranks(op, [RankCopy(1, bad)], gate)
            cell = measure_ranks(op, [RankCopy(1, good)], gate)
        return str(info.value).split(": <")[0], len(cell.pair_samples[0])

    outcomes = run_ranks("h200x2", [2], fn, SMALL)
    assert all(o.ok for o in outcomes), [o.error for o in outcomes]
    assert [o.value for o in outcomes] == [("rank 1: copy sizes differ", 1)] * 2


def test_total_is_refused_across_ranks() -> None:
    """measure_ranks has no TOTAL figure: refused before any collective, naming what is
    allowed (only rank 0 asks, so a collective would wait for rank 1 until the timeout)."""

    def fn(system: System) -> str:
        if system.world.rank != 0:
            return "idle"
        op = MemcpyOperation(system, CE, kind=measurement.Kind.TOTAL, loops=2)
        with pytest.raises(UsageError, match=r"TOTAL .* allowed: FIRST, SUM, VECTOR"):
            measure_ranks(op, [RankCopy(0, None)], None)  # type: ignore[arg-type]
        return "refused"

    start = time.monotonic()
    outcomes = run_ranks("h200x2", [2], fn, SMALL, timeout_s=120.0)
    assert [o.value for o in outcomes] == ["refused", "idle"], [o.error for o in outcomes]
    assert time.monotonic() - start < 60  # a collective before the refusal would wait 120 s


def test_a_rank_failing_to_make_its_gate_words_frees_the_flag_everywhere() -> None:
    """A pinned allocation failing on rank 1 inside RankGate.create: every rank raises
    rank 1's error, and every rank has freed the shared flag (collectively)."""

    def fn(system: System) -> tuple[str, int]:
        with pytest.raises(RemoteRankError) as info:
            RankGate.create(system)
        return str(info.value), len(system.sharing.live)

    faults = {1: Faults(host_alloc_fail_after=0)}
    outcomes = run_ranks("h200x2", [2], fn, SMALL, faults=faults)
    assert all(o.ok for o in outcomes), [o.error for o in outcomes]
    message = "rank 1: cuMemHostAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (injected fault)"
    assert [o.value for o in outcomes] == [(message, 0)] * 2


def test_a_size_one_rank_refuses_is_refused_on_every_rank_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A buffer size that one rank's devices cannot hold (hosts that differ) is a usage error
    on every rank, at once: the others do not go on into collectives it never joins."""
    from gpubw.model.errors import UsageError as Refusal
    from gpubw.runner import checks

    check = checks.check_sizes

    def refusing(system: Any, selection: Any, sizes: Any) -> None:
        if system.world.rank == 1:
            raise Refusal("buffer size 1 MiB is larger than device 0 can hold", param="sizes")
        check(system, selection, sizes)

    monkeypatch.setattr(checks, "check_sizes", refusing)
    started = time.monotonic()
    with pytest.raises(Refusal, match=r"^rank 1: buffer size 1 MiB is larger than device 0"):
        ranked_report("h200x2", [2], SMALL, testcases=[KEYS[0]], timeout_s=120.0)
    assert time.monotonic() - started < 60  # not the world timeout


def test_a_hung_rank_ends_the_run_with_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank that stops answering: rank 0's collective times out (bounded), the testcase
    is Error naming the collective, nothing further runs, the report is still made."""
    release = threading.Event()
    original = entry(KEYS[0]).cls.run

    def hang(self: Any, size: int, loops: int) -> Any:
        if self.system.world.rank == 1:
            release.wait(5)
        return original(self, size, loops)

    cls = entry(KEYS[0]).cls
    monkeypatch.setattr(cls, "run", hang)
    try:
        report = ranked_report("h200x2", [2], SMALL, testcases=[KEYS[0], KEYS[1]], timeout_s=1.0)
    finally:
        release.set()
    assert [t.status for t in report.testcases] == [Status.ERROR]
    message = report.testcases[0].message
    assert "did not complete within 1 s" in message, message
    assert "the world is broken" not in message, message  # said once, not repeated


def test_single_node_testcases_run_once_per_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a 2-host run a single-node testcase runs on each host's first rank only; rank 0
    reports its own host's result and one summary line per other host (JSON: hosts)."""
    ran: list[int] = []
    original = entry("device_to_device_memcpy_read_ce").cls.run

    def spy(self: Any, size: int, loops: int) -> Any:
        ran.append(self.system.world.rank)
        return original(self, size, loops)

    monkeypatch.setattr(entry("device_to_device_memcpy_read_ce").cls, "run", spy)
    report = ranked_report(
        "gb200nvl72", [2, 2], SMALL, testcases=["device_to_device_memcpy_read_ce"]
    )
    assert sorted(ran) == [0, 2]
    assert [t.status for t in report.testcases] == [Status.PASSED]
    ((host, (other,)),) = report.hosts
    assert host == "simhost01" and other.status is Status.PASSED
    assert len(other.matrices[0].values) == 4  # every GPU of that host
    lines = text(report).splitlines()
    summary = (
        f"host simhost01: device_to_device_memcpy_read_ce SUM {other.matrices[0].sum * 1e-9:.2f}"
    )
    assert summary in lines
    doc = json.loads(dumps(report))
    assert [h["host"] for h in doc["hosts"]] == ["simhost01"]
    assert doc["world"]["rank_hosts"] == [0, 0, 1, 1] and doc["host"] == "simhost00"


def test_stop_on_error_stops_every_rank_at_the_same_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """stop_on_error: an Error on another host's first rank stops every rank at one step."""
    from gpubw.runner import core as runner
    from gpubw.runner.simulation import Simulation
    from gpubw.runner.spec import RunSpec, select
    from gpubw.writers.nvbandwidth import failure_message

    h2d = entry("host_to_device_memcpy_ce").cls
    original = h2d.run

    def fails_on_rank_1(self: Any, size: int, loops: int) -> Any:
        if self.system.world.rank == 1:
            raise GpubwError("injected failure on rank 1")
        return original(self, size, loops)

    monkeypatch.setattr(h2d, "run", fails_on_rank_1)
    selection, _ = select(["host_to_device_memcpy_ce", "device_to_host_memcpy_ce"], [])
    system = model("gb200nvl72")
    rack = Simulation(system.name, system, ranks=(1, 1))
    report = runner.run(RunSpec(selection, SMALL, simulation=rack, stop_on_error=True))
    assert [(t.key, t.status) for t in report.testcases] == [
        ("host_to_device_memcpy_ce", Status.PASSED)
    ]
    ((host, (other,)),) = report.hosts
    assert other.status is Status.ERROR
    assert (
        failure_message(report)
        == f"host {host}: host_to_device_memcpy_ce: injected failure on rank 1"
    )


def test_more_ranks_than_gpus_is_warned_once_per_host() -> None:
    """3 ranks on a host of 2 GPUs: nvbandwidth's warning, once, in rank 0's report; the
    third rank shares device 0."""
    report = ranked_report("h200x2", [3], SMALL, testcases=[KEYS[0]])
    warning = (
        "Warning: there are more processes than GPUs on simhost00. Please reduce number of "
        "processes to match GPU count."
    )
    assert report.warnings.count(warning) == 1
    assert report.world is not None
    assert [p["device"] for p in report.world["processes"]] == [0, 1, 0]


def test_bad_sample_pairs(capsys: pytest.CaptureFixture[str]) -> None:
    """A bad --sample-pairs, or a count below N (naming the minimum), is a usage error before
    anything runs; so is a negative --seed."""
    from gpubw.cli.command import main

    assert main(["--simulate", "h200x2", "--sample-pairs", "abc", "-t", "4"]) == 2
    assert "--sample-pairs" in capsys.readouterr().err
    code = main(["--simulate", "h200x2", "-b", "1MiB", "-i", "1", "--sample-pairs", "1", "-j",
                 "-t", "4", "0"])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert "N = 2 devices" in captured.err and "at least 2" in captured.err
    assert len(captured.err.strip().splitlines()) == 1
    assert main(["--simulate", "h200x2", "--seed", "-1", "-t", "4"]) == 2
    assert "'-1' must be at least 0" in capsys.readouterr().err


def test_a_rack_refuses_a_sample_below_n_before_any_rank_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--simulate gb200nvl72 -p multinode --sample-pairs 8: exit 2 naming 72, nothing run."""
    from gpubw.cli.command import main

    assert main(["--simulate", "gb200nvl72", "-p", "multinode", "--sample-pairs", "8"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "ask for at least 72" in captured.err


def test_a_negative_seed_is_refused_by_the_options() -> None:
    """RunOptions(seed=-1) is refused, naming the value and the range."""
    with pytest.raises(ValueError, match=r"seed must be in \[0, .*got -1"):
        RunOptions(seed=-1)


#: backend calls that make (or need) the device's CUDA context: (method, which argument is
#: the device; alloc_host's is the context that allocates, None meaning device 0)
_CONTEXT_CALLS = (
    ("memory_info", 0),
    ("alloc_device", 0),
    ("alloc_host", 1),
    ("create_stream", 0),
    ("create_event", 0),
    ("load_kernels", 0),
    ("enable_peer_access", 0),
    ("export_device", 0),
    ("import_device", 0),
)


def test_a_rank_that_is_not_its_hosts_first_touches_only_its_own_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under MPI, only the host's first rank makes contexts on every device (it runs the
    single-node testcases): rank 1 loads kernels, checks sizes, allocates its host memory and
    runs its multinode testcase on device 1 alone."""
    from gpubw.backend.sim.backend import SimulatedBackend

    touched: dict[int | None, set[int]] = {}
    lock = threading.Lock()

    def recording(name: str, position: int) -> Any:
        original = getattr(SimulatedBackend, name)

        def call(self: SimulatedBackend, *args: Any, **kwargs: Any) -> Any:
            device = args[position] if len(args) > position else None
            with lock:
                touched.setdefault(self.rank, set()).add(0 if device is None else device)
            return original(self, *args, **kwargs)

        return call

    for name, position in _CONTEXT_CALLS:
        monkeypatch.setattr(SimulatedBackend, name, recording(name, position))
    report = ranked_report(
        "h200x2", [2], SMALL, testcases=["device_to_device_memcpy_read_ce", KEYS[0]]
    )
    assert set(statuses(report).values()) == {"Passed"}, report.testcases
    assert touched == {0: {0, 1}, 1: {1}}


def _series_cells(
    system: System, issuers_of: Sequence[Sequence[int]], fail_in: int | None = None
) -> list[list[RankCopy]]:
    """A series' cells, each issued by the ranks of ``issuers_of``: 1 MiB device copies of
    this rank's where it issues (the first issuer's of cell ``fail_in`` of mismatched
    sizes: a bad copy)."""
    me = system.world.rank
    cells = []
    for k, issuers in enumerate(issuers_of):
        pairs = []
        for issuer in issuers:
            copy = None
            if me == issuer:
                a = DeviceBuffer.allocate(system, system.rank_device, 1 << 20)
                bad = k == fail_in and issuer == issuers[0]
                size = (2 << 20) if bad else (1 << 20)
                copy = Copy(a, DeviceBuffer.allocate(system, system.rank_device, size))
            pairs.append(RankCopy(issuer, copy))
        cells.append(pairs)
    return cells


def _series_on_4_ranks(fail_in: int | None) -> list[Any]:
    """Four ranks (h200x8, one host) measure a series of three cells issued by rank 1, rank 1
    and ranks 2 and 3 together (a bad copy of the cell's first issuer in cell ``fail_in``):
    each rank's figures or error, and the groups of every collective it took part in."""

    def fn(system: System) -> tuple[Any, list[Any]]:
        world = system.world
        seen: list[Any] = []
        run = world._run

        def counted(name: str, timeout_s: Any, body: Any, group: Any = None) -> Any:
            seen.append(group)
            return run(name, timeout_s, body, group)

        op = MemcpyOperation(system, CE, loops=2)
        with RankGate.create(system) as gate:
            cells = _series_cells(system, ((1,), (1,), (2, 3)), fail_in)
            world._run = counted
            try:
                result: Any = [len(c.pair_samples[0]) for c in measure_series(op, cells, gate)]
            except RemoteRankError as exc:
                result = str(exc).split(": <")[0]
            finally:
                world._run = run
        return result, seen

    outcomes = run_ranks("h200x8", [4], fn, SMALL)
    assert all(o.ok for o in outcomes), [o.error for o in outcomes]
    return [o.value for o in outcomes]


def test_only_rank_0_builds_the_n_by_n_matrices() -> None:
    """An N x N testcase on 4 ranks: rank 0 returns the 4 x 4 matrix (every cell); the others,
    which report nothing, one N/A cell each, with the same key and the note naming rank 0
    (no rank but 0 builds N x N matrices: O(N^3) for a simulated rack)."""
    key = "multinode_device_to_device_memcpy_read_ce"
    full = _rank_0_matrix_and_stand_ins(key)
    assert full.key == key and len(full.values) == 4
    assert sum(v is not None for row in full.values for v in row) == 12


def _rank_0_matrix_and_stand_ins(key: str) -> Any:
    """Run ``key`` on 4 simulated ranks; check that every rank but 0 returned one N/A
    stand-in naming rank 0, and return rank 0's matrix (which has no such note)."""

    def fn(system: System) -> list[Any]:
        return list(entry(key).create(system).run(1 << 20, 2))

    outcomes = run_ranks("h200x8", [4], fn, SMALL)
    assert all(o.ok for o in outcomes), [o.error for o in outcomes]
    (full,) = outcomes[0].value
    assert FIGURES_NOTE not in dict(full.notes)
    for outcome in outcomes[1:]:
        (stand_in,) = outcome.value
        assert (stand_in.key, stand_in.values) == (key, ((None,),))
        assert dict(stand_in.notes)[FIGURES_NOTE] == 0
    return full


@pytest.mark.parametrize(
    ("key", "shape"),
    [
        ("multinode_device_to_device_all_to_one_write_sm", (1, 4)),
        ("multinode_device_to_device_all_from_one_read_sm", (1, 4)),
        ("multinode_bisect_write_ce", (4, 1)),
    ],
)
def test_only_rank_0_builds_the_per_rank_and_bisect_matrices(
    key: str, shape: tuple[int, int]
) -> None:
    """The 1 x N and N x 1 testcases on 4 ranks: rank 0 returns the whole matrix, every
    other rank one N/A cell with the note naming rank 0 (each building N cells is O(N^2)
    for a simulated rack)."""
    full = _rank_0_matrix_and_stand_ins(key)
    assert (len(full.values), len(full.values[0])) == shape
    assert all(v is not None for row in full.values for v in row)


@pytest.mark.parametrize(
    "key",
    [
        "multinode_device_to_device_memcpy_read_ce",
        "multinode_device_to_device_bidirectional_memcpy_read_ce",
        "multinode_bisect_write_ce",
    ],
)
def test_a_testcase_takes_the_same_world_collectives_with_one_or_two_buffer_sets(key: str) -> None:
    """On 4 ranks each rank takes 10 collectives of the whole world in a testcase, whatever
    its buffer sets: the gate's three, one make of every set (allgather, agree), the series'
    last gather, two barriers to free every set and two the gate."""

    def fn(system: System) -> list[str]:
        world = system.world
        system.sharing.handle_kind()
        system.sharing.rank_domains()
        seen: list[str] = []
        run = world._run

        def counted(name: str, timeout_s: Any, body: Any, group: Any = None) -> Any:
            if group is None:
                seen.append(name)
            return run(name, timeout_s, body, group)

        world._run = counted
        try:
            entry(key).create(system).run(1 << 20, 2)
        finally:
            world._run = run
        return seen

    outcomes = run_ranks("h200x8", [4], fn, SMALL)
    assert all(o.ok for o in outcomes), [o.error for o in outcomes]
    made = ["allgather", "agree", "agree", "allgather", "agree", "allgather"]
    assert [o.value for o in outcomes] == [[*made, *["barrier"] * 4]] * 4


def test_a_series_takes_no_collective_of_the_ranks_outside_a_cell() -> None:
    """A cell of one issuing rank takes no collective; one of two, its ranks' own (one
    sample: steps 4 and 7, nothing at the cell's end); rank 0 is at every hand-over and
    outside the cells; every rank ends with every cell."""
    values = _series_on_4_ranks(None)
    assert [v[0] for v in values] == [[1, 1, 1]] * 4
    seen = [v[1] for v in values]
    assert seen[0] == seen[1] == [(0, 1), (0, 1, 2, 3), None]
    assert seen[2] == seen[3] == [(0, 1, 2, 3), (2, 3), (2, 3), None]


def test_a_series_ends_with_one_gathered_list_shared_by_the_ranks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What every rank gives the world's gathers (a series' figures at its end included) is
    immutable all the way down, so that a simulated rack's ranks share the one gathered list
    instead of each unpickling every rank's figures (O(N^2) in one process)."""
    from gpubw.world import tasks
    from gpubw.world.simulated import SimulatedWorld

    frozen: list[bool] = []
    real = SimulatedWorld._allgather

    def allgather(self: Any, name: str, seq: int, value: Any, deadline: float) -> list[Any]:
        frozen.append(tasks._frozen(value))
        return real(self, name, seq, value, deadline)

    monkeypatch.setattr(SimulatedWorld, "_allgather", allgather)
    values = _series_on_4_ranks(None)
    assert [v[0] for v in values] == [[1, 1, 1]] * 4
    assert frozen and all(frozen), frozen


@pytest.mark.parametrize(
    ("fail_in", "message", "in_cell"),
    [(0, "rank 1: copy sizes differ", []), (2, "rank 2: copy sizes differ", [(2, 3)])],
)
def test_an_error_in_a_cell_of_a_series_is_raised_on_every_rank_after_it(
    fail_in: int, message: str, in_cell: list[Any]
) -> None:
    """A bad copy (before the cell's first step): a lone issuer keeps it to the next
    hand-over, two issuers raise it at their first agreement; no later cell is measured, and
    every rank (also the ranks outside the cell) raises the same error at the series' end."""
    values = _series_on_4_ranks(fail_in)
    assert [v[0] for v in values] == [message] * 4
    assert [v[1] for v in values] == [
        [(0, 1), (0, 1, 2, 3), None],
        [(0, 1), (0, 1, 2, 3), None],
        [(0, 1, 2, 3), *in_cell, None],
        [(0, 1, 2, 3), *in_cell, None],
    ]


def _series_with_failing_reset(monkeypatch: pytest.MonkeyPatch, when: int) -> list[Any]:
    """:func:`_series_on_4_ranks` with a fourth cell like the third, where rank 2 (the
    third cell's first rank) fails to zero the flag of sample ``when``: 1 at the sample's
    start (step 1), 0 after its last agreement (one sample a cell)."""
    real = RankGate.reset

    def reset(self: RankGate, sample: int) -> None:
        if self.system.world.rank == 2 and sample == when:
            raise GpubwError(f"flag {sample} not zeroed")
        real(self, sample)

    monkeypatch.setattr(RankGate, "reset", reset)

    def fn(system: System) -> Any:
        op = MemcpyOperation(system, CE, loops=2)
        with RankGate.create(system) as gate:
            cells = _series_cells(system, ((1,), (1,), (2, 3), (2, 3)))
            try:
                return [len(c.pair_samples[0]) for c in measure_series(op, cells, gate)]
            except RemoteRankError as exc:
                return str(exc).split(": <")[0]

    outcomes = run_ranks("h200x8", [4], fn, SMALL)
    assert all(o.ok for o in outcomes), [o.error for o in outcomes]
    return [o.value for o in outcomes]


@pytest.mark.parametrize("when", [1, 0])
def test_a_failed_flag_reset_is_raised_on_every_rank(
    monkeypatch: pytest.MonkeyPatch, when: int
) -> None:
    """A flag not zeroed at a sample's start fails the cell at its next agreement; one not
    zeroed after the cell's last agreement travels to the next hand-over: either way every
    rank raises it and nothing hangs."""
    values = _series_with_failing_reset(monkeypatch, when)
    assert values == [f"rank 2: flag {when} not zeroed"] * 4


def test_the_rank_gate_zeroes_flags_it_did_not_find_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """Device memory need not be zero when made: each owner zeroes its domain's two flags
    before the gate is used."""
    made = SharedBuffer.create

    def dirty(system: System, owner: int, nbytes: int) -> Any:
        buf = made(system, owner, nbytes)
        if system.world.rank == owner:
            ones = HostBuffer.allocate(system, None, nbytes)
            ones.write(b"\xff" * nbytes)
            with system.backend.stream(system.rank_device) as s:
                system.backend.memcpy_async(buf.ptr, ones.ptr, nbytes, s)
                system.backend.synchronize(s, 5.0)
            ones.close()
        return buf

    monkeypatch.setattr(SharedBuffer, "create", staticmethod(dirty))

    def fn(system: System) -> Any:
        with RankGate.create(system) as gate:
            return _words(system, gate.flag(0), 2)

    outcomes = run_ranks("h200x8", [2], fn, SMALL)
    assert [o.value for o in outcomes] == [(0, 0), (0, 0)], [o.error for o in outcomes]


# -- NVLink domains ----------------------------------------------------------------------------
#: one N x N, one fan, one multicast and the bisect testcase
DOMAIN_KEYS = [
    "multinode_device_to_device_memcpy_read_ce",
    "multinode_device_to_device_all_to_one_write_sm",
    "multinode_device_to_device_broadcast_one_to_all_sm",
    "multinode_bisect_write_ce",
]


def two_domains() -> Any:
    """8 GB200 GPUs on 4 hosts of 2, in 2 NVLink domains of 4 (two racks, cut down)."""
    from gpubw.backend.sim.presets import system_from_dict

    doc = {"base": "gb200nvl72", "name": "tworacks", "count": 8, "hosts": [2, 2, 2, 2],
           "nvlink_domains": [4, 4]}  # fmt: skip
    return system_from_dict(doc)


def _domain_report(monkeypatch: pytest.MonkeyPatch, options: RunOptions) -> Report:
    for name in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS",
                 "GPUBW_DISABLE_MULTICAST"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    return ranked_report(two_domains(), [2, 2, 2, 2], options, DOMAIN_KEYS, timeout_s=60)


def test_cells_across_nvlink_domains_are_none_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """8 ranks in 2 NVLink domains of 4: every N x N cell within a domain measured, the 32
    across None and counted in the note (text too); the fan and the multicast column
    measured per domain; bisect pairs within a domain; the JSON validates and says 2."""
    report = _domain_report(monkeypatch, SMALL)
    assert set(statuses(report).values()) == {"Passed"}, report.testcases
    grid, fan, multicast, halves = (t.matrices[0] for t in report.testcases)
    for r in range(8):
        for c in range(8):
            assert (grid.values[r][c] is not None) == (r != c and r // 4 == c // 4), (r, c)
    note = dict(grid.notes)["nvlink_domains"]
    assert note["domains"] == 2 and note["names"] == ["nvl0", "nvl1"] and note["across"] == 32
    assert all(v is not None for v in fan.values[0] + multicast.values[0])
    assert halves.row_labels == ("0->2", "1->3", "2->0", "3->1", "4->6", "5->7", "6->4", "7->5")
    assert all(row[0] is not None for row in halves.values)
    doc = json.loads(dumps(report))  # dumps validates against the schema
    assert doc["world"]["nvlink_domains"] == 2
    assert [p["nvlink_domain"] for p in doc["world"]["processes"]] == ["nvl0"] * 4 + ["nvl1"] * 4
    out = text(report)
    assert "NVLink domains: 2 (nvl0: 4 ranks, nvl1: 4 ranks)" in out
    assert "(32 cells pair GPUs of different NVLink domains (2 NVLink domains: nvl0, nvl1);" in out


def test_devices_of_one_domain_make_a_run_of_one_domain(monkeypatch: pytest.MonkeyPatch) -> None:
    """--devices naming the 4 GPUs of domain 0 (by PCI bus id): 1 domain in JSON and text, no
    domains note, every cell among them measured, the rest None."""
    buses = [d.pci_bus_id for d in two_domains().devices[:4]]
    options = attrs.evolve(SMALL, devices=tuple(buses))
    report = _domain_report(monkeypatch, options)
    assert set(statuses(report).values()) == {"Passed"}, report.testcases
    for t in report.testcases:
        assert all("nvlink_domains" not in dict(m.notes) for m in t.matrices), t.key
    grid = report.testcases[0].matrices[0]
    for r in range(8):
        for c in range(8):
            assert (grid.values[r][c] is not None) == (r != c and r < 4 and c < 4), (r, c)
    assert json.loads(dumps(report))["world"]["nvlink_domains"] == 1
    assert "NVLink domains: 1 (nvl0: 4 ranks)" in text(report)


def test_sampled_pairs_stay_within_nvlink_domains(monkeypatch: pytest.MonkeyPatch) -> None:
    """--sample-pairs 8 over 2 domains of 4: 8 cells, all within a domain, every rank a row
    and a column once at least; the sampled note counts the 24 cells within domains."""
    options = attrs.evolve(SMALL, sample_pairs=8, seed=3)
    for name in ("NCCL_NVLS_ENABLE", "GPUBW_DISABLE_MULTICAST"):
        monkeypatch.delenv(name, raising=False)
    report = ranked_report(two_domains(), [2, 2, 2, 2], options, DOMAIN_KEYS[:1], timeout_s=60)
    grid = report.testcases[0].matrices[0]
    cells = [(r, c) for r in range(8) for c in range(8) if grid.values[r][c] is not None]
    assert len(cells) == 8 and all(r // 4 == c // 4 for r, c in cells)
    assert {r for r, _ in cells} == {c for _, c in cells} == set(range(8))
    assert dict(grid.notes)["sampled"] == {"cells": 24, "measured": 8, "seed": 3}
    assert dict(grid.notes)["nvlink_domains"]["across"] == 32


@pytest.mark.parametrize("key", DOMAIN_KEYS[1:3])
def test_sampled_columns_stay_within_nvlink_domains(
    monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    """--sample-pairs 8 over 2 domains of 4: #52 and #54 measure ceil(4 x 8 / 24) = 2
    columns of each domain (each column reaching its domain's other 3 GPUs), the rest None,
    counted in the sampled note."""
    options = attrs.evolve(SMALL, sample_pairs=8, seed=3)
    for name in ("NCCL_NVLS_ENABLE", "GPUBW_DISABLE_MULTICAST"):
        monkeypatch.delenv(name, raising=False)
    report = ranked_report(two_domains(), [2, 2, 2, 2], options, [key], timeout_s=60)
    assert report.testcases[0].status.value == "Passed"
    (row,) = report.testcases[0].matrices[0].values
    measured = [g for g, v in enumerate(row) if v is not None]
    assert [sum(1 for g in measured if g // 4 == d) for d in (0, 1)] == [2, 2]
    assert sorted(measured) == sorted(sample_columns(8, 8, 3, (0,) * 4 + (1,) * 4))
    notes = dict(report.testcases[0].matrices[0].notes)
    assert notes["sampled"] == {"cells": 8, "measured": 4, "seed": 3}


def _imports(monkeypatch: pytest.MonkeyPatch) -> dict[int, list[int]]:
    """Each rank's imports of shared buffers of SMALL's size from now on: {rank: [nbytes, ...]}
    (the rank gate's flags, 8 bytes, are left out)."""
    from gpubw.backend.sim.backend import SimulatedBackend

    seen: dict[int, list[int]] = {}
    real = SimulatedBackend.import_device

    def counted(self: Any, device: int, handle: Any, kind: str, nbytes: int, fd: Any = None) -> int:
        if nbytes == SMALL.buffer_sizes[0]:
            seen.setdefault(self.rank, []).append(nbytes)
        return real(self, device, handle, kind, nbytes, fd)

    monkeypatch.setattr(SimulatedBackend, "import_device", counted)
    return seen


def test_a_rank_imports_only_the_buffers_of_its_sampled_cells(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--sample-pairs 8 over 2 domains of 4, read CE: each rank maps only the U of the ranks
    it shares a sampled cell with (not its whole domain's); the bisect's ranks one each (the
    destination of the rank they write to), not 3 a buffer set."""
    options = attrs.evolve(SMALL, sample_pairs=8, seed=3)
    seen = _imports(monkeypatch)
    report = ranked_report(two_domains(), [2, 2, 2, 2], options, DOMAIN_KEYS[:1], timeout_s=60)
    grid = report.testcases[0].matrices[0]
    cells = [(r, c) for r in range(8) for c in range(8) if grid.values[r][c] is not None]
    for rank in range(8):
        peers = {c for r, c in cells if r == rank} | {r for r, c in cells if c == rank}
        assert len(seen.get(rank, [])) == len(peers), (rank, seen.get(rank), peers)
    seen.clear()
    report = ranked_report(two_domains(), [2, 2, 2, 2], options, DOMAIN_KEYS[3:], timeout_s=60)
    assert report.testcases[0].status.value == "Passed"
    assert {r: len(v) for r, v in seen.items()} == dict.fromkeys(range(8), 1)


def _words(system: System, ptr: int, count: int) -> tuple[int, ...]:
    """``count`` ints of device memory at ``ptr``, copied back to the host."""
    host = HostBuffer.allocate(system, None, 4 * count)
    try:
        with system.backend.stream(system.rank_device) as s:
            system.backend.memcpy_async(host.ptr, ptr, 4 * count, s)
            system.backend.synchronize(s, 5.0)
        return struct.unpack(f"<{count}i", host.read(4 * count))
    finally:
        host.close()


def test_the_rank_gate_has_one_flag_per_nvlink_domain() -> None:
    """RankGate: two flags (alternate samples) per domain, owned by its lowest rank, zero
    when made, mapped by its ranks only; the relay of a cell is the first of its ranks in
    each domain."""

    def body(system: System) -> tuple[Any, ...]:
        with RankGate.create(system) as gate:
            return (
                gate.owner,
                len(gate.flags),
                [f.mapped for f in gate.flags],
                gate.relays([5, 1, 6, 2]),
                gate.flag(0) != 0 and gate.flag(1) == gate.flag(2) + 4 == gate.flag(0) + 4,
                _words(system, gate.flag(0), 2),
            )

    engine = two_domains()
    from gpubw.backend.sim.backend import SimEngine

    sim = SimEngine(engine)
    cluster = SimulatedCluster([2, 2, 2, 2], timeout_s=30, on_step=sim.align_clocks)

    def run(world: Any) -> Any:
        view = sim.rank_view(world.rank, cluster.rank_hosts[world.rank])
        with System(view, SMALL, world=world) as system:
            return body(system)

    out = [o.value for o in cluster.run(run)]
    assert [o[0] for o in out] == [0] * 4 + [4] * 4
    assert all(o[1] == 2 and o[4] and o[5] == (0, 0) for o in out)
    assert [o[2] for o in out] == [[True, False]] * 4 + [[False, True]] * 4
    assert [r for r, o in enumerate(out) if o[3]] == [1, 5]
