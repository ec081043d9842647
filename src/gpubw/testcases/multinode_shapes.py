"""The shapes of nvbandwidth's multinode testcases (#44-#56), written once.

N is the world size and "GPU g" is rank g's device. Every rank runs the same shape: buffers
shared by a rank with all (U(o), MC(o)) are made and freed collectively, in the same order on
every rank; a local buffer L(o) exists only on o. Every rank hands
:func:`~gpubw.measure.series.measure_series` the global pair list of
each cell (a pair's copy only on its exec rank): the ranks of a cell agree among themselves,
and every rank ends with every cell (an N x N testcase's cells in one series: a cell costs
its own ranks' agreements, not the world's). gpubw allocates each rank's U once per testcase
(at the testcase's size) and reuses it across cells where nvbandwidth re-allocates per cell:
the same copies, far fewer collective allocations; a rank maps only the U of the ranks it
shares a cell with. Only rank 0 builds the matrices (the others return a stand-in).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import attrs

from gpubw.measure.measurement import (
    CellMeasurement,
    Copy,
    Kind,
    MemcpyOperation,
    Prefer,
)
from gpubw.measure.rank_gate import RankGate
from gpubw.measure.series import RankCopy, measure_series
from gpubw.memory.buffers import Buffer, DeviceBuffer
from gpubw.memory.multicast import MulticastBuffer
from gpubw.memory.shared import SharedBuffer
from gpubw.model.results import (
    AXIS_NONE,
    AXIS_RANK,
    BOTH_WAYS,
    ROW_TO_COLUMN,
    Axes,
    Matrix,
)
from gpubw.testcases.base import Testcase
from gpubw.testcases.multinode_plan import (
    DomainFacts,
    GridPlan,
    Issuers,
    bisect_plan,
    both_issue,
    column_sample,
    domain_facts,
    fan_column,
    grid_plan,
    row_issues,
    selected_domains,
)
from gpubw.testcases.shapes import (
    Grid,
    Plan,
    bandwidth_matrix,
    bidirectional_matrices,
    counted_bytes_of,
    first_copy_matrices,
    sampled_note,
)

#: the reason every multinode testcase is waived in a run of one rank
ONE_RANK = "needs an MPI run of 2 or more ranks (world size is 1)"
#: why the cells that pair GPUs of different NVLink domains are None (the domains note)
ACROSS = "not measured: NVLink and fabric handles reach only within an NVLink domain"
#: the axes of a 1 x N figure per rank (the one row names no end: its figure is the column
#: rank's, into, out of or multicast from its GPU), and of figures of the whole world at once
PER_RANK = Axes(AXIS_NONE, AXIS_RANK, ROW_TO_COLUMN)
WHOLE_WORLD = Axes(AXIS_NONE, AXIS_NONE, ROW_TO_COLUMN)


#: the note of the stand-in matrices of a rank other than 0: the rank that reports them
FIGURES_NOTE = "figures_on_rank"


def stand_in(plan: Plan, kind: Kind, axes: Axes) -> list[Matrix]:
    """The matrix a rank other than 0 returns in place of the figures only rank 0 reports:
    one N/A cell and the :data:`FIGURES_NOTE` (building every rank's N-cell row or column,
    O(N) a rank, is O(N^2) for a simulated rack's ranks in one process)."""
    plan = attrs.evolve(plan, notes=(*plan.notes, (FIGURES_NOTE, 0)))
    return [bandwidth_matrix(plan, kind, [[None]], "not reported on this rank", axes=axes)]


class MultinodeTestcase(Testcase):
    """Base of the multinode testcases: waived unless the world has 2 or more ranks; with
    ``multicast`` also unless every rank's devices allow NVLink multicast (agreed by all
    ranks, so all waive together, with the failing rank's reason)."""

    multicast = False
    #: the ranks whose GPU is selected (--devices); None: every rank (see gather_selection)
    _ranks: frozenset[int] | None = None
    #: each rank's NVLink domain, by rank (see gather_selection)
    _domains: tuple[str, ...] = ()
    #: the facts of the ranks' NVLink domains, shared by a process's ranks (gather_selection)
    _facts: DomainFacts | None = None

    @property
    def world(self) -> Any:
        return self.system.world

    def gather_selection(self) -> None:
        """Collective, at the top of every shape: which ranks' GPUs ``--devices`` selects,
        and each rank's NVLink domain (gathered once per run by the run's sharing). A rank
        whose GPU is not selected still joins every collective step (the world stays whole)
        but issues no copy, and the cells of its row and column are None; so are the cells
        of two ranks in different domains (NVLink and fabric handles reach only within a
        domain)."""
        self._domains = self.system.sharing.rank_domains()
        self._facts = domain_facts(self._domains)  # computed once per process, not per rank
        if self.system.selection is None:
            self._ranks = None
            return
        mine = self.system.selected(self.system.rank_device)
        self._ranks = frozenset(r for r, ok in enumerate(self.world.allgather(mine)) if ok)

    @property
    def domains(self) -> tuple[str, ...]:
        """Each rank's NVLink domain, by rank (after gather_selection)."""
        return self._domains

    @property
    def selection(self) -> frozenset[int] | None:
        """The ranks whose GPU is measured; None: every rank (after gather_selection)."""
        return self._ranks

    def selected(self, index: int) -> bool:
        """Whether rank ``index``'s GPU is measured (the rows and columns of a multinode
        matrix are ranks)."""
        return self._ranks is None or index in self._ranks

    def domain_groups(self) -> tuple[int, ...] | None:
        """Each rank's NVLink domain as an index (in order of first appearance), or None
        where every rank is in one domain (after :meth:`gather_selection`)."""
        return None if self._facts is None else self._facts.groups

    def members(self, rank: int) -> Sequence[int]:
        """The ranks of rank ``rank``'s NVLink domain, ascending (made once per process:
        every rank asks for every column's, O(N) each)."""
        if self._facts is None:
            return range(self.world.size)
        return self._facts.members[self._domains[rank]]

    def grid_plan(self, n: int, issuers: Issuers) -> GridPlan:
        """The plan of this N x N testcase's cells, shared by a process's ranks (after
        :meth:`gather_selection`)."""
        options = self.system.options
        k, seed = getattr(options, "sample_pairs", None), getattr(options, "seed", 0)
        rows = None if self._ranks is None else tuple(sorted(self._ranks))  # hashable
        return grid_plan(n, k, seed, rows, self.domain_groups(), issuers)

    def domain_notes(self, across: int) -> tuple[tuple[str, Any], ...]:
        """The ``nvlink_domains`` note of a matrix of a run whose selected ranks span several
        NVLink domains: ``{domains, names, across, reason}``, ``across`` the cells not
        measured because they pair GPUs of different domains; none for one domain."""
        names = list(selected_domains(self._domains, self._ranks))
        if len(names) < 2:
            return ()
        note = {"domains": len(names), "names": names, "across": across, "reason": ACROSS}
        return (("nvlink_domains", note),)

    def filter(self) -> bool:
        world = self.world
        if world.size < 2:
            return self.waive(ONE_RANK)
        if not self.multicast:
            return True
        ok = self.needs_multicast()
        reasons = world.allgather(None if ok else self.waive_reason)
        failed = [(r, m) for r, m in enumerate(reasons) if m is not None]
        if not failed:
            return True
        if len({m for _, m in failed}) == 1 and len(failed) == world.size:
            return self.waive(failed[0][1])  # the same reason everywhere (an env variable)
        rank, message = failed[0]
        more = f" (and {len(failed) - 1} more rank(s))" if len(failed) > 1 else ""
        return self.waive(f"rank {rank}: {message}{more}")


class Shared:
    """The buffers of one testcase run across ranks, each freed (collectively, in reverse
    order of creation, on every rank alike) when the stack closes."""

    def __init__(self, testcase: MultinodeTestcase, stack: contextlib.ExitStack) -> None:
        self.system = testcase.system
        self.world = testcase.world
        self._stack = stack

    def unicast_used(
        self, nbytes: int, uses: Sequence[Collection[int]]
    ) -> list[dict[int, SharedBuffer]]:
        """One set of U(0), ..., U(N-1) (every rank's device memory) per entry of ``uses``,
        made in two collectives and freed in two whatever N and the sets; in set k a rank
        maps only its own and those of the owners of ``uses[k]`` (its copies' peers, within
        its NVLink domain): {owner: U(owner)} of those."""
        sets = SharedBuffer.map_all(self.system, nbytes, uses)
        self._stack.callback(SharedBuffer.destroy_all, [b for s in sets for b in s.values()])
        return sets

    def unicast(self, owner: int, nbytes: int) -> Any:
        """U(owner): device memory of ``owner`` mapped by every rank (collective)."""
        buf = SharedBuffer.create(self.system, owner, nbytes)
        self._stack.callback(buf.close)
        return buf

    def multicast(self, owner: int, nbytes: int) -> Any:
        """MC(owner): a multicast object of every rank's device (collective)."""
        buf = MulticastBuffer.create(self.system, owner, nbytes)
        self._stack.callback(buf.close)
        return buf

    def multicast_all(self, owners: Sequence[int], nbytes: int) -> list[Any]:
        """MC(g) of every g of ``owners`` at once, made and freed in three and two
        collectives whatever their number."""
        bufs = MulticastBuffer.create_all(self.system, owners, nbytes)
        self._stack.callback(MulticastBuffer.destroy_all, bufs)
        return bufs

    def local(self, owner: int, nbytes: int) -> DeviceBuffer | None:
        """L(owner): plain memory on the owner's device, made only on the owner."""
        if self.world.rank != owner:
            return None
        buf = DeviceBuffer.allocate(self.system, self.system.rank_device, nbytes)
        self._stack.callback(buf.close)
        return buf

    def gate(self) -> RankGate:
        """The device flag of the cross-rank spin gate (collective)."""
        return self._stack.enter_context(RankGate.create(self.system))


class Part(Buffer):
    """``nbytes`` of a shared buffer from ``offset`` on: one of the fresh per-peer buffers
    U_j(g) of the all-to-one/one-from-all testcases, which gpubw carves out of one shared
    allocation per column (one collective allocation instead of N - 1; the same device
    memory, the same copies). Freed with the whole (collectively), never on its own."""

    def __init__(self, whole: Any, offset: int, nbytes: int) -> None:
        super().__init__(whole.pool, whole.ptr + offset, nbytes, whole.device)
        self.whole = whole

    @property
    def context_device(self) -> int | None:
        device: int | None = self.whole.context_device
        return device

    @property
    def label(self) -> str:
        return str(self.whole.label)

    def close(self) -> None:
        """Nothing: the whole shared buffer is freed collectively."""

    def free(self) -> None:
        """Nothing: the whole shared buffer is freed collectively."""


#: alignment of the parts of a shared buffer (copy kernels load 16-byte vectors)
PART_ALIGN = 4096


#: the pairs issued by another rank, by that rank: the same (immutable) one for every cell
#: of a 1 x N or all-at-once testcase (every rank lists every pair of a column)
_ELSEWHERE: dict[int, RankCopy] = {}


def reported(
    op: MemcpyOperation, pairs: Sequence[RankCopy], gate: RankGate, reports: bool
) -> CellMeasurement | None:
    """One cell across ranks (:func:`~gpubw.measure.series.measure_ranks`), its figures only
    on the rank that ``reports`` them (None on the others, once it ended as on every rank)."""
    cells = measure_series(op, [pairs], gate, keep=reports)
    return cells[0] if cells else None


def pair(world: Any, rank: int, src: Any, dst: Any) -> RankCopy:
    """A pair issued by ``rank``: its buffers only where they are used."""
    if world.rank != rank:
        return _ELSEWHERE.get(rank) or _ELSEWHERE.setdefault(rank, RankCopy(rank, None))
    assert src is not None and dst is not None, "the exec rank holds both buffers"
    return RankCopy(rank, Copy(src, dst))


# -- N x N ------------------------------------------------------------------------------------
#: a cell's pairs from (world, r, c, buffer sets U[k]: {owner: U(owner)} of the buffers this
#: rank maps)
GridFlow = Callable[[Any, int, int, Sequence[Mapping[int, Any]]], list[RankCopy]]


def _multinode(plan: Plan) -> MultinodeTestcase:
    """The plan's testcase, a multinode one (every shape here is given one)."""
    testcase = plan.testcase
    assert isinstance(testcase, MultinodeTestcase), testcase
    return testcase


def _grid(
    plan: Plan, op: MemcpyOperation, flow: GridFlow, sets: int, issuers: Issuers
) -> tuple[Grid, tuple[tuple[str, Any], ...]]:
    """The cells of an N x N testcase (``flow``'s pairs, issued by ``issuers``), each
    measured by its ranks, and the matrices' notes; every rank but 0 ends with a stand-in.
    A rank builds the pairs of the cells it issues a copy of only: the others' it takes from
    the plan its process's ranks share (:mod:`gpubw.testcases.multinode_plan`)."""
    testcase, size = _multinode(plan), plan.size
    world = testcase.world
    n = world.size
    testcase.gather_selection()
    layout = testcase.grid_plan(n, issuers)
    seed = getattr(testcase.system.options, "seed", 0)
    notes = () if layout.total is None else sampled_note(layout.total, len(layout.cells), seed)
    notes += testcase.domain_notes(layout.across)
    me = world.rank
    with contextlib.ExitStack() as stack:
        shared = Shared(testcase, stack)
        gate = shared.gate()
        buffers = shared.unicast_used(size, [layout.peers(me)] * sets)
        flows: list[Sequence[RankCopy]] = list(layout.elsewhere)
        for k in layout.own(me):
            r, c = layout.cells[k]
            flows[k] = flow(world, r, c, buffers)
        reports = me == 0
        measured = (
            measure_series(op, flows, gate, keep=reports, layout=layout.series) if flows else []
        )
    if not reports:
        # Only rank 0 reports the figures. The others stand in with one N/A cell rather
        # than each building every cell and the N x N matrices: O(N^2) a rank, O(N^3) for
        # a simulated rack's ranks in one process.
        return [[None]], (*notes, (FIGURES_NOTE, 0))
    grid: Grid = [[None] * n for _ in range(n)]
    for (r, c), cell in zip(layout.cells, measured):
        grid[r][c] = cell
    return grid, notes


def read(world: Any, r: int, c: int, u: Sequence[Mapping[int, Any]]) -> list[RankCopy]:
    """U(c) -> U(r), issued by r."""
    return [pair(world, r, u[0].get(c), u[0].get(r))]


def write(world: Any, r: int, c: int, u: Sequence[Mapping[int, Any]]) -> list[RankCopy]:
    """U(r) -> U(c), issued by r."""
    return [pair(world, r, u[0].get(r), u[0].get(c))]


def n_by_n(
    plan: Plan,
    flow: GridFlow,
    *,
    prefer: Prefer,
    direction: str,
) -> list[Matrix]:
    """Row r, column c: ``flow``'s one copy between r's and c's shared buffers (FIRST);
    ``direction``: the header's arrow between the row and the column rank."""
    grid, notes = _grid(plan, plan.operation(Kind.FIRST, prefer), flow, 1, row_issues)
    axes = Axes(AXIS_RANK, AXIS_RANK, direction)
    return first_copy_matrices(attrs.evolve(plan, notes=notes), grid, axes=axes)


def bidirectional(
    plan: Plan, word: str, *, prefer: Prefer, key_word: str | None = None
) -> list[Matrix]:
    """Row r, column c: two copies at once between r and c over two sets of shared buffers:
    read (``prefer`` DST) c1 -> r1 issued by r and r2 -> c2 by c; write (SRC) r1 -> c1 by r
    and c2 -> r2 by c. Three matrices as the single-node tests (``key_word`` names the keys
    where nvbandwidth's header says another word)."""

    def flow(world: Any, r: int, c: int, u: Sequence[Mapping[int, Any]]) -> list[RankCopy]:
        (u1, u2) = u
        if prefer is Prefer.DST:
            return [pair(world, r, u1.get(c), u1.get(r)), pair(world, c, u2.get(r), u2.get(c))]
        return [pair(world, r, u1.get(r), u1.get(c)), pair(world, c, u2.get(c), u2.get(r))]

    grid, notes = _grid(plan, plan.operation(Kind.VECTOR, prefer), flow, 2, both_issue)
    what = (
        "copy 1 (issued by the row rank)",
        "copy 2 (the reverse direction, issued by the column rank)",
    )
    # rank x rank both ways, where nvbandwidth's header says CPU(row)
    axes = Axes(AXIS_RANK, AXIS_RANK, BOTH_WAYS)
    plan = attrs.evolve(plan, notes=notes)
    return bidirectional_matrices(plan, word, grid, what, axes=axes, key_word=key_word)


# -- 1 x N and the all-at-once shapes ----------------------------------------------------------
def fan(plan: Plan, *, into: bool) -> list[Matrix]:
    """Column g: every other rank j at once, between its L(j) and a fresh U_j(g) owned by g,
    issued by j: L(j) -> U_j(g) if ``into`` (data enters g) else U_j(g) -> L(j). SUM. The
    U_j(g) of a column are :class:`Part` s of one shared allocation of g's."""
    testcase, size = _multinode(plan), plan.size
    world = testcase.world
    n = world.size
    testcase.gather_selection()
    columns, notes = sampled_columns(testcase, n)
    op = plan.operation(Kind.SUM, Prefer.SRC)
    reports = world.rank == 0
    row: list[CellMeasurement | None] = []
    with contextlib.ExitStack() as run_stack:
        shared = Shared(testcase, run_stack)
        gate = shared.gate()
        mine = shared.local(world.rank, size)
        stride = -(-size // PART_ALIGN) * PART_ALIGN
        for g in range(n):
            plan_g = None
            if g in columns and testcase.selected(g):  # g's NVLink domain's others
                plan_g = fan_column(tuple(testcase.members(g)), g, testcase.selection)
            if plan_g is None or not plan_g.others:
                row.append(None)
                continue
            with contextlib.ExitStack() as stack:
                whole = Shared(testcase, stack).unicast(g, stride * len(plan_g.others))
                # the column's pairs as the process's ranks share them; this rank's own
                # pair (its part of g's buffer) made here alone
                pairs = list(plan_g.elsewhere)
                if world.rank in plan_g.place:
                    k, i = plan_g.place[world.rank]
                    theirs = Part(whole, i * stride, size)
                    pairs[k] = pair(
                        world, world.rank, *((mine, theirs) if into else (theirs, mine))
                    )
                row.append(reported(op, pairs, gate, reports) if pairs else None)
    if not reports:
        return stand_in(plan, Kind.SUM, PER_RANK)
    direction = "into" if into else "out of"
    text = (
        f"bytes of every simultaneous copy {direction} the column's GPU, one per other rank "
        f"({plan.copy_text(counted_bytes_of(row, None))}), "
        "each rank's figure summed"
    )
    plan = attrs.evolve(plan, notes=(*plan.notes, *notes, *testcase.domain_notes(0)))
    return [bandwidth_matrix(plan, Kind.SUM, [row], text, axes=PER_RANK)]


def sampled_columns(
    testcase: MultinodeTestcase, n: int
) -> tuple[Collection[int], tuple[tuple[str, Any], ...]]:
    """The columns of a 1 x N testcase to measure and the matrix notes that say so: every
    column, no notes; with ``--sample-pairs``, the columns of
    :func:`gpubw.measure.sampling.sample_columns` (within NVLink domains, the same on every
    rank for one seed) and a ``sampled`` note ``{cells, measured, seed}`` counting columns
    (those whose GPU and at least one other of its domain are selected)."""
    options = testcase.system.options
    k = getattr(options, "sample_pairs", None)
    if k is None:
        return range(n), ()
    seed = getattr(options, "seed", 0)
    domains = testcase.domains or ("",) * n
    chosen, eligible, measured = column_sample(n, k, seed, domains, testcase.selection)
    return chosen, sampled_note(eligible, measured, seed)


def broadcast(plan: Plan, *, all_at_once: bool) -> list[Matrix]:
    """L(g) -> MC(g) issued by g: column g alone (1 x N), or every g at once (1 x 1). Copies
    use the size rounded down to whole 4-byte words (spec 3.5). SUM. Column g reaches every
    other GPU of g's NVLink domain: ``--sample-pairs`` samples the columns as
    :func:`fan`'s (:func:`sampled_columns`)."""
    testcase = _multinode(plan)
    world = testcase.world
    n = world.size
    testcase.gather_selection()
    columns, notes = (range(n), ()) if all_at_once else sampled_columns(testcase, n)
    nbytes = plan.size // 4 * 4
    op = plan.operation(Kind.SUM, Prefer.SRC)
    reports = world.rank == 0
    row: list[CellMeasurement | None] = []
    with contextlib.ExitStack() as stack:
        shared = Shared(testcase, stack)
        gate = shared.gate()
        mine = shared.local(world.rank, nbytes)
        chosen = [g for g in range(n) if testcase.selected(g) and g in columns]
        measured = set(chosen)
        groups = [chosen] if all_at_once else [[g] if g in measured else [] for g in range(n)]
        for group in groups:
            if not group:
                row.append(None)
                continue
            with contextlib.ExitStack() as cell_stack:
                cell = Shared(testcase, cell_stack)
                if all_at_once:
                    objects = cell.multicast_all(group, nbytes)
                else:
                    objects = [cell.multicast(g, nbytes) for g in group]
                pairs = [pair(world, g, mine, mc) for g, mc in zip(group, objects)]
                row.append(reported(op, pairs, gate, reports))
    axes = WHOLE_WORLD if all_at_once else PER_RANK
    if not reports:
        return stand_in(plan, Kind.SUM, axes)
    text = (
        "bytes written to the multicast object by each issuing rank "
        f"({attrs.evolve(plan, size=nbytes).copy_text(counted_bytes_of(row, None))}), "
        "counted once, summed over ranks"
    )
    # each multicast object spans its owner's NVLink domain
    plan = attrs.evolve(plan, notes=(*plan.notes, *notes, *testcase.domain_notes(0)))
    return [bandwidth_matrix(plan, Kind.SUM, [row], text, axes=axes)]


def bisect_labels(n: int, partners: Sequence[int] | None = None) -> tuple[str, ...]:
    """nvbandwidth's row labels of the bisect test: ``<i>-><p>``, p = (i + n/2) mod n (or
    ``partners[i]``), each number right-aligned to the digit width of n - 1."""
    w = len(str(n - 1))
    if partners is None:
        partners = [(i + n // 2) % n for i in range(n)]
    return tuple(f"{i:>{w}}->{partners[i]:>{w}}" for i in range(n))


def bisect(plan: Plan) -> list[Matrix]:
    """Every rank i at once receives from its partner p
    (:class:`~gpubw.testcases.multinode_plan.BisectPlan`: (i + N/2) mod N within one NVLink
    domain): S(p) -> D(i), issued by p (a write). Row i (labelled
    ``i->p``, the reverse of the data's direction, as nvbandwidth) holds the copy into i.
    VECTOR, N x 1; a rank alone in its domain has no partner (None)."""
    testcase, size = _multinode(plan), plan.size
    world = testcase.world
    n = world.size
    testcase.gather_selection()
    op = plan.operation(Kind.VECTOR, Prefer.SRC)
    layout = bisect_plan(testcase.domains or ("",) * n, testcase.selection)  # once a process
    partner, rows, me = layout.partners, layout.rows, world.rank
    mine = layout.place.get(me, ())
    m = None
    with contextlib.ExitStack() as stack:
        shared = Shared(testcase, stack)
        gate = shared.gate()
        # a rank copies from its own source into the destinations of the ranks it is the
        # partner of: it maps no other source, and only those destinations
        src, dst = shared.unicast_used(size, [(), {rows[k] for k in mine}])
        if rows:
            pairs = list(layout.elsewhere)  # this rank's own pairs made here alone
            for k in mine:
                pairs[k] = pair(world, me, src.get(me), dst.get(rows[k]))
            m = reported(op, pairs, gate, world.rank == 0)
    if world.rank != 0:
        return stand_in(plan, Kind.VECTOR, WHOLE_WORLD)
    return [_bisect_matrix(plan, testcase, m, rows, partner)]


def _bisect_matrix(
    plan: Plan,
    testcase: MultinodeTestcase,
    m: CellMeasurement | None,
    rows: Sequence[int],
    partner: Sequence[int],
) -> Matrix:
    """The bisect test's N x 1 matrix: row i the copy into i (None where not measured)."""
    n = len(partner)
    grid: Grid = [[m if i in rows else None] for i in range(n)]
    text = (
        f"bytes of the copy into the row's rank "
        f"({plan.copy_text(counted_bytes_of([m], None))}), "
        "counted once; every rank's copy runs at the same time"
    )
    alone = sum(1 for i in range(n) if partner[i] == i and testcase.selected(i))
    plan = attrs.evolve(plan, notes=(*plan.notes, *testcase.domain_notes(alone)))
    # the pair labels (i->p) name both ends themselves: no axis gpubw looks a device up in
    matrix = bandwidth_matrix(plan, Kind.VECTOR, grid, text, axes=WHOLE_WORLD)
    where = {i: k for k, i in enumerate(rows)}
    values = [[None if m is None or i not in where else m.pair_value(where[i])] for i in range(n)]
    samples = [
        [None if m is None or i not in where else m.pair_samples[where[i]]] for i in range(n)
    ]
    return attrs.evolve(
        matrix,
        row_labels=bisect_labels(n, partner),
        column_labels=("0",),
        values=values,
        samples=samples,
    )
