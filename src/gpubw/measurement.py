"""How a copy is timed: nvbandwidth's protocol, kept exactly, in one place.

For one matrix cell a testcase hands :meth:`MemcpyOperation.measure` a list of copies (source,
destination); they all run at once, each on its own stream in the context of its executing
device. Each sample: fill the buffers (outside the timing), hold every stream behind the spin
gate, queue a warm-up, record start events (streams >= 1 wait on stream 0's start), queue
``loops`` measured copies, record end events, release the gate, synchronise (bounded), verify.
Bandwidth per pair per sample = counted bytes x loops / (end - start).
"""

from __future__ import annotations

import contextlib
import enum
import math
import statistics
from collections.abc import Sequence
from typing import Any

import attrs

from gpubw.backend.base import DeviceInfo
from gpubw.buffers import MAX_VERIFY_SLOTS, Buffer
from gpubw.errors import GateTimeoutError, GpubwError, UsageError, VerificationError
from gpubw.gate import Gate
from gpubw.initiators import Initiator
from gpubw.options import WARMUP_ITERATIONS
from gpubw.system import System


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
        for c in copies:
            if c.src.nbytes != c.dst.nbytes:
                raise UsageError(f"copy sizes differ: {c.src!r} vs {c.dst!r}")
            if c.src.nbytes <= 0:
                raise UsageError(f"copy size must be positive, got {c.src.nbytes}")
        system = self.system
        backend = system.backend
        options = system.options
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
        gate = system.gate
        gate.page  # noqa: B018 - the page exists before any stream is held by it
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
            for _ in range(options.samples):
                self._one_sample(
                    copies,
                    infos,
                    counted,
                    checked,
                    streams,
                    starts,
                    ends,
                    total_end,
                    pair_samples,
                    total_samples,
                )
        return CellMeasurement(
            counted_bytes=counted,
            loops=self.loops,
            pair_samples=tuple(tuple(s) for s in pair_samples),
            total_samples=tuple(total_samples),
            statistic=options.statistic,
            pair_labels=tuple(f"{c.src.label} -> {c.dst.label}" for c in copies),
        )

    def _drain(self, gate: Gate, streams: list[Any]) -> None:
        """Open the gate (never leave a stream held by it) and wait for the streams (bounded),
        each step tried even if another failed, before the streams are destroyed."""
        with contextlib.suppress(GpubwError):
            gate.open()
        for s in streams:
            with contextlib.suppress(GpubwError):
                self.system.backend.synchronize(s, self.system.options.sync_timeout_s)

    def _one_sample(
        self,
        copies: Sequence[Copy],
        infos: list[DeviceInfo],
        counted: tuple[int, ...],
        checked: list[int],
        streams: list[Any],
        starts: list[Any],
        ends: list[Any],
        total_end: Any,
        pair_samples: list[list[float]],
        total_samples: list[float],
    ) -> None:
        system = self.system
        backend = system.backend
        options = system.options
        gate = system.gate
        init = self.initiator
        # 1. Fill (outside the timing), and wait for it, so no fill overlaps a timed copy.
        for c, info, n, s in zip(copies, infos, checked, streams):
            init.prepare(system, c.src, c.dst, checked=n, stream=s, exec_device=info)
        for s in streams:
            backend.synchronize(s, options.sync_timeout_s)
        # 2. Close the gate; hold every stream behind it; warm up behind it.
        gate.close()
        for c, info, s in zip(copies, infos, streams):
            gate.enqueue_wait(s, options.gate_timeout_s)
            init.enqueue(
                system,
                c.src,
                c.dst,
                nbytes=c.nbytes,
                loops=WARMUP_ITERATIONS,
                stream=s,
                exec_device=info,
            )
        # 3. Start events: every stream starts once stream 0 has started.
        backend.record_event(starts[0], streams[0])
        for i in range(1, len(copies)):
            backend.wait_event(streams[i], starts[0])
            backend.record_event(starts[i], streams[i])
        # 4. Measured copies and end events.
        for i, (c, info, s) in enumerate(zip(copies, infos, streams)):
            init.enqueue(
                system, c.src, c.dst, nbytes=c.nbytes, loops=self.loops, stream=s, exec_device=info
            )
            backend.record_event(ends[i], s)
            if self.kind is Kind.TOTAL and i >= 1:
                backend.wait_event(streams[0], ends[i])
        backend.record_event(total_end, streams[0])
        # 5. Release and wait (bounded).
        gate.open()
        for s in streams:
            backend.synchronize(s, options.gate_timeout_s + options.sync_timeout_s)
        if gate.timed_out():
            raise GateTimeoutError(
                f"the spin gate timed out after {options.gate_timeout_s:g} s before gpubw "
                "released it (queuing the copies took too long); the sample would have started "
                "early, so it is discarded"
            )
        # 6. Verify.
        if options.verify:
            self._verify(copies, infos, checked, streams)
        # 7. Arithmetic.
        for i in range(len(copies)):
            seconds = backend.elapsed_seconds(starts[i], ends[i])
            pair_samples[i].append(_rate(counted[i] * self.loops, seconds))
        if self.kind is Kind.TOTAL:
            seconds = backend.elapsed_seconds(starts[0], total_end)
            total_samples.append(_rate(sum(counted) * self.loops, seconds))

    def _verify(
        self,
        copies: Sequence[Copy],
        infos: list[DeviceInfo],
        checked: list[int],
        streams: list[Any],
    ) -> None:
        backend = self.system.backend
        pending: list[tuple[int, Buffer, Copy, int]] = []
        slot = 0
        for c, info, n, s in zip(copies, infos, checked, streams):
            if slot + 2 > MAX_VERIFY_SLOTS:
                break
            checks = self.initiator.enqueue_checks(
                c.src, c.dst, checked=n, stream=s, exec_device=info, first_slot=slot
            )
            for sl, buf in checks:
                pending.append((sl, buf, c, info.ordinal))
            slot += 2
        for s in streams:
            backend.synchronize(s, self.system.options.sync_timeout_s)
        for sl, buf, c, e in pending:
            try:
                buf.check_verified(sl)
            except VerificationError as exc:
                raise VerificationError(
                    f"{buf.label} after the copy {c.src.label} -> {c.dst.label} "
                    f"issued by device {e}",
                    exc.offset,
                ) from None


def _rate(nbytes: int, seconds: float) -> float:
    if seconds <= 0:
        raise GpubwError(
            f"measured an interval of {seconds * 1e6:.3f} us for {nbytes} bytes; "
            "use a larger buffer size or loop count"
        )
    return nbytes / seconds
