"""The built-in testcases, end to end on the simulated presets (no GPU).

What nvbandwidth's reference (§5) fixes is checked here: which testcases are waived where,
matrix keys, header strings, shapes, N/A placement, bandwidth kinds, initiators, the exact data
flow of every cell (source, destination, size, executing device; so the 2S interference of the
CE host tests and the context preference of each test), #18 == #19, latency ignoring the
buffer size, and device_local_copy's read + write matrix.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

import attrs
import pytest

from gpubw import BANDWIDTH, LATENCY, Matrix, MemcpyOperation, RunOptions, System
from gpubw import Testcase as AnyTestcase  # (a Test* name would be collected by pytest)
from gpubw.backend.sim.model import SimSystem
from gpubw.backend.sim.presets import load_system
from gpubw.measure.initiators import sm_truncated_bytes
from gpubw.measure.latency import NODE_BYTES, RING_BYTES, STRIDE_NODES, ring_bytes
from gpubw.memory.pool import BufferPool
from gpubw.model.results import axes_from_header
from gpubw.testcases import latency as latency_module

MIB = 1 << 20
SIZE = 4 * MIB
LOOPS = 2
OPTIONS = RunOptions(samples=2, loops=LOOPS)

#: preset -> (device count, ordered peer pairs or None for all)
PRESETS: dict[str, tuple[int, set[tuple[int, int]] | None]] = {
    "h200x1": (1, None),
    "h200x2": (2, None),
    "h200x8": (8, None),
    "pcie4": (4, {(0, 1), (1, 0), (2, 3), (3, 2)}),
}


def accessible(preset: str, r: int, c: int) -> bool:
    _, peers = PRESETS[preset]
    return r != c and (peers is None or (r, c) in peers)


TESTCASES: dict[str, type[AnyTestcase]] = {
    ep.name: ep.load()
    for ep in entry_points(group="gpubw.testcases")
    if ep.value.startswith("gpubw.")
    and not ep.name.startswith("multinode_")
    and not ep.value.startswith("gpubw.testcases.pageable:")
}  # the 13 multinode testcases run across ranks: tests/test_multinode.py; the pageable
# ones (gpubw's own, timed without the gate): tests/test_pageable.py

# -- what nvbandwidth's table says ------------------------------------------------------------

HOST_1xN = {
    # key: (header, initiator)
    "host_to_device_memcpy_ce": ("memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)", "CE"),
    "device_to_host_memcpy_ce": ("memcpy CE CPU(row) <- GPU(column) bandwidth (GB/s)", "CE"),
    "host_to_device_bidirectional_memcpy_ce": (
        "memcpy CE CPU(row) <-> GPU(column) bandwidth (GB/s)",
        "CE",
    ),
    "device_to_host_bidirectional_memcpy_ce": (
        "memcpy CE CPU(row) <-> GPU(column) bandwidth (GB/s)",
        "CE",
    ),
    "all_to_host_memcpy_ce": ("memcpy CE CPU(row) <- GPU(column) bandwidth (GB/s)", "CE"),
    "all_to_host_bidirectional_memcpy_ce": (
        "memcpy CE CPU(row) <-> GPU(column) bandwidth (GB/s)",
        "CE",
    ),
    "host_to_all_memcpy_ce": ("memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)", "CE"),
    "host_to_all_bidirectional_memcpy_ce": (
        "memcpy CE CPU(row) <-> GPU(column) bandwidth (GB/s)",
        "CE",
    ),
    "host_to_device_memcpy_sm": ("memcpy SM CPU(row) -> GPU(column) bandwidth (GB/s)", "SM"),
    "device_to_host_memcpy_sm": ("memcpy SM CPU(row) <- GPU(column) bandwidth (GB/s)", "SM"),
    "host_to_device_bidirectional_memcpy_sm": (
        "memcpy SM CPU(row) <-> GPU(column) bandwidth (GB/s)",
        "SM split-warp",
    ),
    "device_to_host_bidirectional_memcpy_sm": (
        "memcpy SM CPU(row) <-> GPU(column) bandwidth (GB/s)",
        "SM split-warp",
    ),
    "all_to_host_memcpy_sm": ("memcpy SM CPU(row) <- GPU(column) bandwidth (GB/s)", "SM"),
    "all_to_host_bidirectional_memcpy_sm": (
        "memcpy SM CPU(row) <-> GPU(column) bandwidth (GB/s)",
        "SM split-warp",
    ),
    "host_to_all_memcpy_sm": ("memcpy SM CPU(row) -> GPU(column) bandwidth (GB/s)", "SM"),
    "host_to_all_bidirectional_memcpy_sm": (
        "memcpy SM CPU(row) <-> GPU(column) bandwidth (GB/s)",
        "SM split-warp",
    ),
}
PEER_NxN = {
    "device_to_device_memcpy_read_ce": ("memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)", "CE"),
    "device_to_device_memcpy_write_ce": (
        "memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)",
        "CE",
    ),
    "device_to_device_memcpy_read_sm": ("memcpy SM GPU(row) -> GPU(column) bandwidth (GB/s)", "SM"),
    "device_to_device_memcpy_write_sm": (
        "memcpy SM GPU(row) <- GPU(column) bandwidth (GB/s)",
        "SM",
    ),
    "device_to_device_memcpy_read_tma": (
        "memcpy TMA GPU(row) -> GPU(column) bandwidth (GB/s)",
        "TMA",
    ),
    "device_to_device_memcpy_write_tma": (
        "memcpy TMA GPU(row) <- GPU(column) bandwidth (GB/s)",
        "TMA",
    ),
}
BIDIRECTIONAL = {
    # key: (engine, word)
    "device_to_device_bidirectional_memcpy_read_ce": ("CE", "Read"),
    "device_to_device_bidirectional_memcpy_write_ce": ("CE", "Write"),
    "device_to_device_bidirectional_memcpy_read_sm": ("SM", "Read"),
    "device_to_device_bidirectional_memcpy_write_sm": ("SM", "Write"),
    "device_to_device_bidirectional_memcpy_read_tma": ("TMA", "Read"),
    "device_to_device_bidirectional_memcpy_write_tma": ("TMA", "Write"),
}
FAN = {
    "all_to_one_write_ce": ("memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)", "CE"),
    "all_to_one_read_ce": ("memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)", "CE"),
    "one_to_all_write_ce": ("memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)", "CE"),
    "one_to_all_read_ce": ("memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)", "CE"),
    "all_to_one_write_sm": ("memcpy SM GPU(row) <- GPU(column) bandwidth (GB/s)", "SM"),
    "all_to_one_read_sm": ("memcpy SM GPU(row) -> GPU(column) bandwidth (GB/s)", "SM"),
    "one_to_all_write_sm": ("memcpy SM GPU(row) -> GPU(column) bandwidth (GB/s)", "SM"),
    "one_to_all_read_sm": ("memcpy SM GPU(row) <- GPU(column) bandwidth (GB/s)", "SM"),
}
LATENCY_TESTS = {
    "host_device_latency_sm": "memory latency SM CPU(row) <-> GPU(column) (ns)",
    "device_to_device_latency_sm": "Device to Device Latency SM GPU(row) <-> GPU(column) (ns)",
    "device_to_device_latency_tma": "Device to Device Latency TMA GPU(row) <-> GPU(column) (ns)",
}
PEER_LATENCY = {"device_to_device_latency_sm", "device_to_device_latency_tma"}
LOCAL = {
    "device_local_copy": ("memcpy local GPU(column) bandwidth (GB/s)", "CE"),
    "device_local_copy_sm": ("memcpy SM local GPU(column) bandwidth (GB/s)", "SM"),
    "device_local_copy_tma": ("memcpy TMA local GPU(column) bandwidth (GB/s)", "TMA"),
}
#: the one-way local kernels: (header, initiator, the word for the bytes counted)
LOCAL_ONE_WAY = {
    "device_local_read_sm": (
        "memcpy SM local read GPU(column) bandwidth (GB/s)",
        "SM read",
        "read",
    ),
    "device_local_write_sm": (
        "memcpy SM local write GPU(column) bandwidth (GB/s)",
        "SM write",
        "written",
    ),
}
NEEDS_PEERS = {*PEER_NxN, *BIDIRECTIONAL, *FAN, *PEER_LATENCY}
#: the testcases made with TMA (compute capability 9.0 or newer; pcie4's cards are 8.9)
TMA_KEYS = {k for k in (*PEER_NxN, *BIDIRECTIONAL, *LATENCY_TESTS, *LOCAL) if k.endswith("_tma")}


def waived_for_tma(tc: AnyTestcase, matrices: list[Matrix] | None, preset: str) -> bool:
    """Whether ``tc`` is a TMA testcase on a preset without TMA (then it must be waived so)."""
    if tc.key not in TMA_KEYS or preset != "pcie4":
        return False
    assert matrices is None
    assert tc.waive_reason.startswith("needs TMA (compute capability 9.0 or newer)")
    return True


def test_the_table_covers_every_builtin() -> None:
    """The expectation tables here cover exactly the 44 built-in testcases (v0.10's)."""
    tables = (HOST_1xN, PEER_NxN, BIDIRECTIONAL, FAN, LATENCY_TESTS, LOCAL, LOCAL_ONE_WAY)
    table = {k: v for t in tables for k, v in t.items()}
    assert set(table) == set(TESTCASES)
    assert len(TESTCASES) == 44
    assert len(TMA_KEYS) == 6


@pytest.mark.parametrize("key", sorted(TESTCASES))
def test_class_key_and_description(key: str) -> None:
    """Each built-in states no key (its entry-point name is its key), has a 1-3 line
    description, and is fixed_size only if latency."""
    cls = TESTCASES[key]
    assert not hasattr(cls, "key")
    lines = cls.description().splitlines()
    assert 1 <= len(lines) <= 3, lines
    assert all(len(line) <= 100 for line in lines)
    assert cls.fixed_size is (key in LATENCY_TESTS)


# -- running ----------------------------------------------------------------------------------

Ran = tuple[AnyTestcase, "list[Matrix] | None", System]


@pytest.fixture
def run(sim_system: Callable[..., System]) -> Callable[..., Ran]:
    """``run(preset, key, size=SIZE)``: filter, then run ``key`` on a fresh System on the
    simulated ``preset``; (testcase, matrices or None if waived, system). Checks that the
    testcase gave back every buffer it took (and, at teardown, that nothing leaked)."""

    def go(preset: str | SimSystem, key: str, size: int = SIZE) -> Ran:
        system = sim_system(preset, options=OPTIONS)
        tc = TESTCASES[key](system, key)
        if not tc.filter():
            return tc, None, system
        matrices = list(tc.run(size, LOOPS))
        assert system.live_buffers == 0, f"{key} left {system.live_buffers} buffers allocated"
        return tc, matrices, system

    return go


def check_matrix(m: Matrix, rows: int, cols: int, na: Callable[[int, int], bool]) -> None:
    """Shape, labels, N/A placement, units, positive values, raw samples, sums."""
    assert m.row_labels == tuple(str(i) for i in range(rows))
    assert m.column_labels == tuple(str(i) for i in range(cols))
    assert len(m.values) == rows and all(len(r) == cols for r in m.values)
    for r in range(rows):
        for c in range(cols):
            v = m.values[r][c]
            if na(r, c):
                assert v is None, f"{m.key}[{r}][{c}] should be N/A, is {v}"
                assert m.samples[r][c] is None
            else:
                assert v is not None and v > 0 and math.isfinite(v), f"{m.key}[{r}][{c}] = {v}"
                s = m.samples[r][c]
                assert s is not None and len(s) >= 1
    assert m.sum == pytest.approx(sum(v for row in m.values for v in row if v is not None))
    assert m.bytes_counted
    assert m.statistic


def cases(keys: Any) -> list[Any]:
    return [
        pytest.param(preset, key, id=f"{preset}-{key}")
        for preset in PRESETS
        for key in sorted(keys)
    ]


@pytest.mark.parametrize(("preset", "key"), cases(HOST_1xN))
def test_host_testcases(run: Callable[..., Ran], preset: str, key: str) -> None:
    """Host testcases: header, initiator, 1 x N shape, bytes per copy and interference."""
    n, _ = PRESETS[preset]
    header, initiator = HOST_1xN[key]
    _, matrices, _ = run(preset, key)
    assert matrices is not None
    (m,) = matrices
    assert (m.key, m.description, m.unit) == (key, header, BANDWIDTH)
    assert (m.initiator, m.bandwidth_kind) == (initiator, "first")
    check_matrix(m, 1, n, lambda r, c: False)
    for row in m.samples:
        for s in row:
            assert s is not None and len(s) == OPTIONS.samples
    expected = SIZE // 2 if initiator == "SM split-warp" else SIZE
    assert m.bytes_per_copy == expected
    assert "counted once" in m.bytes_counted
    same_device = "bidirectional_memcpy_ce" in key  # #2, #3, #9, #11
    other_devices = "all" in key and n > 1  # #8-#11, #24-#27
    has_interference = "interference copies" in m.bytes_counted
    assert has_interference is (same_device or other_devices)
    if has_interference:
        assert "not counted" in m.bytes_counted
        assert ("twice the measured size" in m.bytes_counted) is key.endswith("_ce")


@pytest.mark.parametrize(("preset", "key"), cases(PEER_NxN))
def test_peer_testcases(run: Callable[..., Ran], preset: str, key: str) -> None:
    """Peer N x N testcases: waived on one device, else N/A exactly where peer access is missing."""
    n, _ = PRESETS[preset]
    header, initiator = PEER_NxN[key]
    tc, matrices, _ = run(preset, key)
    if waived_for_tma(tc, matrices, preset):
        return
    if n == 1:
        assert matrices is None
        assert tc.waive_reason == "needs 2 devices with peer access; found 1 device"
        return
    assert matrices is not None
    (m,) = matrices
    assert (m.key, m.description, m.unit) == (key, header, BANDWIDTH)
    assert (m.initiator, m.bandwidth_kind) == (initiator, "first")
    check_matrix(m, n, n, lambda r, c: not accessible(preset, r, c))
    assert m.bytes_per_copy == SIZE


@pytest.mark.parametrize(("preset", "key"), cases(BIDIRECTIONAL))
def test_bidirectional_testcases(run: Callable[..., Ran], preset: str, key: str) -> None:
    """Bidirectional peer testcases give two direction matrices and a total equal to their sum."""
    n, _ = PRESETS[preset]
    engine, word = BIDIRECTIONAL[key]
    tc, matrices, _ = run(preset, key)
    if waived_for_tma(tc, matrices, preset):
        return
    if n == 1:
        assert matrices is None
        return
    assert matrices is not None
    one, two, total = matrices
    lower = word.lower()
    assert [m.key for m in matrices] == [f"{key}_{lower}1", f"{key}_{lower}2", f"{key}_total"]
    for m, label in zip(matrices, (f"{word}1", f"{word}2", "Total")):
        assert m.description == f"memcpy {engine} GPU(row) <-> GPU(column) {label} bandwidth (GB/s)"
        assert (m.initiator, m.bandwidth_kind, m.unit) == (engine, "vector", BANDWIDTH)
        check_matrix(m, n, n, lambda r, c: not accessible(preset, r, c))
    for r in range(n):
        for c in range(n):
            a, b, t = one.values[r][c], two.values[r][c], total.values[r][c]
            if t is not None:
                assert a is not None and b is not None
                assert t == pytest.approx(a + b)
    assert total.sum == pytest.approx(one.sum + two.sum)


@pytest.mark.parametrize(("preset", "key"), cases(FAN))
def test_all_to_one_and_one_to_all(run: Callable[..., Ran], preset: str, key: str) -> None:
    """All-to-one and one-to-all testcases: waived on one device, else a 1 x N total matrix."""
    n, _ = PRESETS[preset]
    header, initiator = FAN[key]
    tc, matrices, _ = run(preset, key)
    if n == 1:
        assert matrices is None
        assert "needs 2 devices with peer access" in tc.waive_reason
        return
    assert matrices is not None
    (m,) = matrices
    assert (m.key, m.description, m.unit) == (key, header, BANDWIDTH)
    assert (m.initiator, m.bandwidth_kind) == (initiator, "total")
    # a column is N/A only when its device has no accessible peer (none here)
    check_matrix(m, 1, n, lambda r, c: not any(accessible(preset, c, j) for j in range(n)))
    assert m.bytes_per_copy == SIZE


@pytest.mark.parametrize(("preset", "key"), cases(LATENCY_TESTS))
def test_latency_testcases(run: Callable[..., Ran], preset: str, key: str) -> None:
    """Latency testcases give plausible seconds per access, each the mean of its samples."""
    n, _ = PRESETS[preset]
    tc, matrices, _ = run(preset, key)
    if waived_for_tma(tc, matrices, preset):
        return
    if key in PEER_LATENCY and n == 1:
        assert matrices is None
        return
    assert matrices is not None
    (m,) = matrices
    assert (m.key, m.description, m.unit) == (key, LATENCY_TESTS[key], LATENCY)
    assert m.bandwidth_kind == "latency"
    if key == "host_device_latency_sm":
        check_matrix(m, 1, n, lambda r, c: False)
    else:
        check_matrix(m, n, n, lambda r, c: not accessible(preset, r, c))
    for row in m.values:
        for v in row:
            assert v is None or 1e-9 < v < 1e-4, v  # seconds per access
    # the value is the mean of the per-launch samples (sum of launch times / 10^6 accesses)
    for vrow, srow in zip(m.values, m.samples):
        for v, s in zip(vrow, srow):
            if v is not None:
                assert s is not None
                assert v == pytest.approx(sum(s) / len(s))


@pytest.mark.parametrize(("preset", "key"), cases(LOCAL))
def test_device_local_copy(run: Callable[..., Ran], preset: str, key: str) -> None:
    """Local copies give a copy matrix and a read + write one at twice it, with % of nominal."""
    n, _ = PRESETS[preset]
    header, initiator = LOCAL[key]
    tc, matrices, system = run(preset, key)
    if waived_for_tma(tc, matrices, preset):
        return
    assert matrices is not None
    once, read_write = matrices
    assert (once.key, once.description, once.initiator) == (key, header, initiator)
    assert read_write.key == f"{key}_read_write"
    assert read_write.bytes_counted.startswith("read + write (each byte copied counted twice")
    for m in matrices:
        assert (m.unit, m.bandwidth_kind) == (BANDWIDTH, "first")
        check_matrix(m, 1, n, lambda r, c: False)
    for a, b in zip(once.values[0], read_write.values[0]):
        assert a is not None and b == pytest.approx(2 * a)
    notes = dict(read_write.notes)
    nominal = [d.nominal_memory_bandwidth for d in system.devices]
    assert list(notes["nominal_memory_bandwidth"]) == pytest.approx(nominal)
    percent = notes["percent_of_nominal"]
    for v, p, nom in zip(read_write.values[0], percent, nominal):
        assert v is not None and p == pytest.approx(100 * v / nom)
    assert dict(once.notes)["percent_of_nominal_read_write"] == percent


@pytest.mark.parametrize(("preset", "key"), cases(LOCAL_ONE_WAY))
def test_device_local_one_way(run: Callable[..., Ran], preset: str, key: str) -> None:
    """Local read-only and write-only kernels: one matrix of the bytes moved, % of nominal."""
    n, _ = PRESETS[preset]
    header, initiator, moved = LOCAL_ONE_WAY[key]
    _, matrices, system = run(preset, key)
    assert matrices is not None
    (m,) = matrices
    assert (m.key, m.description, m.initiator) == (key, header, initiator)
    assert (m.unit, m.bandwidth_kind) == (BANDWIDTH, "first")
    check_matrix(m, 1, n, lambda r, c: False)
    assert f"bytes {moved}" in m.bytes_counted
    notes = dict(m.notes)
    nominal = [d.nominal_memory_bandwidth for d in system.devices]
    assert list(notes["nominal_memory_bandwidth"]) == pytest.approx(nominal)
    for v, p, nom in zip(m.values[0], notes["percent_of_nominal"], nominal):
        assert v is not None and p == pytest.approx(100 * v / nom)


#: what each testcase's matrices' rows are (Matrix.axes); their columns are GPUs
ROWS = {
    **dict.fromkeys(HOST_1xN, "host"),
    **dict.fromkeys([*PEER_NxN, *BIDIRECTIONAL, *PEER_LATENCY], "gpu"),
    **dict.fromkeys(FAN, "peers"),
    **dict.fromkeys([*LOCAL, *LOCAL_ONE_WAY], "none"),
    "host_device_latency_sm": "host",
}


@pytest.mark.parametrize("key", sorted(TESTCASES))
def test_matrices_are_built_with_the_axes_their_header_names(
    run: Callable[..., Ran], key: str
) -> None:
    """Every built-in matrix is built with its axes, and they are the ones its header names:
    a report read back (its JSON has no axes) reads its cells the same."""
    _, matrices, _ = run("h200x2", key, MIB)
    assert matrices
    for m in matrices:
        assert m._axes is not None, f"{m.key} was built without axes"
        assert (m.axes.rows, m.axes.columns) == (ROWS[key], "gpu")
        assert m.axes == axes_from_header(m.description, len(m.row_labels))


# -- the exact data flow of every cell ---------------------------------------------------------

Flow = list[tuple[str, str, int, int]]  # (source, destination, bytes, executing device)


# nvbandwidth's notation: H(g) is pinned host memory near g, D(g) memory on g
def H(g: int) -> str:
    return "Host"


def D(g: int) -> str:
    return f"Device {g}"


def expected_flows(key: str, preset: str, s: int) -> list[Flow]:
    """Every measured cell's copies, in order, from nvbandwidth's table (reference §5)."""
    n, _ = PRESETS[preset]
    others = [[j for j in range(n) if j != g] for g in range(n)]
    pairs = [(r, c) for r in range(n) for c in range(n) if accessible(preset, r, c)]
    h2d = [(H(g), D(g), s, g) for g in range(n)]
    d2h = [(D(g), H(g), s, g) for g in range(n)]

    def h2d_at(g: int, size: int) -> tuple[str, str, int, int]:
        return (H(g), D(g), size, g)

    def d2h_at(g: int, size: int) -> tuple[str, str, int, int]:
        return (D(g), H(g), size, g)

    two = 2 * s
    table: dict[str, Callable[[], list[Flow]]] = {
        "host_to_device_memcpy_ce": lambda: [[h2d[g]] for g in range(n)],
        "device_to_host_memcpy_ce": lambda: [[d2h[g]] for g in range(n)],
        "host_to_device_bidirectional_memcpy_ce": lambda: [
            [h2d[g], d2h_at(g, two)] for g in range(n)
        ],
        "device_to_host_bidirectional_memcpy_ce": lambda: [
            [d2h[g], h2d_at(g, two)] for g in range(n)
        ],
        "device_to_device_memcpy_read_ce": lambda: [[(D(c), D(r), s, r)] for r, c in pairs],
        "device_to_device_memcpy_write_ce": lambda: [[(D(r), D(c), s, r)] for r, c in pairs],
        "device_to_device_bidirectional_memcpy_read_ce": lambda: [
            [(D(c), D(r), s, r), (D(r), D(c), s, c)] for r, c in pairs
        ],
        "device_to_device_bidirectional_memcpy_write_ce": lambda: [
            [(D(c), D(r), s, c), (D(r), D(c), s, r)] for r, c in pairs
        ],
        "all_to_host_memcpy_ce": lambda: [
            [d2h[g], *(d2h_at(j, two) for j in others[g])] for g in range(n)
        ],
        "all_to_host_bidirectional_memcpy_ce": lambda: [
            [
                d2h[g],
                h2d_at(g, two),
                *(x for j in others[g] for x in (d2h_at(j, two), h2d_at(j, two))),
            ]
            for g in range(n)
        ],
        "host_to_all_memcpy_ce": lambda: [
            [h2d[g], *(h2d_at(j, two) for j in others[g])] for g in range(n)
        ],
        "host_to_all_bidirectional_memcpy_ce": lambda: [
            [
                h2d[g],
                d2h_at(g, two),
                *(x for j in others[g] for x in (h2d_at(j, two), d2h_at(j, two))),
            ]
            for g in range(n)
        ],
        # all to one / one to all: for g, one copy per peer j that g can access
        "all_to_one_write_ce": lambda: fan(lambda g, j: (D(j), D(g), s, j)),
        "all_to_one_read_ce": lambda: fan(lambda g, j: (D(g), D(j), s, j)),
        "one_to_all_write_ce": lambda: fan(lambda g, j: (D(g), D(j), s, g)),
        "one_to_all_read_ce": lambda: fan(lambda g, j: (D(j), D(g), s, g)),
        "host_to_device_memcpy_sm": lambda: [[h2d[g]] for g in range(n)],
        "device_to_host_memcpy_sm": lambda: [[d2h[g]] for g in range(n)],
        # split-warp: one kernel over (source H(g), destination D(g)); #19 is the same
        "host_to_device_bidirectional_memcpy_sm": lambda: [[h2d[g]] for g in range(n)],
        "device_to_host_bidirectional_memcpy_sm": lambda: [[h2d[g]] for g in range(n)],
        "device_to_device_memcpy_read_sm": lambda: [[(D(c), D(r), s, r)] for r, c in pairs],
        "device_to_device_memcpy_write_sm": lambda: [[(D(r), D(c), s, r)] for r, c in pairs],
        "device_to_device_bidirectional_memcpy_read_sm": lambda: [
            [(D(c), D(r), s, r), (D(r), D(c), s, c)] for r, c in pairs
        ],
        "device_to_device_bidirectional_memcpy_write_sm": lambda: [
            [(D(c), D(r), s, c), (D(r), D(c), s, r)] for r, c in pairs
        ],
        # TMA: as the SM ones (the TMA of the device that runs the SM kernel)
        "device_to_device_memcpy_read_tma": lambda: [[(D(c), D(r), s, r)] for r, c in pairs],
        "device_to_device_memcpy_write_tma": lambda: [[(D(r), D(c), s, r)] for r, c in pairs],
        "device_to_device_bidirectional_memcpy_read_tma": lambda: [
            [(D(c), D(r), s, r), (D(r), D(c), s, c)] for r, c in pairs
        ],
        "device_to_device_bidirectional_memcpy_write_tma": lambda: [
            [(D(c), D(r), s, c), (D(r), D(c), s, r)] for r, c in pairs
        ],
        # the SM host tests: interference at S, not 2S
        "all_to_host_memcpy_sm": lambda: [[d2h[g], *(d2h[j] for j in others[g])] for g in range(n)],
        "all_to_host_bidirectional_memcpy_sm": lambda: [
            [d2h[g], *(d2h[j] for j in others[g])] for g in range(n)
        ],
        "host_to_all_memcpy_sm": lambda: [[h2d[g], *(h2d[j] for j in others[g])] for g in range(n)],
        "host_to_all_bidirectional_memcpy_sm": lambda: [
            [h2d[g], *(d2h[j] for j in others[g])] for g in range(n)
        ],
        "all_to_one_write_sm": lambda: fan(lambda g, j: (D(j), D(g), s, j)),
        # SM reads run on the data's source (PREFER_SRC), unlike the CE versions
        "all_to_one_read_sm": lambda: fan(lambda g, j: (D(g), D(j), s, g)),
        "one_to_all_write_sm": lambda: fan(lambda g, j: (D(g), D(j), s, g)),
        "one_to_all_read_sm": lambda: fan(lambda g, j: (D(j), D(g), s, j)),
        "device_local_copy": lambda: [[(D(g), D(g), s, g)] for g in range(n)],
        "device_local_copy_sm": lambda: [[(D(g), D(g), s, g)] for g in range(n)],
        "device_local_copy_tma": lambda: [[(D(g), D(g), s, g)] for g in range(n)],
        # one buffer, both ends: read only or written only
        "device_local_read_sm": lambda: [[(D(g), D(g), s, g)] for g in range(n)],
        "device_local_write_sm": lambda: [[(D(g), D(g), s, g)] for g in range(n)],
    }

    def fan(copy: Callable[[int, int], tuple[str, str, int, int]]) -> list[Flow]:
        flows = [[copy(g, j) for j in others[g] if accessible(preset, g, j)] for g in range(n)]
        return [f for f in flows if f]

    return table[key]()


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[Flow]:
    """Every MemcpyOperation.measure call's copies as (src, dst, bytes, exec device)."""
    calls: list[Flow] = []
    measure = MemcpyOperation.measure

    def spy(self: MemcpyOperation, copies: Any) -> Any:
        calls.append([(c.src.label, c.dst.label, c.nbytes, self.exec_device(c)) for c in copies])
        return measure(self, copies)

    monkeypatch.setattr(MemcpyOperation, "measure", spy)
    return calls


BANDWIDTH_KEYS = sorted(k for k in TESTCASES if k not in LATENCY_TESTS)


@pytest.mark.parametrize("preset", ["pcie4", "h200x2"])
@pytest.mark.parametrize("key", BANDWIDTH_KEYS)
def test_data_flow_of_every_cell(
    run: Callable[..., Ran], recorded: list[Flow], preset: str, key: str
) -> None:
    """Every cell's copies (source, destination, size, executing device) are nvbandwidth's."""
    tc, matrices, _ = run(preset, key)
    if waived_for_tma(tc, matrices, preset):
        assert recorded == []
        return
    assert matrices is not None
    assert recorded == expected_flows(key, preset, SIZE)


def test_interference_buffers_are_allocated_at_twice_the_size(
    run: Callable[..., Ran], monkeypatch: pytest.MonkeyPatch
) -> None:
    """#2: per cell, H(g) and D(g) of S for the measured copy and of 2S for the interference."""
    sizes: list[tuple[bool, int | None, int]] = []
    allocate = BufferPool.allocate_memory

    def spy(self: BufferPool, host: bool, device: int | None, nbytes: int, **kw: Any) -> int:
        sizes.append((host, device, nbytes))
        return allocate(self, host, device, nbytes, **kw)

    monkeypatch.setattr(BufferPool, "allocate_memory", spy)
    run("h200x1", "host_to_device_bidirectional_memcpy_ce")
    big = [(h, d) for h, d, b in sizes if b == 2 * SIZE]
    assert sorted(big, key=str) == [(False, 0), (True, 0)]
    assert {(h, d) for h, d, b in sizes if b == SIZE} == {(False, 0), (True, 0)}


def test_split_warp_18_is_19(run: Callable[..., Ran], recorded: list[Flow]) -> None:
    """Testcases #18 and #19 (bidirectional SM host copies) make the same copies and matrix."""
    _, a, _ = run("h200x2", "host_to_device_bidirectional_memcpy_sm")
    first = list(recorded)
    recorded.clear()
    _, b, _ = run("h200x2", "device_to_host_bidirectional_memcpy_sm")
    assert a is not None and b is not None
    assert first == recorded
    (ma,), (mb,) = a, b
    assert ma.description == mb.description
    assert (ma.initiator, ma.bytes_per_copy) == (mb.initiator, mb.bytes_per_copy)


# -- latency ------------------------------------------------------------------------------------


def test_latency_ignores_the_buffer_size(
    run: Callable[..., Ran], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Latency testcases chase the same fixed-size ring whatever the buffer size."""
    rings: list[int] = []
    hows: list[str] = []
    chase = latency_module.pointer_chase

    def spy(system: System, exec_device: int, ring: Any, how: str = "SM") -> Any:
        rings.append(ring.nbytes)
        hows.append(how)
        return chase(system, exec_device, ring, how)

    monkeypatch.setattr(latency_module, "pointer_chase", spy)
    _, small, _ = run("h200x2", "host_device_latency_sm", size=SIZE)
    _, large, _ = run("h200x2", "host_device_latency_sm", size=64 * MIB)
    assert small is not None and large is not None
    assert rings == [RING_BYTES] * 4
    _, d2d, _ = run("h200x2", "device_to_device_latency_sm", size=64 * MIB)
    assert d2d is not None
    assert rings[4:] == [RING_BYTES] * 2
    _, tma, _ = run("h200x2", "device_to_device_latency_tma", size=64 * MIB)
    assert tma is not None
    assert rings[6:] == [RING_BYTES] * 2
    assert hows == ["SM"] * 6 + ["TMA"] * 2


def test_ring_points_sixteen_nodes_on() -> None:
    """ring_bytes builds a 262144-node ring in which each node points 16 nodes further on."""
    import numpy as np

    base = 0x7F00_0000_0000
    nodes = np.frombuffer(ring_bytes(base), dtype="<u8")
    assert len(nodes) == RING_BYTES // NODE_BYTES == 262_144
    assert int(nodes[0]) == base + STRIDE_NODES * NODE_BYTES
    assert int(nodes[-1]) == base + (STRIDE_NODES - 1) * NODE_BYTES
    i = np.arange(len(nodes), dtype=np.uint64)
    assert (nodes == base + ((i + 16) % 262_144) * 8).all()


# -- other topologies and sizes ------------------------------------------------------------------


def test_no_peer_pair_waives_with_a_reason(run: Callable[..., Ran]) -> None:
    """With no peer pair at all, every testcase that needs peers is waived with the same reason."""
    isolated = attrs.evolve(load_system("h200x2"), peers={})
    for key in sorted(NEEDS_PEERS):
        tc, matrices, _ = run(isolated, key)
        assert matrices is None
        assert tc.waive_reason == (
            "needs 2 devices with peer access; none of the 2 devices can access another"
        )


PARTIAL_PEERS = {(0, 1), (1, 0)}


@pytest.mark.parametrize(
    "key", ["device_to_device_memcpy_read_ce", "device_to_device_latency_sm", *sorted(FAN)]
)
def test_a_device_without_peers_is_na(run: Callable[..., Ran], key: str) -> None:
    """Devices without any peer get N/A columns (1 x N) and N/A cells (N x N)."""
    # pcie4 with only 0 <-> 1 peers: devices 2 and 3 have none.
    model = load_system("pcie4")
    partial = attrs.evolve(model, peers={p: model.peers[p] for p in PARTIAL_PEERS})
    _, matrices, _ = run(partial, key)
    assert matrices is not None
    (m,) = matrices
    if len(m.values) == 1:
        check_matrix(m, 1, 4, lambda r, c: c >= 2)
    else:
        check_matrix(m, 4, 4, lambda r, c: (r, c) not in PARTIAL_PEERS)


def test_sm_copies_from_64_mib_on_are_truncated(run: Callable[..., Ran]) -> None:
    """SM copies from 64 MiB on count the SM-truncated size and say so; CE copies the full size."""
    size = 65 * MIB
    _, matrices, system = run("h200x1", "host_to_device_memcpy_sm", size=size)
    assert matrices is not None
    (m,) = matrices
    truncated = sm_truncated_bytes(size, system.devices[0].sm_count)
    assert truncated < size
    assert m.bytes_per_copy == truncated
    assert "a multiple of 16 x SMs x 512 bytes" in m.bytes_counted
    _, ce, _ = run("h200x1", "host_to_device_memcpy_ce", size=size)
    assert ce is not None
    assert ce[0].bytes_per_copy == size


@pytest.mark.parametrize(
    ("size", "text"),
    [(1, "1 B per copy"), (3 << 19, "1536 KiB per copy"), (1 << 30, "1 GiB per copy")],
)
def test_copy_text_names_sizes_as_the_cli_does(size: int, text: str) -> None:
    """bytes_counted names a copy's exact size in the same words as -b and the CLI."""
    from gpubw.measure.initiators import CE
    from gpubw.testcases.shapes import copy_text

    assert copy_text(CE, size, size, 16) == f"{text} x 16 copies per sample"
