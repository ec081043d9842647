"""The simulated backend's facade: :class:`SimulatedBackend`, the whole
:class:`gpubw.backend.base.Backend` over a :class:`~gpubw.backend.sim.model.SimSystem`, and
:class:`SimEngine`, the modelled system its rank views share.

Cut from the package's ``__init__`` (which keeps the package's docstring): the facade owns
the host side: the host's virtual clock (``now``, advanced a little by every call), argument
checks, and which devices it shows; the model, memory, engine, kernels, faults, streams and
sharing it calls are the package's other modules. Build one from a preset or a JSON system
file with :func:`gpubw.backend.sim.presets.from_preset`.

**Ranks.** A :class:`SimEngine` is one modelled system (memory, streams, links, the device
clock) that several facades share: ``engine.rank_view(rank, host)`` is one simulated rank,
showing its host's devices with host-local ordinals and keeping its own host clock (ranks are
separate processes: separate clocks). One lock guards every entry into the engine, so rank
threads (:class:`gpubw.world.simulated.SimulatedCluster`) may call their views concurrently;
``engine.align_clocks`` (the cluster's ``on_step``) sets every rank's clock to the latest one
at each collective, as a barrier takes the time of its last arrival (``engine.align_group``,
its ``on_group``: the clocks of a group's ranks at the group's collectives). A plain
``SimulatedBackend(system)`` is the one view of its own engine (host 0, the whole system when
the model has a single host): single-node output is unchanged.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np

from gpubw.backend.base import Backend, DeviceInfo, KernelArg, check_launch_geometry
from gpubw.backend.sim import facts as sim_facts
from gpubw.backend.sim.engine import Engine, Stream
from gpubw.backend.sim.faults import FaultInjector, Faults
from gpubw.backend.sim.kernels import EMULATIONS, Launch, memcpy_op, repeat_copy
from gpubw.backend.sim.memory import Memory
from gpubw.backend.sim.model import SimSystem
from gpubw.backend.sim.plugin_kernels import plugin_kernel, plugin_op
from gpubw.backend.sim.sharing import Export, Multicast, SharingMixin, locked
from gpubw.backend.sim.streams import StreamsMixin
from gpubw.hw.nvml import NodeFacts
from gpubw.kernels import KERNELS
from gpubw.model.errors import CudaError, GpubwError, SimulationError, UsageError

__all__ = ["SimEngine", "SimulatedBackend"]


class SimEngine:
    """One modelled system shared by the rank views of a simulated multinode run: the
    memory, the streams and links, the device clock, the exported allocations and multicast
    objects, and the lock around all of it. ``faults`` here are the device side's (a gate
    that never opens, a hanging device); each view has its own (``rank_view(faults=)``)."""

    def __init__(self, system: SimSystem, faults: Faults | None = None) -> None:
        self.model = system
        self.injector = FaultInjector(faults if faults is not None else (system.faults or Faults()))
        self.memory = Memory(system)
        self.engine = Engine(system, self.injector)
        self.lock = threading.RLock()
        #: notified whenever device memory may have changed (a gate released elsewhere)
        self.cond = threading.Condition(self.lock)
        #: tells this engine's handles from another process's
        self.token = f"{os.getpid()}:{uuid.uuid4().hex}"
        self.exports: dict[int, Export] = {}
        self.multicasts: dict[int, Multicast] = {}
        self.views: list[SimulatedBackend] = []
        #: the views of each rank (a group collective aligns its members' clocks only)
        self.rank_views: dict[int | None, list[SimulatedBackend]] = {}
        self._ids = itertools.count(1)
        #: how a rank view waits for another rank to change device memory (a gate's flag):
        #: None, on ``cond`` (ranks as free threads); else the ranks' turn-taking (ranks that
        #: pass one baton: :meth:`gpubw.world.simulated.SimulatedCluster.pause`), which returns
        #: False once no other rank can run
        self.pause: Callable[[], bool] | None = None

    def next_id(self) -> int:
        return next(self._ids)

    def rank_view(self, rank: int, host: int, faults: Faults | None = None) -> SimulatedBackend:
        """The facade of simulated rank ``rank`` on host ``host`` (an index of the model's
        ``hosts``): that host's devices, ordinals 0..k-1, its own clock and ``faults``
        (None: the model's ``rank_faults`` of that rank, else its ``faults``)."""
        return SimulatedBackend(self.model, faults, engine=self, host=host, rank=rank)

    def align_clocks(self, step: int | None = None, name: str | None = None) -> None:
        """Set every view's host clock to the latest one (use as a SimulatedCluster's
        ``on_step``: it runs while every rank is blocked in the collective)."""
        with self.lock:
            live = [v for v in self.views if not v.closed]
            if live:
                latest = max(v._now for v in live)
                for v in live:
                    v._now = latest

    def align_group(self, ranks: tuple[int, ...]) -> None:
        """:meth:`align_clocks` for the views of ``ranks`` only (a SimulatedCluster's
        ``on_group``: a collective of those ranks alone)."""
        with self.lock:
            views = self.rank_views
            live = [v for r in ranks for v in views.get(r, ()) if not v.closed]
            if live:
                latest = max(v._now for v in live)
                for v in live:
                    v._now = latest

    def wait_for_ranks(self, deadline: float) -> bool:
        """Let another rank change device memory (call holding the lock); False once
        waiting is pointless: ``deadline`` (``time.monotonic()``) passed, or no other rank
        can run."""
        if self.pause is not None:
            # the other ranks are threads too: give up every level of the lock while they
            # take their turns, as Condition.wait does with an RLock
            saved = self.lock._release_save()  # type: ignore[attr-defined]
            try:
                return self.pause()
            finally:
                self.lock._acquire_restore(saved)  # type: ignore[attr-defined]
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        self.cond.wait(min(remaining, 0.05))
        return True

    def live_allocations(self) -> list[tuple[int, int, int | None]]:
        """(pointer, bytes, global device or None for host) of every live allocation."""
        with self.lock:
            return [(a.base, a.size, a.device) for a in self.memory.allocs.values()]


class SimulatedBackend(SharingMixin, StreamsMixin, Backend):
    """The facade over a :class:`SimSystem` (see the module docstring): the one view of its
    own engine, or (``engine=``, ``host=``, ``rank=``; see :meth:`SimEngine.rank_view`) one
    rank's view of a shared one."""

    name = "simulated"
    simulated = True

    def __init__(
        self,
        system: SimSystem,
        faults: Faults | None = None,
        *,
        engine: SimEngine | None = None,
        host: int = 0,
        rank: int | None = None,
    ) -> None:
        self.model = system
        if engine is None:
            engine = SimEngine(system, faults)
            self._injector = engine.injector
        else:
            if engine.model is not system:
                raise ValueError("a rank view must be of its engine's system")
            if faults is None:
                faults = system.faults_of_rank(rank)
            self._injector = FaultInjector(faults if faults is not None else Faults())
        self._shared = engine
        self._memory = engine.memory
        self._engine = engine.engine
        self.host = host
        self.rank = rank
        self._globals = system.host_devices(host)
        self._locals = {g: i for i, g in enumerate(self._globals)}
        if self._globals == tuple(range(len(system.devices))):
            self._devices: tuple[DeviceInfo, ...] = system.devices
        else:
            self._devices = tuple(
                attrs.evolve(system.devices[g], ordinal=i) for i, g in enumerate(self._globals)
            )
        self._now = 0.0  # host clock
        self._device_allocs_made = 0
        self._host_allocs_made = 0
        self._huge_pages_used = 0  # huge pages held by host buffers (host_huge_pages)
        self._huge_allocs: dict[int, int] = {}
        self._loaded: set[int] = set()
        self.closed = False
        self.view_id = engine.next_id()
        self._init_sharing()
        engine.views.append(self)
        engine.rank_views.setdefault(rank, []).append(self)

    @property
    def faults(self) -> Faults:
        """The faults injected from now on (assignable, e.g. between testcases)."""
        faults: Faults = self._injector.faults
        return faults

    @faults.setter
    def faults(self, value: Faults) -> None:
        self._injector.faults = value

    # -- conveniences for tests -------------------------------------------------------------
    @property
    def engine(self) -> SimEngine:
        """The engine this view belongs to (its own, unless made by ``rank_view``)."""
        engine: SimEngine = self._shared
        return engine

    @locked
    def live_allocations(self) -> list[tuple[int, int, int | None]]:
        """(pointer, bytes, device or None for host) of every allocation not yet freed (the
        whole engine's; devices of other hosts by their global ordinal)."""
        return [
            (a.base, a.size, None if a.device is None else self._locals.get(a.device, a.device))
            for a in self._memory.allocs.values()
        ]

    @locked
    def peer_access_enabled(self) -> frozenset[tuple[int, int]]:
        """Ordered pairs (a, b) for which enable_peer_access(a, b) succeeded."""
        return frozenset(
            (self._locals[a], self._locals[b])
            for a, b in self._memory.peer_enabled
            if a in self._locals and b in self._locals
        )

    @locked
    def live_streams(self) -> int:
        return sum(1 for s in self._engine.streams if not s.destroyed)

    @locked
    def live_events(self) -> int:
        return len(self._engine.events)

    @property
    def now(self) -> float:
        """The host's virtual clock, in seconds since the backend was created."""
        return self._now

    # -- system -----------------------------------------------------------------------------
    @locked
    def versions(self) -> dict[str, Any]:
        return {
            "cuda_driver": self.model.cuda_driver,
            "driver": f"{self.model.driver_version} (simulated)",
            "simulated": True,
            "system": self.model.name,
        }

    def devices(self) -> Sequence[DeviceInfo]:
        return self._devices

    @locked
    def nvlink_domain(self, device: int) -> str:
        """The model's NVLink domain of ``device``: ``nvl<index>`` (``nvlink_domains``)."""
        return self.model.domain_name(self._global(device))

    def node_facts(self) -> NodeFacts:
        """The model's NVML-like facts (:mod:`gpubw.backend.sim.facts`): the first reading
        of this backend is the ``nvml`` ones, every later one (the end of a run, between soak
        repetitions) has the model's ``nvml_end`` over them; at the host's virtual time."""
        self._fact_readings = getattr(self, "_fact_readings", 0) + 1
        later = self._fact_readings > 1
        return sim_facts.node_facts(self.model, later=later, now=self._now)

    def confidential_compute(self) -> bool | None:
        """The system file's ``"nvml": {"confidential_compute": true}`` (absent: off)."""
        return sim_facts.confidential_compute(self.model)

    def gpu_processes(self) -> dict[str, tuple[int, ...]] | None:
        specs = sim_facts.device_specs(self.model, now=self._now)
        return {
            spec["pci_bus_id"]: tuple(p if isinstance(p, int) else p["pid"] for p in procs)
            for spec in specs
            for procs in [spec.get("processes", ())]
        }

    def clock(self) -> float:
        """The host's virtual clock: a simulated run's waits and soaks are in modelled time."""
        return self._now

    def pause(self, seconds: float) -> None:
        """Let ``seconds`` of modelled time pass (a wait, without sleeping)."""
        with self._shared.lock:
            self._now += max(0.0, seconds)

    def huge_pages(self) -> tuple[int, int] | None:
        page, free = sim_facts.huge_pages(self.model)
        return page, free - self._huge_pages_used

    def _device(self, device: int, call: str = "cuDeviceGet") -> int:
        """``device`` (a local ordinal) if this facade shows it."""
        if (
            isinstance(device, bool)
            or not isinstance(device, int)
            or not (0 <= device < len(self._globals))
        ):
            raise UsageError(
                f"no device {device!r}; devices are 0..{len(self._globals) - 1} ({call})"
            )
        return device

    def _global(self, device: int, call: str = "cuDeviceGet") -> int:
        """The model's (global) ordinal of this facade's device ``device``."""
        return self._globals[self._device(device, call)]

    def _local(self, device: int) -> int:
        """This facade's ordinal of global device ``device`` (itself if not shown here)."""
        return self._locals.get(device, device)

    @locked
    def can_access_peer(self, device: int, peer: int) -> bool:
        a, b = self._device(device), self._device(peer)
        if a == b or self._injector.refuses_peer(a, b):
            return False
        return (self._globals[a], self._globals[b]) in self.model.peers

    @locked
    def enable_peer_access(self, device: int, peer: int) -> None:
        self._tick()
        a, b = self._device(device), self._device(peer)
        if a == b:
            raise CudaError("cuCtxEnablePeerAccess", "CUDA_ERROR_INVALID_DEVICE")
        if not self.can_access_peer(a, b):
            raise CudaError("cuCtxEnablePeerAccess", "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED")
        self._memory.peer_enabled.add((self._globals[a], self._globals[b]))

    @locked
    def memory_info(self, device: int) -> tuple[int, int]:
        d = self._global(device)
        return self._memory.free_bytes(d), self.model.devices[d].memory_bytes

    @locked
    def host_memory_bytes(self) -> int | None:
        return self.model.host_memory_bytes

    # -- memory -----------------------------------------------------------------------------
    @locked
    def alloc_device(self, device: int, nbytes: int) -> int:
        self._tick()
        d = self._device(device)
        if nbytes <= 0:
            raise UsageError(f"device allocation size must be positive, got {nbytes}")
        return self._alloc_shared(self._globals[d], nbytes)

    def _alloc_shared(self, g: int, size: int) -> int:
        """Device memory on global device ``g`` (injected allocation faults apply)."""
        self._injector.check_device_alloc(self._locals.get(g, -1), self._device_allocs_made)
        base = self._memory.alloc_device(g, size)
        self._device_allocs_made += 1
        return base

    @locked
    def free_device(self, pointer: int) -> None:
        self._tick()
        self._free(pointer, False, "cuMemFree")

    @locked
    def alloc_host(self, nbytes: int, device: int | None, *, numa_node: int | None = None) -> int:
        base = self._alloc_pinned(nbytes, device)
        self._place(base, device, numa_node)
        return base

    def _place(self, base: int, device: int | None, numa_node: int | None) -> None:
        """Host memory's NUMA node: ``numa_node`` if bound, else (first touch under the
        device's affinity) the device's node; None for memory near no device."""
        if numa_node is None and device is not None:
            numa_node = self._devices[device].numa_node
        self._memory.allocs[base].numa_node = numa_node

    @locked
    def alloc_pageable(
        self, nbytes: int, device: int | None, *, numa_node: int | None = None
    ) -> int:
        self._tick()
        if device is not None:
            self._device(device)
        if nbytes <= 0:
            raise UsageError(f"host allocation size must be positive, got {nbytes}")
        base = self._memory.alloc_host(nbytes)
        self._memory.allocs[base].pageable = True
        self._place(base, device, numa_node)
        return base

    @locked
    def free_pageable(self, pointer: int) -> None:
        self._tick()
        alloc = self._memory.allocs.get(pointer)
        if alloc is None or not alloc.pageable:
            raise UsageError(f"0x{pointer:x} is not pageable memory allocated by this backend")
        self._free(pointer, True, "free_pageable")

    def numa_nodes(self) -> tuple[int, ...]:
        """The modelled host's nodes: those of its devices (node 0 where none is given)."""
        return tuple(sorted({0 if d.numa_node is None else d.numa_node for d in self._devices}))

    @locked
    def host_numa_node(self, pointer: int) -> int | None:
        found = self._memory.find(pointer, 1)
        return None if found is None else found[0].numa_node

    def _alloc_pinned(self, nbytes: int, device: int | None) -> int:
        self._tick()
        if device is not None:
            self._device(device)
        if nbytes <= 0:
            raise UsageError(f"host allocation size must be positive, got {nbytes}")
        self._injector.check_host_alloc(self._host_allocs_made)
        pages = 0
        if self.host_huge_pages:  # what mmap(MAP_HUGETLB) would do: fail when none are left
            page, free = sim_facts.huge_pages(self.model)
            pages = -(-nbytes // page)
            if pages > free - self._huge_pages_used:
                raise GpubwError(
                    f"mmap(MAP_HUGETLB) of {nbytes} bytes failed: ENOMEM ({pages} huge pages "
                    f"needed, {free - self._huge_pages_used} free; simulated)"
                )
        base = self._memory.alloc_host(nbytes)
        self._host_allocs_made += 1
        if pages:
            self._huge_pages_used += pages
            self._huge_allocs[base] = pages
        return base

    @locked
    def free_host(self, pointer: int) -> None:
        self._tick()
        self._huge_pages_used -= self._huge_allocs.pop(pointer, 0)
        self._free(pointer, True, "cuMemFreeHost")

    def _free(self, pointer: int, host: bool, call: str) -> None:
        alloc = self._memory.lookup(pointer, host, call)
        self._engine.advance(self._now)  # work already finished may still read it
        self._memory.remove(alloc)

    @locked
    def host_write(self, pointer: int, data: bytes) -> None:
        self._tick()
        self._engine.advance(self._now)
        if not data:
            return
        alloc, off = self._memory.host_range(pointer, len(data), "host_write")
        self._memory.write(alloc, off, np.frombuffer(bytes(data), dtype=np.uint8))
        self._engine.release_gates()  # a released flag lets waiting gates go
        self._shared.cond.notify_all()

    @locked
    def host_read(self, pointer: int, nbytes: int) -> bytes:
        self._tick()
        self._engine.advance(self._now)
        if nbytes <= 0:
            return b""
        alloc, off = self._memory.host_range(pointer, nbytes, "host_read")
        return self._memory.read(alloc, off, nbytes).tobytes()

    # -- work -------------------------------------------------------------------------------
    def _launch(self, s: Stream, grid: int = 1, block: int = 1) -> Launch:
        return Launch(
            self.model, self._memory, self._engine, self._injector, s, self._now, grid, block
        )

    @locked
    def memcpy_async(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        self._tick()
        s = self._stream(stream, "cuMemcpyAsync")
        if nbytes <= 0:
            return
        if repeat_copy(self._engine, s, dst, src, nbytes, self._now):
            self._engine.advance(self._now)  # as enqueue does: behind work, so nothing starts
            return
        op = memcpy_op(self._launch(s), dst, src, nbytes)
        self._engine.enqueue(s, op, self._now)

    @locked
    def load_kernels(self, device: int) -> None:
        self._tick()
        self._loaded.add(self._global(device))

    @locked
    def launch(
        self, kernel: str, grid: int, block: int, args: Sequence[KernelArg], stream: Any
    ) -> None:
        self._tick()
        spec = KERNELS.get(kernel)
        simulate = None
        if spec is None:
            module, spec = plugin_kernel(kernel)
            simulate = module.simulate.get(kernel)
            if simulate is None:
                raise SimulationError(
                    f"kernel {kernel!r} of module {module.name!r} has no simulation, so it "
                    "cannot run on the simulated backend"
                )
        if len(args) != len(spec.params) or any(
            not isinstance(a, KernelArg) or a.ctype != p for a, p in zip(args, spec.params)
        ):
            got = ", ".join(getattr(a, "ctype", type(a).__name__) for a in args)
            raise UsageError(f"{kernel} takes ({', '.join(spec.params)}), got ({got})")
        check_launch_geometry(kernel, grid, block)
        s = self._stream(stream, f"cuLaunchKernel({kernel})")
        if s.device not in self._loaded:
            d = self._local(s.device)
            raise UsageError(f"kernels are not loaded on device {d}; call load_kernels({d}) first")
        values = [a.value for a in args]
        call = self._launch(s, int(grid), int(block))
        if simulate is not None:
            op = plugin_op(call, kernel, simulate, values)
        else:
            op = EMULATIONS[kernel](call, *values)
        failing = self._injector.kernel_failure(kernel)
        if failing is not None:
            op.effect = failing
        self._engine.enqueue(s, op, self._now)

    # -- host clock and teardown ------------------------------------------------------------
    def _tick(self) -> None:
        self._now += self.model.overheads.host_call

    @locked
    def close(self) -> None:
        """Release this view's shared memory (imports, exports, multicast parts) left behind;
        other streams and memory stay visible to :meth:`live_allocations` (System.close frees
        what it handed out). The first failure is raised after all were tried."""
        if self.closed:
            return
        errors = self._release_sharing()
        self.closed = True
        if errors:
            raise errors[0]
