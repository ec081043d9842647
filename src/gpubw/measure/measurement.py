"""How a copy is timed: nvbandwidth's protocol, kept exactly, in one place.

This module is the one-process protocol; the same protocol run across the ranks of a world,
a cell at a time (the multinode testcases), is :mod:`gpubw.measure.series` (cut from this
module along that seam: it injects its own :class:`Sync`).

For one matrix cell a testcase hands :meth:`MemcpyOperation.measure` a list of copies (source,
destination); they all run at once, each on its own stream in the context of its executing
device. Across the ranks of a world (:func:`gpubw.measure.series.measure_series`) the ranks
that issue a copy of the cell (the cell's *group*) run the same protocol, each for its own
pairs (a cell of one issuing rank with :class:`LocalSync`, as one process).

One sequence serves both (:meth:`MemcpyOperation._sample`); what differs is injected as a
:class:`Sync`. :class:`LocalSync` is one process's: the spin gate, opened by gpubw, nothing to
agree on. :class:`gpubw.measure.series.RankSync` is a rank's: the spin gate plus a device
flag of a :class:`gpubw.measure.rank_gate.RankGate` (two, used by alternate samples), which
carries the first rank's release to the others, and an agreement point among the cell's
group (:func:`gpubw.memory.sharing.agreed`) at the end of steps 4 and 7, so that an error on
one rank is raised on every rank of the cell at the same point. Each sample:

1. Across ranks: close the host gate, and the first rank zeroes the *next* sample's flag
   (this sample's was zeroed before the last agreement; an error here is step 4's).
2. Fill every copy's buffers (outside the timing) and wait for it, so that no fill overlaps a
   timed copy.
3. Close the gate (one process; across ranks it closed in step 1); hold every stream behind it
   (across ranks the first rank's stream 0 relays its host gate to the device flag and every
   other stream waits on that flag) and queue a warm-up behind the hold.
4. Record start events (streams >= 1 wait on stream 0's start), queue ``loops`` measured
   copies, record end events; for a TOTAL figure stream 0 also waits for every end and records
   the last one. Across ranks: agree (every rank's copies are queued before a gate opens).
5. Release the gate (across ranks: the first rank) and wait for every stream (bounded); if a
   gate kernel gave up waiting before the release, the sample is discarded (an error).
6. Verify (unless verification is off).
7. Rates: bandwidth per pair = counted bytes x loops / (end - start); TOTAL: all pairs' bytes x
   loops / (stream 0's start -> the last end). Across ranks: agree.

After the last sample (``Sync.end``) across ranks the first rank zeroes the last sample's
flag; an error made before the first step (a bad copy, a stream that could not be made) is
agreed at the first step's point, one made after the last (a failed cleanup) travels to the
series' next hand-over (:mod:`gpubw.measure.series`). The
statistic (median or mean) of each pair's samples, and of the TOTAL samples, gives the cell's
FIRST, SUM, VECTOR or TOTAL figure (:class:`CellMeasurement`; across ranks no TOTAL).

Cleanup: each stream and event is owned as soon as it exists; whatever fails (a create, a
sample, Ctrl-C), the gate is opened (across ranks the device flags set too), the streams are
drained (bounded) and every handle is destroyed, each step tried; the first error is raised.
"""

from __future__ import annotations

import abc
import contextlib
import enum
import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from gpubw.backend.base import DeviceInfo
from gpubw.measure.initiators import CopyJob, Initiator
from gpubw.memory.buffers import MAX_VERIFY_SLOTS, Buffer
from gpubw.memory.system import System
from gpubw.model.errors import GateTimeoutError, GpubwError, UsageError, VerificationError
from gpubw.model.options import WARMUP_ITERATIONS


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


# -- the synchronisation injected into the protocol -----------------------------------------
class Sync(abc.ABC):
    """What the streams of a sample wait on and where the processes agree: the part of the
    protocol (the module's docstring) that differs between one process and the ranks."""

    #: who opens the gate (named when a gate kernel gave up waiting before)
    releaser: str = ""
    #: whether the cell makes a TOTAL end event (one process: always, whatever the kind, so
    #: that its driver calls do not depend on the kind; across ranks TOTAL is refused)
    total_event: bool = False

    def __init__(self, system: System) -> None:
        self.system = system

    @abc.abstractmethod
    def step(self, work: Callable[[], None], bound_s: float | None = None) -> None:
        """Run one step of a sample; ``bound_s`` is how long the step itself may take."""

    @abc.abstractmethod
    def begin(self) -> None:
        """Step 1, before the fill (not an agreement point: an error here is the next
        step's)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Step 3, after the fill, before any stream is held."""

    @abc.abstractmethod
    def hold(self, k: int, stream: Any) -> None:
        """Step 3: hold the ``k``-th stream of the cell until the release."""

    @abc.abstractmethod
    def release(self) -> None:
        """Step 5: release the held streams."""

    @abc.abstractmethod
    def end(self) -> None:
        """After the cell's last sample, before its streams are drained."""

    def drain(self, streams: Sequence[Any]) -> None:
        """Cleanup: open the gate (never leave a stream held by it) and wait for the streams
        (bounded), each step tried even if another failed, before the streams are destroyed."""
        system = self.system
        with contextlib.suppress(GpubwError):
            system.gate.open()
        for s in streams:
            with contextlib.suppress(GpubwError):
                system.backend.synchronize(s, system.options.sync_timeout_s)


class LocalSync(Sync):
    """One process: the spin gate holds the streams and gpubw opens it; no other process
    takes part, so an error is raised where it happens."""

    releaser = "gpubw"
    total_event = True

    def step(self, work: Callable[[], None], bound_s: float | None = None) -> None:
        work()

    def begin(self) -> None:
        """Nothing: the gate closes after the fill."""

    def close(self) -> None:
        self.system.gate.close()

    def hold(self, k: int, stream: Any) -> None:
        self.system.gate.enqueue_wait(stream, self.system.options.gate_timeout_s)

    def release(self) -> None:
        self.system.gate.open()

    def end(self) -> None:
        """Nothing: the gate is this process's alone."""


@attrs.define
class CellRun:
    """One cell's work on this process for all its samples: a job per copy (each on its own
    stream), the bytes one copy call is counted as moving, the events that time them (no
    ``total_end`` where the sync makes none), and the samples so far."""

    jobs: list[CopyJob]
    counted: tuple[int, ...]
    starts: list[Any]
    ends: list[Any]
    total_end: Any
    pair_samples: list[list[float]]
    total_samples: list[float] = attrs.Factory(list)


def pair_label(copy: Copy) -> str:
    return f"{copy.src.label} -> {copy.dst.label}"


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

    def measure(self, copies: Sequence[Copy]) -> CellMeasurement:
        """Run all ``copies`` simultaneously for ``samples`` samples."""
        if not copies:
            raise UsageError("measure() needs at least one copy")
        cell = self.run_cell(copies, LocalSync(self.system))
        return CellMeasurement(
            counted_bytes=cell.counted,
            loops=self.loops,
            pair_samples=tuple(tuple(s) for s in cell.pair_samples),
            total_samples=tuple(cell.total_samples),
            statistic=self.system.options.statistic,
            pair_labels=tuple(pair_label(c) for c in copies),
        )

    # -- the protocol ---------------------------------------------------------------------
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

    def run_cell(self, copies: Sequence[Copy], sync: Sync) -> CellRun:
        """Every sample of one cell on this process, synchronised by ``sync``: the copies
        checked and planned, a stream per copy and its events made, then the samples (the
        module's protocol). Each stream and event is owned as soon as it exists; on any
        error ``sync.drain`` runs before they are destroyed (each tried, the first error
        raised)."""
        check_copies(copies)
        system = self.system
        backend = system.backend
        execs, infos, counted, checked = self._plan(system, copies)
        trace = system.trace
        with contextlib.ExitStack() as stack:
            stack.callback(trace.end)  # the teardown span (below) ends once all is undone
            trace.begin("setup")
            streams = [stack.enter_context(backend.stream(e)) for e in execs]
            owners = [*execs, *execs, *execs[:1]] if sync.total_event else [*execs, *execs]
            events = [stack.enter_context(backend.event(e)) for e in owners]
            stack.callback(sync.drain, streams)
            stack.callback(trace.begin, "teardown")  # the first thing undone
            trace.end()
            n = len(execs)
            cell = CellRun(
                jobs=self._jobs(copies, infos, checked, streams),
                counted=counted,
                starts=events[:n],
                ends=events[n : 2 * n],
                total_end=events[2 * n] if sync.total_event else None,
                pair_samples=[[] for _ in copies],
            )
            for _ in range(system.options.samples):
                self._sample(cell, sync)
            sync.end()
        return cell

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

    def _sample(self, cell: CellRun, sync: Sync) -> None:
        """One sample: steps 1-7 of the module's protocol, the last two of them steps of
        ``sync`` (each an agreement point across ranks)."""
        options = self.system.options
        sync.begin()
        sync.step(lambda: self._queue(cell, sync), options.gate_timeout_s)
        sync.step(lambda: self._finish(cell, sync), options.gate_timeout_s + options.sync_timeout_s)

    def _queue(self, cell: CellRun, sync: Sync) -> None:
        """Steps 2-4: fill and wait; close the gate; hold every stream with its warm-up;
        start events, the measured copies, end events."""
        trace = self.system.trace
        with trace.span("pattern_fill"):
            self._fill(cell.jobs)
        with trace.span("enqueue"):
            sync.close()
            self._enqueue_timed(cell, sync.hold)

    def _finish(self, cell: CellRun, sync: Sync) -> None:
        """Steps 5-7: release and wait (bounded), verify, and this sample's rates."""
        trace = self.system.trace
        with trace.span("warmup"):
            sync.release()
            self._wait_released([j.stream for j in cell.jobs], sync.releaser)
        if self.system.options.verify:
            with trace.span("verification"):
                self._verify(cell.jobs)
        rates = self._rates(cell)
        for samples, rate in zip(cell.pair_samples, rates):
            samples.append(rate)
        if self.kind is Kind.TOTAL and cell.total_end is not None:
            seconds = self.system.backend.elapsed_seconds(cell.starts[0], cell.total_end)
            cell.total_samples.append(bytes_per_second(sum(cell.counted) * self.loops, seconds))
        if trace.on:
            self._trace_wait(cell, rates)

    def _trace_wait(self, cell: CellRun, rates: list[float]) -> None:
        """The trace: the wait ran the warm-up, then the timed copies (what the figure's
        samples cover: pair 0 of a FIRST figure, else every pair), then the rest of longer
        simultaneous copies; the events say how long each was (loops x bytes / rate)."""
        spans = [n * self.loops / r for n, r in zip(cell.counted, rates)]
        if self.kind is Kind.TOTAL and cell.total_samples:
            spans.append(sum(cell.counted) * self.loops / cell.total_samples[-1])
        timed = spans[0] if self.kind is Kind.FIRST else max(spans)
        tail = [("timed", round(timed * 1e9)), ("interference", round((max(spans) - timed) * 1e9))]
        self.system.trace.split_last("warmup", tail)

    def _fill(self, jobs: list[CopyJob]) -> None:
        """Fill every copy's buffers (outside the timing) and wait for it, so no fill
        overlaps a timed copy."""
        system = self.system
        for job in jobs:
            self.initiator.prepare(job)
        for job in jobs:
            system.backend.synchronize(job.stream, system.options.sync_timeout_s)

    def _enqueue_timed(self, cell: CellRun, hold: Callable[[int, Any], None]) -> None:
        """Hold every stream (``hold(k, stream)``) and queue its warm-up behind the hold;
        start events (every stream starts once stream 0 has started); the measured copies
        and end events; for TOTAL, stream 0 also waits for every end and records the last."""
        backend = self.system.backend
        init = self.initiator
        jobs, starts, ends = cell.jobs, cell.starts, cell.ends
        total_end = cell.total_end if self.kind is Kind.TOTAL else None
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

    def _rates(self, cell: CellRun) -> list[float]:
        """Each pair's bandwidth of this sample: counted bytes x loops / (end - start)."""
        elapsed = self.system.backend.elapsed_seconds
        return [
            bytes_per_second(n * self.loops, elapsed(start, end))
            for n, start, end in zip(cell.counted, cell.starts, cell.ends)
        ]

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


def bytes_per_second(nbytes: int, seconds: float) -> float:
    """``nbytes`` moved in ``seconds``, in bytes/s; a GpubwError for an interval of 0 or
    less (a timer that cannot resolve the copy)."""
    if seconds <= 0:
        raise GpubwError(
            f"measured an interval of {seconds * 1e6:.3f} us for {nbytes} bytes; "
            "use a larger buffer size or loop count"
        )
    return nbytes / seconds
