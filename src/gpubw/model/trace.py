"""Where a run's time goes: the trace a run records when asked (``--trace``), off by default.

A :class:`Tracer` turns spans of work into a flat list of :class:`TraceEvent`: each names a
category (:data:`CATEGORIES`: allocation, host registration, pattern fill, warm-up, the timed
copies, verification, kernel load, NVML, synchronisation, teardown, ...), the step (testcase
and size) it belongs to, and its start and duration in nanoseconds of the backend's clock
(``Backend.clock``: monotonic on real GPUs, modelled time on the simulated backend, whose
host clock only moves with its calls). Spans nest, and the innermost one wins: when a span
opens inside another the outer one's segment ends there and resumes after it, so the events
never overlap and their durations add up to the time the spans covered. Each step also gets
one event of category ``"testcase"`` from its start to its end: the wall time the other
events of the step are a breakdown of (what no span covered is the rest).

Zero cost when off: the System's tracer is then :data:`NO_TRACE`, whose spans are one shared
null context (no clock read, nothing kept); the memory and measurement layers call
``trace.span(...)`` around whole phases, never per copy. The runner's
:class:`gpubw.runner.tracing.TraceListener` marks the steps and puts :meth:`Tracer.record` into
the report's ``trace`` member; ``benchmarks/overhead.py`` reads it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs

__all__ = ["CATEGORIES", "NO_TRACE", "STEP", "TraceEvent", "Tracer", "trace_record"]

#: The step itself (a testcase at one size), start to end: the wall time of the step.
STEP = "testcase"
#: What each event's ``category`` may be, with what it covers.
CATEGORIES: dict[str, str] = {
    STEP: "a whole step (one testcase at one size): the wall time the others break down",
    "allocation": "device memory allocated (cuMemAlloc), pool scratch included",
    "host_registration": "pinned host memory allocated and registered with the driver",
    "pattern_fill": "buffers filled with the verification patterns, and the wait for it",
    "setup": "streams and events made, peer access enabled",
    "enqueue": "the gate closed, every stream held, the warm-up and measured copies queued",
    "warmup": "the gate released, the warm-up copies run (the wait before the first start event)",
    "timed": "the measured copies: start to end event of the sample (loops x bytes / rate)",
    "interference": "simultaneous copies that outlast the measured one (a bidirectional "
    "testcase's reverse copies of twice the size): run, not timed",
    "verification": "the compare kernels queued, waited for and their result words read",
    "kernel_load": "kernels compiled (or taken from the cache) and loaded on the devices",
    "nvml": "NVML read: facts at the run's start and end, processes around each testcase",
    "sync": "a wait for a stream outside the other categories",
    "teardown": "streams, events and buffers freed, the System closed",
}


@attrs.frozen
class TraceEvent:
    """One span of work: ``category`` (a key of :data:`CATEGORIES`), the ``step`` (0-based
    position of the step's result in the report; None: outside any step), that step's
    ``testcase`` key and ``size`` (None: a fixed-size testcase, or outside a step), and its
    ``start_ns`` and ``duration_ns`` on the trace's clock."""

    category: str
    step: int | None
    testcase: str | None
    size: int | None
    start_ns: int
    duration_ns: int

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


class _Open:
    """A span being recorded: its category and where its current segment began."""

    __slots__ = ("category", "since")

    def __init__(self, category: str, since: int) -> None:
        self.category = category
        self.since = since


class Tracer:
    """Records spans as non-overlapping :class:`TraceEvent` (the module's docstring).
    ``clock`` gives seconds (``Backend.clock``); ``clock_name`` says what it is."""

    on = True

    def __init__(self, clock: Callable[[], float], clock_name: str = "monotonic") -> None:
        self._clock = clock
        self.clock_name = clock_name
        self.events: list[TraceEvent] = []
        self._stack: list[_Open] = []
        self._where: tuple[int | None, str | None, int | None] = (None, None, None)
        self._step_start: int | None = None

    def now_ns(self) -> int:
        return round(self._clock() * 1e9)

    def _emit(self, category: str, start: int, end: int) -> None:
        if end > start:
            self.events.append(TraceEvent(category, *self._where, start, end - start))

    @contextlib.contextmanager
    def span(self, category: str) -> Iterator[None]:
        """Record the body as ``category``; spans opened inside it take their time from it."""
        self.begin(category)
        try:
            yield
        finally:
            self.end()

    def begin(self, category: str) -> None:
        """Open a span of ``category`` (:meth:`span` as two calls, for a span that an exit
        stack closes); :meth:`end` closes the innermost one."""
        if category not in CATEGORIES or category == STEP:
            raise ValueError(f"unknown trace category {category!r}; allowed: {_names()}")
        now = self.now_ns()
        if self._stack:
            outer = self._stack[-1]
            self._emit(outer.category, outer.since, now)
        self._stack.append(_Open(category, now))

    def end(self) -> None:
        """Close the innermost open span (nothing open: nothing to do)."""
        if not self._stack:
            return
        end = self.now_ns()
        mine = self._stack.pop()
        self._emit(mine.category, mine.since, end)
        if self._stack:
            self._stack[-1].since = end

    def split_last(self, source: str, tail: Sequence[tuple[str, int]]) -> None:
        """Give the end of the latest ``source`` event to the ``(category, nanoseconds)`` of
        ``tail``, in that order (the wait that ran the warm-up, then the timed copies, then
        the tail of longer interference copies): the host's clock knows the wait, the GPU's
        events know how much of it each part was. Never more than the event's duration."""
        at = next((i for i in range(len(self.events) - 1, -1, -1)
                   if self.events[i].category == source), None)  # fmt: skip
        if at is None:
            return
        event = self.events[at]
        left = event.duration_ns
        parts = []
        for category, ns in reversed(tail):
            ns = max(0, min(ns, left))
            left -= ns
            parts.append(attrs.evolve(event, category=category, start_ns=event.start_ns + left,
                                      duration_ns=ns))  # fmt: skip
        parts.append(attrs.evolve(event, duration_ns=left))
        self.events[at : at + 1] = [e for e in reversed(parts) if e.duration_ns > 0]

    def begin_step(self, step: int, testcase: str, size: int | None) -> None:
        """A step starts: events from now on belong to it."""
        self._where = (step, testcase, size)
        self._step_start = self.now_ns()

    def end_step(self) -> None:
        """The step ended: its ``"testcase"`` event, start to now."""
        if self._step_start is not None:
            start, self._step_start = self._step_start, None
            self.events.append(TraceEvent(STEP, *self._where, start, self.now_ns() - start))
        self._where = (None, None, None)

    def record(self) -> dict[str, Any]:
        """The report's ``trace`` member: the clock's name and every event."""
        return trace_record(self.clock_name, self.events)


class _NoTrace(Tracer):
    """Tracing off: spans cost one call and record nothing."""

    on = False
    _NULL = contextlib.nullcontext()

    def __init__(self) -> None:
        super().__init__(lambda: 0.0, "none")

    def span(self, category: str) -> contextlib.nullcontext[None]:  # type: ignore[override]
        return self._NULL

    def split_last(self, source: str, tail: Sequence[tuple[str, int]]) -> None:
        pass

    def begin(self, category: str) -> None:
        pass

    def end(self) -> None:
        pass

    def begin_step(self, step: int, testcase: str, size: int | None) -> None:
        pass

    def end_step(self) -> None:
        pass


#: The tracer of a run that records nothing (the default).
NO_TRACE: Tracer = _NoTrace()


def trace_record(clock: str, events: list[TraceEvent]) -> dict[str, Any]:
    """A trace as the report's JSON carries it."""
    return {"clock": clock, "events": [e.as_dict() for e in events]}


def _names() -> str:
    return ", ".join(c for c in CATEGORIES if c != STEP)
