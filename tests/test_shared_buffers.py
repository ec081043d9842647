"""Memory shared across ranks (gpubw.memory.shared, sharing, multicast) on simulated ranks
that share one engine."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pytest

from gpubw.backend.base import MULTICAST_OFF, ptr, u32, u64
from gpubw.backend.sim.backend import SimEngine, SimulatedBackend
from gpubw.backend.sim.faults import Faults
from gpubw.backend.sim.model import SimSystem
from gpubw.backend.sim.presets import load_system, system_from_dict
from gpubw.kernels.patterns import SRC_SEED
from gpubw.memory import sharing as sharing_module
from gpubw.memory.buffers import DeviceBuffer, HostBuffer
from gpubw.memory.multicast import MulticastBuffer
from gpubw.memory.pool import BufferPool
from gpubw.memory.shared import SharedBuffer
from gpubw.memory.sharing import IMEX_MESSAGE, RemoteRankError, Sharing, SharingError
from gpubw.model.errors import CudaError, GateTimeoutError, VerificationError
from gpubw.model.options import RunOptions
from gpubw.world.base import WorldError, WorldTimeoutError
from gpubw.world.fds import FdPassingError, FdServer
from gpubw.world.simulated import RankOutcome, SimulatedCluster, SimulatedWorld
from test_fds import listening, open_fds

MIB = 1 << 20
SIZE = 4 * MIB


def _quiet(model: SimSystem) -> SimSystem:
    """The model without jitter, so that two runs of one copy take exactly as long."""
    return attrs.evolve(model, jitter=0.0)


@attrs.define
class Rank:
    """One simulated rank's pieces: its world, backend view, pool and sharing."""

    world: SimulatedWorld
    backend: SimulatedBackend
    pool: BufferPool
    sharing: Sharing

    @property
    def device(self) -> int:
        return self.sharing.device


def run_ranks(
    model: SimSystem,
    hosts: Sequence[int],
    fn: Callable[[Rank], Any],
    faults: dict[int, Faults] | None = None,
    timeout_s: float = 20.0,
    prefer: str | None = None,
) -> tuple[SimEngine, list[RankOutcome[Any]]]:
    """Run ``fn`` on every rank of a cluster of ``hosts`` over one engine of ``model``; each
    rank's pool and view are closed after ``fn`` (a failure there is the rank's outcome)."""
    engine = SimEngine(model)
    cluster = SimulatedCluster(list(hosts), timeout_s=timeout_s, on_step=engine.align_clocks)
    views = {
        r: engine.rank_view(r, cluster.rank_hosts[r], (faults or {}).get(r))
        for r in range(cluster.size)
    }

    def body(world: SimulatedWorld) -> Any:
        view = views[world.rank]
        pool = BufferPool(view, view.devices(), RunOptions(gate_timeout_s=5.0))
        device = world.local_rank % len(view.devices())
        view.load_kernels(device)
        rank = Rank(world, view, pool, Sharing(pool, world, device, prefer=prefer))
        try:
            return fn(rank)
        finally:
            rank.sharing.close()
            pool.close()
            view.close()

    return engine, cluster.run(body, join_timeout_s=3 * timeout_s)


def values(outcomes: list[RankOutcome[Any]]) -> list[Any]:
    for o in outcomes:
        assert o.ok, f"rank {o.rank}: {o.error!r} (hung={o.hung})"
    return [o.value for o in outcomes]


def _copy_seconds(backend: SimulatedBackend, device: int, dst: int, src: int, n: int) -> float:
    with backend.stream(device) as s, backend.event(device) as a, backend.event(device) as b:
        backend.record_event(a, s)
        backend.memcpy_async(dst, src, n, s)
        backend.record_event(b, s)
        backend.synchronize(s, 10.0)
        return backend.elapsed_seconds(a, b)


# -- handle kinds ----------------------------------------------------------------------------
def test_ranks_agree_on_the_best_common_handle_kind() -> None:
    """h200x2 offers posix-fd and IPC: two ranks on its host agree on posix-fd (tested end to
    end); a GB200 rack offers fabric, which ranks on two hosts agree on."""
    _, out = run_ranks(load_system("h200x2"), [2], lambda r: r.sharing.handle_kind())
    assert values(out) == ["posix-fd", "posix-fd"]
    _, out = run_ranks(load_system("gb200nvl72"), [2, 2], lambda r: r.sharing.handle_kind())
    assert values(out) == ["fabric"] * 4


def test_a_handle_type_asked_for_is_used_or_refused() -> None:
    """--handle-type ipc on h200x2 uses IPC although posix-fd is better; fabric, which h200x2
    lacks, is one clear SharingError on every rank naming what the ranks can use."""
    _, out = run_ranks(load_system("h200x2"), [2], lambda r: r.sharing.handle_kind(), prefer="ipc")
    assert values(out) == ["ipc", "ipc"]
    _, out = run_ranks(
        load_system("h200x2"), [2], lambda r: r.sharing.handle_kind(), prefer="fabric"
    )
    errors = {str(o.error) for o in out}
    assert errors == {
        "the handle type fabric was asked for, but not every rank can use it (the ranks can "
        "all use: posix-fd, ipc)"
    }


def test_ranks_on_two_hosts_without_fabric_get_the_imex_error() -> None:
    """Ranks on two hosts without fabric handles: every rank raises the same SharingError
    naming IMEX, the channel device and the first rank whose fabric export failed - and
    asking again raises it again without communicating."""
    model = system_from_dict({"base": "h200x8", "hosts": [4, 4]})

    def body(r: Rank) -> str:
        with pytest.raises(SharingError) as first:
            r.sharing.handle_kind()
        with pytest.raises(SharingError) as second:
            r.sharing.handle_kind()
        assert second.value is first.value
        return str(first.value)

    _, out = run_ranks(model, [1, 1], body)
    texts = values(out)
    assert texts[0] == texts[1]
    assert texts[0] == IMEX_MESSAGE.format(
        detail="fabric export failed on rank 0 with CUDA_ERROR_NOT_PERMITTED (no IMEX "
        "channel (/dev/nvidia-caps-imex-channels) in the simulated system) from "
        "cuMemExportToShareableHandle"
    )


def test_one_rank_refusing_fabric_export_is_named() -> None:
    """On a rack with IMEX, one rank whose fabric export is refused (as without an IMEX
    channel) makes the agreement fail, naming that rank."""

    def body(r: Rank) -> str:
        with pytest.raises(SharingError) as info:
            r.sharing.handle_kind()
        return str(info.value)

    _, out = run_ranks(
        load_system("gb200nvl72"), [2, 2], body, faults={3: Faults(export_refused=True)}
    )
    texts = values(out)
    assert all("fabric export failed on rank 3 with CUDA_ERROR_NOT_PERMITTED" in t for t in texts)


def test_posix_fd_refused_end_to_end_falls_back_to_ipc() -> None:
    """If importing a POSIX fd fails on a rank (the driver refuses it), the ranks use IPC and
    say why."""

    def body(r: Rank) -> tuple[str, str]:
        if r.world.rank == 1:
            original = r.backend.import_device

            def refuse(device: int, handle: Any, kind: str, nbytes: int, fd: Any = None) -> int:
                if kind == "posix-fd":
                    raise CudaError("cuMemImportFromShareableHandle", "EPERM", "injected")
                return original(device, handle, kind, nbytes, fd)

            r.backend.import_device = refuse  # type: ignore[method-assign]
        return r.sharing.handle_kind(), r.sharing.describe()

    engine, out = run_ranks(load_system("h200x2"), [2], body)
    for kind, text in values(out):
        assert kind == "ipc"
        assert "posix-fd refused: rank 1: cuMemImportFromShareableHandle failed: EPERM" in text
    assert engine.live_allocations() == []


def test_a_descriptor_refused_by_its_server_falls_back_to_ipc() -> None:
    """The owner's descriptor server refuses a process that is not one of the run's ranks on
    its host (SO_PEERCRED): here rank 0 believes its host's ranks are another process, so it
    refuses rank 1, which gets no descriptor; the ranks use IPC and say why."""

    def body(r: Rank) -> tuple[str, str]:
        if r.world.rank == 0:
            r.world.host_pids = frozenset({1})
        return r.sharing.handle_kind(), r.sharing.describe()

    engine, out = run_ranks(load_system("h200x2"), [2], body)
    for kind, text in values(out):
        assert kind == "ipc"
        assert "posix-fd refused: rank 1: the server at " in text
        assert "closed the connection without sending the descriptor" in text
    assert engine.live_allocations() == []


def _stalling_receive(monkeypatch: pytest.MonkeyPatch, nth: int, dies: bool) -> list[int]:
    """Rank 1's ``nth`` descriptor (1: the handle-kind probe's, 2: its first buffer's): it
    connects to the owner's server, then hangs 3 s without reading and gives up, or dies
    (its thread leaves the world) right after connecting. Other receives are real."""
    real = sharing_module.receive_fd
    calls = [0]

    def receive(address: str, pids: Any, timeout_s: float) -> int:
        if threading.current_thread().name != "gpubw-rank-1":
            return real(address, pids, timeout_s)
        calls[0] += 1
        if calls[0] != nth:
            return real(address, pids, timeout_s)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(address)
            if dies:
                raise SystemExit("rank 1 died mid-handshake")
            time.sleep(3.0)
        raise FdPassingError("rank 1 gave up")

    monkeypatch.setattr(sharing_module, "receive_fd", receive)
    return calls


@pytest.mark.parametrize("dies", [False, True], ids=["hangs", "dies"])
@pytest.mark.parametrize("nth", [1, 2], ids=["probe", "buffer"])
def test_a_rank_stopping_mid_handshake_ends_within_the_world_timeout(
    monkeypatch: pytest.MonkeyPatch, nth: int, dies: bool
) -> None:
    """Rank 1 stops between connecting to the owner's descriptor server and receiving: the
    owner (rank 0) ends within the world timeout (2 s) - a WorldTimeoutError if rank 1
    hangs, a WorldError at once if it died -, closing its server and freeing its export;
    no descriptor stays open, no folder stays behind."""
    calls = _stalling_receive(monkeypatch, nth, dies)
    before = open_fds()

    def body(r: Rank) -> tuple[float, BaseException]:
        if nth == 2:
            r.sharing.handle_kind()
        start = time.monotonic()
        with pytest.raises(WorldError) as info:
            SharedBuffer.create(r.sharing, owner=0, nbytes=SIZE)
        return time.monotonic() - start, info.value

    engine, out = run_ranks(load_system("h200x2"), [2], body, timeout_s=2.0)
    assert calls == [nth]
    assert out[0].ok, out[0].error
    assert out[0].value is not None
    seconds, error = out[0].value
    # which error says how it ended (a departure at once, or the bound); the upper bounds only
    # say that it ended, with room for a loaded machine
    if dies:
        assert "rank 1 left the world" in str(error) and seconds < 30
    else:
        assert isinstance(error, WorldTimeoutError) and 1.9 < seconds < 30
    assert engine.live_allocations() == [] and engine.exports == {}
    assert open_fds() == before


# -- shared buffers ----------------------------------------------------------------------------
def test_cross_rank_copy_matches_the_single_node_copy() -> None:
    """A copy by rank 0 from rank 1's shared buffer moves the owner's bytes over the owner's
    link: same content, and the same modelled time as the single-node copy between the two
    devices with peer access."""
    model = _quiet(load_system("h200x2"))

    def body(r: Rank) -> float | None:
        with SharedBuffer.create(r.sharing, owner=1, nbytes=SIZE) as u:
            assert u.label == "Multinode node 1"
            assert u.allocated == SIZE and u.nbytes == SIZE and u.owner == 1
            assert u.context_device == r.device
            if r.world.rank == 1:
                with r.backend.stream(r.device) as s:
                    u.fill(SRC_SEED, SIZE, stream=s, exec_device=r.device)
                    r.backend.synchronize(s, 5.0)
            r.world.barrier()
            seconds = None
            if r.world.rank == 0:
                with DeviceBuffer.allocate(r.pool, r.device, SIZE) as mine:
                    seconds = _copy_seconds(r.backend, r.device, mine.ptr, u.ptr, SIZE)
                    with r.backend.stream(r.device) as s:
                        mine.verify(SRC_SEED, SIZE, stream=s, exec_device=r.device)
            r.world.barrier()
            return seconds

    engine, out = run_ranks(model, [2], body)
    cross = values(out)[0]
    single = SimulatedBackend(model)
    pool = BufferPool(single, single.devices(), RunOptions())
    single.enable_peer_access(0, 1)
    single.enable_peer_access(1, 0)
    with (
        DeviceBuffer.allocate(pool, 0, SIZE) as dst,
        DeviceBuffer.allocate(pool, 1, SIZE) as src,
    ):
        expected = _copy_seconds(single, 0, dst.ptr, src.ptr, SIZE)
    pool.close()
    assert cross == pytest.approx(expected, rel=1e-12)
    assert engine.live_allocations() == []


def test_shared_buffer_content_is_one_allocation() -> None:
    """What the owner writes is what every importer reads (and a corrupted word written by
    an importer is what the owner's verify finds)."""

    def body(r: Rank) -> str:
        with SharedBuffer.create(r.sharing, owner=0, nbytes=SIZE) as u:
            with r.backend.stream(r.device) as s:
                if r.world.rank == 0:
                    u.fill(SRC_SEED, SIZE, stream=s, exec_device=r.device)
                    r.backend.synchronize(s, 5.0)
                r.world.barrier()
                u.verify(SRC_SEED, SIZE, stream=s, exec_device=r.device)
                r.world.barrier()
                if r.world.rank == 1:
                    with HostBuffer.allocate(r.pool, r.device, 4) as h:
                        h.write(b"\xef\xbe\xad\xde")
                        r.backend.memcpy_async(u.ptr + 4096, h.ptr, 4, s)
                        r.backend.synchronize(s, 5.0)
                r.world.barrier()
                with pytest.raises(VerificationError) as info:
                    u.verify(SRC_SEED, SIZE, stream=s, exec_device=r.device)
            return str(info.value)

    _, out = run_ranks(load_system("h200x2"), [2], body)
    assert (
        values(out)
        == ["verification failed on Multinode node 0: first bad 32-bit word at byte offset 4096"]
        * 2
    )


def test_collective_teardown_frees_everything_across_hosts() -> None:
    """Every rank's buffer of a 2-host rack, created and destroyed collectively (fabric),
    leaves no allocation and no export behind; sizes are rounded to the granularity."""

    def body(r: Rank) -> list[int]:
        sizes = []
        for owner in range(r.world.size):
            with SharedBuffer.create(r.sharing, owner, 3 * MIB + 5) as u:
                assert u.kind == "fabric"
                sizes.append(u.allocated)
        return sizes

    engine, out = run_ranks(load_system("gb200nvl72"), [2, 2], body)
    assert values(out) == [[4 * MIB] * 4] * 4
    assert engine.live_allocations() == [] and engine.exports == {}


def test_an_allocation_failure_on_the_owner_fails_every_rank_alike() -> None:
    """The owner's out-of-memory is every rank's RemoteRankError naming the owner, and the
    next buffer works."""

    def body(r: Rank) -> str:
        r.sharing.handle_kind()
        if r.world.rank == 1:
            r.backend.faults = Faults(alloc_fail_after=0)
        with pytest.raises(RemoteRankError) as info:
            SharedBuffer.create(r.sharing, owner=1, nbytes=SIZE)
        r.backend.faults = Faults()
        with SharedBuffer.create(r.sharing, owner=1, nbytes=SIZE):
            pass
        assert info.value.rank == 1
        return str(info.value)

    engine, out = run_ranks(load_system("h200x2"), [2], body)
    assert (
        values(out) == ["rank 1: cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (injected fault)"] * 2
    )
    assert engine.live_allocations() == []


@pytest.mark.parametrize(
    "create",
    [
        lambda sharing: SharedBuffer.create(sharing, owner=0, nbytes=SIZE),
        lambda sharing: SharedBuffer.create_all(sharing, SIZE),
    ],
    ids=["one-owner", "every-owner"],
)
def test_an_import_failure_unwinds_every_rank(create: Callable[[Sharing], Any]) -> None:
    """An import failing on one rank of four: every rank raises the same error, the ranks
    that imported unmap, the owners free; nothing is left."""

    def body(r: Rank) -> str:
        r.sharing.handle_kind()
        if r.world.rank == 2:

            def refuse(device: int, handle: Any, kind: str, nbytes: int, fd: Any = None) -> int:
                raise CudaError("cuMemImportFromShareableHandle", "CUDA_ERROR_NOT_PERMITTED")

            r.backend.import_device = refuse  # type: ignore[method-assign]
        with pytest.raises(RemoteRankError) as info:
            create(r.sharing)
        return str(info.value)

    engine, out = run_ranks(load_system("gb200nvl72"), [4], body)
    assert (
        values(out)
        == ["rank 2: cuMemImportFromShareableHandle failed: CUDA_ERROR_NOT_PERMITTED"] * 4
    )
    assert engine.live_allocations() == [] and engine.exports == {}


def test_export_refused_after_agreement_fails_the_buffer() -> None:
    """An export refused on the owner (after the kind was agreed) fails that buffer on every
    rank."""

    def body(r: Rank) -> str:
        r.sharing.handle_kind()
        if r.world.rank == 0:
            r.backend.faults = Faults(export_refused=True)
        with pytest.raises(RemoteRankError) as info:
            SharedBuffer.create(r.sharing, owner=0, nbytes=SIZE)
        return str(info.value)

    engine, out = run_ranks(load_system("h200x2"), [2], body)
    assert (
        values(out)
        == [
            "rank 0: cuMemExportToShareableHandle failed: CUDA_ERROR_NOT_PERMITTED (injected fault)"
        ]
        * 2
    )
    assert engine.live_allocations() == []


def test_posix_fd_buffers_pass_their_descriptor_to_the_hosts_ranks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """4 ranks of one h200x8 host agree on posix-fd: each buffer's owner serves its
    descriptor to the 3 others over a Unix socket until they all imported, then closes it;
    no descriptor, socket or allocation is left."""
    servers = _spied_servers(monkeypatch)
    before = open_fds()

    def body(r: Rank) -> str:
        kind = r.sharing.handle_kind()
        for owner in (2, 0):
            with SharedBuffer.create(r.sharing, owner=owner, nbytes=SIZE):
                r.world.barrier()
        return kind

    engine, out = run_ranks(load_system("h200x8"), [4], body)
    assert values(out) == ["posix-fd"] * 4
    # the handle kind's end-to-end test, then one per buffer
    assert [(s.served, s.refused) for s in servers] == [(3, [])] * 3
    assert not any(listening(s.address) for s in servers)
    assert engine.live_allocations() == [] and open_fds() == before


def test_sharing_close_frees_what_an_interrupted_testcase_left() -> None:
    """Buffers never destroyed (a rank stopped mid-testcase) are freed by Sharing.close,
    locally."""

    def body(r: Rank) -> int:
        SharedBuffer.create(r.sharing, owner=0, nbytes=SIZE)
        SharedBuffer.create(r.sharing, owner=1, nbytes=SIZE)
        return len(r.sharing.live)

    engine, out = run_ranks(load_system("h200x2"), [2], body)
    assert values(out) == [2, 2]
    assert engine.live_allocations() == []


def test_bad_owner_is_api_misuse() -> None:
    """An owner outside the world is a ValueError before any collective."""

    def body(r: Rank) -> None:
        with pytest.raises(ValueError, match=r"owner must be a rank of 0\.\.1, got 2"):
            SharedBuffer.create(r.sharing, owner=2, nbytes=SIZE)

    values(run_ranks(load_system("h200x2"), [2], body)[1])


# -- the gate across ranks ---------------------------------------------------------------------
def test_a_gate_released_by_another_rank_waits_for_it() -> None:
    """A stream held by a gate whose flag lives in another rank's memory waits (in real
    time) for that rank to release it, instead of timing out on the virtual clock."""

    def body(r: Rank) -> str:
        with SharedBuffer.create(r.sharing, owner=0, nbytes=4) as flag:
            status = r.pool.host_scratch("status", 4)
            status.write(b"\0" * 4)
            r.world.barrier()
            if r.world.rank == 1:
                with r.backend.stream(r.device) as s:
                    r.backend.launch(
                        "gpubw_gate_wait",
                        1,
                        1,
                        (ptr(flag.ptr), u64(int(2e9)), ptr(status.ptr)),
                        s,
                    )
                    r.world.barrier()
                    r.backend.synchronize(s, 2.0)
            else:
                r.world.barrier()
                time.sleep(0.2)  # rank 1 is already waiting
                with HostBuffer.allocate(r.pool, r.device, 4) as one, r.backend.stream(0) as s:
                    one.write(struct.pack("<i", 1))
                    r.backend.memcpy_async(flag.ptr, one.ptr, 4, s)
                    r.backend.synchronize(s, 2.0)
            r.world.barrier()
            return status.read(4).hex()

    _, out = run_ranks(load_system("h200x2"), [2], body)
    assert values(out) == ["00000000"] * 2


def test_a_gate_never_released_still_times_out() -> None:
    """Nobody releases the flag: the waiting rank gives up after the bound, as a gate
    timeout."""

    def body(r: Rank) -> None:
        with SharedBuffer.create(r.sharing, owner=0, nbytes=4) as flag:
            status = r.pool.host_scratch("status", 4)
            if r.world.rank == 1:
                with r.backend.stream(r.device) as s:
                    r.backend.launch(
                        "gpubw_gate_wait", 1, 1, (ptr(flag.ptr), u64(10**10), ptr(status.ptr)), s
                    )
                    started = time.monotonic()
                    with pytest.raises(GateTimeoutError):
                        r.backend.synchronize(s, 0.3)
                    assert time.monotonic() - started >= 0.25

    values(run_ranks(load_system("h200x2"), [2], body)[1])


# -- multicast ---------------------------------------------------------------------------------
@pytest.fixture
def multicast_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, _ in MULTICAST_OFF:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("multicast_allowed")
def test_a_store_to_a_multicast_object_lands_in_every_member() -> None:
    """Rank 0 copies its buffer into the multicast object of a 4-rank GB200 host; every
    member's memory then holds the bytes, at the modelled multicast rate."""
    model = _quiet(load_system("gb200nvl72"))

    def body(r: Rank) -> float | None:
        with MulticastBuffer.create(r.sharing, owner=0, nbytes=SIZE) as mc:
            assert mc.label == "Multinode node 0"
            seconds = None
            if r.world.rank == 0:
                with DeviceBuffer.allocate(r.pool, r.device, SIZE) as src:
                    with r.backend.stream(r.device) as s:
                        src.fill(SRC_SEED, SIZE, stream=s, exec_device=r.device)
                        r.backend.synchronize(s, 5.0)
                    with (
                        r.backend.stream(r.device) as s,
                        r.backend.event(r.device) as a,
                        r.backend.event(r.device) as b,
                    ):
                        r.backend.record_event(a, s)
                        elements = SIZE // 16
                        r.backend.launch(
                            "gpubw_copy",
                            elements // 512,
                            512,
                            (ptr(mc.ptr), ptr(src.ptr), u64(elements), u32(1)),
                            s,
                        )
                        r.backend.record_event(b, s)
                        r.backend.synchronize(s, 5.0)
                        seconds = r.backend.elapsed_seconds(a, b)
            r.world.barrier()
            found = r.backend.engine.memory.find(mc.ptr, SIZE)
            assert found is not None and found[0].members is not None
            mine = [m for m in found[0].members if m.device == r.device]
            assert len(found[0].members) == 4 and len(mine) == 1
            memory = r.backend.engine.memory
            head = memory.read(mine[0], 0, 64).tobytes()
            assert head == memory.read(memory.find(mc.ptr, 64)[0], 0, 64).tobytes()  # type: ignore[index]
            assert head != bytes(64)
            r.world.barrier()
            return seconds

    engine, out = run_ranks(model, [4], body)
    seconds = values(out)[0]
    rate = model.peers[(0, 1)].sm
    overhead = model.overheads.kernel_launch + model.overheads.host_call  # record -> launch
    assert seconds == pytest.approx(SIZE / rate + overhead, rel=1e-6)
    assert engine.live_allocations() == [] and engine.multicasts == {}


def _spied_servers(monkeypatch: pytest.MonkeyPatch) -> list[FdServer]:
    """Every descriptor server the ranks make from now on."""
    made: list[FdServer] = []

    class Spied(FdServer):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            made.append(self)

    monkeypatch.setattr(sharing_module, "FdServer", Spied)
    return made


@pytest.mark.usefixtures("multicast_allowed")
def test_a_multicast_object_shared_with_posix_fd_passes_its_descriptor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With posix-fd handles (asked for, on one GB200 host of 4 ranks), the owner's
    descriptor of its multicast object reaches the 3 other members over its Unix socket;
    each joins with its own duplicate; afterwards no object, server or descriptor is left."""
    before = open_fds()

    def body(r: Rank) -> int:
        assert r.sharing.handle_kind() == "posix-fd"
        servers = _spied_servers(monkeypatch) if r.world.rank == 1 else []
        r.world.barrier()
        with MulticastBuffer.create(r.sharing, owner=1, nbytes=SIZE) as mc:
            found = r.backend.engine.memory.find(mc.ptr, SIZE)
            assert found is not None and found[0].members is not None
            members = len(found[0].members)
            r.world.barrier()
        if servers:
            (server,) = servers
            assert (server.served, server.refused) == (3, [])
        return members

    engine, out = run_ranks(load_system("gb200nvl72"), [4], body, prefer="posix-fd")
    assert values(out) == [4] * 4
    assert engine.multicasts == {} and engine.live_allocations() == []
    assert open_fds() == before


@pytest.mark.parametrize(("name", "value"), MULTICAST_OFF)
def test_multicast_is_refused_where_the_environment_disables_it(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    """Each disabling setting stops multicast before any object exists."""
    for other, _ in MULTICAST_OFF:
        monkeypatch.delenv(other, raising=False)
    monkeypatch.setenv(name, value)

    def body(r: Rank) -> str:
        with pytest.raises(RemoteRankError) as info:
            MulticastBuffer.create(r.sharing, owner=0, nbytes=SIZE)
        return str(info.value)

    engine, out = run_ranks(load_system("gb200nvl72"), [2], body)
    assert (
        values(out)
        == [
            f"rank 0: cuMulticastCreate failed: CUDA_ERROR_NOT_PERMITTED (NVLink multicast is "
            f"disabled here ({name}={value}); gpubw never creates multicast objects then)"
        ]
        * 2
    )
    assert engine.multicasts == {}


@pytest.mark.usefixtures("multicast_allowed")
def test_multicast_needs_every_member_device_to_support_it() -> None:
    """H200x2 devices have no multicast: the owner's create fails on every rank."""

    def body(r: Rank) -> str:
        with pytest.raises(RemoteRankError) as info:
            MulticastBuffer.create(r.sharing, owner=1, nbytes=SIZE)
        return str(info.value)

    _, out = run_ranks(load_system("h200x2"), [2], body)
    assert (
        values(out)
        == [
            "rank 1: cuMulticastCreate failed: CUDA_ERROR_NOT_SUPPORTED (no multicast on this "
            "device)"
        ]
        * 2
    )


def test_one_rank_shares_with_itself() -> None:
    """A world of one (no MPI): the best local kind, and a buffer it owns."""
    from gpubw.world import SingleWorld

    backend = SimulatedBackend(load_system("gb200nvl72"))
    pool = BufferPool(backend, backend.devices(), RunOptions())
    sharing = Sharing(pool, SingleWorld(), 2)
    assert sharing.handle_kind() == "fabric" and sharing.agreed_kind == "fabric"
    with SharedBuffer.create(sharing, 0, MIB) as u:
        assert u.is_owner and u.device == 2 and u.allocated == 2 * MIB
    pool.close()
    assert backend.live_allocations() == []


# -- NVLink domains ------------------------------------------------------------------------------
def _two_domains() -> SimSystem:
    """8 GB200 GPUs on 4 hosts of 2, in 2 NVLink domains of 4."""
    doc = {"base": "gb200nvl72", "count": 8, "hosts": [2, 2, 2, 2], "nvlink_domains": [4, 4]}
    return system_from_dict(doc)


def test_a_shared_buffer_is_mapped_only_within_its_owners_domain() -> None:
    """U(5) over 8 ranks in 2 domains: ranks 4-7 map it (the same bytes), ranks 0-3 hold a
    placeholder; the collective teardown leaves nothing; the domains are gathered once."""

    def body(r: Rank) -> tuple[bool, tuple[str, ...]]:
        with SharedBuffer.create(r.sharing, owner=5, nbytes=SIZE) as u:
            mapped = u.mapped and u.ptr != 0
        return mapped, r.sharing.rank_domains()

    engine, out = run_ranks(_two_domains(), [2, 2, 2, 2], body)
    assert [v[0] for v in values(out)] == [False] * 4 + [True] * 4
    assert all(v[1] == ("nvl0",) * 4 + ("nvl1",) * 4 for v in values(out))
    assert engine.live_allocations() == [] and engine.exports == {}


@pytest.mark.usefixtures("multicast_allowed")
def test_a_multicast_object_spans_its_owners_domain() -> None:
    """MC(0) over 8 ranks in 2 domains: 4 members (ranks 0-3) join and map it, the others
    only take the collective steps; nothing is left."""

    def body(r: Rank) -> bool:
        with MulticastBuffer.create(r.sharing, owner=0, nbytes=SIZE) as mc:
            return bool(mc.mapped)

    engine, out = run_ranks(_two_domains(), [2, 2, 2, 2], body)
    assert values(out) == [True] * 4 + [False] * 4
    assert engine.live_allocations() == [] and engine.multicasts == {}


# -- every rank's buffer at once (create_all) -------------------------------------------------
def _counting(world: SimulatedWorld) -> list[Any]:
    """The groups of the collectives ``world`` takes part in from now on (None: the world)."""
    seen: list[Any] = []
    run = world._run

    def counted(name: str, timeout_s: Any, body: Any, group: Any = None) -> Any:
        seen.append(name)
        return run(name, timeout_s, body, group)

    world._run = counted  # type: ignore[method-assign]
    return seen


@pytest.mark.parametrize("preset", ["gb200nvl72", "h200x2"], ids=["fabric", "posix-fd"])
def test_every_ranks_buffer_at_once_in_two_collectives(preset: str) -> None:
    """Every rank's U at once: each rank owns its own and maps the others (it verifies the
    next owner's fill), in two collectives to make and two to free, whatever N; nothing is
    left."""

    def body(r: Rank) -> tuple[list[bool], list[str]]:
        r.sharing.handle_kind()
        r.sharing.rank_domains()
        seen = _counting(r.world)
        bufs = SharedBuffer.create_all(r.sharing, SIZE)
        made = list(seen)
        me, nxt = r.world.rank, (r.world.rank + 1) % r.world.size
        with r.backend.stream(r.device) as s:
            bufs[me].fill(SRC_SEED + me, SIZE, stream=s, exec_device=r.device)
            r.backend.synchronize(s, 5.0)
            r.world.barrier()
            bufs[nxt].verify(SRC_SEED + nxt, SIZE, stream=s, exec_device=r.device)
        SharedBuffer.destroy_all(bufs)
        SharedBuffer.destroy_all(bufs)  # twice: nothing more
        return [b.is_owner for b in bufs], made + seen[len(made) + 1 :]

    hosts = [2, 2] if preset == "gb200nvl72" else [2]
    engine, out = run_ranks(load_system(preset), hosts, body)
    n = sum(hosts)
    for rank, (owners, collectives) in enumerate(values(out)):
        assert owners == [o == rank for o in range(n)]
        assert collectives == ["allgather", "agree", "barrier", "barrier"]
    assert engine.live_allocations() == [] and engine.exports == {}


def test_an_export_failure_in_create_all_fails_every_rank_alike() -> None:
    """Rank 1's out-of-memory: every rank's RemoteRankError names it, the other exports are
    freed, and the next create_all works."""

    def body(r: Rank) -> str:
        r.sharing.handle_kind()
        if r.world.rank == 1:
            r.backend.faults = Faults(alloc_fail_after=0)
        with pytest.raises(RemoteRankError) as info:
            SharedBuffer.create_all(r.sharing, SIZE)
        r.backend.faults = Faults()
        SharedBuffer.destroy_all(SharedBuffer.create_all(r.sharing, SIZE))
        return str(info.value)

    engine, out = run_ranks(load_system("h200x2"), [2], body)
    assert (
        values(out) == ["rank 1: cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (injected fault)"] * 2
    )
    assert engine.live_allocations() == []


def test_every_ranks_buffer_is_mapped_only_within_its_domain() -> None:
    """create_all over 8 ranks in 2 domains: each rank maps its own domain's 4 buffers and
    holds placeholders for the other domain's; nothing is left."""

    def body(r: Rank) -> list[bool]:
        bufs = SharedBuffer.create_all(r.sharing, SIZE)
        try:
            return [b.mapped and b.ptr != 0 for b in bufs]
        finally:
            SharedBuffer.destroy_all(bufs)

    engine, out = run_ranks(_two_domains(), [2, 2, 2, 2], body)
    for rank, mapped in enumerate(values(out)):
        assert mapped == [(o < 4) == (rank < 4) for o in range(8)]
    assert engine.live_allocations() == [] and engine.exports == {}


def test_some_ranks_buffers_at_once_in_two_collectives() -> None:
    """create_all of owners 0 and 4 (one per domain, out of order and repeated): only they
    export, each rank maps its domain's one and holds a placeholder for the other's, in two
    collectives to make and two to free; a bad owner is refused before any collective."""

    def body(r: Rank) -> tuple[list[int], list[bool], list[str]]:
        r.sharing.handle_kind()
        r.sharing.rank_domains()
        with pytest.raises(ValueError, match=r"owner must be a rank of 0\.\.7, got 8"):
            SharedBuffer.create_all(r.sharing, SIZE, [0, 8])
        seen = _counting(r.world)
        bufs = SharedBuffer.create_all(r.sharing, SIZE, [4, 0, 4])
        try:
            return [b.owner for b in bufs], [b.mapped for b in bufs], seen
        finally:
            SharedBuffer.destroy_all(bufs)

    engine, out = run_ranks(_two_domains(), [2, 2, 2, 2], body)
    for rank, (owners, mapped, collectives) in enumerate(values(out)):
        assert owners == [0, 4]
        assert mapped == [rank < 4, rank >= 4]
        assert collectives == ["allgather", "agree", "barrier", "barrier"]
    assert engine.live_allocations() == [] and engine.exports == {}


def test_map_all_maps_only_the_buffers_a_rank_uses() -> None:
    """map_all of two sets over 8 ranks in 2 domains, rank r using r + 1 and r + 4 in the
    first set and nothing in the second: each rank holds its own and its domain's used one
    (never the other domain's, no placeholder), imports only that one, reads the owner's
    fill through it; both sets in two collectives and freed in two; nothing is left."""

    def body(r: Rank) -> tuple[list[list[int]], list[int], list[str]]:
        r.sharing.handle_kind()
        r.sharing.rank_domains()
        imports: list[int] = []
        real = r.backend.import_device

        def counted(*args: Any, **kwargs: Any) -> int:
            imports.append(args[3])
            return real(*args, **kwargs)

        r.backend.import_device = counted  # type: ignore[method-assign]
        me = r.world.rank
        seen = _counting(r.world)
        sets = SharedBuffer.map_all(r.sharing, SIZE, [[(me + 1) % 8, (me + 4) % 8, me], []])
        made = list(seen)
        bufs = sets[0]
        with r.backend.stream(r.device) as s:
            bufs[me].fill(SRC_SEED + me, SIZE, stream=s, exec_device=r.device)
            r.backend.synchronize(s, 5.0)
            r.world.barrier()
            for o, b in bufs.items():
                b.verify(SRC_SEED + o, SIZE, stream=s, exec_device=r.device)
        SharedBuffer.destroy_all([b for each in sets for b in each.values()])
        return [sorted(each) for each in sets], imports, made + seen[len(made) + 1 :]

    engine, out = run_ranks(_two_domains(), [2, 2, 2, 2], body)
    for rank, (owners, imports, collectives) in enumerate(values(out)):
        nxt = (rank + 1) % 8
        same = nxt // 4 == rank // 4
        assert owners == [sorted({rank, nxt}) if same else [rank], [rank]], (rank, owners)
        assert imports == ([SIZE] if same else []), (rank, imports)
        assert collectives == ["allgather", "agree", "barrier", "barrier"]
    assert engine.live_allocations() == [] and engine.exports == {}


def test_a_failed_second_export_of_map_all_fails_every_rank_and_frees_the_first() -> None:
    """Rank 1's second export of two sets runs out of memory: every rank's RemoteRankError
    names it, its first export is freed with the others', and the next map_all works."""

    def body(r: Rank) -> str:
        r.sharing.handle_kind()
        real = r.backend.export_device
        calls: list[int] = []

        def export(*args: Any) -> Any:
            calls.append(1)
            if r.world.rank == 1 and len(calls) == 2:
                raise CudaError("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY", "injected fault")
            return real(*args)

        r.backend.export_device = export  # type: ignore[method-assign]
        r.world.barrier()
        before = len(r.backend.engine.live_allocations())
        with pytest.raises(RemoteRankError) as info:
            SharedBuffer.map_all(r.sharing, SIZE, [[0, 1], [0, 1]])
        r.world.barrier()  # every rank has unwound
        assert len(r.backend.engine.live_allocations()) == before
        r.world.barrier()  # every rank has counted
        sets = SharedBuffer.map_all(r.sharing, SIZE, [[0, 1], [0, 1]])
        SharedBuffer.destroy_all([b for each in sets for b in each.values()])
        return str(info.value)

    engine, out = run_ranks(load_system("h200x2"), [2], body)
    assert (
        values(out) == ["rank 1: cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (injected fault)"] * 2
    )
    assert engine.live_allocations() == [] and engine.exports == {}


# -- every rank's multicast object at once (MulticastBuffer.create_all) ------------------------
@pytest.mark.usefixtures("multicast_allowed")
def test_every_ranks_multicast_object_at_once_in_three_collectives() -> None:
    """MC(g) of all 8 ranks at once over 2 domains of 4: each rank maps its own domain's 4
    objects (placeholders for the others'), each object has its domain's 4 members; three
    collectives to make and two to free, whatever N; nothing is left."""

    def body(r: Rank) -> tuple[list[bool], list[int], list[str]]:
        r.sharing.handle_kind()
        r.sharing.rank_domains()
        seen = _counting(r.world)
        bufs = MulticastBuffer.create_all(r.sharing, range(8), SIZE)
        made = list(seen)
        members = []
        for b in bufs:
            found = r.backend.engine.memory.find(b.ptr, SIZE) if b.mapped else None
            if found is not None and found[0].members is not None:
                members.append(len(found[0].members))
        r.world.barrier()
        MulticastBuffer.destroy_all(bufs)
        MulticastBuffer.destroy_all(bufs)  # twice: nothing more
        return [b.mapped for b in bufs], members, made + seen[len(made) + 1 :]

    engine, out = run_ranks(_two_domains(), [2, 2, 2, 2], body)
    for rank, (mapped, members, collectives) in enumerate(values(out)):
        assert mapped == [(o < 4) == (rank < 4) for o in range(8)]
        assert members == [4] * 4
        assert collectives == ["allgather", "agree", "agree", "barrier", "barrier"]
    assert engine.live_allocations() == [] and engine.multicasts == {}


@pytest.mark.usefixtures("multicast_allowed")
def test_a_failure_in_multicast_create_all_fails_every_rank_alike() -> None:
    """Rank 2 cannot bind memory to the objects (out of memory): every rank's
    RemoteRankError names it, every object is freed, and the next create_all works."""

    def body(r: Rank) -> tuple[str, int]:
        r.sharing.handle_kind()
        if r.world.rank == 2:
            r.backend.faults = Faults(alloc_fail_after=0)
        with pytest.raises(RemoteRankError) as info:
            MulticastBuffer.create_all(r.sharing, range(4), SIZE)
        r.world.barrier()
        left = len(r.backend.engine.multicasts)  # every rank has unwound
        r.world.barrier()  # every rank has counted
        r.backend.faults = Faults()
        MulticastBuffer.destroy_all(MulticastBuffer.create_all(r.sharing, range(4), SIZE))
        return str(info.value), left

    engine, out = run_ranks(load_system("gb200nvl72"), [4], body)
    ((message, left),) = set(values(out))
    assert message.startswith("rank 2: ") and "OUT_OF_MEMORY" in message
    assert left == 0
    assert engine.live_allocations() == [] and engine.multicasts == {}


@pytest.mark.usefixtures("multicast_allowed")
def test_one_failing_free_in_destroy_all_leaves_the_other_objects_freed() -> None:
    """Rank 0's free of the last object made fails: destroy_all still frees rank 0's parts
    of the 3 others (they are gone once every rank released its part), then raises."""

    def body(r: Rank) -> tuple[str, int]:
        bufs = MulticastBuffer.create_all(r.sharing, range(4), SIZE)
        failed = ""
        if r.world.rank == 0:
            free = r.backend.multicast_free

            def fails_once(key: int) -> None:
                r.backend.multicast_free = free  # type: ignore[method-assign]
                raise CudaError("cuMemRelease", "CUDA_ERROR_UNKNOWN", "injected")

            r.backend.multicast_free = fails_once  # type: ignore[method-assign]
            with pytest.raises(CudaError) as info:
                MulticastBuffer.destroy_all(bufs)
            failed = str(info.value)
        else:
            MulticastBuffer.destroy_all(bufs)
        r.world.barrier()
        left = len(r.backend.engine.multicasts)
        r.world.barrier()  # every rank has counted before the pools close
        return failed, left

    engine, out = run_ranks(load_system("gb200nvl72"), [4], body)
    assert "injected" in values(out)[0][0]
    assert [left for _, left in values(out)] == [1] * 4
    assert engine.multicasts == {}  # the pool's close freed the rest
