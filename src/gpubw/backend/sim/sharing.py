"""Memory shared across simulated ranks: export/import tokens and NVLink multicast objects.

The simulated backend's half of :class:`gpubw.backend.base.Backend`'s sharing calls, as a
mixin of :class:`gpubw.backend.sim.backend.SimulatedBackend` (one per rank view). Every rank view of
one :class:`gpubw.backend.sim.backend.SimEngine` shares its memory, so an import maps *the same
allocation*: same bytes, same device, hence a copy from an imported buffer is a flow over the
owner's links, as on hardware. A token from another engine (another process: a real MPI
run of simulated backends) becomes a *shadow* allocation on the owner's device in this
engine: the rank that copies fills and verifies both sides itself, so content stays exact;
only the links are this process's own view. Likewise a multicast object made by a process's
own backend (not a rank view) binds once this process's members joined: the others join in
their processes, unseen here, and each process models the traffic of its own members.

Which handle kinds work is the model's ``handle_kinds`` (``fabric`` needs IMEX); POSIX-fd and
IPC handles work on one host only. A POSIX-fd export makes a real file descriptor (a memfd
holding the handle), as the driver does, and an importer must present its own duplicate of
it (``fd``, refused unless it holds that very handle): so the ranks pass it over a Unix
socket (:mod:`gpubw.world.fds`) exactly as on hardware. Faults per rank:
``Faults.export_refused`` (every export fails with CUDA_ERROR_NOT_PERMITTED, as a fabric
export without an IMEX channel does) and the allocation faults. Multicast follows the
driver's order (create, every member adds its device, then each binds its memory and maps)
and is refused while
:func:`gpubw.backend.base.multicast_disabled` says so.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

import attrs

from gpubw.backend.base import (
    FABRIC,
    HANDLE_KINDS,
    IPC,
    POSIX_FD,
    HandleProbe,
    check_handle_kind,
    check_multicast_allowed,
)
from gpubw.backend.sim.memory import Alloc
from gpubw.model.errors import CudaError, UsageError

#: Granularity of exported allocations and multicast objects (the driver's usual 2 MiB).
GRANULARITY = 2 << 20
_TOKEN = "gpubw-sim"
_MC_TOKEN = "gpubw-sim-multicast"


P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")


def locked(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """Run a facade method holding its engine's lock (rank threads share one engine)."""

    def wrapper(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with self._shared.lock:  # type: ignore[attr-defined]
            return method(self, *args, **kwargs)

    functools.update_wrapper(wrapper, method)
    return wrapper


def _rounded(nbytes: int) -> int:
    return -(-nbytes // GRANULARITY) * GRANULARITY


def _descriptor(token: tuple[Any, ...]) -> int:
    """A new file descriptor for a POSIX-fd export: a memfd holding ``token`` (as JSON)."""
    fd = os.memfd_create("gpubw-sim-export")
    try:
        os.write(fd, json.dumps(list(token)).encode())
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_descriptor(fd: int | None, handle: tuple[Any, ...], call: str) -> None:
    """Refuse a POSIX-fd import whose ``fd`` is missing or is not ``handle``'s descriptor (as
    the driver refuses a descriptor that is not an exported allocation's)."""
    if fd is None:
        raise CudaError(call, "CUDA_ERROR_INVALID_VALUE", "no descriptor for a posix-fd handle")
    try:
        held = tuple(json.loads(os.pread(fd, 1 << 16, 0)))
    except (OSError, ValueError, TypeError) as exc:
        raise CudaError(call, "CUDA_ERROR_INVALID_VALUE", f"descriptor {fd}: {exc}") from None
    if held != tuple(handle):
        raise CudaError(
            call, "CUDA_ERROR_INVALID_VALUE", f"descriptor {fd} is not the handle's allocation"
        )


def _check_size(nbytes: int) -> None:
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
        raise UsageError(f"shared allocation size must be a positive int, got {nbytes!r}")


@attrs.define(eq=False)
class Export:
    """An exported allocation of the engine: who made it, of which kind."""

    alloc: Alloc
    kind: str
    view: int  # the exporting view's id
    host: int


@attrs.define(eq=False)
class Multicast:
    """A multicast object: its members' devices and physical memory, and its mapping."""

    id: int
    size: int
    num_devices: int
    kind: str
    host: int
    owner_device: int  # global ordinal
    devices: list[int] = attrs.Factory(list)  # global ordinals that joined
    mapping: Alloc | None = None  # the multicast address range (members in .members)
    released_by_owner: bool = False
    shadow: bool = False
    #: members may join in other processes, unseen here (a real MPI run of simulated ranks,
    #: where each process's engine sees its own members only, as with a shadow)
    foreign: bool = False


@attrs.define(eq=False)
class Joined:
    """One view's part of a multicast object."""

    mc: Multicast
    device: int  # global ordinal
    created: bool
    memory: Alloc | None = None


class SharingMixin:
    """Export, import and multicast for a :class:`gpubw.backend.sim.backend.SimulatedBackend` view
    (which provides the attributes used here)."""

    _shared: Any
    _injector: Any
    _now: float
    _globals: tuple[int, ...]
    host: int
    view_id: int

    def _init_sharing(self) -> None:
        self._imports: dict[int, Alloc] = {}  # pointer -> the mapped allocation
        self._shadows: set[int] = set()  # imports of another process's memory
        self._exports: set[int] = set()
        self._joined: dict[int, Joined] = {}
        #: ("export", pointer) or ("multicast", id) -> (POSIX-fd token, its descriptor)
        self._fds: dict[tuple[str, int], tuple[tuple[Any, ...], int]] = {}

    # provided by SimulatedBackend
    def _global(self, device: int, call: str = "cuDeviceGet") -> int:
        raise NotImplementedError

    def _tick(self) -> None:
        raise NotImplementedError

    @property
    def _others_unseen(self) -> bool:
        """Whether the other ranks run in other processes, unseen by this engine: this is a
        process's own backend (a real MPI run of simulated ranks), not a rank view of an
        engine that every rank shares."""
        return getattr(self, "rank", None) is None

    def _check_kind(self, kind: str, call: str, export: bool = False) -> str:
        """``kind`` if the model offers it (and, for an export, no fault refuses it)."""
        try:
            check_handle_kind(kind)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if kind not in self._shared.model.handle_kinds:
            result = "CUDA_ERROR_NOT_PERMITTED" if kind == FABRIC else "CUDA_ERROR_NOT_SUPPORTED"
            why = (
                "no IMEX channel (/dev/nvidia-caps-imex-channels) in the simulated system"
                if kind == FABRIC
                else f"{kind} handles are not available in the simulated system"
            )
            raise CudaError(call, result, why)
        if export and self._injector.faults.export_refused:
            raise CudaError(call, "CUDA_ERROR_NOT_PERMITTED", "injected fault")
        return kind

    # -- probes and export/import ---------------------------------------------------------
    @locked
    def handle_probes(self, device: int) -> tuple[HandleProbe, ...]:
        self._tick()
        self._global(device)
        out = []
        for kind in HANDLE_KINDS:
            call = "cuIpcGetMemHandle" if kind == IPC else "cuMemExportToShareableHandle"
            try:
                self._check_kind(kind, call, export=True)
            except CudaError as exc:
                text = exc.result + (f" ({exc.detail})" if exc.detail else "")
                out.append(HandleProbe(kind, False, f"{text} from {exc.call}"))
            else:
                out.append(HandleProbe(kind, True))
        return tuple(out)

    @locked
    def shared_granularity(self, device: int, kind: str) -> int:
        self._global(device)
        try:
            check_handle_kind(kind)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        return GRANULARITY

    @locked
    def export_device(self, device: int, nbytes: int, kind: str) -> tuple[int, Any]:
        self._tick()
        g = self._global(device, "cuMemCreate")
        _check_size(nbytes)
        call = "cuIpcGetMemHandle" if kind == IPC else "cuMemExportToShareableHandle"
        self._check_kind(kind, call, export=True)
        pointer = self._alloc_shared(g, _rounded(nbytes))
        shared = self._shared
        alloc = shared.memory.allocs[pointer]
        alloc.foreign = self._others_unseen  # importers may store to it, unseen here
        shared.exports[pointer] = Export(alloc, kind, self.view_id, self.host)
        self._exports.add(pointer)
        token = (_TOKEN, shared.token, kind, pointer, alloc.size, g, self.host)
        if kind == POSIX_FD:
            self._fds["export", pointer] = (token, _descriptor(token))
        return pointer, token

    def exported_fd(self, handle: Any) -> int:
        for token, fd in self._fds.values():
            if token == handle:
                return fd
        raise UsageError(f"{handle!r} is not a posix-fd handle exported by this backend")

    def _close_descriptor(self, what: str, key: int) -> None:
        _, fd = self._fds.pop((what, key), (None, None))
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _alloc_shared(self, g: int, size: int) -> int:
        """Device memory for sharing on global device ``g`` (allocation faults apply)."""
        raise NotImplementedError

    def _parse(self, handle: Any, kind: str, call: str, tag: str = _TOKEN) -> tuple[Any, ...]:
        if not (isinstance(handle, tuple) and len(handle) == 7 and handle[0] == tag):
            raise CudaError(call, "CUDA_ERROR_INVALID_VALUE", f"not a simulated handle: {handle!r}")
        if handle[2] != kind:
            raise CudaError(
                call,
                "CUDA_ERROR_INVALID_VALUE",
                f"a {handle[2]} handle imported as {kind}",
            )
        if kind != FABRIC and handle[6] != self.host:
            raise CudaError(
                call,
                "CUDA_ERROR_INVALID_VALUE",
                f"a {kind} handle works on its own host only (exported on host {handle[6]}, "
                f"imported on host {self.host})",
            )
        return handle

    def _check_domain(self, owner: int, device: int, call: str) -> None:
        """Refuse (CUDA_ERROR_NOT_PERMITTED, as a fabric handle of another NVLink domain is
        refused) to map memory of global device ``owner`` on global device ``device`` when
        the model puts them in different NVLink domains."""
        model = self._shared.model
        if model.domain_of(owner) != model.domain_of(device):
            raise CudaError(
                call,
                "CUDA_ERROR_NOT_PERMITTED",
                f"device {owner} ({model.domain_name(owner)}) and device {device} "
                f"({model.domain_name(device)}) are in different NVLink domains",
            )

    @locked
    def import_device(
        self, device: int, handle: Any, kind: str, nbytes: int, fd: int | None = None
    ) -> int:
        self._tick()
        g = self._global(device, "cuMemImportFromShareableHandle")
        _check_size(nbytes)
        call = "cuIpcOpenMemHandle" if kind == IPC else "cuMemImportFromShareableHandle"
        self._check_kind(kind, call)
        _, token, _, pointer, size, owner_device, _ = self._parse(handle, kind, call)
        self._check_domain(owner_device, g, call)
        if kind == POSIX_FD:
            _check_descriptor(fd, handle, call)
        if nbytes > size:
            raise CudaError(call, "CUDA_ERROR_INVALID_VALUE", f"{nbytes} bytes of a {size}")
        shared = self._shared
        if token == shared.token:
            export = shared.exports.get(pointer)
            if export is None:
                raise CudaError(call, "CUDA_ERROR_INVALID_VALUE", "the allocation was freed")
            if export.view == self.view_id:
                raise CudaError(call, "CUDA_ERROR_INVALID_VALUE", "imported by its exporter")
            alloc = export.alloc
        else:  # another process's engine: a shadow on the owner's device, here
            alloc = shared.memory.allocs[self._alloc_shared(owner_device, size)]
            alloc.foreign = True
            self._shadows.add(alloc.base)
        if pointer in self._imports and token == shared.token:
            raise CudaError(call, "CUDA_ERROR_ALREADY_MAPPED", "imported twice")
        alloc.mapped_by.add(g)
        self._imports[alloc.base] = alloc
        base: int = alloc.base
        return base

    @locked
    def close_import(self, pointer: int) -> None:
        self._tick()
        alloc = self._imports.pop(pointer, None)
        if alloc is None:
            raise UsageError(f"0x{pointer:x} is not memory imported by this backend")
        shared = self._shared
        shared.engine.advance(self._now)
        if pointer in self._shadows:
            self._shadows.discard(pointer)
            shared.memory.remove(alloc)
        else:
            alloc.mapped_by.difference_update(self._globals)

    @locked
    def free_exported(self, pointer: int) -> None:
        self._tick()
        if pointer not in self._exports:
            raise UsageError(f"0x{pointer:x} is not memory exported by this backend")
        self._exports.discard(pointer)
        shared = self._shared
        shared.engine.advance(self._now)
        export = shared.exports.pop(pointer)
        shared.memory.remove(export.alloc)
        self._close_descriptor("export", pointer)

    # -- multicast ------------------------------------------------------------------------
    @locked
    def multicast_create(
        self, device: int, nbytes: int, num_devices: int, kind: str
    ) -> tuple[int, Any]:
        check_multicast_allowed("cuMulticastCreate")
        self._tick()
        g = self._global(device, "cuMulticastCreate")
        _check_size(nbytes)
        if isinstance(num_devices, bool) or not isinstance(num_devices, int) or num_devices < 1:
            raise UsageError(f"num_devices must be a positive int, got {num_devices!r}")
        if not self._shared.model.devices[g].multicast_supported:
            raise CudaError(
                "cuMulticastCreate", "CUDA_ERROR_NOT_SUPPORTED", "no multicast on this device"
            )
        if kind == IPC:
            raise CudaError("cuMulticastCreate", "CUDA_ERROR_INVALID_VALUE", "no IPC handles")
        self._check_kind(kind, "cuMemExportToShareableHandle", export=True)
        shared = self._shared
        mc = Multicast(shared.next_id(), _rounded(nbytes), num_devices, kind, self.host, g)
        mc.foreign = self._others_unseen  # members may join elsewhere, unseen here
        shared.multicasts[mc.id] = mc
        self._joined[mc.id] = Joined(mc, g, created=True)
        token = (_MC_TOKEN, shared.token, kind, mc.id, mc.size, num_devices, self.host)
        if kind == POSIX_FD:
            self._fds["multicast", mc.id] = (token, _descriptor(token))
        return mc.id, token

    @locked
    def multicast_join(
        self, device: int, handle: Any, kind: str, nbytes: int, fd: int | None = None
    ) -> int:
        check_multicast_allowed("cuMulticastAddDevice")
        self._tick()
        g = self._global(device, "cuMulticastAddDevice")
        call = "cuMemImportFromShareableHandle"
        _, token, _, mc_id, size, _, _ = self._parse(handle, kind, call, _MC_TOKEN)
        creator = token == self._shared.token and ("multicast", mc_id) in self._fds
        if kind == POSIX_FD and not creator:
            _check_descriptor(fd, handle, call)  # every member but the creator imports it
        if not self._shared.model.devices[g].multicast_supported:
            raise CudaError(
                "cuMulticastAddDevice", "CUDA_ERROR_NOT_SUPPORTED", "no multicast on this device"
            )
        shared = self._shared
        if token == shared.token:
            mc = shared.multicasts.get(mc_id)
            if mc is None:
                raise CudaError(call, "CUDA_ERROR_INVALID_VALUE", "the object was released")
            self._check_domain(mc.owner_device, g, "cuMulticastAddDevice")
        else:  # another process's object: this process sees its own member only
            mc = Multicast(shared.next_id(), size, 1, kind, self.host, g, shadow=True)
            shared.multicasts[mc.id] = mc
        if g in mc.devices or len(mc.devices) >= mc.num_devices:
            raise CudaError(
                "cuMulticastAddDevice",
                "CUDA_ERROR_INVALID_VALUE",
                f"device already added, or {mc.num_devices} devices joined already",
            )
        mc.devices.append(g)
        part = self._joined.get(mc.id)
        if part is None:
            self._joined[mc.id] = Joined(mc, g, created=False)
        joined: int = mc.id
        return joined

    @locked
    def multicast_map(self, key: int) -> int:
        check_multicast_allowed("cuMulticastBindMem")
        self._tick()
        part = self._joined.get(key)
        if part is None or part.device not in part.mc.devices:
            raise UsageError(f"{key!r} is not a multicast object this rank joined")
        mc = part.mc
        if len(mc.devices) < mc.num_devices and not mc.foreign:
            raise CudaError(
                "cuMulticastBindMem",
                "CUDA_ERROR_INVALID_VALUE",
                f"only {len(mc.devices)} of {mc.num_devices} devices joined (on hardware "
                "this call would wait for the others forever)",
            )
        if part.memory is not None:
            raise CudaError("cuMulticastBindMem", "CUDA_ERROR_INVALID_VALUE", "bound twice")
        shared = self._shared
        part.memory = shared.memory.allocs[self._alloc_shared(part.device, mc.size)]
        if mc.mapping is None:
            mc.mapping = shared.memory.alloc_multicast(mc.owner_device, mc.size)
        assert mc.mapping.members is not None
        mc.mapping.members.append(part.memory)
        mc.mapping.mapped_by.add(part.device)
        return mc.mapping.base

    @locked
    def multicast_free(self, key: int) -> None:
        self._tick()
        part = self._joined.pop(key, None)
        if part is None:
            raise UsageError(f"{key!r} is not a multicast object of this backend")
        shared = self._shared
        shared.engine.advance(self._now)
        mc = part.mc
        if mc.mapping is not None:
            mc.mapping.mapped_by.discard(part.device)
            if part.memory is not None and mc.mapping.members is not None:
                mc.mapping.members.remove(part.memory)
        if part.memory is not None:
            shared.memory.remove(part.memory)
        if part.device in mc.devices:
            mc.devices.remove(part.device)
        if part.created:
            mc.released_by_owner = True
            self._close_descriptor("multicast", key)
        if (mc.released_by_owner or mc.shadow) and not mc.devices:
            if mc.mapping is not None:
                shared.memory.remove(mc.mapping)
            shared.multicasts.pop(mc.id, None)

    # -- teardown -------------------------------------------------------------------------
    @locked
    def _release_sharing(self) -> list[BaseException]:
        """Free every import, export and multicast part this view still holds."""
        errors: list[BaseException] = []
        for key in list(self._joined):
            try:
                self.multicast_free(key)
            except BaseException as exc:
                errors.append(exc)
        for pointer in list(self._imports):
            try:
                self.close_import(pointer)
            except BaseException as exc:
                errors.append(exc)
        for pointer in list(self._exports):
            try:
                self.free_exported(pointer)
            except BaseException as exc:
                errors.append(exc)
        return errors
