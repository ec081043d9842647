"""Rank views of one simulated engine, and their export/import/multicast calls."""

from __future__ import annotations

import os

import pytest

from gpubw.backend.base import MULTICAST_OFF, HandleProbe
from gpubw.backend.sim.backend import SimEngine, SimulatedBackend
from gpubw.backend.sim.faults import Faults
from gpubw.backend.sim.presets import load_system
from gpubw.model.errors import CudaError, UsageError
from gpubw.world.fds import FdServer, receive_fd

MIB = 1 << 20


def test_a_rank_view_shows_its_hosts_devices_with_local_ordinals() -> None:
    """Host 5 of a GB200 rack: devices 20..23 of the model, shown as 0..3; allocations land
    on the global device; a device of another host does not exist here."""
    model = load_system("gb200nvl72")
    engine = SimEngine(model)
    view = engine.rank_view(rank=21, host=5)
    devices = view.devices()
    assert [d.ordinal for d in devices] == [0, 1, 2, 3]
    assert [d.uuid for d in devices] == [model.devices[g].uuid for g in range(20, 24)]
    ptr = view.alloc_device(1, MIB)
    assert engine.live_allocations() == [(ptr, MIB, 21)]
    assert view.live_allocations() == [(ptr, MIB, 1)]
    with pytest.raises(UsageError, match=r"no device 4; devices are 0\.\.3"):
        view.alloc_device(4, MIB)
    free, total = view.memory_info(1)
    assert total == model.devices[21].memory_bytes and free < total
    view.free_device(ptr)


def test_a_plain_backend_is_the_one_view_of_its_engine() -> None:
    """SimulatedBackend(model) shows the whole single-host model, unchanged; on a rack it
    shows host 0."""
    model = load_system("h200x8")
    backend = SimulatedBackend(model)
    assert backend.devices() is model.devices
    assert backend.engine.views == [backend]
    rack = SimulatedBackend(load_system("gb200nvl72"))
    assert len(rack.devices()) == 4


def test_align_clocks_sets_every_view_to_the_latest() -> None:
    """Each view keeps its own host clock; aligning takes the latest."""
    engine = SimEngine(load_system("h200x2"))
    a, b = engine.rank_view(0, 0), engine.rank_view(1, 0)
    for _ in range(5):
        a.alloc_host(64, None)
    assert a.now > b.now
    engine.align_clocks(1, "barrier")
    assert a.now == b.now


def test_probes_follow_the_model_and_the_faults() -> None:
    """h200x2 has no fabric (IMEX) but posix-fd and ipc; an export_refused rank has none."""
    engine = SimEngine(load_system("h200x2"))
    probes = engine.rank_view(0, 0).handle_probes(0)
    assert [p.kind for p in probes] == ["fabric", "posix-fd", "ipc"]
    assert [p.ok for p in probes] == [False, True, True]
    assert probes[0].error.startswith("CUDA_ERROR_NOT_PERMITTED (no IMEX channel")
    refused = engine.rank_view(1, 0, Faults(export_refused=True)).handle_probes(0)
    assert refused == (
        HandleProbe("fabric", False, probes[0].error),
        HandleProbe(
            "posix-fd",
            False,
            "CUDA_ERROR_NOT_PERMITTED (injected fault) from cuMemExportToShareableHandle",
        ),
        HandleProbe(
            "ipc", False, "CUDA_ERROR_NOT_PERMITTED (injected fault) from cuIpcGetMemHandle"
        ),
    )


def test_import_maps_the_same_allocation_and_checks_the_handle() -> None:
    """An import in the same engine is the exporter's allocation (rounded to 2 MiB); bad
    handles, kinds and hosts are refused as the driver would."""
    engine = SimEngine(load_system("gb200nvl72"))
    owner, same_host, other_host = (
        engine.rank_view(0, 0),
        engine.rank_view(1, 0),
        engine.rank_view(4, 1),
    )
    ptr, handle = owner.export_device(0, 3 * MIB, "posix-fd")
    assert engine.live_allocations() == [(ptr, 4 * MIB, 0)]
    fd = owner.exported_fd(handle)
    assert same_host.import_device(1, handle, "posix-fd", 3 * MIB, fd) == ptr
    with pytest.raises(CudaError, match="works on its own host only"):
        other_host.import_device(0, handle, "posix-fd", MIB)
    with pytest.raises(CudaError, match="a posix-fd handle imported as fabric"):
        other_host.import_device(0, handle, "fabric", MIB)
    with pytest.raises(CudaError, match="not a simulated handle"):
        same_host.import_device(1, ("nope",), "posix-fd", MIB)
    with pytest.raises(CudaError, match="imported by its exporter"):
        owner.import_device(0, handle, "posix-fd", MIB, fd)
    with pytest.raises(UsageError, match="not memory imported"):
        same_host.close_import(ptr + 1)
    with pytest.raises(UsageError, match="not memory exported"):
        same_host.free_exported(ptr)
    same_host.close_import(ptr)
    owner.free_exported(ptr)
    assert engine.live_allocations() == [] and engine.exports == {}


def test_a_handle_of_another_process_becomes_a_shadow() -> None:
    """A token from another engine (another MPI process) is mapped as a shadow allocation on
    the owner's device in this engine, and freed by close_import."""
    theirs = SimEngine(load_system("h200x2")).rank_view(1, 0)
    ptr, handle = theirs.export_device(1, MIB, "ipc")
    mine_engine = SimEngine(load_system("h200x2"))
    mine = mine_engine.rank_view(0, 0)
    shadow = mine.import_device(0, handle, "ipc", MIB)
    assert mine_engine.live_allocations() == [(shadow, 2 * MIB, 1)]
    mine.close_import(shadow)
    assert mine_engine.live_allocations() == []
    theirs.free_exported(ptr)


def test_close_frees_a_views_shared_memory() -> None:
    """A view closed after an error frees its imports, exports and multicast parts."""
    engine = SimEngine(load_system("h200x2"))
    a, b = engine.rank_view(0, 0), engine.rank_view(1, 0)
    _, handle = a.export_device(0, MIB, "posix-fd")
    b.import_device(0, handle, "posix-fd", MIB, a.exported_fd(handle))
    b.close()
    a.close()
    assert engine.live_allocations() == [] and engine.exports == {}


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_posix_fd_import_needs_the_exporters_descriptor() -> None:
    """A POSIX-fd export is a real descriptor (a memfd holding the handle): the import goes
    through a duplicate of it received over a Unix socket (SCM_RIGHTS), and is refused
    without one, or with another export's; freeing the export closes its descriptor."""
    before = _open_fds()
    engine = SimEngine(load_system("h200x2"))
    owner, importer = engine.rank_view(0, 0), engine.rank_view(1, 0)
    ptr, handle = owner.export_device(0, MIB, "posix-fd")
    other, other_handle = owner.export_device(0, MIB, "posix-fd")
    with pytest.raises(CudaError, match=r"INVALID_VALUE \(no descriptor for a posix-fd handle"):
        importer.import_device(1, handle, "posix-fd", MIB)
    with pytest.raises(CudaError, match="is not the handle's allocation"):
        importer.import_device(1, handle, "posix-fd", MIB, owner.exported_fd(other_handle))
    with pytest.raises(UsageError, match="not a posix-fd handle exported by this backend"):
        importer.exported_fd(handle)
    with FdServer(owner.exported_fd(handle), {os.getpid()}) as server:
        fd = receive_fd(server.address, {os.getpid()}, 5.0)
    assert fd != owner.exported_fd(handle)
    try:
        assert importer.import_device(1, handle, "posix-fd", MIB, fd) == ptr
    finally:
        os.close(fd)
    importer.close_import(ptr)
    owner.free_exported(ptr)
    owner.free_exported(other)
    assert _open_fds() == before


def test_per_view_allocation_faults_use_local_ordinals() -> None:
    """alloc_fail_on_device names the view's own ordinal; other views are unaffected."""
    engine = SimEngine(load_system("gb200nvl72"))
    faulty = engine.rank_view(5, 1, Faults(alloc_fail_on_device=1))
    fine = engine.rank_view(1, 0)
    with pytest.raises(CudaError, match="OUT_OF_MEMORY"):
        faulty.export_device(1, MIB, "fabric")
    fine.free_device(fine.alloc_device(1, MIB))


@pytest.fixture
def multicast_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, _ in MULTICAST_OFF:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("multicast_allowed")
def test_multicast_follows_the_drivers_order() -> None:
    """Create, every member joins, then each maps: binding before all joined, joining twice
    or beyond the member count are errors; freeing in any order leaves nothing."""
    engine = SimEngine(load_system("gb200nvl72"))
    v0, v1 = engine.rank_view(0, 0), engine.rank_view(1, 0)
    key, handle = v0.multicast_create(0, 3 * MIB, 2, "fabric")
    assert v0.multicast_join(0, handle, "fabric", 3 * MIB) == key
    with pytest.raises(CudaError, match="only 1 of 2 devices joined"):
        v0.multicast_map(key)
    k1 = v1.multicast_join(1, handle, "fabric", 3 * MIB)
    with pytest.raises(CudaError, match="already added"):
        v1.multicast_join(1, handle, "fabric", 3 * MIB)
    p0, p1 = v0.multicast_map(key), v1.multicast_map(k1)
    assert p0 == p1
    assert sorted(d for _, _, d in engine.live_allocations()) == [0, 0, 1]  # mapping + 2 members
    v0.multicast_free(key)
    assert engine.multicasts  # the other member still holds it
    v1.multicast_free(k1)
    assert engine.live_allocations() == [] and engine.multicasts == {}


@pytest.mark.usefixtures("multicast_allowed")
def test_a_multicast_object_of_a_process_binds_with_its_own_members_only() -> None:
    """Two processes' backends (an MPI run of simulated ranks): each engine sees only its own
    member of a 2-device object, so each binds without waiting for the other's join."""
    model = load_system("gb200nvl72")
    creator, other = SimulatedBackend(model), SimulatedBackend(model)
    key, handle = creator.multicast_create(0, 3 * MIB, 2, "fabric")
    creator.multicast_join(0, handle, "fabric", 3 * MIB)
    theirs = other.multicast_join(1, handle, "fabric", 3 * MIB)
    assert creator.multicast_map(key) and other.multicast_map(theirs)
    for backend, k in ((creator, key), (other, theirs)):
        backend.multicast_free(k)
        assert backend.live_allocations() == []


@pytest.mark.usefixtures("multicast_allowed")
def test_multicast_needs_fabric_or_posix_fd() -> None:
    """IPC handles cannot carry multicast objects; fabric is refused without IMEX."""
    engine = SimEngine(load_system("h200x8"))
    view = engine.rank_view(0, 0)
    with pytest.raises(CudaError, match="no IPC handles"):
        view.multicast_create(0, MIB, 2, "ipc")
    with pytest.raises(CudaError, match="NOT_PERMITTED"):
        view.multicast_create(0, MIB, 2, "fabric")
    before = _open_fds()
    key, handle = view.multicast_create(0, MIB, 2, "posix-fd")
    assert view.multicast_join(0, handle, "posix-fd", MIB) == key  # the creator: no descriptor
    other = engine.rank_view(1, 0)
    with pytest.raises(CudaError, match="no descriptor for a posix-fd handle"):
        other.multicast_join(1, handle, "posix-fd", MIB)
    other.multicast_join(1, handle, "posix-fd", MIB, view.exported_fd(handle))
    other.multicast_free(key)
    view.multicast_free(key)
    assert engine.multicasts == {} and _open_fds() == before


@pytest.mark.parametrize("release", [True, False])
def test_gate_relay_stores_the_device_flag(release: bool) -> None:
    """The relay emulation holds its stream on the host flag, then - released or timed out
    (status 1) - stores 1 to the device flag, which releases a remote gate waiting on it."""
    from gpubw.backend.sim.kernels import gate_relay, gate_wait

    backend = SimulatedBackend(load_system("h200x2"))
    host_flag, status = backend.alloc_host(4, None), backend.alloc_host(4, None)
    device_flag = backend.alloc_device(1, 4)
    backend.enable_peer_access(0, 1)  # the relay on device 0 stores to device 1's memory
    waiter_status = backend.alloc_host(4, None)
    for p in (host_flag, status, waiter_status):
        backend.host_write(p, b"\0" * 4)
    with backend.stream(0) as relay_stream, backend.stream(1) as waiting:
        relay = gate_relay(backend._launch(relay_stream), host_flag, device_flag, 10**6, status)
        backend._engine.enqueue(relay_stream, relay, backend.now)
        wait = gate_wait(backend._launch(waiting), device_flag, 10**9, waiter_status)
        assert wait.remote
        backend._engine.enqueue(waiting, wait, backend.now)
        if release:
            backend.host_write(host_flag, b"\1\0\0\0")
        backend.synchronize(relay_stream, 1.0)
        backend.synchronize(waiting, 1.0)
    assert backend.host_read(status, 4) == (b"\0" * 4 if release else b"\1\0\0\0")
    assert backend.host_read(waiter_status, 4) == b"\0" * 4  # released, not timed out


def test_a_rank_behind_the_device_clock_waits_from_the_device_clock() -> None:
    """Another rank ran the shared device side ahead of this rank's host clock: this rank's
    synchronize bound counts from the device clock, not from its own stale clock."""
    engine = SimEngine(load_system("h200x8"))
    a, b = engine.rank_view(0, 0), engine.rank_view(1, 0)
    n = 2 << 30  # ~5.4 ms per copy at 394.5 GB/s
    bufs = {d: (a.alloc_device(d, n), a.alloc_device(d, n)) for d in range(4)}
    for d in range(4):
        a.enable_peer_access(d, d ^ 1)
    with a.stream(0) as sa, b.stream(2) as sb:
        a.memcpy_async(bufs[1][0], bufs[0][0], n, sa)
        b.memcpy_async(bufs[3][0], bufs[2][0], n, sb)
        a.synchronize(sa, 1.0)
        assert engine.engine.t > b.now + 5e-3
        b.memcpy_async(bufs[3][1], bufs[2][1], n, sb)  # runs from ~5.4 ms to ~10.9 ms
        b.synchronize(sb, 8e-3)
    assert b.now >= engine.engine.t - 1e-9


@pytest.mark.usefixtures("multicast_allowed")
def test_nothing_is_shared_across_nvlink_domains() -> None:
    """On 2 racks a fabric import or a multicast join by a GPU of the other rack is refused
    with CUDA_ERROR_NOT_PERMITTED, as a real fabric refuses it; within a rack both work."""
    from gpubw.backend.sim.presets import system_from_dict

    doc = {"base": "gb200nvl72", "count": 8, "hosts": [2, 2, 2, 2], "nvlink_domains": [4, 4]}
    engine = SimEngine(system_from_dict(doc))
    owner, near, far = engine.rank_view(0, 0), engine.rank_view(2, 1), engine.rank_view(4, 2)
    ptr, handle = owner.export_device(0, MIB, "fabric")
    with pytest.raises(CudaError, match=r"NOT_PERMITTED.*device 0 \(nvl0\) and device 4 \(nvl1\)"):
        far.import_device(0, handle, "fabric", MIB)
    near.close_import(near.import_device(0, handle, "fabric", MIB))
    key, mc = owner.multicast_create(0, MIB, 2, "fabric")
    with pytest.raises(CudaError, match=r"NOT_PERMITTED.*different NVLink domains"):
        far.multicast_join(0, mc, "fabric", MIB)
    owner.multicast_free(key)
    owner.free_exported(ptr)
    assert engine.live_allocations() == []
