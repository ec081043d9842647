"""How a copy is timed: nvbandwidth's protocol, kept exactly, in one place.

For one matrix cell a testcase hands :meth:`MemcpyOperation.measure` a list of copies (source,
destination); they all run at once, each on its own stream in the context of its executing
device. Each sample: fill the buffers (outside the timing), hold every stream behind the spin
gate, queue a warm-up, record start events (streams >= 1 wait on stream 0's start), queue
``loops`` measured copies, record end events, release the gate, synchronise (bounded), verify.
Bandwidth per pair per sample = counted bytes x loops / (end - start).

Across the ranks of a world (:meth:`MemcpyOperation.measure_ranks`, the multinode testcases)
the same protocol runs on every rank for the rank's own pairs, with three agreement points
per sample (:func:`gpubw.memory.shared.agreed`) and a device flag that carries the first rank's gate
release to the others (:class:`gpubw.measure.rank_gate.RankGate`); the ranks' per-pair samples are
then gathered in one collective, so every rank holds the whole cell and FIRST/SUM/VECTOR are
formed exactly as on one node.
"""

from __future__ import annotations

import contextlib
import enum
import math
import statistics
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from gpubw.backend.base import DeviceInfo
from gpubw.measure.initiators import CopyJob, Initiator
from gpubw.memory.buffers import MAX_VERIFY_SLOTS, Buffer
from gpubw.memory.gate import Gate
from gpubw.memory.shared import RemoteRankError, agreed
from gpubw.memory.system import System
from gpubw.model.errors import GateTimeoutError, GpubwError, UsageError, VerificationError
from gpubw.model.options import WARMUP_ITERATIONS

if TYPE_CHECKING:
    from gpubw.measure.rank_gate import RankGate


@attrs.frozen
class RankCopy:
    """One pair of a cross-rank cell: issued by ``rank``; ``copy`` is its buffers on that
    rank and None on every other rank (whose mappings it does not need)."""

    rank: int
    copy: Copy | None


class Prefer(enum.Enum):
    """Which buffer's context issues a copy (nvbandwidth's PREFER_SRC/DST_CONTEXT)."""

    SRC = "source"
    DST = "destination"


class Kind(enum.Enum):
    """How a cell's figure is formed from the simultaneous copies."""

    FIRST = "first"  # pair 0's bandwidth; the other pairs are interference
    SUM = "sum"  # sum over pairs of each pair's statistic
    TOTAL = "total"  # all bytes over the time from the first start to the last end
    VECTOR = "vector"  # each pair's statistic, separately


@attrs.frozen
class Copy:
    """One copy of a cell: ``src`` -> ``dst``, both of the same size."""

    src: Buffer
    dst: Buffer

    @property
    def nbytes(self) -> int:
        return self.src.nbytes


def check_copies(copies: Sequence[Copy]) -> None:
    """The copies of a cell are well formed: each one's source and destination of the same,
    positive size (UsageError naming the buffers otherwise)."""
    for c in copies:
        if c.src.nbytes != c.dst.nbytes:
            raise UsageError(f"copy sizes differ: {c.src!r} vs {c.dst!r}")
        if c.src.nbytes <= 0:
            raise UsageError(f"copy size must be positive, got {c.src.nbytes}")


def statistic(values: Sequence[float], name: str) -> float:
    """nvbandwidth's statistics: median (mean of the middle two for an even count, 0.0 for
    none) or mean (NaN for none)."""
    if name == "median":
        return float(statistics.median(values)) if values else 0.0
    if name == "mean":
        return float(statistics.fmean(values)) if values else math.nan
    raise UsageError(f"unknown statistic {name!r}; allowed: median, mean")


@attrs.frozen
class CellMeasurement:
    """Everything measured for one cell. Bandwidths in bytes/s."""

    #: bytes one copy call of each pair is counted as moving
    counted_bytes: tuple[int, ...]
    loops: int
    #: per pair, per sample: bytes/s
    pair_samples: tuple[tuple[float, ...], ...]
    #: per sample: all pairs' bytes over first start -> last end (filled for TOTAL only)
    total_samples: tuple[float, ...]
    statistic: str
    #: labels of each pair, "src -> dst"
    pair_labels: tuple[str, ...] = ()

    def pair_value(self, index: int) -> float:
        return statistic(self.pair_samples[index], self.statistic)

    def value(self, kind: Kind) -> float:
        """The cell's figure for a scalar kind, in bytes/s."""
        if kind is Kind.FIRST:
            return self.pair_value(0)
        if kind is Kind.SUM:
            return sum(self.pair_value(i) for i in range(len(self.pair_samples)))
        if kind is Kind.TOTAL:
            return statistic(self.total_samples, self.statistic)
        raise ValueError("VECTOR has no single value; use vector()")

    def vector(self) -> tuple[float, ...]:
        return tuple(self.pair_value(i) for i in range(len(self.pair_samples)))

    def samples(self, kind: Kind, index: int = 0) -> tuple[float, ...]:
        """The raw samples behind ``value(kind)`` (for SUM: the per-sample sums)."""
        if kind is Kind.FIRST or kind is Kind.VECTOR:
            return self.pair_samples[index]
        if kind is Kind.TOTAL:
            return self.total_samples
        return tuple(sum(col) for col in zip(*self.pair_samples))


class MemcpyOperation:
    """One way of measuring: initiator, context preference, bandwidth kind, loop count."""

    def __init__(
        self,
        system: System,
        initiator: Initiator,
        *,
        prefer: Prefer = Prefer.SRC,
        kind: Kind = Kind.FIRST,
        loops: int,
    ) -> None:
        if isinstance(loops, bool) or not isinstance(loops, int) or loops < 1:
            raise UsageError(f"loop count must be a positive integer, got {loops!r}")
        self.system = system
        self.initiator = initiator
        self.prefer = prefer
        self.kind = kind
        self.loops = loops

    @property
    def world(self) -> Any:
        """The run's world (the System's; a single rank without one)."""
        return getattr(self.system, "world", None)

    def exec_device(self, copy: Copy) -> int:
        """The device whose context issues ``copy``."""
        if self.prefer is Prefer.SRC and copy.src.context_device is not None:
            return copy.src.context_device
        if copy.dst.context_device is not None:
            return copy.dst.context_device
        if copy.src.context_device is not None:
            return copy.src.context_device
        raise UsageError("a copy between two host buffers has no device to issue it")

    def _plan(
        self, system: System, copies: Sequence[Copy]
    ) -> tuple[list[int], list[DeviceInfo], tuple[int, ...], list[int]]:
        """The executing device of each copy, its info, the bytes counted and the bytes
        checked; kernels loaded and the gate page made (before any stream is held by it)."""
        system.load_kernels()
        execs = [self.exec_device(c) for c in copies]
        infos: list[DeviceInfo] = [system.devices[e] for e in execs]
        counted = tuple(self.initiator.counted_bytes(c.nbytes, d) for c, d in zip(copies, infos))
        checked = [self.initiator.checked_bytes(c.nbytes, d) for c, d in zip(copies, infos)]
        if any(b <= 0 for b in counted):
            raise UsageError(
                f"buffer of {copies[0].nbytes} bytes is too small for a {self.initiator.name} "
                "copy (nothing would be copied)"
            )
        system.gate.page  # noqa: B018 - the page exists before any stream is held by it
        return execs, infos, counted, checked

    def measure(self, copies: Sequence[Copy]) -> CellMeasurement:
        """Run all ``copies`` simultaneously for ``samples`` samples."""
        if not copies:
            raise UsageError("measure() needs at least one copy")
        check_copies(copies)
        system = self.system
        backend = system.backend
        options = system.options
        execs, infos, counted, checked = self._plan(system, copies)
        gate = system.gate
        pair_samples: list[list[float]] = [[] for _ in copies]
        total_samples: list[float] = []
        # Each stream and event is owned as soon as it exists: whatever fails (a create, a
        # sample, Ctrl-C), the gate is opened, the streams drained (bounded) and every handle
        # destroyed, each tried; the first error is the one raised.
        with contextlib.ExitStack() as stack:
            streams = [stack.enter_context(backend.stream(e)) for e in execs]
            events = [stack.enter_context(backend.event(e)) for e in [*execs, *execs, execs[0]]]
            stack.callback(self._drain, gate, streams)
            starts, ends, total_end = events[: len(execs)], events[len(execs) : -1], events[-1]
            jobs = self._jobs(copies, infos, checked, streams)
            for _ in range(options.samples):
                self._one_sample(
                    jobs, counted, starts, ends, total_end, pair_samples, total_samples
                )
        return CellMeasurement(
            counted_bytes=counted,
            loops=self.loops,
            pair_samples=tuple(tuple(s) for s in pair_samples),
            total_samples=tuple(total_samples),
            statistic=options.statistic,
            pair_labels=tuple(f"{c.src.label} -> {c.dst.label}" for c in copies),
        )

    # -- across ranks ---------------------------------------------------------------------
    def exec_rank(self, src_owner: int, dst_owner: int) -> int:
        """The rank that issues a copy between buffers owned by ``src_owner`` and
        ``dst_owner`` (nvbandwidth: the owner of the preferred side)."""
        return src_owner if self.prefer is Prefer.SRC else dst_owner

    def measure_ranks(self, pairs: Sequence[RankCopy], rank_gate: RankGate) -> CellMeasurement:
        """Run every rank's pairs of one cell simultaneously for ``samples`` samples. Every
        rank calls this with the same global pair list (``RankCopy.copy`` set where the rank
        issues it), also a rank with no pairs of its own. Returns the whole cell, every
        pair's samples, on every rank."""
        world = self.world
        if not pairs:
            raise UsageError("measure_ranks() needs at least one pair")
        if self.kind is Kind.TOTAL:
            # the same on every rank, so every rank raises it here without a collective
            raise UsageError(
                "a TOTAL figure is not measured across ranks; allowed: FIRST, SUM, VECTOR"
            )
        me = world.rank
        mine = [(i, p.copy) for i, p in enumerate(pairs) if p.rank == me]
        error: BaseException | None = None
        local: dict[int, tuple[int, tuple[float, ...]]] = {}
        labels: dict[int, str] = {}
        try:
            if any(c is None for _, c in mine):
                raise UsageError(f"rank {me} issues a pair of the cell but has no buffers for it")
            local = self._measure_local(
                [c for _, c in mine if c is not None],
                [i for i, _ in mine],
                first=pairs[0].rank == me,
                rank_gate=rank_gate,
            )
            labels = {i: f"{c.src.label} -> {c.dst.label}" for i, c in mine if c is not None}
        except RemoteRankError:
            raise  # every rank raised it at the same agreement point already
        except GpubwError as exc:
            error = exc
        # after the last sample: every rank's error, if any, is everyone's
        agreed(world, error)
        merged: dict[int, tuple[int, tuple[float, ...]]] = {}
        names: dict[int, str] = {}
        for part, part_labels in world.allgather((local, labels)):
            merged.update(part)
            names.update(part_labels)
        order = range(len(pairs))
        return CellMeasurement(
            counted_bytes=tuple(merged[i][0] for i in order),
            loops=self.loops,
            pair_samples=tuple(merged[i][1] for i in order),
            total_samples=(),
            statistic=self.system.options.statistic,
            pair_labels=tuple(names[i] for i in order),
        )

    def _measure_local(
        self, copies: list[Copy], indexes: list[int], *, first: bool, rank_gate: RankGate
    ) -> dict[int, tuple[int, tuple[float, ...]]]:
        """This rank's part of :meth:`measure_ranks`: {pair index: (counted, samples)}. Every
        sample has the agreement points of the protocol, also on a rank without copies;
        errors of a sample are raised on every rank (see :func:`agreed`)."""
        system = self.system
        backend = system.backend
        options = system.options
        world = self.world
        check_copies(copies)
        execs, infos, counted, checked = self._plan(system, copies)
        gate = system.gate
        samples: list[list[float]] = [[] for _ in copies]
        with contextlib.ExitStack() as stack:
            streams = [stack.enter_context(backend.stream(e)) for e in execs]
            events = [stack.enter_context(backend.event(e)) for e in [*execs, *execs]]
            stack.callback(self._drain_ranks, gate, rank_gate, streams)
            starts, ends = events[: len(execs)], events[len(execs) :]
            jobs = self._jobs(copies, infos, checked, streams)
            bound = options.gate_timeout_s + options.sync_timeout_s
            for _ in range(options.samples):
                # 1. close both gates (rank 0 zeroes the device flag); all ranks agree
                error: BaseException | None = None
                try:
                    gate.close()
                    if world.rank == rank_gate.owner:
                        rank_gate.reset()
                except GpubwError as exc:
                    error = exc
                agreed(world, error)
                # 2.-3. fill, hold the streams behind the gates, queue everything
                try:
                    self._queue_ranks(jobs, starts, ends, first, rank_gate)
                except GpubwError as exc:
                    error = exc
                # 4. every rank's copies are queued before the gate opens
                agreed(world, error, options.gate_timeout_s + world.timeout_s)
                # 5. release (first rank), wait, verify, arithmetic; all ranks agree
                try:
                    if first:
                        gate.open()
                    self._wait_released(streams, "the first rank")
                    if options.verify and copies:
                        self._verify(jobs)
                    for k, rate in enumerate(self._rates(counted, starts, ends)):
                        samples[k].append(rate)
                except GpubwError as exc:
                    error = exc
                agreed(world, error, bound + world.timeout_s)
        return {i: (counted[k], tuple(samples[k])) for k, i in enumerate(indexes)}

    def _queue_ranks(
        self,
        jobs: list[CopyJob],
        starts: list[Any],
        ends: list[Any],
        first: bool,
        rank_gate: RankGate,
    ) -> None:
        """Steps 1-4 of a sample on this rank: the first rank's first stream relays its host
        gate to the device flag, every other stream waits on that flag."""
        gate = self.system.gate
        timeout_s = self.system.options.gate_timeout_s
        flag = rank_gate.flag_pointer

        def hold(k: int, stream: Any) -> None:
            if first and k == 0:
                gate.enqueue_relay(stream, flag, timeout_s)
            else:
                gate.enqueue_wait(stream, timeout_s, flag=flag)

        self._fill(jobs)
        self._enqueue_timed(jobs, starts, ends, hold)

    def _drain_ranks(self, gate: Gate, rank_gate: RankGate, streams: list[Any]) -> None:
        """:meth:`_drain` across ranks: also set the device flag (any rank may), so no
        rank's streams stay held when the first rank failed before its relay ran."""
        with contextlib.suppress(GpubwError):
            rank_gate.release()
        self._drain(gate, streams)

    def _drain(self, gate: Gate, streams: list[Any]) -> None:
        """Open the gate (never leave a stream held by it) and wait for the streams (bounded),
        each step tried even if another failed, before the streams are destroyed."""
        with contextlib.suppress(GpubwError):
            gate.open()
        for s in streams:
            with contextlib.suppress(GpubwError):
                self.system.backend.synchronize(s, self.system.options.sync_timeout_s)

    # -- the steps of a sample, shared by one node and the ranks ---------------------------
    def _jobs(
        self,
        copies: Sequence[Copy],
        infos: list[DeviceInfo],
        checked: list[int],
        streams: list[Any],
    ) -> list[CopyJob]:
        """Each copy as the initiator gets it, on its own stream."""
        return [
            CopyJob(
                system=self.system,
                src=c.src,
                dst=c.dst,
                nbytes=c.nbytes,
                checked=n,
                exec_device=info,
                stream=s,
            )
            for c, info, n, s in zip(copies, infos, checked, streams)
        ]

    def _fill(self, jobs: list[CopyJob]) -> None:
        """Fill every copy's buffers (outside the timing) and wait for it, so no fill
        overlaps a timed copy."""
        system = self.system
        for job in jobs:
            self.initiator.prepare(job)
        for job in jobs:
            system.backend.synchronize(job.stream, system.options.sync_timeout_s)

    def _enqueue_timed(
        self,
        jobs: list[CopyJob],
        starts: list[Any],
        ends: list[Any],
        hold: Callable[[int, Any], None],
        total_end: Any = None,
    ) -> None:
        """Hold every stream (``hold(k, stream)``) and queue its warm-up behind the hold;
        start events (every stream starts once stream 0 has started); the measured copies
        and end events; with ``total_end``, stream 0 also waits for every end and records it."""
        backend = self.system.backend
        init = self.initiator
        for k, job in enumerate(jobs):
            hold(k, job.stream)
            init.enqueue(job, loops=WARMUP_ITERATIONS)
        if jobs:
            backend.record_event(starts[0], jobs[0].stream)
        for i in range(1, len(jobs)):
            backend.wait_event(jobs[i].stream, starts[0])
            backend.record_event(starts[i], jobs[i].stream)
        for i, job in enumerate(jobs):
            init.enqueue(job, loops=self.loops)
            backend.record_event(ends[i], job.stream)
            if total_end is not None and i >= 1:
                backend.wait_event(jobs[0].stream, ends[i])
        if total_end is not None:
            backend.record_event(total_end, jobs[0].stream)

    def _wait_released(self, streams: list[Any], releaser: str) -> None:
        """Wait for every stream (bounded by the gate's and the sync timeout), then refuse
        the sample if a gate kernel gave up waiting before ``releaser`` released it."""
        system = self.system
        options = system.options
        for s in streams:
            system.backend.synchronize(s, options.gate_timeout_s + options.sync_timeout_s)
        if system.gate.timed_out():
            raise GateTimeoutError(
                f"the spin gate timed out after {options.gate_timeout_s:g} s before "
                f"{releaser} released it (queuing the copies took too long); the sample would "
                "have started early, so it is discarded"
            )

    def _rates(self, counted: tuple[int, ...], starts: list[Any], ends: list[Any]) -> list[float]:
        """Each pair's bandwidth of this sample: counted bytes x loops / (end - start)."""
        elapsed = self.system.backend.elapsed_seconds
        return [
            _rate(n * self.loops, elapsed(start, end))
            for n, start, end in zip(counted, starts, ends)
        ]

    def _one_sample(
        self,
        jobs: list[CopyJob],
        counted: tuple[int, ...],
        starts: list[Any],
        ends: list[Any],
        total_end: Any,
        pair_samples: list[list[float]],
        total_samples: list[float],
    ) -> None:
        system = self.system
        gate = system.gate
        timeout_s = system.options.gate_timeout_s
        total = self.kind is Kind.TOTAL
        # 1. Fill (outside the timing), and wait for it, so no fill overlaps a timed copy.
        self._fill(jobs)
        # 2.-4. Close the gate; hold every stream behind it with its warm-up; start events
        #    (every stream starts once stream 0 has); measured copies and end events.
        gate.close()
        self._enqueue_timed(
            jobs,
            starts,
            ends,
            lambda _k, s: gate.enqueue_wait(s, timeout_s),
            total_end if total else None,
        )
        # 5. Release and wait (bounded).
        gate.open()
        self._wait_released([j.stream for j in jobs], "gpubw")
        # 6. Verify.
        if system.options.verify:
            self._verify(jobs)
        # 7. Arithmetic.
        for samples, rate in zip(pair_samples, self._rates(counted, starts, ends)):
            samples.append(rate)
        if total:
            seconds = system.backend.elapsed_seconds(starts[0], total_end)
            total_samples.append(_rate(sum(counted) * self.loops, seconds))

    def _verify(self, jobs: list[CopyJob]) -> None:
        """Queue every job's compares (two result slots each, as many jobs as the gate
        page's slots hold), wait, and raise the first mismatch, naming the copy."""
        backend = self.system.backend
        pending: list[tuple[int, Buffer, CopyJob]] = []
        slot = 0
        for job in jobs:
            if slot + 2 > MAX_VERIFY_SLOTS:
                break
            for sl, buf in self.initiator.enqueue_checks(job, first_slot=slot):
                pending.append((sl, buf, job))
            slot += 2
        for job in jobs:
            backend.synchronize(job.stream, self.system.options.sync_timeout_s)
        for sl, buf, job in pending:
            try:
                buf.check_verified(sl)
            except VerificationError as exc:
                raise VerificationError(
                    f"{buf.label} after the copy {job.src.label} -> {job.dst.label} "
                    f"issued by device {job.exec_device.ordinal}",
                    exc.offset,
                ) from None


def _rate(nbytes: int, seconds: float) -> float:
    if seconds <= 0:
        raise GpubwError(
            f"measured an interval of {seconds * 1e6:.3f} us for {nbytes} bytes; "
            "use a larger buffer size or loop count"
        )
    return nbytes / seconds
