"""The backend facade: the only layer that talks to CUDA (or to a simulated system).

Two implementations exist: :class:`gpubw.backend.cuda.CudaBackend` (the real driver, through
``cuda.bindings.driver`` and NVRTC via ``cuda.core``) and
:class:`gpubw.backend.sim.backend.SimulatedBackend` (a modelled system, for CI and ``--simulate``).
Everything above this layer (buffers, initiators, measurement, testcases) is written against
:class:`Backend` only, so the same testcase code runs on both.

Handles (pointers, streams, events) are opaque to callers: pointers are ``int`` device or
host addresses (unified addressing), streams and events are whatever the backend returns.
A stream belongs to one device; work enqueued on it runs in that device's primary context.

Memory shared across ranks (processes, possibly on other hosts) goes through four more
calls: the owner exports an allocation (:meth:`Backend.export_device`) and sends the
picklable handle to the others, who :meth:`Backend.import_device` it; importers
:meth:`Backend.close_import`, then the owner :meth:`Backend.free_exported`. A POSIX-fd
handle also needs its file descriptor in the importing process: the owner serves
:meth:`Backend.exported_fd` over a Unix socket (:mod:`gpubw.world.fds`, SCM_RIGHTS) and the
importer passes the duplicate it received as ``fd``. Which handle kind works on this
machine is probed with :meth:`Backend.handle_probes`. NVLink multicast objects
(``multicast_*``) are created only where :func:`multicast_disabled` says nothing disables
them; both backends check it before any multicast call.
"""

from __future__ import annotations

import abc
import contextlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from gpubw.hw.nvml import NodeFacts
from gpubw.hw.nvml_read import Session
from gpubw.model.devices import DeviceInfo as DeviceInfo
from gpubw.model.devices import pci_short as pci_short
from gpubw.model.errors import CudaError, UsageError

#: Kinds of shareable handle for device memory, best first: CUDA fabric handles (across
#: hosts, need the IMEX service and a channel), POSIX file descriptors (one host; the
#: descriptor is passed over a Unix socket, :mod:`gpubw.world.fds`), legacy CUDA IPC handles
#: (one host, ``cuMemAlloc`` memory).
FABRIC = "fabric"
POSIX_FD = "posix-fd"
IPC = "ipc"
HANDLE_KINDS = (FABRIC, POSIX_FD, IPC)
#: The level of each kind; ranks agree on the minimum of their best levels.
HANDLE_LEVELS = {IPC: 0, POSIX_FD: 1, FABRIC: 2}

#: Environment settings under which NVLink multicast must never be used (creating multicast
#: objects on shared machines can take their GPUs out of service).
MULTICAST_OFF = (
    ("NCCL_NVLS_ENABLE", "0"),
    ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
    ("NVSHMEM_DISABLE_NVLS", "1"),
    ("GPUBW_DISABLE_MULTICAST", "1"),
)


def multicast_disabled(environ: Mapping[str, str] | None = None) -> str:
    """The setting that disables NVLink multicast here (e.g. ``"NCCL_NVLS_ENABLE=0"``), or
    "" if none does."""
    env = os.environ if environ is None else environ
    for name, value in MULTICAST_OFF:
        if env.get(name, "").strip() == value:
            return f"{name}={value}"
    return ""


def check_multicast_allowed(call: str) -> None:
    """Raise :class:`CudaError` (``CUDA_ERROR_NOT_PERMITTED``) from ``call`` if the
    environment disables multicast: the last guard before any multicast driver call."""
    setting = multicast_disabled()
    if setting:
        raise CudaError(
            call,
            "CUDA_ERROR_NOT_PERMITTED",
            f"NVLink multicast is disabled here ({setting}); gpubw never creates multicast "
            "objects then",
        )


def check_handle_kind(kind: str) -> str:
    """``kind`` if it is one of :data:`HANDLE_KINDS`, else ValueError naming them."""
    if kind not in HANDLE_KINDS:
        raise ValueError(f"unknown handle kind {kind!r}; kinds are {', '.join(HANDLE_KINDS)}")
    return kind


@attrs.frozen
class HandleProbe:
    """Whether device memory of one handle kind can be exported here (``ok``), and if not,
    why (``error``, e.g. ``cuMemExportToShareableHandle: CUDA_ERROR_NOT_PERMITTED``)."""

    kind: str
    ok: bool
    error: str = ""


@attrs.frozen
class KernelArg:
    """One kernel argument: a value and its C type ("ptr", "u64", "u32", "i32")."""

    ctype: str
    value: int


#: The most blocks of one launch (CUDA's grid x limit).
MAX_GRID = (1 << 31) - 1


def check_launch_geometry(kernel: str, grid: int, block: int) -> None:
    """Refuse a launch shape CUDA cannot run (both backends call this first): UsageError
    naming the kernel, the value and the allowed range."""
    if not 1 <= int(grid) <= MAX_GRID:
        raise UsageError(f"grid of {kernel} must be in 1..{MAX_GRID}, got {grid}")
    if not 1 <= int(block) <= 1024:
        raise UsageError(f"block of {kernel} must be in 1..1024, got {block}")


def ptr(value: int) -> KernelArg:
    return KernelArg("ptr", int(value))


def u64(value: int) -> KernelArg:
    return KernelArg("u64", int(value))


def u32(value: int) -> KernelArg:
    return KernelArg("u32", int(value))


def i32(value: int) -> KernelArg:
    return KernelArg("i32", int(value))


class Backend(abc.ABC):
    """The checked facade. Every method raises :class:`gpubw.model.errors.CudaError` (or
    :class:`gpubw.model.errors.SimulationError`) on failure; nothing returns an error code."""

    #: "cuda" or "simulated"
    name: str = "abstract"
    #: True for the simulated backend; every report it produces says so.
    simulated: bool = False

    # -- system ---------------------------------------------------------------------------
    @abc.abstractmethod
    def versions(self) -> dict[str, Any]:
        """{'cuda_driver': int (e.g. 13000), 'driver': str ('580.159.04'), ...}."""

    @abc.abstractmethod
    def devices(self) -> Sequence[DeviceInfo]:
        """All visible devices, in driver order."""

    @abc.abstractmethod
    def can_access_peer(self, device: int, peer: int) -> bool:
        """Whether ``device`` can access memory on ``peer`` (one direction)."""

    @abc.abstractmethod
    def enable_peer_access(self, device: int, peer: int) -> None:
        """Let ``device``'s context access ``peer``'s memory. Already-enabled is not an error."""

    @abc.abstractmethod
    def memory_info(self, device: int) -> tuple[int, int]:
        """(free, total) bytes of device memory."""

    def host_memory_bytes(self) -> int | None:
        """Physical host memory in bytes (None where unknown): the largest pinned buffer
        that could ever be allocated. The runner refuses larger buffer sizes up front."""
        try:
            return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
        except (AttributeError, OSError, ValueError):
            return None

    # -- node facts (NVML) and host huge pages ---------------------------------------------
    #: host buffers come from huge pages (set by :meth:`enable_host_huge_pages`)
    host_huge_pages: bool = False

    @property
    def nvml(self) -> Session:
        """The backend's NVML session (:class:`gpubw.hw.nvml_read.Session`: made by
        :meth:`_new_nvml_session` on first use, shut down by :meth:`close`)."""
        session: Session | None = self.__dict__.get("_nvml_session")
        if session is None:
            session = self.__dict__["_nvml_session"] = self._new_nvml_session()
        return session

    def _new_nvml_session(self) -> Session:
        """A new NVML session (a backend may hand over one made ready elsewhere)."""
        return Session()

    def node_facts(self) -> NodeFacts:
        """Facts about the node from NVML (:meth:`gpubw.hw.nvml_read.Session.facts`); never
        raises."""
        return self.nvml.facts()

    def confidential_compute(self) -> bool | None:
        """Whether Confidential Computing is on, so host <-> device copies go through
        encrypted bounce buffers (NVML's CC feature); None where NVML cannot say. Never
        raises."""
        return self.nvml.confidential_compute()

    def nvlink_domain(self, device: int) -> str:
        """The NVLink domain of ``device``: the GPUs that NVLink, fabric handles and
        multicast objects reach from it. NVML's GPU fabric info (``<clusterUuid>/<cliqueId>``)
        where the GPU registered with a fabric; else (no NVML, no such call, no fabric, the
        registration not complete) this host's name, as the GPUs of one host reach each
        other and no other. Never raises for what NVML lacks."""
        import socket

        found = self.nvml.fabric_domain(self.devices()[device].pci_bus_id)
        return found if found is not None else socket.gethostname()

    def gpu_processes(self) -> dict[str, tuple[int, ...]] | None:
        """PCI bus id -> pids of the compute processes on that GPU (this one included), or
        None where NVML cannot say. Cheap enough to ask before and after every testcase."""
        return self.nvml.processes()

    def clock(self) -> float:
        """Seconds on the clock waits and soaks are measured by (monotonic; the simulated
        backend's is its modelled time)."""
        import time

        return time.monotonic()

    def pause(self, seconds: float) -> None:
        """Wait ``seconds`` (the simulated backend lets modelled time pass instead)."""
        import time

        time.sleep(max(0.0, seconds))

    def close_nvml(self) -> None:
        """Shut the NVML session down (if one was opened); :meth:`close` calls it."""
        session: Session | None = self.__dict__.pop("_nvml_session", None)
        if session is not None:
            session.close()

    def huge_pages(self) -> tuple[int, int] | None:
        """(page bytes, free pages) of the host's default huge-page pool (/proc/meminfo
        Hugepagesize, HugePages_Free); None where unknown."""
        return meminfo_huge_pages()

    def enable_host_huge_pages(self, largest: int) -> None:
        """From now on host buffers come from huge pages. :class:`UsageError` when the host
        has none free, or too few for one buffer of ``largest`` bytes."""
        hp = self.huge_pages()
        if hp is None:
            raise UsageError(
                "--host-huge-pages: this host does not report huge pages (no HugePages_Free "
                "in /proc/meminfo); run without --host-huge-pages"
            )
        page, free = hp
        need = -(-largest // page)
        where = "simulated host" if self.simulated else "/proc/meminfo HugePages_Free"
        if free < need:
            raise UsageError(
                f"--host-huge-pages: {free} huge pages of {page >> 10} KiB are free "
                f"({where}), a {largest}-byte buffer needs {need}; "
                f"reserve more (e.g. sysctl -w vm.nr_hugepages=<pages>) or run without "
                "--host-huge-pages"
            )
        self.host_huge_pages = True

    # -- memory ---------------------------------------------------------------------------
    @abc.abstractmethod
    def alloc_device(self, device: int, nbytes: int) -> int:
        """Allocate ``nbytes`` on ``device``; returns the device pointer."""

    @abc.abstractmethod
    def free_device(self, pointer: int) -> None: ...

    @abc.abstractmethod
    def alloc_host(self, nbytes: int, device: int | None, *, numa_node: int | None = None) -> int:
        """Allocate pinned, portable host memory (placed near ``device`` where the caller has
        already set CPU affinity; made in ``device``'s context, the first device's for None);
        returns a pointer usable by every device. ``numa_node``: every page on that node
        (``--host-numa``; :meth:`numa_nodes` lists them)."""

    @abc.abstractmethod
    def free_host(self, pointer: int) -> None: ...

    # -- pageable host memory and NUMA placement ------------------------------------------
    def alloc_pageable(
        self, nbytes: int, device: int | None, *, numa_node: int | None = None
    ) -> int:
        """Plain (pageable: not pinned, not registered) host memory of ``nbytes``, touched
        where it is allocated (near ``device``'s CPUs when the caller set the affinity, or on
        ``numa_node``); the copy engine copies it through the driver's staging buffers.
        Freed by :meth:`free_pageable`."""
        raise CudaError("alloc_pageable", "CUDA_ERROR_NOT_SUPPORTED", self.name)

    def free_pageable(self, pointer: int) -> None:
        """Free what :meth:`alloc_pageable` allocated."""
        raise UsageError(f"0x{pointer:x} is not pageable memory allocated by this backend")

    def numa_nodes(self) -> tuple[int, ...]:
        """The host's NUMA nodes (/sys/devices/system/node/)."""
        from gpubw.backend import numa

        return numa.nodes()

    def host_numa_node(self, pointer: int) -> int | None:
        """The NUMA node of the host memory at ``pointer`` (its first page); None where
        unknown."""
        from gpubw.backend import numa

        return numa.node_of(pointer)

    @abc.abstractmethod
    def host_write(self, pointer: int, data: bytes) -> None:
        """Write bytes into pinned host memory from the CPU (no stream involved)."""

    @abc.abstractmethod
    def host_read(self, pointer: int, nbytes: int) -> bytes:
        """Read bytes of pinned host memory from the CPU (no stream involved)."""

    # -- streams and events ---------------------------------------------------------------
    @abc.abstractmethod
    def create_stream(self, device: int) -> Any:
        """A non-blocking stream in ``device``'s primary context."""

    @abc.abstractmethod
    def destroy_stream(self, stream: Any) -> None: ...

    @abc.abstractmethod
    def create_event(self, device: int) -> Any:
        """A timing event in ``device``'s primary context."""

    @abc.abstractmethod
    def destroy_event(self, event: Any) -> None: ...

    @contextlib.contextmanager
    def stream(self, device: int) -> Iterator[Any]:
        """A stream of ``device`` (:meth:`create_stream`) for the body, destroyed after it. If
        the body raised, a failing destroy is not reported: the body's error is the one."""
        handle = self.create_stream(device)
        with _destroyed_after(self.destroy_stream, handle):
            yield handle

    @contextlib.contextmanager
    def event(self, device: int) -> Iterator[Any]:
        """A timing event of ``device`` (:meth:`create_event`) for the body, destroyed after
        it, with the same error rule as :meth:`stream`."""
        handle = self.create_event(device)
        with _destroyed_after(self.destroy_event, handle):
            yield handle

    @abc.abstractmethod
    def record_event(self, event: Any, stream: Any) -> None: ...

    @abc.abstractmethod
    def wait_event(self, stream: Any, event: Any) -> None:
        """Make ``stream`` wait until ``event`` (possibly of another device) completes."""

    @abc.abstractmethod
    def elapsed_seconds(self, start: Any, end: Any) -> float:
        """Seconds between two completed events."""

    @abc.abstractmethod
    def synchronize(self, stream: Any, timeout_s: float) -> None:
        """Wait until everything on ``stream`` completed; raise
        :class:`gpubw.model.errors.GateTimeoutError` if it has not after ``timeout_s`` seconds."""

    # -- work -----------------------------------------------------------------------------
    @abc.abstractmethod
    def memcpy_async(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        """Copy-engine copy of ``nbytes`` (any direction, unified addressing) on ``stream``."""

    @abc.abstractmethod
    def load_kernels(self, device: int) -> None:
        """Compile (or fetch from the cache) and load every registered kernel module
        (:func:`gpubw.kernels.modules.kernel_modules`) not yet loaded on ``device``. Called
        for every device before any measurement, so no module load happens while a stream
        is held by the spin gate."""

    @abc.abstractmethod
    def launch(
        self, kernel: str, grid: int, block: int, args: Sequence[KernelArg], stream: Any
    ) -> None:
        """Launch gpubw kernel ``kernel`` (a name from :mod:`gpubw.kernels`) on ``stream``'s
        device."""

    # -- sharing memory across ranks ------------------------------------------------------
    def handle_probes(self, device: int) -> tuple[HandleProbe, ...]:
        """Which handle kinds can export memory of ``device`` here, one probe per kind of
        :data:`HANDLE_KINDS` (in that order). Each probe is local (the export side, one
        granule); whether an import in another process works is the caller's to test
        (:mod:`gpubw.memory.sharing` does). A backend without sharing reports every kind failed."""
        why = f"the {self.name} backend cannot share memory across processes"
        return tuple(HandleProbe(k, False, why) for k in HANDLE_KINDS)

    def shared_granularity(self, device: int, kind: str) -> int:
        """Bytes that an exported allocation of ``kind`` on ``device`` is rounded up to."""
        check_handle_kind(kind)
        return 2 << 20

    def export_device(self, device: int, nbytes: int, kind: str) -> tuple[int, Any]:
        """Allocate at least ``nbytes`` (rounded up to :meth:`shared_granularity`) on
        ``device``, exportable as ``kind``, mapped here; returns (pointer, handle). The handle
        is small and picklable (bytes, ints, tuples): send it to the other ranks, which pass
        it to :meth:`import_device`. Free with :meth:`free_exported` after every importer
        called :meth:`close_import`."""
        raise CudaError("cuMemExportToShareableHandle", "CUDA_ERROR_NOT_SUPPORTED", self.name)

    def exported_fd(self, handle: Any) -> int:
        """The file descriptor of a POSIX-fd ``handle`` that this backend exported
        (:meth:`export_device` or :meth:`multicast_create`): what the owner passes to the
        importers (:mod:`gpubw.world.fds`). The backend keeps it and closes it when the
        export is freed. UsageError for any other handle."""
        raise UsageError(f"{handle!r} is not a posix-fd handle exported by this backend")

    def import_device(
        self, device: int, handle: Any, kind: str, nbytes: int, fd: int | None = None
    ) -> int:
        """Map memory exported by another rank (``handle`` from its :meth:`export_device`,
        ``nbytes`` as it asked) into this process, accessible from ``device``; returns the
        pointer to use here (never the exporter's). For ``kind`` posix-fd, ``fd`` is this
        process's duplicate of the exporter's descriptor (received over a Unix socket); the
        caller keeps it and closes it after. Undo with :meth:`close_import`."""
        raise CudaError("cuMemImportFromShareableHandle", "CUDA_ERROR_NOT_SUPPORTED", self.name)

    def close_import(self, pointer: int) -> None:
        """Unmap memory mapped by :meth:`import_device` (the exporter's memory stays)."""
        raise UsageError(f"0x{pointer:x} is not memory imported by this backend")

    def free_exported(self, pointer: int) -> None:
        """Unmap and release memory made by :meth:`export_device` (after the importers
        closed theirs)."""
        raise UsageError(f"0x{pointer:x} is not memory exported by this backend")

    # -- NVLink multicast (never where multicast_disabled() says so) ----------------------
    def multicast_create(
        self, device: int, nbytes: int, num_devices: int, kind: str
    ) -> tuple[int, Any]:
        """Create a multicast object of ``num_devices`` devices and ``nbytes`` (rounded up to
        its granularity) on the owner's ``device``; returns (key, handle): the handle, of
        handle kind ``kind``, goes to every rank's :meth:`multicast_join` (the owner's too).
        Raises CudaError (NOT_PERMITTED) when :func:`multicast_disabled` says so."""
        check_multicast_allowed("cuMulticastCreate")
        raise CudaError("cuMulticastCreate", "CUDA_ERROR_NOT_SUPPORTED", self.name)

    def multicast_join(
        self, device: int, handle: Any, kind: str, nbytes: int, fd: int | None = None
    ) -> int:
        """Import the multicast object (unless this process created it; for posix-fd from
        ``fd``, as :meth:`import_device`) and add ``device`` to it; returns this process's key
        for it. Every member must join before any :meth:`multicast_map` (a barrier between
        them)."""
        check_multicast_allowed("cuMulticastAddDevice")
        raise CudaError("cuMulticastAddDevice", "CUDA_ERROR_NOT_SUPPORTED", self.name)

    def multicast_map(self, key: int) -> int:
        """Give the joined multicast object ``key`` this device's physical memory (bound to
        it) and map it here; returns the multicast pointer: a store to it lands in every
        member's memory."""
        check_multicast_allowed("cuMulticastBindMem")
        raise CudaError("cuMulticastBindMem", "CUDA_ERROR_NOT_SUPPORTED", self.name)

    def multicast_free(self, key: int) -> None:
        """Unmap, unbind and release everything of multicast object ``key`` here (safe at any
        stage after :meth:`multicast_create` or :meth:`multicast_join`)."""
        raise UsageError(f"{key!r} is not a multicast object of this backend")

    def close(self) -> None:
        """Release whatever the backend itself holds (modules, contexts, shared memory, the
        NVML session); a backend that holds more calls this too."""
        self.close_nvml()


@contextlib.contextmanager
def _destroyed_after(destroy: Callable[[Any], None], handle: Any) -> Iterator[None]:
    """Call ``destroy(handle)`` after the body; when the body raised, a failure of the destroy
    is dropped so that the first error (the body's) is the one that propagates."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            destroy(handle)
        raise
    destroy(handle)


def meminfo_huge_pages(path: str = "/proc/meminfo") -> tuple[int, int] | None:
    """(Hugepagesize in bytes, HugePages_Free) from ``path``; None where it lacks them."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        free = int(fields["HugePages_Free"].split()[0])
        page = int(fields["Hugepagesize"].split()[0]) * 1024  # "2048 kB"
    except (OSError, KeyError, ValueError, IndexError):
        return None
    return page, free
