"""The run-scoped owner of CUDA state: backend, devices, peer access, patterns, buffer pool.

A :class:`System` is created once per run (by the runner) and handed to every testcase. It
owns everything that outlives one measurement, and :meth:`System.close` frees all of it,
including buffers a failed testcase left behind, so a run never leaks device or pinned memory.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence

from gpubw.backend.base import Backend, DeviceInfo
from gpubw.kernels.modules import (
    GPUBW,
    PROTOCOL,
    KernelModule,
    generation,
    register_kernel_module,
)
from gpubw.kernels.patterns import DST_SEED, SRC_SEED, pattern_bytes
from gpubw.memory import selection
from gpubw.memory.gate import Gate
from gpubw.memory.pool import BufferPool
from gpubw.memory.sharing import Sharing
from gpubw.model.options import RunOptions
from gpubw.model.trace import NO_TRACE, Tracer
from gpubw.world import SingleWorld, World, device_assignment
from gpubw.world.launch_env import driven_devices

__all__ = ["DST_SEED", "SRC_SEED", "System", "pattern_bytes"]


class System:
    """Backend + devices + the run's buffer pool, gate and caches. Use as a context manager or
    call :meth:`close`."""

    def __init__(
        self, backend: Backend, options: RunOptions | None = None, *, world: World | None = None
    ) -> None:
        self.backend = backend
        self.options = options or RunOptions()
        self.devices: Sequence[DeviceInfo] = tuple(backend.devices())
        if self.options.host_huge_pages:  # refuse now when the host has too few
            backend.enable_host_huge_pages(max(self.options.buffer_sizes))
        #: where the run's time goes (--trace; :data:`NO_TRACE` records nothing), on the
        #: backend's clock (the simulated one's is modelled time)
        self.trace: Tracer = NO_TRACE
        if self.options.trace:
            clock = "simulated" if getattr(backend, "simulated", False) else "monotonic"
            self.trace = Tracer(backend.clock, clock)
        #: every buffer's memory, the run's scratch, patterns and the gate page
        self.pool = BufferPool(backend, self.devices, self.options)
        self.pool.trace = self.trace
        self._world: World = world if world is not None else SingleWorld()
        #: the devices this process drives: every one, except on an MPI rank that is not its
        #: host's first, which runs only the multinode testcases, on :attr:`rank_device`
        #: (kernels are loaded, sizes checked and contexts made only on these; the pool's
        #: device-less host memory is made in the first one's context)
        self.driven_devices: tuple[int, ...] = driven_devices(
            len(self.devices), self.world.local_rank, several_ranks=self.world.size > 1
        )
        self.pool.home_device = self.driven_devices[0] if self.driven_devices else 0
        #: the spin gate (its page belongs to the pool)
        self.gate: Gate = self.pool.gate
        #: kernel-module registry generation the devices were loaded at (None: not yet)
        self._kernels_loaded: int | None = None
        #: whether a testcase declared its kernel modules (:meth:`load_kernel_modules`)
        self._declared = False
        self._sharing: Sharing | None = None
        self._before_close: list[Callable[[], None]] = []
        #: the GPUs to measure (--devices, --pair); None: every GPU (see :meth:`select_devices`)
        self.selection: frozenset[int] | None = None
        self.closed = False

    @property
    def world(self) -> World:
        """The ranks of the run (one rank holding every local GPU without an MPI launcher):
        a System is made for one world and never re-targeted (no setter)."""
        return self._world

    @property
    def rank_device(self) -> int:
        """The device this rank drives in the multinode testcases: its local rank modulo the
        local device count (:func:`gpubw.world.device_assignment`)."""
        return device_assignment(self.world, self.device_count).device

    @property
    def sharing(self) -> Sharing:
        """Device memory shared across the world's ranks (made on first use; the handle kind
        is agreed by the ranks at the first shared buffer)."""
        if self._sharing is None:
            self._sharing = Sharing(
                self.pool, self.world, self.rank_device, prefer=self.options.handle_type
            )
        return self._sharing

    @property
    def handle_kind(self) -> str | None:
        """The handle kind the ranks agreed on, None if nothing was shared."""
        return None if self._sharing is None else self._sharing.agreed_kind

    # -- devices and peers ----------------------------------------------------------------
    @property
    def device_count(self) -> int:
        return len(self.devices)

    def confidential_compute(self) -> bool | None:
        """Whether host <-> device copies go through Confidential Computing's encrypted
        bounce buffers (:meth:`gpubw.backend.base.Backend.confidential_compute`; asked
        once); None: unknown."""
        if not hasattr(self, "_confidential_compute"):
            self._confidential_compute = self.backend.confidential_compute()
        return self._confidential_compute

    def can_access_peer(self, device: int, peer: int) -> bool:
        """One-directional probe, cached (``device`` can read/write ``peer``'s memory)."""
        return self.pool.peers.can_access(device, peer)

    def peer_pairs(self) -> list[tuple[int, int]]:
        """Every ordered pair (a, b), a != b, where a can access b."""
        return self.pool.peers.pairs()

    def enable_peer_access(self, a: int, b: int) -> None:
        """Enable access both ways between devices a and b (nvbandwidth probes one way and
        enables both). Idempotent."""
        with self.trace.span("setup"):
            self.pool.peers.enable(a, b)

    def select_devices(self, *, lenient: bool = False) -> tuple[str, ...]:
        """Resolve the options' ``devices`` (:mod:`gpubw.memory.selection`) into
        :attr:`selection`; UsageError for a token that names no GPU. Returns the tokens that
        name none of this process's GPUs (only with ``lenient``: under MPI another rank's)."""
        tokens = self.options.devices
        if tokens is None:
            self.selection = None
            return ()
        flag = "--pair" if self.options.device_pair else "--devices"
        found = selection.resolve(tokens, self.devices, flag=flag, lenient=lenient)
        self.selection = found.ordinals
        return found.unmatched

    def selected(self, device: int) -> bool:
        """Whether ``device`` is measured in this run (every one without --devices)."""
        return self.selection is None or device in self.selection

    def load_kernel_modules(self, modules: Iterable[KernelModule]) -> None:
        """Make the kernels of ``modules`` (what a testcase declares in ``kernel_modules``)
        and gpubw's protocol kernels (:data:`gpubw.kernels.modules.PROTOCOL`: the spin gate,
        fill, verify) launchable on every device this process drives
        (:attr:`driven_devices`), before anything is gated: each is registered
        (:func:`gpubw.kernels.modules.register_kernel_module`; PluginError on a clash) and
        the backend loads, once per device, whatever it has not loaded yet. A copy-engine
        testcase declares no module, so it never waits for gpubw's copy kernels (gpubw.cu,
        on a cold kernel cache still compiling in the background)."""
        self._declared = True
        self._load((PROTOCOL, *modules))

    def load_kernels(self) -> None:
        """What a measurement calls before it gates a stream: gpubw's protocol kernels and
        whatever else is registered, once per device; on a System no testcase declared its
        modules to (:meth:`load_kernel_modules`: code that measures without the runner), also
        gpubw's copy kernels (:data:`gpubw.kernels.modules.GPUBW`), as nothing says which it
        launches."""
        self._load((PROTOCOL,) if self._declared else (PROTOCOL, GPUBW))

    def _load(self, modules: Iterable[KernelModule]) -> None:
        """Register ``modules`` and load what the registry has that the devices lack."""
        for module in modules:
            register_kernel_module(module)
        current = generation()
        if self._kernels_loaded != current:
            with self.trace.span("kernel_load"):
                for ordinal in self.driven_devices:
                    self.backend.load_kernels(ordinal)
            self._kernels_loaded = current

    # -- affinity ---------------------------------------------------------------------------
    def near(self, device: int | None) -> contextlib.AbstractContextManager[None]:
        """Run the body with the CPU affinity set to ``device``'s local CPUs (if known and not
        disabled with ``-d``), then restore it (see :meth:`BufferPool.near`)."""
        return self.pool.near(device)

    # -- buffers --------------------------------------------------------------------------
    def release_leaked(self) -> int:
        """Really free every buffer still handed out (the runner calls this after each
        testcase, so one that failed or leaked does not hold memory for the rest of the
        run); returns how many there were."""
        return self.pool.release_leaked()

    def release_pool(self) -> None:
        """Really free every idle pooled buffer (the runner calls this after a testcase that
        failed, so that device and pinned memory are back where they were before it)."""
        self.pool.release_idle()

    @property
    def live_buffers(self) -> int:
        """Buffers handed out and not closed (idle pooled buffers not counted)."""
        return self.pool.live_buffers

    def pattern(self, device: int, seed: int) -> int:
        """Device pointer to the 2 MiB verification pattern of ``seed`` on ``device``."""
        return self.pool.pattern(device, seed)

    # -- teardown -------------------------------------------------------------------------
    def before_close(self, hook: Callable[[], None]) -> None:
        """Call ``hook()`` first thing in :meth:`close`, while everything is still open (the
        run's end-of-run NVML facts are read there, in the backend's NVML session); its
        failure is raised after everything was freed, like a failure to free."""
        self._before_close.append(hook)

    def close(self) -> None:
        """Free everything: handed-out and idle buffers, patterns, gate, scratch; then the
        backend's own resources (also when freeing failed). Safe to call twice."""
        if self.closed:
            return
        self.closed = True
        with self.trace.span("teardown"):
            self._close()

    def _close(self) -> None:
        """:meth:`close`'s work: the hooks, sharing, the pool, the backend."""
        errors: list[BaseException] = []
        for hook in self._before_close:
            try:
                hook()
            except BaseException as exc:
                errors.append(exc)
        if self._sharing is not None:
            try:
                self._sharing.close()
            except BaseException as exc:
                errors.append(exc)
        try:
            self.pool.close()
        except BaseException as exc:
            errors.append(exc)
        try:
            self.backend.close()
        except BaseException as exc:
            errors.append(exc)
        if errors:
            raise errors[0]

    def __enter__(self) -> System:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
