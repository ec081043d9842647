"""Simulated copies and kernels: bytes moved, patterns checked (gpubw.backend.sim.kernels)."""

from __future__ import annotations

import numpy as np
import pytest

from gpubw.backend.base import i32, ptr, u32, u64
from gpubw.backend.sim.backend import SimulatedBackend
from gpubw.backend.sim.presets import load_system
from gpubw.kernels import PATTERN_WORDS
from gpubw.kernels.patterns import SRC_SEED, pattern_bytes
from gpubw.model.errors import CudaError, UsageError

MIB = 1 << 20


def test_memcpy_copies_bytes(backend: SimulatedBackend) -> None:
    """memcpy_async moves real bytes host -> device -> peer -> host."""
    n = 1 * MIB
    data = np.random.default_rng(1).integers(0, 256, n, dtype=np.uint8).tobytes()
    h_in, h_out = backend.alloc_host(n, 0), backend.alloc_host(n, 0)
    d0, d1 = backend.alloc_device(0, n), backend.alloc_device(1, n)
    backend.host_write(h_in, data)
    s = backend.create_stream(0)
    backend.memcpy_async(d0, h_in, n, s)
    backend.memcpy_async(d1, d0, n, s)
    backend.memcpy_async(h_out, d1, n, s)
    backend.synchronize(s, 1.0)
    assert backend.host_read(h_out, n) == data


def test_memcpy_invalid_pointer(backend: SimulatedBackend) -> None:
    """A copy outside allocated memory raises cuMemcpyAsync CUDA_ERROR_INVALID_VALUE."""
    d = backend.alloc_device(0, 4096)
    s = backend.create_stream(0)
    with pytest.raises(CudaError) as info:
        backend.memcpy_async(d, d + 100, 4096, s)
    assert info.value.result == "CUDA_ERROR_INVALID_VALUE"


def _fill_verify(be: SimulatedBackend, nbytes: int, corrupt_at: int | None) -> int:
    """Fill a buffer of nbytes with the source pattern, optionally flip a word, verify;
    returns the first bad word index (or ~0)."""
    s = be.create_stream(0)
    stage = be.alloc_host(PATTERN_WORDS * 4, None)
    pattern = be.alloc_device(0, PATTERN_WORDS * 4)
    be.host_write(stage, pattern_bytes(SRC_SEED))
    be.memcpy_async(pattern, stage, PATTERN_WORDS * 4, s)
    buf = be.alloc_device(0, nbytes)
    words = nbytes // 4
    be.launch("gpubw_fill", 1, 1024, (ptr(buf), ptr(pattern), u64(words)), s)
    if corrupt_at is not None:
        flip = be.alloc_host(4, None)
        be.host_write(flip, b"\x01\x02\x03\x04")
        be.memcpy_async(buf + corrupt_at, flip, 4, s)
    slot = be.alloc_device(0, 8)
    result = be.alloc_host(8, None)
    be.host_write(result, b"\xff" * 8)
    be.memcpy_async(slot, result, 8, s)
    be.launch("gpubw_verify", 1, 1024, (ptr(buf), ptr(pattern), u64(words), ptr(slot)), s)
    be.memcpy_async(result, slot, 8, s)
    be.synchronize(s, 1.0)
    return int.from_bytes(be.host_read(result, 8), "little")


@pytest.mark.parametrize("nbytes", [4 * MIB, 64 * MIB])
def test_fill_and_verify(backend: SimulatedBackend, nbytes: int) -> None:
    """Fill then verify passes on real (small) and symbolic (large) buffers."""
    assert _fill_verify(backend, nbytes, None) == (1 << 64) - 1


@pytest.mark.parametrize("nbytes", [4 * MIB, 64 * MIB])
def test_verify_finds_first_bad_word(backend: SimulatedBackend, nbytes: int) -> None:
    """verify stores the index of the first wrong 32-bit word, for real and symbolic bytes."""
    assert _fill_verify(backend, nbytes, 3 * MIB + 40) == (3 * MIB + 40) // 4


@pytest.mark.parametrize("nbytes", [1 * MIB, 32 * MIB])
def test_split_warp_and_parity_clear(backend: SimulatedBackend, nbytes: int) -> None:
    """clear_warp_parity + split-warp copy leave both buffers complete (nvbandwidth's scheme)."""
    be = backend
    s = be.create_stream(0)
    src, dst = be.alloc_device(0, nbytes), be.alloc_device(0, nbytes)
    stage = be.alloc_host(PATTERN_WORDS * 4, None)
    pattern = be.alloc_device(0, PATTERN_WORDS * 4)
    be.host_write(stage, pattern_bytes(SRC_SEED))
    be.memcpy_async(pattern, stage, PATTERN_WORDS * 4, s)
    words, elements = nbytes // 4, nbytes // 16
    for buf in (src, dst):
        be.launch("gpubw_fill", 1, 1024, (ptr(buf), ptr(pattern), u64(words)), s)
    be.launch("gpubw_clear_warp_parity", 1, 1024, (ptr(dst), u64(elements), u32(1)), s)
    be.launch("gpubw_clear_warp_parity", 1, 1024, (ptr(src), u64(elements), u32(0)), s)
    slot, result = be.alloc_device(0, 16), be.alloc_host(16, None)

    def check() -> list[int]:
        be.host_write(result, b"\xff" * 16)
        be.memcpy_async(slot, result, 16, s)
        for k, buf in enumerate((dst, src)):
            args = (ptr(buf), ptr(pattern), u64(words), ptr(slot + 8 * k))
            be.launch("gpubw_verify", 1, 1024, args, s)
        be.memcpy_async(result, slot, 16, s)
        be.synchronize(s, 1.0)
        raw = be.host_read(result, 16)
        return [int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little")]

    assert check() == [128, 0]  # dst's first odd group, src's first even group are zero
    be.launch("gpubw_copy_split_warp", 4, 512, (ptr(dst), ptr(src), u64(elements), u32(2)), s)
    assert check() == [(1 << 64) - 1] * 2


def test_copy_kernel_needs_peer_access(backend: SimulatedBackend) -> None:
    """A kernel touching a peer's memory without peer access fails with ILLEGAL_ADDRESS."""
    be = backend
    d0, d1 = be.alloc_device(0, 1 * MIB), be.alloc_device(1, 1 * MIB)
    s = be.create_stream(0)
    be.launch("gpubw_copy", 4, 512, (ptr(d0), ptr(d1), u64(MIB // 16), u32(1)), s)
    with pytest.raises(CudaError) as info:
        be.synchronize(s, 1.0)
    assert info.value.result == "CUDA_ERROR_ILLEGAL_ADDRESS"
    be.enable_peer_access(0, 1)
    be.launch("gpubw_copy", 4, 512, (ptr(d0), ptr(d1), u64(MIB // 16), u32(1)), s)
    be.synchronize(s, 1.0)


def test_launch_checks(backend: SimulatedBackend) -> None:
    """Unknown kernels, wrong arguments and unloaded modules are refused at launch."""
    be = SimulatedBackend(load_system("h200x1"))
    s = be.create_stream(0)
    args = (ptr(0), ptr(0), u64(1))
    with pytest.raises(UsageError, match="not loaded"):
        be.launch("gpubw_fill", 1, 1, args, s)
    be.load_kernels(0)
    with pytest.raises(UsageError, match="unknown kernel"):
        be.launch("no_such_kernel", 1, 1, args, s)
    with pytest.raises(UsageError, match="takes"):
        be.launch("gpubw_fill", 1, 1, (ptr(0), i32(0), u64(1)), s)
    with pytest.raises(UsageError, match=r"^block of gpubw_fill must be in 1\.\.1024, got 2048$"):
        be.launch("gpubw_fill", 1, 2048, args, s)
    with pytest.raises(UsageError, match=r"^grid of gpubw_fill must be in 1\.\.2147483647, got"):
        be.launch("gpubw_fill", 1 << 31, 1, args, s)


def test_pointer_chase_latency(backend: SimulatedBackend) -> None:
    """pointer_chase follows the ring, stores the final pointer, and takes steps x latency."""
    be = backend
    nodes, stride, steps = 2 * MIB // 8, 16, 1000
    for where, latency in ((None, 1.2e-6), (1, 0.83e-6), (0, 0.6e-6)):
        buf = be.alloc_host(2 * MIB, 0) if where is None else be.alloc_device(where, 2 * MIB)
        ring = (buf + 8 * ((np.arange(nodes) + stride) % nodes)).astype("<u8").tobytes()
        s = be.create_stream(0)
        if where is None:
            be.host_write(buf, ring)
        else:
            stage = be.alloc_host(2 * MIB, None)
            be.host_write(stage, ring)
            be.memcpy_async(buf, stage, 2 * MIB, s)
            if where == 1:
                be.enable_peer_access(0, 1)
        sink = be.alloc_device(0, 8)
        out = be.alloc_host(8, None)
        start, end = be.create_event(0), be.create_event(0)
        be.record_event(start, s)
        be.launch("gpubw_pointer_chase", 132, 1, (ptr(buf), u64(steps), u32(0), ptr(sink)), s)
        be.record_event(end, s)
        be.memcpy_async(out, sink, 8, s)
        be.synchronize(s, 1.0)
        assert int.from_bytes(be.host_read(out, 8), "little") == buf + 8 * (stride * steps % nodes)
        per = be.elapsed_seconds(start, end) / steps
        assert latency < per < latency * 1.01


def test_a_gates_flag_is_read_again_only_after_its_allocation_is_written(
    backend: SimulatedBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gate's probe reads its flag once, then again only once the flag's allocation was
    written (not after writes elsewhere), and then sees the release; a freed flag is gone."""
    from gpubw.backend.sim.kernels import gate_wait

    flag, other, status = (backend.alloc_host(4, None) for _ in range(3))
    memory = backend._memory
    reads: list[int] = []
    read = memory.read
    monkeypatch.setattr(memory, "read", lambda a, off, n: reads.append(a.base) or read(a, off, n))
    with backend.stream(0) as s:
        op = gate_wait(backend._launch(backend._stream(s, "test")), flag, 10**6, status)
    assert op.probe is not None
    assert [op.probe(), op.probe()] == [False, False] and reads == [flag]
    backend.host_write(other, b"\1\0\0\0")  # memory written elsewhere
    assert op.probe() is False and reads == [flag]
    backend.host_write(flag, b"\0\0\0\0")  # its own allocation, still zero: read again
    assert op.probe() is False and reads == [flag, flag]
    backend.host_write(flag, b"\1\0\0\0")
    assert op.probe() is True and op.probe() is True and reads == [flag] * 3
    backend.free_host(flag)
    assert op.probe() is None


def test_control_words_draw_no_jitter_from_the_measured_copies_stream() -> None:
    """A copy under MEASURED_MIN (a flag word) takes no draw from the random stream the
    measured copies' jitter comes from; a copy of MEASURED_MIN bytes takes one."""
    from gpubw.backend.sim.kernels import MEASURED_MIN

    be = SimulatedBackend(load_system("h200x2"))
    rng = be._engine._rng
    h, d = be.alloc_host(MEASURED_MIN, 0), be.alloc_device(0, MEASURED_MIN)
    s = be.create_stream(0)
    state = rng.getstate()
    for nbytes in (4, MEASURED_MIN - 1):
        be.memcpy_async(d, h, nbytes, s)
    assert rng.getstate() == state
    be.memcpy_async(d, h, MEASURED_MIN, s)
    be.synchronize(s, 1.0)
    assert rng.getstate() != state


def _copy_runs(be: SimulatedBackend, sizes: tuple[int, ...]) -> tuple[list[float], list[str]]:
    """Runs of the same copy on one stream (split by a record, a new size, a new path) beside
    a run on a second stream, with jitter; the elapsed times of the records and the kinds of
    the first stream's ops as queued behind its running one."""
    n = max(sizes)
    d0, d1, h = be.alloc_device(0, n), be.alloc_device(1, n), be.alloc_host(n, 0)
    s0, s1 = be.create_stream(0), be.create_stream(1)
    events = [be.create_event(0) for _ in range(len(sizes) + 3)]
    be.record_event(events[0], s0)
    for size, event in zip(sizes, events[1:]):
        for i in range(4):
            be.memcpy_async(d1, d0, size, s0)
            if size < 4096 and i == 1:  # host calls: the third copy starts at its call
                be.create_event(0), be.create_event(0), be.create_event(0)
        be.record_event(event, s0)
    be.enable_peer_access(0, 1)  # the same copy over another path from here: a new run
    for _ in range(3):
        be.memcpy_async(d1, d0, n, s0)
        be.memcpy_async(d0, h, n, s1)
    be.record_event(events[-2], s0)
    be.record_event(events[-1], s1)
    kinds = [op.kind for op in (s0.cur, *s0.queue) if op is not None]
    be.synchronize(s0, 1.0)
    be.synchronize(s1, 1.0)
    return [be.elapsed_seconds(events[0], e) for e in events[1:]], kinds


def test_a_copy_made_again_behind_itself_is_one_op_with_the_times_of_separate_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Copies of the same buffers, size and path queued back to back on a stream are one
    engine op made again (a record, another size or another path starts a new one), with
    the same elapsed times and jitter draws as separate ops, bit for bit."""
    import gpubw.backend.sim.backend as sim_backend

    sizes = (4096, 8, 4 * MIB)  # copies slower than the host's calls, faster, far slower
    merged = SimulatedBackend(load_system("h200x2"))
    times, kinds = _copy_runs(merged, sizes)
    monkeypatch.setattr(sim_backend, "repeat_copy", lambda *args: False)
    separate = SimulatedBackend(load_system("h200x2"))
    assert _copy_runs(separate, sizes)[0] == times
    assert merged._engine._rng.getstate() == separate._engine._rng.getstate()
    assert kinds == ["xfer", "record", "xfer", "record"]  # the last two runs: one op each


def test_a_copy_made_again_after_its_buffer_was_freed_is_refused(
    backend: SimulatedBackend,
) -> None:
    """The same copy queued behind itself after its source was freed is not made again: it
    is refused as any copy of unallocated memory is."""
    src, dst = backend.alloc_device(0, 4 * MIB), backend.alloc_device(0, 4 * MIB)
    s = backend.create_stream(0)
    backend.memcpy_async(dst, src, 4 * MIB, s)
    backend.free_device(src)
    with pytest.raises(CudaError) as info:
        backend.memcpy_async(dst, src, 4 * MIB, s)
    assert info.value.result == "CUDA_ERROR_INVALID_VALUE"
