"""HostBuffer and DeviceBuffer on the simulated backend: lifetime, pool, fill, verify, peers."""

from __future__ import annotations

import ast
import importlib.util
import itertools
import pathlib
from typing import Any

import attrs
import pytest

from conftest import MIB, SimSystemFactory
from gpubw.backend.sim.backend import SimulatedBackend
from gpubw.backend.sim.faults import Faults
from gpubw.backend.sim.presets import load_system
from gpubw.kernels.patterns import DST_SEED, SRC_SEED, pattern_bytes
from gpubw.memory.buffers import DeviceBuffer, HostBuffer
from gpubw.model.errors import CudaError, VerificationError


def _backend(system: object) -> SimulatedBackend:
    backend = system.backend  # type: ignore[attr-defined]
    assert isinstance(backend, SimulatedBackend)
    return backend


def test_context_manager_returns_to_pool(sim_system: SimSystemFactory) -> None:
    """Closing a buffer returns it to the pool; the next allocation of that shape reuses it."""
    system = sim_system("h200x1")
    with DeviceBuffer.allocate(system, 0, 4 * MIB) as buf:
        first = buf.ptr
        assert system.live_buffers == 1
    assert system.live_buffers == 0
    again = DeviceBuffer.allocate(system, 0, 4 * MIB)
    assert again.ptr == first
    other = DeviceBuffer.allocate(system, 0, 4 * MIB)
    assert other.ptr != first
    h1 = HostBuffer.allocate(system, 0, MIB)
    h1.close()
    assert HostBuffer.allocate(system, 0, MIB).ptr == h1.ptr
    assert HostBuffer.allocate(system, None, MIB).ptr != h1.ptr  # near another device: new


def test_pool_not_reused_across_shapes(sim_system: SimSystemFactory) -> None:
    """A pooled buffer is only reused for the same host/device, device and size."""
    system = sim_system("h200x2")
    a = DeviceBuffer.allocate(system, 0, MIB)
    a.close()
    assert DeviceBuffer.allocate(system, 1, MIB).ptr != a.ptr
    assert DeviceBuffer.allocate(system, 0, 2 * MIB).ptr != a.ptr


def test_host_buffers_pooled_by_placement(sim_system: SimSystemFactory) -> None:
    """Pinned memory near one GPU serves another GPU with the same local CPUs (or any GPU
    with -d); GPUs on different CPUs get their own."""
    same = sim_system("h200x2")  # both GPUs: CPUs 0-31
    h = HostBuffer.allocate(same, 0, MIB)
    h.close()
    assert HostBuffer.allocate(same, 1, MIB).ptr == h.ptr
    anywhere = sim_system("h200x8", affinity=False)
    h = HostBuffer.allocate(anywhere, 0, MIB)
    h.close()
    assert HostBuffer.allocate(anywhere, 7, MIB).ptr == h.ptr
    apart = sim_system("h200x8")  # GPUs 0-3 on CPUs 0-55, GPUs 4-7 on CPUs 56-111
    h = HostBuffer.allocate(apart, 0, MIB)
    h.close()
    assert HostBuffer.allocate(apart, 4, MIB).ptr != h.ptr
    assert HostBuffer.allocate(apart, 3, MIB).ptr == h.ptr


def test_pool_dropped_on_out_of_memory(sim_system: SimSystemFactory) -> None:
    """Out of memory with idle pooled buffers: the pool is freed and the allocation retried."""
    system = sim_system("h200x1")
    backend = _backend(system)
    free, _ = backend.memory_info(0)
    big = DeviceBuffer.allocate(system, 0, free // 2 + MIB)
    big.close()  # idle in the pool, still allocated
    second = DeviceBuffer.allocate(system, 0, free // 2 + 2 * MIB)
    assert second.ptr != big.ptr
    assert len(backend.live_allocations()) == 1


def test_close_twice_is_harmless(sim_system: SimSystemFactory) -> None:
    """close() is idempotent."""
    system = sim_system("h200x1")
    buf = HostBuffer.allocate(system, 0, MIB)
    buf.close()
    buf.close()
    assert system.live_buffers == 0


def test_host_buffer_read_write(sim_system: SimSystemFactory) -> None:
    """HostBuffer.write/read go through host memory."""
    system = sim_system("h200x1")
    buf = HostBuffer.allocate(system, 0, 4096)
    buf.write(b"abc", offset=100)
    assert buf.read(5, offset=99) == b"\0abc\0"


@pytest.mark.parametrize("size", [2 * MIB, 3 * MIB + 512, 40 * MIB])
def test_fill_then_verify(sim_system: SimSystemFactory, size: int) -> None:
    """fill with a seed and verify against it pass, at real and symbolic sizes."""
    system = sim_system("h200x1")
    system.load_kernels()
    stream = system.backend.create_stream(0)
    try:
        for buf in (DeviceBuffer.allocate(system, 0, size), HostBuffer.allocate(system, 0, size)):
            buf.fill(SRC_SEED, size, stream=stream, exec_device=0)
            buf.verify(SRC_SEED, size, stream=stream, exec_device=0)
            with pytest.raises(VerificationError) as info:
                buf.verify(DST_SEED, size, stream=stream, exec_device=0)
            assert info.value.offset == 0 and info.value.where == buf.label
    finally:
        system.backend.destroy_stream(stream)


def test_fill_writes_the_pattern(sim_system: SimSystemFactory) -> None:
    """A filled host buffer holds nvbandwidth's xorshift pattern, repeated."""
    system = sim_system("h200x1")
    system.load_kernels()
    stream = system.backend.create_stream(0)
    buf = HostBuffer.allocate(system, 0, 5 * MIB)
    buf.fill(DST_SEED, 5 * MIB, stream=stream, exec_device=0)
    system.backend.synchronize(stream, 1.0)
    pattern = pattern_bytes(DST_SEED)
    assert buf.read(2 * MIB) == pattern
    assert buf.read(MIB, offset=4 * MIB) == pattern[: 1 * MIB]
    system.backend.destroy_stream(stream)


def test_verify_reports_offset_of_corruption(sim_system: SimSystemFactory) -> None:
    """verify names the buffer and the byte offset of the first wrong word."""
    system = sim_system("h200x1")
    system.load_kernels()
    stream = system.backend.create_stream(0)
    buf = HostBuffer.allocate(system, 0, 4 * MIB)
    buf.fill(SRC_SEED, 4 * MIB, stream=stream, exec_device=0)
    system.backend.synchronize(stream, 1.0)
    buf.write(b"\0\0\0\0", offset=12344)
    with pytest.raises(VerificationError) as info:
        buf.verify(SRC_SEED, 4 * MIB, stream=stream, exec_device=0)
    assert (info.value.where, info.value.offset) == ("Host", 12344)
    system.backend.destroy_stream(stream)


def test_peer_access_enable(sim_system: SimSystemFactory) -> None:
    """enable_peer_access: usable pairs are enabled both ways; pcie4 0-2 is not usable."""
    system = sim_system("pcie4")
    d0, d1, d2 = (DeviceBuffer.allocate(system, i, MIB) for i in range(3))
    assert d0.enable_peer_access(d1)
    assert {(0, 1), (1, 0)} <= _backend(system).peer_access_enabled()
    assert not d0.enable_peer_access(d2)
    assert d0.enable_peer_access(HostBuffer.allocate(system, 0, MIB))


def test_refused_peer_is_not_usable(sim_system: SimSystemFactory) -> None:
    """A refused pair (fault) is reported not usable, as nvbandwidth's N/A cells."""
    system = sim_system("h200x2", faults=Faults(refuse_peer={(0, 1), (1, 0)}))
    d0, d1 = DeviceBuffer.allocate(system, 0, MIB), DeviceBuffer.allocate(system, 1, MIB)
    assert not d0.enable_peer_access(d1)
    assert not d1.enable_peer_access(d0)


def test_one_way_refusal_fails_enabling(sim_system: SimSystemFactory) -> None:
    """A one-way peer refusal makes enabling fail with PEER_ACCESS_UNSUPPORTED, as in the driver."""
    # Probing the other direction succeeds.
    system = sim_system("h200x2", faults=Faults(refuse_peer={(0, 1)}))
    d0, d1 = DeviceBuffer.allocate(system, 0, MIB), DeviceBuffer.allocate(system, 1, MIB)
    with pytest.raises(CudaError, match="PEER_ACCESS_UNSUPPORTED"):
        d1.enable_peer_access(d0)


def test_allocation_failure_raises_cuda_error(sim_system: SimSystemFactory) -> None:
    """An allocation that fails raises the backend's CudaError and registers nothing."""
    system = sim_system("h200x1", faults=Faults(alloc_fail_after=1))
    DeviceBuffer.allocate(system, 0, MIB)
    with pytest.raises(CudaError, match="OUT_OF_MEMORY"):
        DeviceBuffer.allocate(system, 0, MIB)
    assert system.live_buffers == 1


def test_labels(sim_system: SimSystemFactory) -> None:
    """Buffer labels are nvbandwidth's: Host and Device <i>."""
    system = sim_system("h200x2")
    assert HostBuffer.allocate(system, 1, MIB).label == "Host"
    assert DeviceBuffer.allocate(system, 1, MIB).label == "Device 1"


def _gpubw_imports(module: str) -> set[str]:
    """The gpubw modules ``module``'s source imports anywhere (module level, in functions,
    under TYPE_CHECKING), as dotted names; ``from a import b`` counts ``a.b`` when that is
    a module itself. Parent packages other than the root ``gpubw`` count too (importing
    ``gpubw.backend.base`` runs ``gpubw/backend/__init__.py``)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    tree = ast.parse(pathlib.Path(spec.origin).read_text(encoding="utf-8"), spec.origin)
    package = module if spec.submodule_search_locations else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            found.add(base)
            for alias in node.names:
                name = f"{base}.{alias.name}"
                if importlib.util.find_spec(base) and _is_module(name):
                    found.add(name)
    result = {name for name in found if name == "gpubw" or name.startswith("gpubw.")}
    for name in list(result):
        parts = name.split(".")
        result.update(".".join(parts[:i]) for i in range(2, len(parts)))
    return result


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def test_import_walker_sees_function_level_imports() -> None:
    """The walker below finds lazy imports: gpubw.memory.system imports the kernel registry in a
    function, and gpubw.runner.core reaches gpubw.memory.system."""
    assert "gpubw.kernels.modules" in _gpubw_imports("gpubw.memory.system")
    assert "gpubw.memory.system" in _gpubw_imports("gpubw.runner.core")


def test_buffers_does_not_import_system() -> None:
    """gpubw.memory.buffers and gpubw.memory.pool, and every gpubw module they import
    (directly or inside a function), never import gpubw.memory.system nor the gpubw package
    facade (which imports it): no import circle."""
    seen: set[str] = set()
    todo = ["gpubw.memory.buffers", "gpubw.memory.pool"]
    chains = {m: m for m in todo}
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        for imported in _gpubw_imports(module):
            chains.setdefault(imported, f"{chains[module]} -> {imported}")
            assert imported not in ("gpubw", "gpubw.memory.system"), chains[imported]
            todo.append(imported)
    assert {"gpubw.memory.gate", "gpubw.backend.base", "gpubw.kernels"} <= seen


def test_allocate_refuses_swapped_or_impossible_requests(sim_system: SimSystemFactory) -> None:
    """Device first, then size, for both kinds: a call with the two swapped (the old HostBuffer
    order), a size that is not positive or a device that does not exist is refused, naming
    the value, before anything is allocated."""
    system = sim_system("h200x2")
    with pytest.raises(ValueError, match="got 0"):
        HostBuffer.allocate(system, MIB, 0)
    with pytest.raises(ValueError, match=r"no device 1048576: devices are 0\.\.1"):
        HostBuffer.allocate(system, MIB, 4096)
    with pytest.raises(ValueError, match="no device 2"):
        DeviceBuffer.allocate(system, 2, MIB)
    with pytest.raises(ValueError, match="device ordinal, got None"):
        DeviceBuffer.allocate(system, None, MIB)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"got 1\.5"):
        DeviceBuffer.allocate(system, 0, 1.5)  # type: ignore[arg-type]
    assert _backend(system).live_allocations() == [] and system.live_buffers == 0


def test_allocate_from_the_pool_itself(sim_system: SimSystemFactory) -> None:
    """allocate() takes the pool or anything holding one; both draw from the same pool, and
    ``with ... as b`` gives the buffer's own type."""
    system = sim_system("h200x1")
    with DeviceBuffer.allocate(system.pool, 0, MIB) as buf:
        assert type(buf) is DeviceBuffer and buf.pool is system.pool
        first = buf.ptr
    with DeviceBuffer.allocate(system, 0, MIB) as again:
        assert again.ptr == first
    with HostBuffer.allocate(system.pool, None, 64) as host:
        host.write(b"x")  # a HostBuffer method, no isinstance needed
        assert host.read(1) == b"x"


def test_double_close_does_not_hand_a_buffer_out_twice(sim_system: SimSystemFactory) -> None:
    """Closing a buffer twice keeps one idle copy: two later allocations get two buffers."""
    system = sim_system("h200x1")
    buf = DeviceBuffer.allocate(system, 0, MIB)
    buf.close()
    buf.close()
    a, b = DeviceBuffer.allocate(system, 0, MIB), DeviceBuffer.allocate(system, 0, MIB)
    assert a.ptr != b.ptr


def test_scratch_is_keyed_by_purpose_and_freed_at_close(sim_system: SimSystemFactory) -> None:
    """Pool scratch: the same purpose, place and size give the same buffer; another purpose
    gives another; none is a handed-out buffer, and close() frees them all."""
    system = sim_system("h200x2")
    pool = system.pool
    staging = pool.host_scratch("staging", 4096)
    assert pool.host_scratch("staging", 4096) is staging
    assert pool.host_scratch("flags", 4096) is not staging
    assert pool.host_scratch("staging", 8192) is not staging
    dev = pool.device_scratch("sums", 1, 4096)
    assert pool.device_scratch("sums", 1, 4096) is dev and dev.device == 1
    assert pool.device_scratch("sums", 0, 4096) is not dev
    assert system.live_buffers == 0
    assert len(_backend(system).live_allocations()) == 5
    system.close()
    assert _backend(system).live_allocations() == []


def test_buffers_after_pool_close_are_freed_on_close(sim_system: SimSystemFactory) -> None:
    """A buffer closed after its pool was closed is freed at once, not kept."""
    system = sim_system("h200x1")
    buf = DeviceBuffer.allocate(system, 0, MIB)
    system.pool.close()
    assert _backend(system).live_allocations() == []
    buf.close()  # already freed by the pool: harmless
    assert _backend(system).live_allocations() == []


# -- a larger idle host buffer serving a smaller request (a view) ---------------------------
S = 2 * MIB


def _count_frees(system: object, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record every pointer the backend frees (host and device), in order."""
    backend = _backend(system)
    freed: list[int] = []
    for name in ("free_host", "free_device"):
        real = getattr(backend, name)

        def counting(pointer: int, _real: Any = real) -> None:
            freed.append(pointer)
            _real(pointer)

        monkeypatch.setattr(backend, name, counting)
    return freed


def test_idle_2s_host_buffer_serves_an_s_request(sim_system: SimSystemFactory) -> None:
    """An idle 2S host buffer serves an S request of the same placement: nbytes == S, the
    same pointer, no new allocation, near the device asked for."""
    system = sim_system("h200x2")  # both GPUs on the same CPUs: one placement
    big = HostBuffer.allocate(system, 0, 2 * S)
    big.close()
    before = _backend(system).live_allocations()
    view = HostBuffer.allocate(system, 1, S)
    assert isinstance(view, HostBuffer) and view is not big
    assert (view.ptr, view.nbytes, view.device) == (big.ptr, S, 1)
    assert _backend(system).live_allocations() == before and system.live_buffers == 1
    assert HostBuffer.allocate(system, 0, S + 4096).ptr != big.ptr  # taken: a new one


def test_larger_idle_buffer_only_within_twice_the_request(sim_system: SimSystemFactory) -> None:
    """A request more than 2x smaller than an idle host buffer gets a new one; of several
    that fit, the smallest serves; device buffers and other placements are never served by
    a larger idle buffer."""
    system = sim_system("h200x8")  # GPUs 0-3 and 4-7 on different CPUs
    big, mid = HostBuffer.allocate(system, 0, 2 * S), HostBuffer.allocate(system, 0, S + S // 2)
    big.close()
    small = HostBuffer.allocate(system, 0, S - 4096)  # 2S > 2 x request: not big
    assert small.ptr not in (big.ptr, mid.ptr)
    mid.close()
    best = HostBuffer.allocate(system, 0, S)  # both fit: the smaller one
    assert (best.ptr, best.nbytes) == (mid.ptr, S)
    assert HostBuffer.allocate(system, 4, S).ptr != big.ptr  # another placement
    dev = DeviceBuffer.allocate(system, 0, 2 * S)
    dev.close()
    assert DeviceBuffer.allocate(system, 0, S).ptr != dev.ptr  # device memory: exact only


def test_closing_a_view_makes_its_backing_idle_at_full_size(
    sim_system: SimSystemFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closing a view makes the whole backing buffer idle again: the next 2S request gets it
    whole; closing or freeing the spent view again frees nothing and gives nothing back."""
    system = sim_system("h200x1")
    freed = _count_frees(system, monkeypatch)
    big = HostBuffer.allocate(system, 0, 2 * S)
    big.close()
    with HostBuffer.allocate(system, 0, S) as view:
        assert view.ptr == big.ptr
    view.close()
    view.free()
    whole = HostBuffer.allocate(system, 0, 2 * S)
    assert (whole.ptr, whole.nbytes) == (big.ptr, 2 * S) and freed == []
    assert HostBuffer.allocate(system, 0, 2 * S).ptr != big.ptr  # handed out only once


def test_a_view_and_its_backing_are_never_both_handed_out(sim_system: SimSystemFactory) -> None:
    """While a view is out, neither its backing nor another view of it is handed out: every
    live host buffer's bytes are its own."""
    system = sim_system("h200x1")
    big = HostBuffer.allocate(system, 0, 2 * S)
    big.close()
    live = [HostBuffer.allocate(system, 0, S), HostBuffer.allocate(system, 0, 2 * S)]
    live += [HostBuffer.allocate(system, 0, S), HostBuffer.allocate(system, 0, 2 * S - 4096)]
    assert live[0].ptr == big.ptr
    spans = sorted((b.ptr, b.ptr + b.nbytes) for b in live)
    assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))
    assert system.live_buffers == 4


def test_every_backing_freed_exactly_once(
    sim_system: SimSystemFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """release_leaked (a view still out), release_idle (a view closed) and pool close (a
    view out, a closed view's backing idle) free each backing allocation exactly once."""
    system = sim_system("h200x1")
    freed = _count_frees(system, monkeypatch)
    backings = [HostBuffer.allocate(system, 0, 2 * S) for _ in range(3)]
    for buf in backings:
        buf.close()
    leaked = HostBuffer.allocate(system, 0, S)
    assert system.release_leaked() == 1 and freed == [leaked.ptr]
    leaked.close()
    leaked.free()  # already freed by the pool: nothing more
    HostBuffer.allocate(system, 0, S).close()
    system.release_pool()
    assert sorted(freed) == sorted(b.ptr for b in backings)
    again = [HostBuffer.allocate(system, 0, 2 * S) for _ in range(2)]
    again[0].close()
    out = HostBuffer.allocate(system, 0, S)
    closed = HostBuffer.allocate(system, 0, S - 4096)
    closed.close()  # a new buffer (again[0] is out as out's backing), now idle
    system.pool.close()
    out.close()  # after the pool closed: already freed, nothing more
    assert len(freed) == len(set(freed)) == 6
    assert _backend(system).live_allocations() == []


def test_out_of_memory_retry_frees_an_idle_backing_once(
    sim_system: SimSystemFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Out of pinned memory with a view's backing idle again: it is freed once, the new
    allocation made, and the spent view frees nothing later."""
    model = attrs.evolve(load_system("h200x1"), host_memory_bytes=8 * S)
    system = sim_system(model)
    freed = _count_frees(system, monkeypatch)
    big = HostBuffer.allocate(system, 0, 4 * S)
    big.close()
    with HostBuffer.allocate(system, 0, 3 * S) as view:
        assert view.ptr == big.ptr
    huge = HostBuffer.allocate(system, 0, 6 * S)  # does not fit beside the idle 4S
    assert freed == [big.ptr] and huge.nbytes == 6 * S
    view.free()
    system.pool.close()
    assert freed == [big.ptr, huge.ptr]


def test_view_fill_verify_read_write_cover_only_its_nbytes(sim_system: SimSystemFactory) -> None:
    """fill and verify of a view touch its first nbytes only (the rest of the backing keeps
    its data); read, write, fill and verify past its end are refused."""
    system = sim_system("h200x1")
    system.load_kernels()
    stream = system.backend.create_stream(0)
    try:
        big = HostBuffer.allocate(system, 0, 2 * S)
        big.fill(DST_SEED, 2 * S, stream=stream, exec_device=0)
        system.backend.synchronize(stream, 1.0)
        big.close()
        view = HostBuffer.allocate(system, 0, S + 4096)
        assert view.ptr == big.ptr
        view.fill(SRC_SEED, view.nbytes, stream=stream, exec_device=0)
        view.verify(SRC_SEED, view.nbytes, stream=stream, exec_device=0)
        for bad in (
            lambda: view.fill(SRC_SEED, view.nbytes + 4, stream=stream, exec_device=0),
            lambda: view.verify(SRC_SEED, view.nbytes + 4, stream=stream, exec_device=0),
            lambda: view.clear_warp_parity(view.nbytes + 16, 0, stream=stream),
            lambda: view.read(1, offset=view.nbytes),
            lambda: view.write(b"xy", offset=view.nbytes - 1),
            lambda: view.read(1, offset=-1),
        ):
            with pytest.raises(ValueError, match=f"do not fit in <HostBuffer Host {S + 4096}"):
                bad()
        view.close()
        whole = HostBuffer.allocate(system, 0, 2 * S)
        assert whole.ptr == big.ptr
        pattern = pattern_bytes(DST_SEED)
        assert whole.read(S - 4096, offset=S + 4096) == pattern[4096:]  # untouched
        assert whole.read(S) == pattern_bytes(SRC_SEED)
    finally:
        system.backend.destroy_stream(stream)
