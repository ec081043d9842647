"""Plugin kernels on the simulated backend: a plugin module's kernel runs through its
module's ``simulate`` function (:mod:`gpubw.kernels.modules`), which sees the launch as a
:class:`gpubw.kernels.modules.SimulatedLaunch` (:class:`PluginLaunch`) and reports its traffic,
which sets the launch's duration.

Cut from :mod:`gpubw.backend.sim.kernels` (the built-in kernels' emulations) along that seam.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gpubw.backend.sim.engine import Op, Stream
from gpubw.backend.sim.kernels import Launch
from gpubw.backend.sim.memory import Memory
from gpubw.backend.sim.model import SimSystem, local_seconds
from gpubw.model.errors import GpubwError, PluginError, UsageError


def plugin_kernel(kernel: str) -> tuple[Any, Any]:
    """The registered plugin module and spec of ``kernel`` (UsageError if none)."""
    try:
        from gpubw.kernels.modules import find_kernel
    except ImportError:  # pragma: no cover - core without plugin kernel modules
        raise UsageError(f"unknown kernel {kernel!r}") from None
    try:
        return find_kernel(kernel)
    except KeyError:
        raise UsageError(f"unknown kernel {kernel!r}") from None


def plugin_op(c: Launch, kernel: str, simulate: Callable[..., None], values: list[int]) -> Op:
    """A plugin kernel: its simulate function runs when the launch starts (reading and
    writing the memory the backend holds) and reports the launch's traffic, which sets its
    duration."""
    op = Op("plugin", c.now, kernel)
    jit = c.engine.jitter()

    def run() -> float:
        launch = PluginLaunch(c.model, c.memory, c.stream, c.grid, c.block)
        try:
            simulate(launch, *values)
        except GpubwError:
            raise
        except Exception as exc:
            raise PluginError(f"the simulation of kernel {kernel!r} failed: {exc!r}") from exc
        return c.model.overheads.kernel_launch + launch.seconds() / jit

    op.effect = None
    op.prepare = run
    return op


class PluginLaunch:
    """One launch of a plugin kernel, as its simulate function sees it
    (:class:`gpubw.kernels.modules.SimulatedLaunch`)."""

    def __init__(
        self, model: SimSystem, memory: Memory, stream: Stream, grid: int, block: int
    ) -> None:
        self._model = model
        self._memory = memory
        self.device = stream.device
        self.grid = grid
        self.block = block
        self._traffic: dict[tuple[str, int | None], float] = {}

    def read(self, pointer: int, nbytes: int) -> bytes | None:
        alloc, off = self._memory.device_view(self.device, pointer, nbytes)
        if alloc.data is None:
            return None
        return alloc.data[off : off + nbytes].tobytes()

    def holds(self, pointer: int, nbytes: int) -> bool:
        found = self._memory.find(pointer, nbytes)
        return found is not None and found[0].data is not None

    def write(self, pointer: int, data: bytes) -> None:
        alloc, off = self._memory.device_view(self.device, pointer, len(data))
        if alloc.data is not None and data:
            self._memory.write(alloc, off, np.frombuffer(bytes(data), dtype=np.uint8))

    def traffic(self, pointer: int, *, read: int = 0, written: int = 0) -> None:
        alloc, _ = self._memory.device_view(self.device, pointer, 1)
        where = alloc.device
        for direction, nbytes in (("read", read), ("written", written)):
            if nbytes:
                key = (direction, where)
                self._traffic[key] = self._traffic.get(key, 0.0) + nbytes

    def seconds(self) -> float:
        """How long the reported traffic takes: each path at its rate, paths in parallel;
        this device's memory serves its reads and writes together as
        :func:`~gpubw.backend.sim.model.local_seconds` says."""
        model = self._model
        d = self.device
        own = (self._traffic.get((k, d), 0.0) for k in ("read", "written"))
        per_path: dict[Any, float] = {("mem", d): local_seconds(model, *own)}
        for (direction, where), nbytes in self._traffic.items():
            if where is None:
                key: Any = (direction, None)
                link = model.host_links[d]
                rate = link.h2d.sm if direction == "read" else link.d2h.sm
            elif where != d:
                key = (direction, where)
                src, dst = (where, d) if direction == "read" else (d, where)
                peer = model.peer_rate(src, dst)
                rate = peer.sm if peer is not None else model.host_links[d].h2d.sm
            else:
                continue
            per_path[key] = per_path.get(key, 0.0) + nbytes / rate
        return max(per_path.values())
