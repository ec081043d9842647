"""The real backend's memory sharing across processes: fabric, POSIX-fd and legacy IPC
handles, and NVLink multicast objects (a mixin of :class:`gpubw.backend.cuda.CudaBackend`).

* **fabric** / **posix-fd** (virtual memory management): ``cuMemCreate`` (pinned, on the
  device, with the handle type requested), ``cuMemExportToShareableHandle`` (a
  ``CUmemFabricHandle`` of 64 bytes, or a file descriptor), then every process maps it:
  ``cuMemAddressReserve`` + ``cuMemMap`` + ``cuMemSetAccess`` (read/write from its device).
  A file descriptor reaches an importer before it imports: the exporter's rank serves it
  over a Unix socket (SCM_RIGHTS, :mod:`gpubw.world.fds`, :meth:`exported_fd`) and the
  importer passes the duplicate it received as ``fd`` (and closes it after). No ptrace
  rights, no ``prctl``, no ``pidfd_getfd``.
* **ipc**: ``cuMemAlloc`` + ``cuIpcGetMemHandle`` (64 opaque bytes), imported with
  ``cuIpcOpenMemHandle(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)``.
* **multicast**: ``cuMulticastCreate`` on the owner, exported like memory; every member
  imports it and ``cuMulticastAddDevice``\\ s its device; then each binds its own
  ``cuMemCreate`` memory (``cuMulticastBindMem``) and maps the object. Every multicast entry
  point first calls :func:`gpubw.backend.base.check_multicast_allowed`, so nothing multicast
  reaches the driver where ``NCCL_NVLS_ENABLE=0`` (or another setting) forbids it.

Handles sent to other ranks are plain tuples: ``(64 bytes, size)`` for fabric and ipc,
``(pid, fd, size)`` for posix-fd (the exporter's process and descriptor number: its identity,
not usable by another process), with ``(num_devices,)`` appended for multicast. Everything
made here is recorded and freed by :meth:`CudaSharingMixin._release_sharing` (the backend's
``close``), also after an error or Ctrl-C.
"""

from __future__ import annotations

import ctypes
import itertools
import os
from typing import Any

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
from gpubw.backend.cuda_support import DriverCalls
from gpubw.model.errors import CudaError, UsageError

#: Bytes of a CUmemFabricHandle and of a CUipcMemHandle.
HANDLE_BYTES = 64
#: Device attributes (by name, as cuda.bindings spells them) that say a kind can work.
_KIND_ATTRIBUTE = {
    FABRIC: "CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED",
    POSIX_FD: "CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED",
}


@attrs.define(eq=False)
class _Shared:
    """One exported or imported allocation mapped in this process."""

    device: int
    kind: str
    size: int
    handle: Any = None  # CUmemGenericAllocationHandle (None for ipc)
    fd: int | None = None  # the exporter's posix fd, closed at free


@attrs.define(eq=False)
class _Multicast:
    """This process's part of one multicast object."""

    device: int
    kind: str
    size: int
    handle: Any  # the multicast object's generic handle (created or imported)
    created: bool
    token: Any = None
    fd: int | None = None
    added: bool = False
    memory: Any = None  # this device's physical memory bound to it
    bound: bool = False
    ptr: int | None = None  # the multicast mapping


class CudaSharingMixin(DriverCalls):
    """Sharing calls of :class:`gpubw.backend.base.Backend` over the CUDA driver. The backend
    provides ``_cu()`` (the driver module), ``_call`` (the checked call), ``_use(device)``,
    ``_device_index``, ``_attr`` and ``_handles``."""

    _handles: list[Any]

    def _attr(self, device: int, name: str, default: int | None = None) -> int:
        raise NotImplementedError

    def _init_sharing(self) -> None:
        self._exported: dict[int, _Shared] = {}
        self._imported: dict[int, _Shared] = {}
        self._multicasts: dict[int, _Multicast] = {}
        self._multicast_keys = itertools.count(1)

    # -- helpers --------------------------------------------------------------------------
    def _handle_type(self, kind: str) -> Any:
        types = self._cu().CUmemAllocationHandleType
        return (
            types.CU_MEM_HANDLE_TYPE_FABRIC
            if kind == FABRIC
            else types.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        )

    def _prop(self, device: int, kind: str | None) -> Any:
        cu = self._cu()
        prop = cu.CUmemAllocationProp()
        prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = device
        if kind is not None:
            prop.requestedHandleTypes = self._handle_type(kind)
        return prop

    def _granularity(self, device: int, kind: str | None) -> int:
        cu = self._cu()
        self._use(device)
        return int(
            self._call(
                "cuMemGetAllocationGranularity",
                cu.cuMemGetAllocationGranularity(
                    self._prop(device, kind),
                    cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
                ),
            )
        )

    def _map(self, handle: Any, size: int, device: int) -> int:
        """Reserve an address range, map ``handle`` there, give ``device`` read/write access."""
        cu = self._cu()
        ptr = int(self._call("cuMemAddressReserve", cu.cuMemAddressReserve(size, 0, 0, 0)))
        try:
            self._call("cuMemMap", cu.cuMemMap(ptr, size, 0, handle, 0))
            try:
                desc = cu.CUmemAccessDesc()
                desc.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
                desc.location.id = device
                desc.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                self._call("cuMemSetAccess", cu.cuMemSetAccess(ptr, size, [desc], 1))
            except BaseException:
                cu.cuMemUnmap(ptr, size)
                raise
        except BaseException:
            cu.cuMemAddressFree(ptr, size)
            raise
        return ptr

    def _unmap(self, ptr: int, size: int, errors: list[BaseException]) -> None:
        cu = self._cu()
        for call, fn in (("cuMemUnmap", cu.cuMemUnmap), ("cuMemAddressFree", cu.cuMemAddressFree)):
            try:
                self._call(call, fn(ptr, size))
            except BaseException as exc:
                errors.append(exc)

    def _export(self, handle: Any, kind: str) -> tuple[Any, int | None]:
        """(token data, fd or None) of a generic handle exported as ``kind``."""
        cu = self._cu()
        shareable = self._call(
            "cuMemExportToShareableHandle",
            cu.cuMemExportToShareableHandle(handle, self._handle_type(kind), 0),
        )
        if kind == FABRIC:
            return bytes(shareable.data), None
        fd = int(shareable)
        return (os.getpid(), fd), fd

    def _import(self, data: Any, kind: str, fd: int | None) -> Any:
        """The generic handle of a shareable handle sent by another process (posix-fd: from
        ``fd``, this process's duplicate of the exporter's descriptor; the caller closes it)."""
        cu = self._cu()
        if kind == FABRIC:
            fabric = cu.CUmemFabricHandle()
            fabric.data = bytes(data)
            return self._call(
                "cuMemImportFromShareableHandle",
                cu.cuMemImportFromShareableHandle(fabric.getPtr(), self._handle_type(kind)),
            )
        if fd is None:
            pid, theirs = data
            raise UsageError(
                f"importing a posix-fd handle (descriptor {theirs} of process {pid}) needs that "
                "descriptor in this process: pass the one received from the exporter as fd"
            )
        return self._call(
            "cuMemImportFromShareableHandle",
            cu.cuMemImportFromShareableHandle(fd, self._handle_type(kind)),
        )

    @staticmethod
    def _kind(kind: str) -> str:
        try:
            return check_handle_kind(kind)
        except ValueError as exc:
            raise UsageError(str(exc)) from None

    # -- probes ---------------------------------------------------------------------------
    def handle_probes(self, device: int) -> tuple[HandleProbe, ...]:
        device = self._device_index(device)
        out = []
        for kind in HANDLE_KINDS:
            attribute = _KIND_ATTRIBUTE.get(kind)
            if attribute is not None and not self._attr(device, attribute, 0):
                out.append(HandleProbe(kind, False, f"{attribute[20:]} is 0 on device {device}"))
                continue
            try:
                nbytes = self.shared_granularity(device, kind)
                ptr, _ = self.export_device(device, nbytes, kind)
                self.free_exported(ptr)
            except CudaError as exc:
                text = exc.result + (f" ({exc.detail})" if exc.detail else "")
                out.append(HandleProbe(kind, False, f"{text} from {exc.call}"))
            else:
                out.append(HandleProbe(kind, True))
        return tuple(out)

    def shared_granularity(self, device: int, kind: str) -> int:
        device = self._device_index(device)
        if self._kind(kind) == IPC:
            return 2 << 20
        return self._granularity(device, kind)

    # -- export / import ------------------------------------------------------------------
    def export_device(self, device: int, nbytes: int, kind: str) -> tuple[int, Any]:
        cu = self._cu()
        device = self._device_index(device)
        kind = self._kind(kind)
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
            raise UsageError(f"shared allocation size must be a positive int, got {nbytes!r}")
        self._use(device)
        if kind == IPC:
            ptr = int(self._call("cuMemAlloc", cu.cuMemAlloc(nbytes)))
            try:
                ipc = self._call("cuIpcGetMemHandle", cu.cuIpcGetMemHandle(ptr))
            except BaseException:
                cu.cuMemFree(ptr)
                raise
            self._exported[ptr] = _Shared(device, IPC, nbytes)
            return ptr, (ctypes.string_at(ipc.getPtr(), HANDLE_BYTES), nbytes)
        gran = self._granularity(device, kind)
        size = -(-nbytes // gran) * gran
        handle = self._call("cuMemCreate", cu.cuMemCreate(size, self._prop(device, kind), 0))
        fd: int | None = None
        try:
            data, fd = self._export(handle, kind)
            ptr = self._map(handle, size, device)
        except BaseException:
            if fd is not None:
                os.close(fd)
            cu.cuMemRelease(handle)
            raise
        self._exported[ptr] = _Shared(device, kind, size, handle, fd)
        token = (data, size) if kind == FABRIC else (*data, size)
        return ptr, token

    def exported_fd(self, handle: Any) -> int:
        token = tuple(handle) if isinstance(handle, (tuple, list)) else ()
        held = {r.fd for r in self._exported.values()}
        held.update(m.fd for m in self._multicasts.values() if m.created)
        if len(token) < 3 or token[0] != os.getpid() or token[1] not in held - {None}:
            raise UsageError(f"{handle!r} is not a posix-fd handle exported by this backend")
        return int(token[1])

    def import_device(
        self, device: int, handle: Any, kind: str, nbytes: int, fd: int | None = None
    ) -> int:
        cu = self._cu()
        device = self._device_index(device)
        kind = self._kind(kind)
        size = int(handle[-1])
        if nbytes > size:
            raise UsageError(f"cannot import {nbytes} bytes of a {size}-byte allocation")
        self._use(device)
        if kind == IPC:
            ipc = cu.CUipcMemHandle()
            data = bytes(handle[0])
            ctypes.memmove(ipc.getPtr(), data, HANDLE_BYTES)
            ptr = int(
                self._call(
                    "cuIpcOpenMemHandle",
                    cu.cuIpcOpenMemHandle(
                        ipc, cu.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
                    ),
                )
            )
            self._imported[ptr] = _Shared(device, IPC, size)
            return ptr
        generic = self._import(handle[0] if kind == FABRIC else handle[:2], kind, fd)
        try:
            ptr = self._map(generic, size, device)
        except BaseException:
            cu.cuMemRelease(generic)
            raise
        self._imported[ptr] = _Shared(device, kind, size, generic)
        return ptr

    def close_import(self, pointer: int) -> None:
        record = self._imported.pop(pointer, None)
        if record is None:
            raise UsageError(f"0x{pointer:x} is not memory imported by this backend")
        errors = self._free_shared(pointer, record, imported=True)
        if errors:
            raise errors[0]

    def free_exported(self, pointer: int) -> None:
        record = self._exported.pop(pointer, None)
        if record is None:
            raise UsageError(f"0x{pointer:x} is not memory exported by this backend")
        errors = self._free_shared(pointer, record, imported=False)
        if errors:
            raise errors[0]

    def _free_shared(self, ptr: int, record: _Shared, imported: bool) -> list[BaseException]:
        """Undo one export or import; every step tried, failures returned."""
        cu = self._cu()
        errors: list[BaseException] = []
        try:
            self._use(record.device)
        except BaseException as exc:
            errors.append(exc)
        if record.kind == IPC:
            call, fn = (
                ("cuIpcCloseMemHandle", cu.cuIpcCloseMemHandle)
                if imported
                else ("cuMemFree", cu.cuMemFree)
            )
            try:
                self._call(call, fn(ptr))
            except BaseException as exc:
                errors.append(exc)
            return errors
        self._unmap(ptr, record.size, errors)
        try:
            self._call("cuMemRelease", cu.cuMemRelease(record.handle))
        except BaseException as exc:
            errors.append(exc)
        if record.fd is not None:
            try:
                os.close(record.fd)
            except OSError as exc:
                errors.append(exc)
        return errors

    # -- multicast (never where the environment disables it) -------------------------------
    def _multicast_prop(self, num_devices: int, size: int, kind: str) -> Any:
        prop = self._cu().CUmulticastObjectProp()
        prop.numDevices = num_devices
        prop.size = size
        prop.handleTypes = self._handle_type(kind)
        return prop

    def multicast_create(
        self, device: int, nbytes: int, num_devices: int, kind: str
    ) -> tuple[int, Any]:
        check_multicast_allowed("cuMulticastCreate")  # before anything touches the driver
        cu = self._cu()
        device = self._device_index(device)
        kind = self._kind(kind)
        if kind == IPC:
            raise UsageError("multicast objects are shared with fabric or posix-fd handles")
        if not self._attr(device, "CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED", 0):
            raise CudaError("cuMulticastCreate", "CUDA_ERROR_NOT_SUPPORTED", f"device {device}")
        self._use(device)
        prop = self._multicast_prop(num_devices, nbytes, kind)
        gran = int(
            self._call(
                "cuMulticastGetGranularity",
                cu.cuMulticastGetGranularity(
                    prop, cu.CUmulticastGranularity_flags.CU_MULTICAST_GRANULARITY_RECOMMENDED
                ),
            )
        )
        size = -(-nbytes // gran) * gran
        prop.size = size
        handle = self._call("cuMulticastCreate", cu.cuMulticastCreate(prop))
        fd: int | None = None
        try:
            data, fd = self._export(handle, kind)
        except BaseException:
            cu.cuMemRelease(handle)
            raise
        token = (data, size, num_devices) if kind == FABRIC else (*data, size, num_devices)
        key = next(self._multicast_keys)
        self._multicasts[key] = _Multicast(device, kind, size, handle, True, token, fd)
        return key, token

    def multicast_join(
        self, device: int, handle: Any, kind: str, nbytes: int, fd: int | None = None
    ) -> int:
        check_multicast_allowed("cuMulticastAddDevice")
        cu = self._cu()
        device = self._device_index(device)
        kind = self._kind(kind)
        token = tuple(handle)
        key = next((k for k, m in self._multicasts.items() if m.created and m.token == token), None)
        if key is None:
            size = int(token[-2])
            data = token[0] if kind == FABRIC else token[:2]
            self._use(device)
            generic = self._import(data, kind, fd)
            key = next(self._multicast_keys)
            self._multicasts[key] = _Multicast(device, kind, size, generic, False, token)
        part = self._multicasts[key]
        self._use(device)
        self._call(
            "cuMulticastAddDevice", cu.cuMulticastAddDevice(part.handle, self._handles[device])
        )
        part.added = True
        return key

    def multicast_map(self, key: int) -> int:
        check_multicast_allowed("cuMulticastBindMem")
        cu = self._cu()
        part = self._multicasts.get(key)
        if part is None or not part.added:
            raise UsageError(f"{key!r} is not a multicast object this process joined")
        self._use(part.device)
        part.memory = self._call(
            "cuMemCreate", cu.cuMemCreate(part.size, self._prop(part.device, None), 0)
        )
        self._call(
            "cuMulticastBindMem",
            cu.cuMulticastBindMem(part.handle, 0, part.memory, 0, part.size, 0),
        )
        part.bound = True
        part.ptr = self._map(part.handle, part.size, part.device)
        return part.ptr

    def multicast_free(self, key: int) -> None:
        part = self._multicasts.pop(key, None)
        if part is None:
            raise UsageError(f"{key!r} is not a multicast object of this backend")
        errors = self._free_multicast(part)
        if errors:
            raise errors[0]

    def _free_multicast(self, part: _Multicast) -> list[BaseException]:
        cu = self._cu()
        errors: list[BaseException] = []

        def attempt(call: str, result_of: Any, *args: Any) -> None:
            try:
                self._call(call, result_of(*args))
            except BaseException as exc:
                errors.append(exc)

        try:
            self._use(part.device)
        except BaseException as exc:
            errors.append(exc)
        if part.ptr is not None:
            self._unmap(part.ptr, part.size, errors)
        if part.bound:
            attempt(
                "cuMulticastUnbind",
                cu.cuMulticastUnbind,
                part.handle,
                self._handles[part.device],
                0,
                part.size,
            )
        if part.memory is not None:
            attempt("cuMemRelease", cu.cuMemRelease, part.memory)
        attempt("cuMemRelease", cu.cuMemRelease, part.handle)
        if part.fd is not None:
            try:
                os.close(part.fd)
            except OSError as exc:
                errors.append(exc)
        return errors

    # -- teardown -------------------------------------------------------------------------
    def _release_sharing(self) -> list[BaseException]:
        """Free every multicast part, import and export still held (close(), error paths):
        importers' mappings before the exports they may map."""
        errors: list[BaseException] = []
        for key in list(self._multicasts):
            errors.extend(self._free_multicast(self._multicasts.pop(key)))
        for ptr in list(self._imported):
            errors.extend(self._free_shared(ptr, self._imported.pop(ptr), imported=True))
        for ptr in list(self._exported):
            errors.extend(self._free_shared(ptr, self._exported.pop(ptr), imported=False))
        return errors
