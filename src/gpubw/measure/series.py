"""Cells measured across ranks: the multi-rank series of the one protocol.

Cut from :mod:`gpubw.measure.measurement` along the seam its docstring names: that module
times one cell on one process (the protocol, its steps, a :class:`~gpubw.measure.measurement.
Sync`); this one runs the same protocol on every rank of a world (the multinode testcases),
a cell at a time, with a :class:`RankSync`.

**A cell across ranks**: the ranks that issue a copy of the cell (its *group*,
:func:`cell_ranks`) run the protocol, each for its own pairs; the other ranks take no part
in the cell. A cell issued by **one rank** (every N x N testcase of one copy: read and write)
is that rank's alone: it runs one process's protocol (:class:`~gpubw.measure.measurement.
LocalSync`: its own spin gate, nothing to agree on), the same copies, fills, warm-ups,
events and checks, with no collective at all. A cell of several issuing ranks needs them in
step: :class:`RankSync` is a rank's synchronisation: the spin gate plus a device flag of a
:class:`gpubw.measure.rank_gate.RankGate` (two, used by alternate samples, so that none
needs an agreement on its reset), which carries the first rank's release to the others,
and an agreement point among the cell's group (:func:`gpubw.memory.sharing.agreed`) at the
end of steps 4 and 7, so that an error on one rank is raised on every rank of the cell at
the same point. An error made before the first step (a bad copy, a stream that could not be
made) is agreed at the first step's point; one made after the last (a failed cleanup) is
this rank's, and travels to the next hand-over. Across ranks a cell has no TOTAL figure.

**A series of cells across ranks** (:func:`measure_series`): every rank walks the same list
of cells, each measured by its group only, one after the other:

- between cell k - 1 and cell k the groups of both cells and rank 0 agree (a *hand-over*):
  cell k starts once cell k - 1 has ended, and the first error so far travels on; a rank
  waits at a hand-over for the cells since its last one, each within its bound
  (:func:`cell_bound_s`). Rank 0 takes part in every hand-over, so a rank that dies or hangs
  in a cell is found within that cell's bound;
- after an error no later cell is measured (its ranks skip it);
- after the last cell every rank takes part once: the world gathers every rank's figures and
  errors, and every rank either holds every cell or raises the same
  :class:`~gpubw.memory.sharing.RemoteRankError`.

So a cell costs agreements among its own ranks (none for one issuing rank, two a sample for
more) and one hand-over, not the whole world's: a rack of N ranks pays O(1) per cell, not O(N).
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from gpubw.measure.measurement import (
    CellMeasurement,
    Copy,
    Kind,
    LocalSync,
    MemcpyOperation,
    Sync,
    pair_label,
)
from gpubw.memory.sharing import RemoteRankError, agreed, error_text
from gpubw.memory.system import System
from gpubw.model.errors import GpubwError, UsageError
from gpubw.world.base import WorldError

if TYPE_CHECKING:
    from gpubw.measure.rank_gate import RankGate


class RankCopy(NamedTuple):
    """One pair of a cross-rank cell: issued by ``rank``; ``copy`` is its buffers on that
    rank and None on every other rank (whose mappings it does not need). A named tuple:
    every rank makes one for every pair of every cell (a simulated rack's ranks, N times
    the cells, in one process)."""

    rank: int
    copy: Copy | None


class RankSync(Sync):
    """One rank of a cross-rank cell: the host gate plus the rank gate's device flag of the
    sample (two flags, used by alternate samples), which carries the release of the rank
    that issues the cell's first pair (``first``) to every other rank's streams; steps 4 and
    7 end at an agreement point among the cell's ranks (``group``; None: the whole world).
    ``ended`` tells that the cell's last agreement has passed: an error after it is this
    rank's alone (the others have gone on)."""

    releaser = "the first rank"

    def __init__(
        self,
        system: System,
        rank_gate: RankGate,
        *,
        first: bool,
        group: tuple[int, ...] | None = None,
    ) -> None:
        super().__init__(system)
        self.rank_gate = rank_gate
        self.first = first
        self.group = group
        #: the sample under way (-1: none yet)
        self.sample = -1
        #: an error of step 1 (no agreement point of its own): the next step's
        self.pending: GpubwError | None = None
        self.ended = False

    def step(self, work: Callable[[], None], bound_s: float | None = None) -> None:
        """Run the step (unless step 1 failed), then agree: if any rank failed, every rank
        raises the same :class:`RemoteRankError`. The agreement waits ``bound_s`` plus the
        world's timeout."""
        error, self.pending = self.pending, None
        if error is None:
            try:
                work()
            except GpubwError as exc:
                error = exc
        world = self.system.world
        bound = None if bound_s is None else bound_s + world.timeout_s
        agreed(world, error, bound, self.group)

    def begin(self) -> None:
        """Close the host gate and (the first rank) zero the next sample's flag: every wait
        on it ended before the last agreement, and this sample's was zeroed a sample ago (or
        before the cell), before any rank holds a stream behind it."""
        self.sample += 1
        try:
            self.system.gate.close()
            if self.first:
                self.rank_gate.reset(self.sample + 1)
        except GpubwError as exc:
            self.pending = exc

    def close(self) -> None:
        """Nothing: both gates closed in step 1."""

    def hold(self, k: int, stream: Any) -> None:
        gate, timeout_s = self.system.gate, self.system.options.gate_timeout_s
        flag = self.rank_gate.flag(self.sample)
        if self.first and k == 0:
            gate.enqueue_relay(stream, flag, timeout_s)
        else:
            gate.enqueue_wait(stream, timeout_s, flag=flag)

    def release(self) -> None:
        if self.first:
            self.system.gate.open()

    def end(self) -> None:
        """The cell's last agreement has passed: (the first rank) zero the last sample's
        flag, so that both are zero when the next cell starts."""
        self.ended = True
        if self.first and self.sample >= 0:
            self.rank_gate.reset(self.sample)

    def drain(self, streams: Sequence[Any]) -> None:
        """Unless every sample ended, also set the device flags (any rank may), so that no
        rank's streams stay held when the first rank failed before its relay ran; a rank
        with no streams holds none behind the flag and leaves it alone."""
        if streams and not self.ended:
            with contextlib.suppress(GpubwError):
                self.rank_gate.release()
        super().drain(streams)


#: one rank's figures of one cell: ({pair: (counted, samples)}, {pair: label})
_Part = tuple[dict[int, tuple[int, tuple[float, ...]]], dict[int, str]]
#: one rank's figures of the cells it measured: {cell: its part}
_Figures = dict[int, _Part]


def cell_ranks(pairs: Sequence[RankCopy]) -> tuple[int, ...]:
    """A cell's group, in increasing order: the ranks that issue its pairs."""
    if len(pairs) == 1:
        return (pairs[0].rank,)
    return tuple(sorted({p.rank for p in pairs}))


class SeriesLayout:
    """Which cells of a series each rank takes part in, from the cells' groups alone: made
    once and shared (immutable) by every rank that walks the same cells (a simulated rack's
    ranks are threads of one process: each would otherwise read every cell's group, O(N^2)
    a testcase). Rank 0 takes part in every hand-over; another rank in the hand-overs into
    and out of its own cells and in those cells (:meth:`steps`)."""

    __slots__ = ("_own", "_steps", "groups")

    def __init__(self, groups: Sequence[tuple[int, ...]]) -> None:
        #: each cell's group (:func:`cell_ranks`), in cell order
        self.groups = tuple(groups)
        own: dict[int, list[int]] = {}
        for k, group in enumerate(self.groups):
            for r in group:
                own.setdefault(r, []).append(k)
        count = len(self.groups)
        self._own = {r: tuple(ks) for r, ks in own.items()}
        self._steps = {
            r: tuple(sorted({*ks, *(k + 1 for k in ks if k + 1 < count)}))
            for r, ks in self._own.items()
        }

    def cells_of(self, rank: int) -> tuple[int, ...]:
        """The cells whose group ``rank`` is in (it issues a pair of each), ascending."""
        return self._own.get(rank, ())

    def steps(self, rank: int) -> Sequence[int]:
        """The cells at which ``rank`` hands over or measures, ascending: every cell for
        rank 0, else its own cells and each next one."""
        return range(len(self.groups)) if rank == 0 else self._steps.get(rank, ())


def measure_ranks(
    op: MemcpyOperation, pairs: Sequence[RankCopy], rank_gate: RankGate
) -> CellMeasurement:
    """One cell across ranks: :func:`measure_series` of that cell alone."""
    return measure_series(op, [pairs], rank_gate)[0]


def measure_series(
    op: MemcpyOperation,
    cells: Sequence[Sequence[RankCopy]],
    rank_gate: RankGate,
    *,
    keep: bool = True,
    layout: SeriesLayout | None = None,
) -> list[CellMeasurement]:
    """Every cell of ``cells`` across ranks, one after the other, each measured by the ranks
    that issue its pairs (the module's "A series of cells across ranks") the way ``op``
    measures. Every rank calls this with the same cells (``RankCopy.copy`` set where the
    rank issues it), also a rank with no pair in any of them, right after a collective of
    the whole world. Returns every cell, every pair's samples, on every rank; where ``keep``
    is False (a rank that does not report them) nothing, once the series has ended as on
    every rank (the same error raised, or none). ``layout``: the cells' :class:`SeriesLayout`
    where the caller shares one among the ranks (made here otherwise)."""
    if not cells or not all(cells):
        raise UsageError("measure_series() needs cells of at least one pair each")
    if layout is not None and len(layout.groups) != len(cells):
        raise UsageError(f"a layout of {len(layout.groups)} cells for {len(cells)} cells")
    if op.kind is Kind.TOTAL:
        # the same on every rank, so every rank raises it here without a collective
        raise UsageError("a TOTAL figure is not measured across ranks; allowed: FIRST, SUM, VECTOR")
    return _Series(op, cells, rank_gate, layout).run(keep)


def cell_bound_s(op: MemcpyOperation) -> float:
    """How long one cell across ranks may take, whatever happens in it: each sample's three
    steps with their bounds and agreements, and the cell's setup and last agreement."""
    options, timeout_s = op.system.options, float(op.world.timeout_s)
    step_s = 2 * options.gate_timeout_s + options.sync_timeout_s
    return options.samples * (step_s + 3 * timeout_s) + 2 * timeout_s


def measure_own_pairs(op: MemcpyOperation, pairs: Sequence[RankCopy], rank_gate: RankGate) -> _Part:
    """This rank's part of one cell, {pair index: (counted, samples)} and {pair index:
    label}: one process's protocol where this rank issues every pair, else the protocol with
    a :class:`RankSync` among the cell's ranks, then their agreement on an error made
    outside a step. An error is raised as the :class:`RemoteRankError` of the rank that made
    it (on every rank of the cell)."""
    world = op.world
    me = world.rank
    group = cell_ranks(pairs)
    indexes = [i for i, p in enumerate(pairs) if p.rank == me]
    copies = [c for c in (pairs[i].copy for i in indexes) if c is not None]
    sync: Sync | None = None
    try:
        if len(copies) < len(indexes):
            raise UsageError(f"rank {me} issues a pair of the cell but has no buffers for it")
        if len(group) == 1:  # this rank's alone: nothing to agree on
            sync = LocalSync(op.system)
        else:
            first = rank_gate.relays([p.rank for p in pairs])  # per NVLink domain
            sync = RankSync(op.system, rank_gate, first=first, group=group)
        cell = op.run_cell(copies, sync)
    except (RemoteRankError, WorldError):
        raise  # every rank of the cell raised it at the same point already; or broken
    except GpubwError as exc:
        if isinstance(sync, LocalSync) or (isinstance(sync, RankSync) and sync.ended):
            # this rank's alone, or after the cell's last agreement: the next hand-over's
            raise RemoteRankError(me, error_text(exc)) from exc
        agreed(world, exc, group=group)  # raises it on every rank of the cell
        raise AssertionError("unreachable: an agreement on an error raises") from exc
    return (
        {i: (cell.counted[k], tuple(cell.pair_samples[k])) for k, i in enumerate(indexes)},
        {i: pair_label(c) for i, c in zip(indexes, copies)},
    )


class _Series:
    """:func:`measure_series` on one rank (the module's "A series of cells across ranks")."""

    def __init__(
        self,
        op: MemcpyOperation,
        cells: Sequence[Sequence[RankCopy]],
        rank_gate: RankGate,
        layout: SeriesLayout | None = None,
    ) -> None:
        self.op = op
        self.cells = cells
        self.rank_gate = rank_gate
        self.world = op.world
        if layout is None:  # this rank's alone: every cell's group, every cell walked
            self.groups: tuple[tuple[int, ...], ...] = tuple(cell_ranks(p) for p in cells)
            self.steps: Sequence[int] = range(len(cells))
        else:
            self.groups, self.steps = layout.groups, layout.steps(self.world.rank)
        self.bound_s = cell_bound_s(op)
        #: the first error of the series as this rank knows it: (failing rank, message)
        self.error: tuple[int, str] | None = None
        self.cause: BaseException | None = None
        self.mine: _Figures = {}
        #: the last hand-over this rank took part in (0: the series' start)
        self.last = 0

    def run(self, keep: bool) -> list[CellMeasurement]:
        me = self.world.rank
        groups = self.groups
        for k in self.steps:  # with a layout, the cells it takes part in, not all of them
            group = groups[k]
            if k > 0 and (me == 0 or me in group or me in groups[k - 1]):  # hand-over k
                self._hand_over(k)
            if me in group and self.error is None:
                self._measure(k)
        return self._gather(keep)

    def _hand_over_group(self, k: int) -> tuple[int, ...]:
        """The groups of cells k - 1 and k, and rank 0."""
        return tuple(sorted({0, *self.groups[k - 1], *self.groups[k]}))

    def _wait_s(self, k: int) -> float:
        """How long this rank may wait at hand-over k (or at the end, k = the cell count):
        the cells since the last hand-over it took part in, each bounded."""
        return (k - self.last) * self.bound_s + float(self.world.timeout_s)

    def _hand_over(self, k: int) -> None:
        group = self._hand_over_group(k)
        errors = self.world.group_allgather(self.error, group, timeout_s=self._wait_s(k))
        self.error = min((e for e in errors if e is not None), default=None)
        self.last = k

    def _measure(self, k: int) -> None:
        """This rank's pairs of cell k; an error that the cell's ranks agreed on is kept
        (a broken world propagates)."""
        try:
            self.mine[k] = measure_own_pairs(self.op, self.cells[k], self.rank_gate)
        except RemoteRankError as exc:
            self.error, self.cause = (exc.rank, exc.remote_message), exc.__cause__

    def _gather(self, keep: bool) -> list[CellMeasurement]:
        """Every rank's figures and errors, once: every cell (none unless ``keep``), or the
        first error raised on every rank."""
        # as tuples all the way down: a simulated rack's ranks share the one gathered list
        # instead of each unpickling every rank's figures (O(N^2) in one process)
        mine = tuple(
            (k, tuple(part.items()), tuple(labels.items()))
            for k, (part, labels) in self.mine.items()
        )
        gathered = self.world.allgather((self.error, mine), timeout_s=self._wait_s(len(self.cells)))
        firsts = list(map(operator.itemgetter(0), gathered))  # at C speed: N a rank, a cell
        errors = [] if firsts.count(None) == len(firsts) else [e for e in firsts if e is not None]
        if errors:
            rank, message = min(errors)
            raise RemoteRankError(rank, message) from self.cause
        if not keep:
            return []
        pairs: dict[int, dict[int, tuple[int, tuple[float, ...]]]] = {}
        names: dict[int, dict[int, str]] = {}
        for _, figures in gathered:
            for k, part, labels in figures:
                pairs.setdefault(k, {}).update(part)
                names.setdefault(k, {}).update(labels)
        return [self._cell(pairs[k], names[k], len(c)) for k, c in enumerate(self.cells)]

    def _cell(
        self, pairs: dict[int, tuple[int, tuple[float, ...]]], names: dict[int, str], count: int
    ) -> CellMeasurement:
        order = range(count)
        return CellMeasurement(
            counted_bytes=tuple(pairs[i][0] for i in order),
            loops=self.op.loops,
            pair_samples=tuple(pairs[i][1] for i in order),
            total_samples=(),
            statistic=self.op.system.options.statistic,
            pair_labels=tuple(names[i] for i in order),
        )
