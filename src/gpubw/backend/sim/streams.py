"""The simulated backend's streams and events: create, record, wait, time and synchronize
(a mixin of :class:`gpubw.backend.sim.backend.SimulatedBackend`).

Cut from the facade along its sections: the facade keeps the host side (the clock, devices,
memory, launches); this mixin checks the stream and event handles a caller passes and puts
their operations on the engine's streams (:mod:`gpubw.backend.sim.engine`). ``synchronize``
is where a rank waits for another rank that must release its gate, and where a gate that
never opens becomes a :class:`~gpubw.model.errors.GateTimeoutError`.
"""

from __future__ import annotations

import time
from typing import Any

from gpubw.backend.sim.engine import Engine, Event, Op, Stream
from gpubw.backend.sim.faults import FaultInjector
from gpubw.backend.sim.sharing import locked
from gpubw.model.errors import CudaError, GateTimeoutError, UsageError


class StreamsMixin:
    """Streams and events for a :class:`gpubw.backend.sim.backend.SimulatedBackend` view
    (which provides the attributes used here)."""

    _shared: Any  # the view's SimEngine
    _engine: Engine
    _injector: FaultInjector
    _now: float

    # provided by SimulatedBackend
    def _global(self, device: int, call: str = "cuDeviceGet") -> int:
        raise NotImplementedError

    def _local(self, device: int) -> int:
        raise NotImplementedError

    def _tick(self) -> None:
        raise NotImplementedError

    @locked
    def create_stream(self, device: int) -> Stream:
        self._tick()
        return self._engine.new_stream(self._global(device, "cuStreamCreate"), self._now)

    def _stream(self, stream: Any, call: str) -> Stream:
        if not isinstance(stream, Stream):
            raise UsageError(f"not a stream of the simulated backend: {stream!r}")
        if stream.destroyed:
            raise CudaError(call, "CUDA_ERROR_INVALID_HANDLE", "the stream was destroyed")
        return stream

    def _event(self, event: Any, call: str) -> Event:
        if not isinstance(event, Event):
            raise UsageError(f"not an event of the simulated backend: {event!r}")
        if event.destroyed:
            raise CudaError(call, "CUDA_ERROR_INVALID_HANDLE", "the event was destroyed")
        return event

    @locked
    def destroy_stream(self, stream: Any) -> None:
        self._tick()
        if isinstance(stream, Stream) and stream.destroyed:
            return
        s = self._stream(stream, "cuStreamDestroy")
        self._engine.destroy(s)  # pending work still runs, as with the driver
        self._engine.advance(self._now)

    @locked
    def create_event(self, device: int) -> Event:
        self._tick()
        return self._engine.new_event(self._global(device, "cuEventCreate"))

    @locked
    def destroy_event(self, event: Any) -> None:
        self._tick()
        if isinstance(event, Event) and event.destroyed:
            return
        e = self._event(event, "cuEventDestroy")
        e.destroyed = True
        self._engine.events.discard(e)

    @locked
    def record_event(self, event: Any, stream: Any) -> None:
        self._tick()
        e = self._event(event, "cuEventRecord")
        s = self._stream(stream, "cuEventRecord")
        op = Op("record", self._now, "record")
        op.event = e
        e.last = op
        self._engine.enqueue(s, op, self._now)

    @locked
    def wait_event(self, stream: Any, event: Any) -> None:
        self._tick()
        s = self._stream(stream, "cuStreamWaitEvent")
        e = self._event(event, "cuStreamWaitEvent")
        op = Op("wait", self._now, "wait")
        op.record = e.last  # CUDA waits on the most recent record at the time of the call
        self._engine.enqueue(s, op, self._now)

    @locked
    def elapsed_seconds(self, start: Any, end: Any) -> float:
        self._tick()
        self._engine.advance(self._now)
        a = self._event(start, "cuEventElapsedTime")
        b = self._event(end, "cuEventElapsedTime")
        for e in (a, b):
            if e.last is None:
                raise CudaError("cuEventElapsedTime", "CUDA_ERROR_INVALID_HANDLE", "never recorded")
            if not e.last.done:
                raise CudaError("cuEventElapsedTime", "CUDA_ERROR_NOT_READY")
        assert a.time is not None and b.time is not None
        return b.time - a.time

    @locked
    def synchronize(self, stream: Any, timeout_s: float) -> None:
        self._tick()
        s = self._stream(stream, "cuStreamSynchronize")
        if len(self._shared.views) > 1:
            # A gate whose flag another rank releases: wait for that rank (real time,
            # bounded), rather than run the virtual clock into a false gate timeout.
            deadline = time.monotonic() + timeout_s
            while self._engine.held_remotely(s) and self._shared.wait_for_ranks(deadline):
                pass
            # other ranks may have run the device side past this rank's clock: its wait
            # starts no earlier than that (the bound is then not spent on the past)
            self._now = max(self._now, self._engine.t)
        limit = self._now + timeout_s
        done = self._engine.advance(limit, until=s.idle)
        self._shared.cond.notify_all()
        if not done:
            self._now = max(self._now, limit)
            raise GateTimeoutError(
                f"a stream on device {self._local(s.device)} did not finish within "
                f"{timeout_s:g} s "
                "(a spin gate never released, or the copies are far slower than expected)"
                + (" [simulated hang]" if self._injector.faults.sync_hang else "")
            )
        self._now = max(self._now, self._engine.t)
        if s.error is not None:
            err, s.error = s.error, None
            raise err
