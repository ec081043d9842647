"""Test support: N simulated ranks in one process over ONE simulated backend.

Each rank (a thread of :class:`gpubw.world.SimulatedCluster`) gets a :class:`RankBackend`, a
view of one shared :class:`SimulatedBackend` whose every call holds one lock. Memory
"exported" by a rank is an ordinary allocation of the shared backend and its "import" the
same pointer (one address space), so the ranks' copies meet in one engine, as on a machine
where every rank's GPU is one of the model's devices. A ``synchronize`` on a stream still
held by a cross-rank gate waits (wall clock, lock released) until the first rank released
it, instead of running virtual time into a false gate timeout.

This stands in for the backend's own N-rank engine in the tests of the cross-rank protocol;
it is not a user feature.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from gpubw.backend.base import FABRIC, HANDLE_KINDS, HandleProbe
from gpubw.backend.sim import SimulatedBackend
from gpubw.options import RunOptions
from gpubw.system import System
from gpubw.world import World
from gpubw.world.simulated import SimulatedCluster

#: how long a synchronize waits for another rank to release its gate (wall clock)
GATE_WAIT_S = 20.0


class RankBackend:
    """One rank's view of the shared backend (all its devices; the rank uses its own)."""

    def __init__(self, shared: SimulatedBackend, lock: threading.RLock, fail: dict) -> None:
        self._shared = shared
        self._lock = lock
        self._fail = fail
        self.rank = -1

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._shared, name)
        if not callable(target):
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return target(*args, **kwargs)

        return call

    @contextlib.contextmanager
    def stream(self, device: int) -> Iterator[Any]:
        s = self.create_stream(device)
        try:
            yield s
        finally:
            self.destroy_stream(s)

    @contextlib.contextmanager
    def event(self, device: int) -> Iterator[Any]:
        e = self.create_event(device)
        try:
            yield e
        finally:
            self.destroy_event(e)

    # -- sharing in one address space ------------------------------------------------------
    def handle_probes(self, device: int) -> tuple[HandleProbe, ...]:
        return tuple(HandleProbe(k, k == FABRIC, "" if k == FABRIC else "n/a") for k in HANDLE_KINDS)

    def shared_granularity(self, device: int, kind: str) -> int:
        return 4096

    def export_device(self, device: int, nbytes: int, kind: str) -> tuple[int, Any]:
        with self._lock:
            ptr = self._shared.alloc_device(device, -(-nbytes // 4096) * 4096)
        return ptr, ("sim", ptr, device)

    def import_device(self, device: int, handle: Any, kind: str, nbytes: int) -> int:
        if self._fail.get("import") == self.rank:
            from gpubw.errors import CudaError

            raise CudaError("cuMemImportFromShareableHandle", "CUDA_ERROR_NOT_PERMITTED")
        with self._lock:  # one address space: map = let this device reach the owner's
            if handle[2] != device:
                self._shared.enable_peer_access(device, handle[2])
        return int(handle[1])

    def close_import(self, pointer: int) -> None:
        return None

    def free_exported(self, pointer: int) -> None:
        with self._lock:
            self._shared.free_device(pointer)

    # -- streams held by another rank's gate -------------------------------------------------
    def synchronize(self, stream: Any, timeout_s: float) -> None:
        deadline = time.monotonic() + GATE_WAIT_S
        while time.monotonic() < deadline:
            with self._lock:
                if not _held(stream):
                    break
            time.sleep(0.0005)
        with self._lock:
            self._shared.synchronize(stream, timeout_s)

    def close(self) -> None:
        """The shared backend is closed by whoever made it."""


def _held(stream: Any) -> bool:
    """Whether ``stream`` waits at a gate whose flag is not released yet."""
    ops = [stream.cur, *stream.queue]
    for op in ops:
        if op is None or op.done:
            continue
        if op.kind == "gate" and op.probe is not None and op.end is None:
            return not op.probe()
    return False


def ranked_systems(
    preset: str, options: RunOptions, fail: dict | None = None
) -> tuple[SimulatedBackend, Callable[[World], System]]:
    """(the shared backend, a function that opens a rank's System in its world)."""
    from gpubw.backend.presets import load_system

    model = attrs.evolve(load_system(preset), jitter=0.0)  # figures independent of thread order
    shared = SimulatedBackend(model)
    lock = threading.RLock()

    def open_for(world: World) -> System:
        view = RankBackend(shared, lock, fail or {})
        view.rank = world.rank
        return System(view, options, world=world)  # type: ignore[arg-type]

    return shared, open_for


def run_ranks(
    preset: str,
    ranks: int,
    fn: Callable[[System], Any],
    options: RunOptions,
    fail: dict | None = None,
    timeout_s: float = 30.0,
) -> list[Any]:
    """``fn(system)`` on every rank of a one-host cluster of ``ranks``; the outcomes."""
    shared, open_for = ranked_systems(preset, options, fail)
    cluster = SimulatedCluster(hosts=[ranks], timeout_s=timeout_s)

    def body(world: World) -> Any:
        with open_for(world) as system:
            return fn(system)

    try:
        return cluster.run(body)
    finally:
        shared.close()
