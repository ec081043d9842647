"""The real backend's sharing calls (fabric, posix-fd, IPC, multicast) against a fake driver
that keeps the books; a POSIX fd is passed for real over a Unix socket (SCM_RIGHTS)."""

from __future__ import annotations

import ctypes
import itertools
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from cuda.bindings import driver as real_cu

from gpubw.backend import cuda as cuda_backend
from gpubw.backend.base import MULTICAST_OFF, HandleProbe
from gpubw.backend.cuda import CudaBackend
from gpubw.model.errors import CudaError, UsageError
from gpubw.world.fds import FdServer, receive_fd
from test_backend_cuda import FakeDriver
from test_fds import open_fds

R = real_cu.CUresult
T = real_cu.CUmemAllocationHandleType
MIB = 1 << 20
GRAN = 2 * MIB


class FakeSharingDriver(FakeDriver):
    """FakeDriver plus the virtual memory, IPC and multicast calls, with their books:
    generic handles (with reference counts), address reservations, mappings, fds."""

    CUmemAllocationHandleType = real_cu.CUmemAllocationHandleType
    CUmemAllocationProp = real_cu.CUmemAllocationProp
    CUmemAllocationType = real_cu.CUmemAllocationType
    CUmemLocationType = real_cu.CUmemLocationType
    CUmemAllocationGranularity_flags = real_cu.CUmemAllocationGranularity_flags
    CUmemAccessDesc = real_cu.CUmemAccessDesc
    CUmemAccess_flags = real_cu.CUmemAccess_flags
    CUmemFabricHandle = real_cu.CUmemFabricHandle
    CUipcMemHandle = real_cu.CUipcMemHandle
    CUipcMem_flags = real_cu.CUipcMem_flags
    CUmulticastObjectProp = real_cu.CUmulticastObjectProp
    CUmulticastGranularity_flags = real_cu.CUmulticastGranularity_flags

    def __init__(self) -> None:
        super().__init__()
        self.attributes: dict[str, int] = {
            "CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED": 1,
            "CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED": 1,
            "CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED": 1,
        }
        self.fabric_permitted = True
        self.refs: dict[int, int] = {}  # generic handle -> references (create/import)
        self.kind_of: dict[int, str] = {}  # handle -> "mem" or "mc"
        self.fabric: dict[bytes, int] = {}  # exported fabric data -> handle
        self.files: dict[int, int] = {}  # inode of an exported fd's file -> handle
        self.reserved: dict[int, int] = {}  # address -> size
        self.mapped: dict[int, int] = {}  # address -> handle
        self.access: dict[int, int] = {}  # address -> device given read/write
        self.ipc_open: dict[int, int] = {}  # imported ipc pointer -> exporter's pointer
        self.mc_devices: dict[int, list[int]] = {}
        self.mc_bound: dict[int, list[int]] = {}
        self.calls: list[str] = []
        self.addresses = itertools.count(0x9000_0000_0000, 0x1000_0000)
        self._tmp: list[Any] = []

    def _new(self, kind: str) -> Any:
        h = next(self.ids)
        self.refs[h] = 1
        self.kind_of[h] = kind
        return real_cu.CUmemGenericAllocationHandle(h)

    def cuDeviceGetAttribute(self, attr: Any, dev: int) -> tuple[Any, ...]:
        return (R.CUDA_SUCCESS, self.attributes.get(attr.name, 0))

    def cuMemGetAllocationGranularity(self, prop: Any, flag: Any) -> tuple[Any, ...]:
        assert prop.location.id == self._dev()
        return (R.CUDA_SUCCESS, GRAN)

    def cuMemCreate(self, size: int, prop: Any, flags: int) -> tuple[Any, ...]:
        assert size % GRAN == 0 and flags == 0 and prop.location.id == self._dev()
        return (R.CUDA_SUCCESS, self._new("mem"))

    def cuMemExportToShareableHandle(self, h: Any, kind: Any, flags: int) -> tuple[Any, ...]:
        self.calls.append("cuMemExportToShareableHandle")
        if kind == T.CU_MEM_HANDLE_TYPE_FABRIC:
            if not self.fabric_permitted:
                return (R.CUDA_ERROR_NOT_PERMITTED, None)
            fabric = real_cu.CUmemFabricHandle()
            data = int(h).to_bytes(8, "little") * 8
            fabric.data = data
            self.fabric[data] = int(h)
            return (R.CUDA_SUCCESS, fabric)
        tmp = tempfile.TemporaryFile()  # noqa: SIM115 - closed by the fixture
        self._tmp.append(tmp)
        fd = os.dup(tmp.fileno())
        self.files[os.fstat(fd).st_ino] = int(h)
        return (R.CUDA_SUCCESS, fd)

    def cuMemImportFromShareableHandle(self, os_handle: int, kind: Any) -> tuple[Any, ...]:
        if kind == T.CU_MEM_HANDLE_TYPE_FABRIC:
            h = self.fabric[ctypes.string_at(os_handle, 64)]
        else:
            h = self.files[os.fstat(os_handle).st_ino]
        self.refs[h] += 1
        return (R.CUDA_SUCCESS, real_cu.CUmemGenericAllocationHandle(h))

    def cuMemRelease(self, h: Any) -> tuple[Any, ...]:
        self.refs[int(h)] -= 1
        if not self.refs[int(h)]:
            del self.refs[int(h)]
        return (R.CUDA_SUCCESS,)

    def cuMemAddressReserve(self, size: int, align: int, addr: int, flags: int) -> tuple:
        p = next(self.addresses)
        self.reserved[p] = size
        return (R.CUDA_SUCCESS, real_cu.CUdeviceptr(p))

    def cuMemAddressFree(self, p: int, size: int) -> tuple[Any, ...]:
        assert self.reserved.pop(p) == size and p not in self.mapped
        return (R.CUDA_SUCCESS,)

    def cuMemMap(self, p: int, size: int, offset: int, h: Any, flags: int) -> tuple[Any, ...]:
        assert self.reserved[p] == size and int(h) in self.refs
        self.mapped[p] = int(h)
        return (R.CUDA_SUCCESS,)

    def cuMemSetAccess(self, p: int, size: int, desc: list, count: int) -> tuple[Any, ...]:
        assert (
            count == 1
            and desc[0].flags == real_cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        )
        self.access[p] = desc[0].location.id
        return (R.CUDA_SUCCESS,)

    def cuMemUnmap(self, p: int, size: int) -> tuple[Any, ...]:
        del self.mapped[p]
        self.access.pop(p, None)
        return (R.CUDA_SUCCESS,)

    def cuIpcGetMemHandle(self, p: int) -> tuple[Any, ...]:
        assert p in self.live["dev"]
        h = real_cu.CUipcMemHandle()
        ctypes.memmove(h.getPtr(), p.to_bytes(8, "little") * 8, 64)
        return (R.CUDA_SUCCESS, h)

    def cuIpcOpenMemHandle(self, h: Any, flags: Any) -> tuple[Any, ...]:
        assert flags == real_cu.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
        exporter = int.from_bytes(ctypes.string_at(h.getPtr(), 8), "little")
        p = next(self.addresses)
        self.ipc_open[p] = exporter
        return (R.CUDA_SUCCESS, real_cu.CUdeviceptr(p))

    def cuIpcCloseMemHandle(self, p: int) -> tuple[Any, ...]:
        del self.ipc_open[p]
        return (R.CUDA_SUCCESS,)

    def cuMulticastGetGranularity(self, prop: Any, flag: Any) -> tuple[Any, ...]:
        self.calls.append("cuMulticastGetGranularity")
        return (R.CUDA_SUCCESS, GRAN)

    def cuMulticastCreate(self, prop: Any) -> tuple[Any, ...]:
        self.calls.append("cuMulticastCreate")
        assert prop.size % GRAN == 0
        h = self._new("mc")
        self.mc_devices[int(h)] = []
        self.mc_bound[int(h)] = []
        return (R.CUDA_SUCCESS, h)

    def cuMulticastAddDevice(self, h: Any, dev: int) -> tuple[Any, ...]:
        self.calls.append("cuMulticastAddDevice")
        self.mc_devices[int(h)].append(dev)
        return (R.CUDA_SUCCESS,)

    def cuMulticastBindMem(self, h: Any, off: int, mem: Any, moff: int, size: int, fl: int):
        self.calls.append("cuMulticastBindMem")
        self.mc_bound[int(h)].append(int(mem))
        return (R.CUDA_SUCCESS,)

    def cuMulticastUnbind(self, h: Any, dev: int, off: int, size: int) -> tuple[Any, ...]:
        self.mc_bound[int(h)].pop()
        return (R.CUDA_SUCCESS,)

    def leftovers(self) -> dict[str, Any]:
        books = {
            "handles": self.refs,
            "reserved": self.reserved,
            "mapped": self.mapped,
            "ipc": self.ipc_open,
            "dev": self.live["dev"],
        }
        return {k: v for k, v in books.items() if v}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeSharingDriver, CudaBackend]]:
    driver = FakeSharingDriver()
    monkeypatch.setattr(cuda_backend, "cu", driver)
    backend = CudaBackend()
    yield driver, backend
    backend.close()
    for tmp in driver._tmp:
        tmp.close()


@pytest.fixture
def multicast_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, _ in MULTICAST_OFF:
        monkeypatch.delenv(name, raising=False)


def test_probes_say_which_kinds_export(fake: tuple[FakeSharingDriver, CudaBackend]) -> None:
    """Without an IMEX channel the fabric export is NOT_PERMITTED; POSIX-fd and IPC work;
    nothing stays allocated after probing."""
    driver, backend = fake
    driver.fabric_permitted = False
    probes = backend.handle_probes(1)
    assert [(p.kind, p.ok) for p in probes] == [
        ("fabric", False),
        ("posix-fd", True),
        ("ipc", True),
    ]
    assert probes[0].error == (
        "CUDA_ERROR_NOT_PERMITTED (fake error text) from cuMemExportToShareableHandle"
    )
    assert driver.leftovers() == {}


def test_a_device_attribute_of_zero_skips_the_kind(
    fake: tuple[FakeSharingDriver, CudaBackend],
) -> None:
    """A device that says it has no fabric handles is not even tried."""
    driver, backend = fake
    driver.attributes["CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED"] = 0
    assert backend.handle_probes(0)[0] == HandleProbe(
        "fabric", False, "HANDLE_TYPE_FABRIC_SUPPORTED is 0 on device 0"
    )
    assert "cuMemExportToShareableHandle" in driver.calls  # the posix-fd probe's only


def _passed(backend: CudaBackend, token: Any) -> int:
    """The exporter's descriptor of ``token``, passed to this process over a Unix socket."""
    with FdServer(backend.exported_fd(token), {os.getpid()}) as server:
        return receive_fd(server.address, {os.getpid()}, 5.0)


@pytest.mark.parametrize("kind", ["fabric", "posix-fd", "ipc"])
def test_export_import_round_trip(fake: tuple[FakeSharingDriver, CudaBackend], kind: str) -> None:
    """Export (rounded to the granularity, mapped with read/write for the device), import
    from the picklable token (a POSIX fd passed over a real Unix socket), then close and
    free: every handle, reservation and mapping is gone, and every descriptor closed."""
    driver, backend = fake
    before = open_fds()
    ptr, token = backend.export_device(0, 3 * MIB, kind)
    assert token[-1] == (3 * MIB if kind == "ipc" else 4 * MIB)
    fd = None
    if kind == "posix-fd":
        assert token[:2] == (os.getpid(), backend.exported_fd(token))
        fd = _passed(backend, token)
        assert fd != token[1]
    imported = backend.import_device(1, token, kind, 3 * MIB, fd)
    if fd is not None:
        os.close(fd)
    assert imported != ptr
    if kind != "ipc":
        assert driver.access[imported] == 1 and driver.access[ptr] == 0
        assert driver.mapped[imported] == driver.mapped[ptr]
        assert driver.refs[driver.mapped[ptr]] == 2  # created + imported
    else:
        assert driver.ipc_open[imported] == ptr
    backend.close_import(imported)
    backend.free_exported(ptr)
    assert driver.leftovers() == {}
    assert open_fds() - before <= {t.fileno() for t in driver._tmp}  # the fake driver's files
    with pytest.raises(UsageError, match="not memory imported"):
        backend.close_import(imported)
    with pytest.raises(UsageError, match="not memory exported"):
        backend.free_exported(ptr)


def test_close_frees_what_sharing_left(fake: tuple[FakeSharingDriver, CudaBackend]) -> None:
    """After an error or Ctrl-C, close() unmaps imports, then frees exports."""
    driver, backend = fake
    for kind in ("fabric", "posix-fd", "ipc"):
        _, token = backend.export_device(0, MIB, kind)
        fd = _passed(backend, token) if kind == "posix-fd" else None
        backend.import_device(1, token, kind, MIB, fd)
        if fd is not None:
            os.close(fd)
    backend.close()
    assert driver.leftovers() == {}


def test_a_failed_export_releases_the_allocation(
    fake: tuple[FakeSharingDriver, CudaBackend],
) -> None:
    """cuMemCreate succeeded, the export was refused: the handle is released."""
    driver, backend = fake
    driver.fabric_permitted = False
    with pytest.raises(CudaError, match="cuMemExportToShareableHandle failed"):
        backend.export_device(0, MIB, "fabric")
    assert driver.leftovers() == {}


def test_bad_arguments(fake: tuple[FakeSharingDriver, CudaBackend]) -> None:
    """Unknown kinds and sizes are UsageErrors; importing more than was exported too."""
    _, backend = fake
    with pytest.raises(UsageError, match="unknown handle kind 'nvlink'"):
        backend.export_device(0, MIB, "nvlink")
    with pytest.raises(UsageError, match="positive int"):
        backend.export_device(0, 0, "fabric")
    ptr, token = backend.export_device(0, MIB, "fabric")
    with pytest.raises(UsageError, match="cannot import"):
        backend.import_device(1, token, "fabric", 4 * MIB)
    backend.free_exported(ptr)


def test_a_posix_fd_import_needs_its_descriptor(
    fake: tuple[FakeSharingDriver, CudaBackend],
) -> None:
    """The token only names the exporter's descriptor: importing without a descriptor in this
    process is refused before any driver call; only this backend's posix-fd exports have an
    exported_fd."""
    driver, backend = fake
    ptr, token = backend.export_device(0, MIB, "posix-fd")
    with pytest.raises(UsageError, match=rf"descriptor {token[1]} of process {os.getpid()}"):
        backend.import_device(1, token, "posix-fd", MIB)
    fabric_ptr, fabric = backend.export_device(0, MIB, "fabric")
    for bad in (fabric, (os.getpid() + 1, token[1], token[2]), (os.getpid(), 10_000, GRAN)):
        with pytest.raises(UsageError, match="not a posix-fd handle exported by this backend"):
            backend.exported_fd(bad)
    backend.free_exported(ptr)
    backend.free_exported(fabric_ptr)
    with pytest.raises(UsageError, match="not a posix-fd handle exported"):
        backend.exported_fd(token)  # freed: its descriptor is closed
    assert driver.leftovers() == {}


@pytest.mark.parametrize(("name", "value"), MULTICAST_OFF)
def test_multicast_never_reaches_the_driver_where_disabled(
    fake: tuple[FakeSharingDriver, CudaBackend],
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    value: str,
) -> None:
    """Each disabling setting stops every multicast call before any driver call."""
    driver, backend = fake
    for other, _ in MULTICAST_OFF:
        monkeypatch.delenv(other, raising=False)
    monkeypatch.setenv(name, value)
    with pytest.raises(CudaError, match=f"NOT_PERMITTED.*{name}={value}"):
        backend.multicast_create(0, MIB, 2, "fabric")
    with pytest.raises(CudaError, match="NOT_PERMITTED"):
        backend.multicast_join(0, (b"x" * 64, GRAN, 2), "fabric", MIB)
    with pytest.raises(CudaError, match="NOT_PERMITTED"):
        backend.multicast_map(1)
    assert not [c for c in driver.calls if c.startswith("cuMulticast")]


@pytest.mark.usefixtures("multicast_allowed")
def test_multicast_create_join_map_free(fake: tuple[FakeSharingDriver, CudaBackend]) -> None:
    """The owner creates and exports; it and an importer (another process: another backend)
    add their devices, bind their own memory and map; freeing both leaves nothing."""
    driver, backend = fake
    key, token = backend.multicast_create(0, 3 * MIB, 2, "fabric")
    assert token[1:] == (4 * MIB, 2)
    assert backend.multicast_join(0, token, "fabric", 3 * MIB) == key
    importer = CudaBackend()
    try:
        other = importer.multicast_join(1, token, "fabric", 3 * MIB)
        mc = driver.mapped.get(backend.multicast_map(key))
        assert mc is not None and driver.kind_of[mc] == "mc"
        assert driver.refs[mc] == 2  # created + imported
        importer.multicast_map(other)
        assert driver.mc_devices[mc] == [0, 1] and len(driver.mc_bound[mc]) == 2
        importer.multicast_free(other)
        backend.multicast_free(key)
        assert driver.leftovers() == {}
    finally:
        importer.close()


@pytest.mark.usefixtures("multicast_allowed")
def test_multicast_needs_device_support(fake: tuple[FakeSharingDriver, CudaBackend]) -> None:
    """A device without multicast support is refused before cuMulticastCreate."""
    driver, backend = fake
    driver.attributes["CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED"] = 0
    with pytest.raises(CudaError, match="cuMulticastCreate failed: CUDA_ERROR_NOT_SUPPORTED"):
        backend.multicast_create(0, MIB, 2, "posix-fd")
    assert "cuMulticastCreate" not in driver.calls


# -- gpu: two real processes -------------------------------------------------------------------
def _exporter(kind: str, device: int, conn: Any, importer: int) -> None:
    """Child process: export a buffer holding a known pattern, send the token (and, for
    posix-fd, where process ``importer`` gets the descriptor), wait."""
    backend = CudaBackend()
    server: FdServer | None = None
    try:
        ptr, token = backend.export_device(device, 4 * MIB, kind)
        host = backend.alloc_host(4 * MIB, device)
        backend.host_write(host, bytes(range(256)) * (4 * MIB // 256))
        with backend.stream(device) as s:
            backend.memcpy_async(ptr, host, 4 * MIB, s)
            backend.synchronize(s, 30.0)
        if kind == "posix-fd":
            server = FdServer(backend.exported_fd(token), {importer})
        conn.send((token, None if server is None else server.address))
        conn.recv()  # the importer is done
        backend.free_exported(ptr)
        conn.send("freed")
    finally:
        if server is not None:
            server.close()
        backend.close()


def _importer(kind: str, device: int, token: Any, fd: int | None) -> bytes:
    backend = CudaBackend()
    try:
        ptr = backend.import_device(device, token, kind, 4 * MIB, fd)
        host = backend.alloc_host(4 * MIB, device)
        with backend.stream(device) as s:
            backend.memcpy_async(host, ptr, 4 * MIB, s)
            backend.synchronize(s, 30.0)
        data = backend.host_read(host, 4 * MIB)
        backend.close_import(ptr)
        return data
    finally:
        backend.close()


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["posix-fd", "ipc"])
def test_two_processes_share_device_memory(kind: str) -> None:
    """On a real GPU: one process exports (on device 0), another imports (on the last
    device; a POSIX fd received over a Unix socket) and reads the exporter's bytes; both
    free everything."""
    import multiprocessing

    try:
        probe = CudaBackend()
    except Exception as exc:  # NoDriverError
        pytest.skip(f"no NVIDIA GPU/driver ({type(exc).__name__})")
    last = len(probe.devices()) - 1
    probes = {p.kind: p for p in probe.handle_probes(0)}
    probe.close()
    if not probes[kind].ok:
        pytest.skip(f"{kind} export does not work here: {probes[kind].error}")
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_exporter, args=(kind, 0, child, os.getpid()))
    proc.start()
    try:
        assert parent.poll(60), "the exporter sent no token"
        token, address = parent.recv()
        fd = None if address is None else receive_fd(address, {proc.pid}, 60.0)
        try:
            data = _importer(kind, last, token, fd)
        finally:
            if fd is not None:
                os.close(fd)
        parent.send("done")
        assert parent.poll(60) and parent.recv() == "freed"
    finally:
        proc.join(60)
        if proc.is_alive():
            proc.kill()
    assert proc.exitcode == 0
    assert data == bytes(range(256)) * (4 * MIB // 256)
