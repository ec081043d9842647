"""The shapes nvbandwidth's testcases share, written once.

A testcase says *what* is copied for one matrix cell (a ``flow``: a function that allocates
the cell's buffers from a :class:`Cell` and returns the simultaneous copies, measured copy
first) and picks a shape; the shape walks the cells, measures each with a
:class:`~gpubw.measure.measurement.MemcpyOperation`, frees the cell's buffers, and builds the
:class:`~gpubw.model.results.Matrix` objects:

* :func:`one_by_n` -- one row, a column per device g (``flow(cell, g)``);
* :func:`host_traffic` -- :func:`one_by_n` for the host tests: a measured host<->device copy on
  g, optionally with interference on g and on every other device;
* :func:`n_by_n` -- a row per device r, a column per device c; diagonal and pairs where r
  cannot access c are N/A (``flow(cell, row_buffer, column_buffer)``);
* :func:`bidirectional` -- the three N x N matrices (``…1``, ``…2``, ``_total``) of the device
  to device bidirectional tests (VECTOR kind);
* :func:`all_to_one` / :func:`one_to_all` -- total bandwidth into or out of each device from or
  to all its accessible peers (TOTAL kind; one buffer per device allocated up front and reused,
  a fresh buffer on g per peer).
"""

from __future__ import annotations

import collections
import contextlib
import enum
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import attrs

from gpubw.measure.initiators import Initiator, SplitWarpCopy
from gpubw.measure.measurement import CellMeasurement, Copy, Kind, MemcpyOperation, Prefer
from gpubw.memory.buffers import DeviceBuffer, HostBuffer
from gpubw.model.errors import UsageError
from gpubw.model.options import MIB
from gpubw.model.results import (
    AXIS_GPU,
    AXIS_HOST,
    AXIS_PEERS,
    BANDWIDTH,
    BOTH_WAYS,
    COLUMN_TO_ROW,
    ROW_TO_COLUMN,
    Axes,
    Matrix,
)
from gpubw.model.sizes import format_size
from gpubw.testcases.base import Testcase

T = TypeVar("T")

Grid = list[list[CellMeasurement | None]]


@attrs.frozen
class Plan:
    """What a shape is given to build a testcase's matrices: the testcase, its run()'s
    ``size`` and ``loops``, the ``initiator`` that copies and the matrix ``header``
    (nvbandwidth's text; the bidirectional shapes' has a ``{}`` for their word). ``notes``
    go on every matrix built from it (a sampled grid's note)."""

    testcase: Testcase
    size: int
    loops: int
    initiator: Initiator
    header: str
    notes: tuple[tuple[str, Any], ...] = ()

    def operation(self, kind: Kind, prefer: Prefer = Prefer.SRC) -> MemcpyOperation:
        """The timing protocol for this plan's cells: ``kind`` of figure, ``prefer``'s issuer."""
        system = self.testcase.system
        return MemcpyOperation(system, self.initiator, prefer=prefer, kind=kind, loops=self.loops)

    def copy_text(self, counted: int | None) -> str:
        """What one copy moves and how often (:func:`copy_text`)."""
        return copy_text(self.initiator, self.size, counted, self.loops)


class PeerTestcase(Testcase):
    """Base of the testcases that need peer access (nvbandwidth's filter P): waived unless at
    least one ordered pair of distinct devices has peer access."""

    def filter(self) -> bool:
        return self.needs_peers()


class Cell:
    """The buffers of one matrix cell: allocated on demand, all freed when the cell is done
    (also on error), since each one is registered with the cell's exit stack."""

    def __init__(self, testcase: Testcase, size: int, stack: contextlib.ExitStack) -> None:
        self.system = testcase.system
        self.size = size
        self._stack = stack

    def host(self, near_device: int, nbytes: int | None = None) -> HostBuffer:
        """Pinned host memory near ``near_device`` (nvbandwidth's H(g)), ``size`` by default."""
        buf = HostBuffer.allocate(self.system, near_device, nbytes or self.size)
        self._stack.callback(buf.close)
        return buf

    def device(self, device: int, nbytes: int | None = None) -> DeviceBuffer:
        """Memory on ``device`` (nvbandwidth's D(g)), ``size`` by default."""
        buf = DeviceBuffer.allocate(self.system, device, nbytes or self.size)
        self._stack.callback(buf.close)
        return buf

    def twin(self, buf: DeviceBuffer) -> DeviceBuffer:
        """Another buffer like ``buf``: same device, same size."""
        assert buf.device is not None
        return self.device(buf.device, buf.nbytes)


# -- the measured cells -------------------------------------------------------------------


def _measure_row(
    plan: Plan, op: MemcpyOperation, flow: Callable[[Cell, int], Sequence[Copy] | None]
) -> tuple[list[CellMeasurement | None], list[int | None]]:
    """The cells of a 1 x N row, and the NUMA node of each cell's measured host buffer
    (None: no host buffer, not measured, or unknown)."""
    testcase = plan.testcase
    row: list[CellMeasurement | None] = []
    nodes: list[int | None] = []
    for g in range(testcase.device_count):
        nodes.append(None)
        if not testcase.selected(g):
            row.append(None)
            continue
        with contextlib.ExitStack() as stack:
            copies = flow(Cell(plan.testcase, plan.size, stack), g)
            row.append(op.measure(copies) if copies else None)
            host = [b for b in (copies[0].src, copies[0].dst) if b.is_host] if copies else []
            if host:
                nodes[-1] = testcase.system.pool.numa_node(host[0])
    return row, nodes


def _measure_grid(
    plan: Plan,
    op: MemcpyOperation,
    flow: Callable[[Cell, DeviceBuffer, DeviceBuffer], Sequence[Copy]],
) -> Grid:
    """Every ordered pair (r, c), r != c: D(r) and D(c) are allocated, peer access is probed
    r -> c and enabled both ways (nvbandwidth's order); an inaccessible pair stays None."""
    testcase = plan.testcase
    n = testcase.device_count
    grid: Grid = [[None] * n for _ in range(n)]
    cells, _ = sampled_cells(testcase, n)
    for r, c in cells:
        with contextlib.ExitStack() as stack:
            cell = Cell(testcase, plan.size, stack)
            row_buf, col_buf = cell.device(r), cell.device(c)
            if row_buf.enable_peer_access(col_buf):
                grid[r][c] = op.measure(flow(cell, row_buf, col_buf))
    return grid


def sampled_cells(
    testcase: Testcase, n: int, groups: Sequence[int] | None = None
) -> tuple[list[tuple[int, int]], tuple[tuple[str, Any], ...]]:
    """The off-diagonal cells of an n x n testcase to measure, in row-major order, and the
    matrix notes that say so: every cell whose row and column are selected
    (:meth:`Testcase.selected`: ``--devices``) and, with ``groups`` (a group per row: the
    NVLink domains of a multinode run), in one group; no notes; with ``--sample-pairs`` the
    deterministic sample of :func:`gpubw.measure.sampling.sample_pairs` (same on every rank and
    every run for one seed, within the groups) and a ``sampled`` note ``{cells, measured,
    seed}`` (the rest stay None)."""
    options = testcase.system.options
    k, seed = getattr(options, "sample_pairs", None), getattr(options, "seed", 0)
    rows = [r for r in range(n) if testcase.selected(r)]
    cells, total = chosen_cells(n, k, seed, rows, groups)
    return list(cells), (() if total is None else sampled_note(total, len(cells), seed))


def chosen_cells(
    n: int, k: int | float | None, seed: int, rows: Sequence[int], groups: Sequence[int] | None
) -> tuple[tuple[tuple[int, int], ...], int | None]:
    """:func:`sampled_cells` from its inputs alone (``k``: ``--sample-pairs``, ``rows``: the
    selected rows): the cells, row-major, and (with ``k``) how many a full run measures."""
    if k is None or n < 2:
        ok = (lambda r, c: r != c) if groups is None else (lambda r, c: groups[r] == groups[c])
        return tuple((r, c) for r in rows for c in rows if r != c and ok(r, c)), None
    from gpubw.measure.sampling import sample_pairs

    chosen = drawn(k, lambda: sample_pairs(n, k, seed, groups=groups))
    # the sample's cells of selected rows and columns, row-major (not every cell: a rank of
    # a rack makes this list, and every simulated rank of one, so it costs O(K log K))
    picked = set(rows)
    cells = sorted(
        (r, c)
        for r, c in chosen
        if r != c and r in picked and c in picked and (groups is None or groups[r] == groups[c])
    )
    return tuple(cells), within_groups(rows, groups)


def drawn(k: int | float, draw: Callable[[], T]) -> T:
    """``draw()``, a sample of ``--sample-pairs k``; its ValueError (a size this run cannot
    use) as the usage error that names the option."""
    try:
        return draw()
    except ValueError as exc:
        raise UsageError(f"--sample-pairs {k}: {exc}", param="sample_pairs") from None


def sampled_note(cells: int, measured: int, seed: int) -> tuple[tuple[str, Any], ...]:
    """The ``sampled`` matrix note: of ``cells`` that a full run measures, ``measured``."""
    return (("sampled", {"cells": cells, "measured": measured, "seed": seed}),)


def within_groups(rows: Sequence[int], groups: Sequence[int] | None) -> int:
    """The off-diagonal cells among ``rows`` whose row and column share a group (every one
    without groups): sum over groups of m (m - 1), in O(len(rows))."""
    sizes = collections.Counter(None if groups is None else groups[r] for r in rows)
    return sum(m * (m - 1) for m in sizes.values())


# -- words for Matrix.bytes_counted ---------------------------------------------------------


def copy_text(initiator: Initiator, size: int, counted: int | None, loops: int) -> str:
    """What one copy moves and how often, e.g. ``512 MiB per copy x 16 copies per sample``."""
    if initiator.name == "CE":
        repeat = f"{loops} copies per sample"
    else:
        repeat = f"{loops} loops of one kernel per sample"
    if counted is None:
        return (
            f"{format_size(size)} buffers, the counted bytes per copy varying with the executing "
            f"device's SM count, x {repeat}"
        )
    if isinstance(initiator, SplitWarpCopy):
        return (
            f"{format_size(counted)} per kernel pass x {repeat}: one split-warp kernel moves half "
            f"of the {format_size(size)} buffers each way, and nvbandwidth reports bytes/time "
            "halved"
        )
    if initiator.name == "SM":
        rule = "whole 16-byte elements"
        if size >= 64 * MIB:
            rule += ", a multiple of 16 x SMs x 512 bytes"
        return (
            f"{format_size(counted)} per copy x {repeat}; the {format_size(size)} buffer is "
            f"truncated by nvbandwidth's SM rule to {rule}"
        )
    return f"{format_size(counted)} per copy x {repeat}"


def _unique(values: Sequence[int]) -> int | None:
    distinct = set(values)
    return distinct.pop() if len(distinct) == 1 else None


def counted_bytes_of(cells: Sequence[CellMeasurement | None], pair: int | None) -> int | None:
    """The bytes per copy behind the figures: pair ``pair`` (None: every pair), if it is the
    same in every cell."""
    found = [
        b
        for m in cells
        if m is not None
        for b in (m.counted_bytes if pair is None else m.counted_bytes[pair : pair + 1])
    ]
    return _unique(found) if found else None


# -- building matrices ----------------------------------------------------------------------


def labels(n: int) -> tuple[str, ...]:
    """nvbandwidth's row/column labels: the device indexes "0" .. "n-1"."""
    return tuple(str(i) for i in range(n))


def bandwidth_matrix(
    plan: Plan,
    kind: Kind,
    grid: Grid,
    bytes_counted: str,
    *,
    axes: Axes,
    pair: int = 0,
    key: str | None = None,
) -> Matrix:
    """A bandwidth matrix (bytes/s) from measured cells: FIRST/TOTAL/SUM take the cell's value
    of that kind; VECTOR takes pair ``pair``'s. ``axes``: what its rows and columns are;
    ``key``: the testcase's by default; the description is the plan's header."""

    def value(m: CellMeasurement | None) -> float | None:
        if m is None:
            return None
        return m.pair_value(pair) if kind is Kind.VECTOR else m.value(kind)

    def samples(m: CellMeasurement | None) -> tuple[float, ...] | None:
        return None if m is None else m.samples(kind, pair)

    cells = [m for row in grid for m in row]
    counted_pair = None if kind in (Kind.TOTAL, Kind.SUM) else pair
    return Matrix(
        key=plan.testcase.key if key is None else key,
        description=plan.header,
        unit=BANDWIDTH,
        row_labels=labels(len(grid)),
        column_labels=labels(len(grid[0]) if grid else 0),
        values=[[value(m) for m in row] for row in grid],
        samples=[[samples(m) for m in row] for row in grid],
        bytes_counted=bytes_counted,
        statistic=plan.testcase.system.options.statistic,
        initiator=plan.initiator.name,
        bandwidth_kind=kind.value,
        bytes_per_copy=counted_bytes_of(cells, counted_pair),
        notes=plan.notes,
        axes=axes,
    )


# -- 1 x N ------------------------------------------------------------------------------------


def one_by_n(
    plan: Plan,
    flow: Callable[[Cell, int], Sequence[Copy] | None],
    *,
    axes: Axes,
    prefer: Prefer = Prefer.SRC,
    interference: str = "",
) -> list[Matrix]:
    """One row (``axes.rows``: the host, or none); column g measures ``flow(cell, g)`` (its
    first copy is reported, the others are interference described by ``interference``); None
    or [] from the flow gives N/A."""
    row, nodes = _measure_row(plan, plan.operation(Kind.FIRST, prefer), flow)
    grid = [row]
    copy = plan.copy_text(counted_bytes_of(grid[0], 0))
    if interference:
        counted = f"bytes of the measured copy ({copy}), counted once; {interference}"
    else:
        counted = f"bytes of the copy ({copy}), counted once"
    # where each column's measured host buffer lives (the host testcases; --host-numa)
    if any(n is not None for n in nodes):
        plan = attrs.evolve(plan, notes=(*plan.notes, ("host_numa_nodes", tuple(nodes))))
    return [bandwidth_matrix(plan, Kind.FIRST, grid, counted, axes=axes)]


class Direction(enum.Enum):
    """A copy between device g and its pinned host buffer H(g)."""

    H2D = "host to device"
    D2H = "device to host"

    def copy(self, cell: Cell, g: int, nbytes: int | None = None) -> Copy:
        host, device = cell.host(g, nbytes), cell.device(g, nbytes)
        return Copy(host, device) if self is Direction.H2D else Copy(device, host)


H2D = Direction.H2D
D2H = Direction.D2H


def host_traffic(
    plan: Plan,
    measured: Direction,
    *,
    direction: str,
    same_device: Sequence[Direction] = (),
    other_devices: Sequence[Direction] = (),
    interference_size: int | None = None,
) -> list[Matrix]:
    """Column g: the ``measured`` copy between H(g) and D(g) (size bytes), run at the same time
    as the ``same_device`` copies on g and the ``other_devices`` copies on every other device
    j (between H(j) and D(j)), all of ``interference_size`` bytes (nvbandwidth uses 2 x size
    in its CE host tests so that the interference outlasts the measured copy). ``direction``:
    the header's arrow between the host (row) and the GPUs (columns)."""
    testcase, size = plan.testcase, plan.size
    extra = interference_size or size

    def flow(cell: Cell, g: int) -> list[Copy]:
        copies = [measured.copy(cell, g)]
        copies += [d.copy(cell, g, extra) for d in same_device]
        for j in range(testcase.device_count):
            if j != g and testcase.selected(j):  # interference on the selected GPUs only
                copies += [d.copy(cell, j, extra) for d in other_devices]
        return copies

    parts = []
    if same_device:
        parts.append(" and ".join(d.value for d in same_device) + " on the same device")
    if other_devices and testcase.device_count > 1:
        parts.append(" and ".join(d.value for d in other_devices) + " on every other device")
    interference = ""
    if parts:
        twice = ", twice the measured size" if extra == 2 * size else ""
        interference = (
            f"the simultaneous interference copies ({'; '.join(parts)}; "
            f"{format_size(extra)} each{twice}) not counted"
        )
    axes = Axes(AXIS_HOST, AXIS_GPU, direction)
    return one_by_n(plan, flow, axes=axes, interference=interference)


# -- N x N ------------------------------------------------------------------------------------


def n_by_n(
    plan: Plan,
    flow: Callable[[Cell, DeviceBuffer, DeviceBuffer], Sequence[Copy]],
    *,
    direction: str,
    prefer: Prefer = Prefer.SRC,
) -> list[Matrix]:
    """Row r, column c: ``flow(cell, D(r), D(c))``'s first copy; N/A on the diagonal and where
    r cannot access c. ``direction``: the header's arrow between the row and column GPU."""
    grid = _measure_grid(plan, plan.operation(Kind.FIRST, prefer), flow)
    notes = sampled_cells(plan.testcase, plan.testcase.device_count)[1]
    axes = Axes(AXIS_GPU, AXIS_GPU, direction)
    return first_copy_matrices(attrs.evolve(plan, notes=notes), grid, axes=axes)


def first_copy_matrices(plan: Plan, grid: Grid, *, axes: Axes) -> list[Matrix]:
    """The one FIRST matrix of an N x N testcase whose cells each measured one copy (also
    across ranks: :func:`gpubw.testcases.multinode_shapes.n_by_n`)."""
    copy = plan.copy_text(counted_bytes_of([m for row in grid for m in row], 0))
    counted = f"bytes of the copy ({copy}), counted once"
    return [bandwidth_matrix(plan, Kind.FIRST, grid, counted, axes=axes)]


def bidirectional(plan: Plan, word: str, *, prefer: Prefer) -> list[Matrix]:
    """Row r, column c: two copies at once, c1 -> r1 and r2 -> c2 (r1, r2 on r; c1, c2 on c; all
    ``size`` bytes), each issued per ``prefer``. Three matrices: copy 1, copy 2 and their
    total; ``header`` has a ``{}`` for ``<word>1``, ``<word>2``, ``Total`` and the keys end in
    ``_<word>1``, ``_<word>2``, ``_total`` (lowercase)."""

    def flow(cell: Cell, r1: DeviceBuffer, c1: DeviceBuffer) -> list[Copy]:
        return [Copy(c1, r1), Copy(cell.twin(r1), cell.twin(c1))]

    grid = _measure_grid(plan, plan.operation(Kind.VECTOR, prefer), flow)
    row_issues = prefer is Prefer.DST  # copy 1 goes into the row device
    what = (
        f"copy 1 (column device -> row device, issued by the {'row' if row_issues else 'column'} "
        "device)",
        f"copy 2 (row device -> column device, issued by the {'column' if row_issues else 'row'} "
        "device)",
    )
    notes = sampled_cells(plan.testcase, plan.testcase.device_count)[1]
    axes = Axes(AXIS_GPU, AXIS_GPU, BOTH_WAYS)
    return bidirectional_matrices(attrs.evolve(plan, notes=notes), word, grid, what, axes=axes)


def bidirectional_matrices(
    plan: Plan,
    word: str,
    grid: Grid,
    what: tuple[str, str],
    *,
    axes: Axes,
    key_word: str | None = None,
) -> list[Matrix]:
    """The three matrices of a bidirectional N x N grid (VECTOR cells of two copies):
    ``<word>1``, ``<word>2`` and ``Total`` in ``header``'s ``{}``; the keys end in
    ``_<key_word>1``, ``_<key_word>2`` (``key_word`` defaults to ``word``) and ``_total``.
    ``what`` describes copy 1 and copy 2."""
    testcase, header = plan.testcase, plan.header
    cells = [m for row in grid for m in row]
    names = (f"{word}1", f"{word}2")
    key_names = (f"{key_word or word}1", f"{key_word or word}2")
    matrices = []
    for i in (0, 1):
        copy = plan.copy_text(counted_bytes_of(cells, i))
        counted = (
            f"bytes of {what[i]}: {copy}, counted once; "
            f"the simultaneous reverse copy is reported in {names[1 - i]}"
        )
        matrices.append(
            bandwidth_matrix(
                attrs.evolve(plan, header=header.format(names[i])),
                Kind.VECTOR,
                grid,
                counted,
                axes=axes,
                pair=i,
                key=f"{testcase.key}_{key_names[i].lower()}",
            )
        )
    matrices.append(_total_matrix(plan, grid, matrices, names))
    return matrices


def _total_matrix(plan: Plan, grid: Grid, pair: Sequence[Matrix], names: tuple[str, str]) -> Matrix:
    """The ``_total`` matrix of a bidirectional grid: per cell (and per sample) the sum of
    the two simultaneous copies' figures in ``pair`` (named ``names``)."""
    first, second = pair
    statistic = plan.testcase.system.options.statistic
    total_values = [
        [None if a is None or b is None else a + b for a, b in zip(ra, rb)]
        for ra, rb in zip(first.values, second.values)
    ]
    total_samples = [
        [None if m is None else tuple(x + y for x, y in zip(*m.pair_samples[:2])) for m in row]
        for row in grid
    ]
    return Matrix(
        key=f"{plan.testcase.key}_total",
        description=plan.header.format("Total"),
        unit=BANDWIDTH,
        row_labels=first.row_labels,
        column_labels=first.column_labels,
        values=total_values,
        samples=total_samples,
        bytes_counted=(
            f"{names[0]} + {names[1]}: the sum of the two simultaneous copies' "
            f"{statistic}s (the samples are per-sample sums)"
        ),
        statistic=statistic,
        initiator=plan.initiator.name,
        bandwidth_kind=Kind.VECTOR.value,
        bytes_per_copy=counted_bytes_of([m for row in grid for m in row], None),
        notes=plan.notes,
        axes=first.axes,
    )


# -- all to one, one to all -------------------------------------------------------------------


def _fan(plan: Plan, *, into: bool, prefer: Prefer) -> list[Matrix]:
    """Column g: at once, one copy per peer j that g can access, between the shared D(j) and a
    fresh D'(g): D(j) -> D'(g) if ``into`` else D'(g) -> D(j). TOTAL kind. The one row is
    g's peers; the arrow is nvbandwidth's (``<-`` into g, ``->`` out of it)."""
    testcase, size = plan.testcase, plan.size
    n = testcase.device_count
    op = plan.operation(Kind.TOTAL, prefer)
    row: list[CellMeasurement | None] = []
    with contextlib.ExitStack() as run_stack:
        shared = Cell(testcase, size, run_stack)
        peers = [shared.device(j) if testcase.selected(j) else None for j in range(n)]
        for g in range(n):
            if not testcase.selected(g):
                row.append(None)
                continue
            with contextlib.ExitStack() as stack:
                cell = Cell(testcase, size, stack)
                copies = []
                for j in range(n):
                    if j == g or not testcase.selected(j):  # peers among the selected GPUs
                        continue
                    theirs = peers[j]
                    assert theirs is not None
                    mine = cell.device(g)
                    if mine.enable_peer_access(theirs):
                        copies.append(Copy(theirs, mine) if into else Copy(mine, theirs))
                row.append(op.measure(copies) if copies else None)
    grid = [row]
    copy = plan.copy_text(counted_bytes_of(row, None))
    direction = "into" if into else "out of"
    counted = (
        f"bytes of every simultaneous copy {direction} the device, one per accessible peer "
        f"({copy}), over the time from the first copy's start to the last copy's end"
    )
    axes = Axes(AXIS_PEERS, AXIS_GPU, COLUMN_TO_ROW if into else ROW_TO_COLUMN)
    return [bandwidth_matrix(plan, Kind.TOTAL, grid, counted, axes=axes)]


def all_to_one(plan: Plan, *, read: bool, prefer: Prefer) -> list[Matrix]:
    """Column g: every accessible peer j at once; write: D(j) -> D'(g) (data enters g), read:
    D'(g) -> D(j) (data leaves g). ``prefer`` picks which side issues each copy."""
    return _fan(plan, into=not read, prefer=prefer)


def one_to_all(plan: Plan, *, read: bool, prefer: Prefer) -> list[Matrix]:
    """Column g: every accessible peer j at once; write: D'(g) -> D(j) (data leaves g), read:
    D(j) -> D'(g) (data enters g). ``prefer`` picks which side issues each copy."""
    return _fan(plan, into=read, prefer=prefer)


__all__ = [
    "D2H",
    "H2D",
    "Cell",
    "Direction",
    "PeerTestcase",
    "Plan",
    "all_to_one",
    "bandwidth_matrix",
    "bidirectional",
    "bidirectional_matrices",
    "chosen_cells",
    "copy_text",
    "drawn",
    "host_traffic",
    "labels",
    "n_by_n",
    "one_by_n",
    "one_to_all",
    "sampled_cells",
    "sampled_note",
]
