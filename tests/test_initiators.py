"""Initiators: byte counting (SM truncation), launch shapes, and what they enqueue."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import MIB, SimSystemFactory
from gpubw.backend.sim.presets import load_system
from gpubw.kernels.patterns import SRC_SEED
from gpubw.measure.initiators import (
    CE,
    FLAT_COPY_BLOCK,
    MAX_GRID,
    SM,
    SM_TRUNCATION_THRESHOLD,
    SPLIT_WARP,
    CopyJob,
    Initiator,
    copy_launch_shape,
    flat_copy_applies,
    flat_copy_launches,
    sm_truncated_bytes,
)
from gpubw.memory.buffers import DeviceBuffer, HostBuffer
from gpubw.memory.system import System
from gpubw.model.errors import VerificationError

H200 = load_system("h200x1").devices[0]


def _job(
    system: System,
    src: Any,
    dst: Any,
    stream: Any,
    *,
    checked: int | None = None,
    device: Any = H200,
) -> CopyJob:
    """The job of a whole-buffer copy ``src`` -> ``dst`` on ``stream`` (all of it checked
    unless told)."""
    n = src.nbytes
    return CopyJob(
        system=system,
        src=src,
        dst=dst,
        nbytes=n,
        checked=n if checked is None else checked,
        exec_device=device,
        stream=stream,
    )


def test_sm_truncation_64mib_on_132_sms() -> None:
    """64 MiB on 132 SMs: 16 x (132 x 512) x floor(4 Mi / 67584) = 67,043,328 bytes."""
    assert sm_truncated_bytes(64 * MIB, 132) == 67_043_328
    assert sm_truncated_bytes(512 * MIB, 132) == 16 * 67584 * ((512 * MIB // 16) // 67584)


def test_sm_truncation_below_threshold() -> None:
    """Below 64 MiB only whole 16-byte elements are kept."""
    assert sm_truncated_bytes(SM_TRUNCATION_THRESHOLD - 1, 132) == SM_TRUNCATION_THRESHOLD - 16
    assert sm_truncated_bytes(1000, 132) == 992
    assert sm_truncated_bytes(15, 132) == 0


@given(nbytes=st.integers(min_value=0, max_value=1 << 36), sms=st.integers(1, 200))
def test_sm_truncation_properties(nbytes: int, sms: int) -> None:
    """The SM-truncated size is a multiple of 16 <= size, and of 16 x SMs x 512 from 64 MiB on."""
    out = sm_truncated_bytes(nbytes, sms)
    assert 0 <= out <= nbytes and out % 16 == 0
    if nbytes >= SM_TRUNCATION_THRESHOLD:
        assert out % (16 * sms * 512) == 0
        assert nbytes - out < 16 * sms * 512 + 16


def test_counted_and_checked_bytes() -> None:
    """CE counts all; SM counts and checks the truncated size; split-warp counts half."""
    # Split-warp checks whole 16-byte elements (not the SM-truncated size).
    n = 64 * MIB + 100
    assert CE.counted_bytes(n, H200) == n and CE.checked_bytes(n, H200) == n
    assert SM.counted_bytes(n, H200) == SM.checked_bytes(n, H200) == sm_truncated_bytes(n, 132)
    assert SPLIT_WARP.checked_bytes(n, H200) == (n // 16) * 16
    assert SPLIT_WARP.counted_bytes(n, H200) == (n // 16) * 16 // 2


def test_copy_launch_shape() -> None:
    """The copy kernel's grid is one wave of resident blocks at most, fewer for tiny copies."""
    grid, block = copy_launch_shape(H200, 1)
    assert grid == 1 and 1 <= block <= 1024
    grid, block = copy_launch_shape(H200, 64 * MIB // 16)
    assert H200.sm_count <= grid <= 32 * H200.sm_count and grid % H200.sm_count == 0


@pytest.mark.parametrize("initiator", [CE, SM, SPLIT_WARP])
def test_enqueue_and_prepare_make_a_correct_copy(
    sim_system: SimSystemFactory, initiator: object
) -> None:
    """prepare + enqueue + the initiator's checks leave verified buffers."""
    system = sim_system("h200x2")
    system.load_kernels()
    backend = system.backend
    src, dst = HostBuffer.allocate(system, 0, 4 * MIB), DeviceBuffer.allocate(system, 0, 4 * MIB)
    checked = initiator.checked_bytes(4 * MIB, H200)  # type: ignore[attr-defined]
    stream = backend.create_stream(0)
    try:
        init: Initiator = initiator  # type: ignore[assignment]
        job = _job(system, src, dst, stream, checked=checked)
        init.prepare(job)
        init.enqueue(job, loops=2)
        checks = init.enqueue_checks(job, first_slot=0)
        backend.synchronize(stream, 1.0)
        for slot, buf in checks:
            buf.check_verified(slot)
        assert len(checks) == (2 if initiator is SPLIT_WARP else 1)
    finally:
        backend.destroy_stream(stream)


def test_prepare_fills_destination_with_other_pattern(sim_system: SimSystemFactory) -> None:
    """Before the copy the destination does not verify (it holds the destination pattern)."""
    system = sim_system("h200x1")
    system.load_kernels()
    backend = system.backend
    src, dst = HostBuffer.allocate(system, 0, MIB), DeviceBuffer.allocate(system, 0, MIB)
    stream = backend.create_stream(0)
    CE.prepare(_job(system, src, dst, stream, device=system.devices[0]))
    backend.synchronize(stream, 1.0)
    src.verify(SRC_SEED, MIB, stream=stream, exec_device=0)
    with pytest.raises(Exception, match="verification failed on Device 0"):
        dst.verify(SRC_SEED, MIB, stream=stream, exec_device=0)
    backend.destroy_stream(stream)


def test_copy_job_and_the_loop_count_and_slot_are_keyword_only(
    sim_system: SimSystemFactory,
) -> None:
    """A CopyJob's fields, enqueue's loop count and enqueue_checks' first slot refuse
    positions (so no call can swap two sizes silently); a job is a frozen value."""
    system = sim_system("h200x1")
    src, dst = HostBuffer.allocate(system, 0, MIB), DeviceBuffer.allocate(system, 0, MIB)
    with pytest.raises(TypeError):
        CopyJob(system, src, dst, MIB, MIB, H200, None)  # type: ignore[call-arg]
    job = _job(system, src, dst, None)
    with pytest.raises(TypeError):
        CE.enqueue(job, 2)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        CE.enqueue_checks(job, 0)  # type: ignore[call-arg]
    with pytest.raises(AttributeError):
        job.checked = 16  # type: ignore[misc]


# -- the flat device-local copy (gpubw_copy_flat) ---------------------------------------------


def flat_kernel_passes(elements: int, loops: int, grid: int, block: int, unroll: int) -> list:
    """What gpubw_copy_flat (kernels/gpubw.cu) does in one launch, step by step: for each
    pass, how many times each element is copied (block k covers piece k % pieces of pass
    k // pieces; a whole piece is blockDim x unroll elements, a short last piece is copied by
    a block-stride loop)."""
    piece = block * unroll
    pieces = -(-elements // piece)
    counts = [[0] * elements for _ in range(loops)]
    for first in range(grid):
        for k in range(first, pieces * loops, grid):
            base, p = (k % pieces) * piece, k // pieces
            for t in range(base, base + block):
                if base + piece <= elements:
                    for u in range(unroll):
                        counts[p][t + u * block] += 1
                else:
                    for i in range(t, elements, block):
                        counts[p][i] += 1
    return counts


@given(
    elements=st.integers(1, 700),
    loops=st.integers(1, 4),
    block=st.sampled_from([1, 3, 32, FLAT_COPY_BLOCK]),
    unroll=st.sampled_from([1, 2]),
    shrink=st.integers(1, 5),
)
def test_flat_copy_covers_every_element_once_per_pass(
    elements: int, loops: int, block: int, unroll: int, shrink: int
) -> None:
    """The flat copy's pass-major plan copies every element exactly once per pass, odd sizes
    and short last pieces included, with the planned grid (loops x pieces) or any smaller one."""
    pieces = -(-elements // (block * unroll))
    for grid in (pieces * loops, max(1, pieces * loops // shrink)):
        counts = flat_kernel_passes(elements, loops, grid, block, unroll)
        assert all(c == 1 for row in counts for c in row), (grid, counts)


@given(elements=st.integers(1, 1 << 40), loops=st.integers(1, 4096))
def test_flat_copy_launches_cover_all_passes(elements: int, loops: int) -> None:
    """The launches of one enqueue run every pass once, one block per (pass, piece) within
    CUDA's grid limit (a grid-stride grid of MAX_GRID beyond it), and only as many launches
    as that limit needs."""
    plan = flat_copy_launches(elements, loops)
    pieces = -(-elements // FLAT_COPY_BLOCK)
    assert sum(passes for _, passes in plan) == loops
    assert all(grid == min(pieces * passes, MAX_GRID) for grid, passes in plan)
    if pieces * loops <= MAX_GRID:
        assert plan == [(pieces * loops, loops)]
    else:
        assert len(plan) == -(-loops // max(1, MAX_GRID // pieces))


def test_flat_copy_applies_to_device_local_beyond_l2(sim_system: SimSystemFactory) -> None:
    """Only copies within one device's memory whose source + destination exceed its L2 take
    the flat kernel; host, peer and within-L2 copies keep gpubw_copy."""
    system = sim_system("h200x2")
    d0, d1 = system.devices[0], system.devices[1]
    half_l2 = d0.l2_bytes // 2 // 16  # elements whose two buffers fill L2 exactly
    a, b = DeviceBuffer.allocate(system, 0, MIB), DeviceBuffer.allocate(system, 0, MIB)
    peer, host = DeviceBuffer.allocate(system, 1, MIB), HostBuffer.allocate(system, 0, MIB)
    assert flat_copy_applies(a, b, half_l2 + 1, d0)
    assert not flat_copy_applies(a, b, half_l2, d0)
    assert not flat_copy_applies(a, b, half_l2 + 1, d1)  # executed by another device
    for src, dst in ((host, a), (a, host), (a, peer), (peer, a)):
        assert not flat_copy_applies(src, dst, 1 << 30, d0)


def _launches(system: System, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    """Record (kernel, grid, block) of every launch made through ``system``'s backend."""
    seen: list[tuple[str, int, int]] = []
    real = system.backend.launch

    def spy(kernel: str, grid: int, block: int, args: Any, stream: Any) -> None:
        seen.append((kernel, grid, block))
        real(kernel, grid, block, args, stream)

    monkeypatch.setattr(system.backend, "launch", spy)
    return seen


def flat_copy_catches_planted_words(system: System, seen: list[tuple[str, int, int]]) -> None:
    """SM copies a device-local pair beyond L2 (an odd size, so the last piece is short) with
    gpubw_copy_flat, and the destination verifies; a bad word planted in the source before the
    copy (in the short last piece) and one planted in the destination after it are each caught
    at their offset."""
    dev = system.devices[0]
    system.load_kernels()
    backend = system.backend
    nbytes = (dev.l2_bytes // 2 // MIB + 8) * MIB + 52
    checked = SM.checked_bytes(nbytes, dev)
    elements = SM.copied_elements(nbytes, dev)
    assert checked == elements * 16
    if nbytes < SM_TRUNCATION_THRESHOLD:  # (from 64 MiB on, SM truncation keeps whole pieces)
        assert elements % FLAT_COPY_BLOCK, "the last piece should be short"
    junk = system.pool.host_scratch("test junk", 4096)
    junk.write(b"\x13\x37\x13\x37")
    cases: list[tuple[str, int | None]] = [
        ("none", None),
        ("src", checked - 4),
        ("dst", 4 * 777_777),
    ]
    with (
        DeviceBuffer.allocate(system, 0, nbytes) as src,
        DeviceBuffer.allocate(system, 0, nbytes) as dst,
        backend.stream(0) as stream,
    ):
        assert flat_copy_applies(src, dst, elements, dev)
        for where, offset in cases:
            seen.clear()
            job = _job(system, src, dst, stream, checked=checked, device=dev)
            SM.prepare(job)
            if where == "src" and offset is not None:
                backend.memcpy_async(src.ptr + offset, junk.ptr, 4, stream)
            SM.enqueue(job, loops=3)
            if where == "dst" and offset is not None:
                backend.memcpy_async(dst.ptr + offset, junk.ptr, 4, stream)
            checks = SM.enqueue_checks(job, first_slot=0)
            backend.synchronize(stream, 30.0)
            pieces = -(-elements // FLAT_COPY_BLOCK)
            assert ("gpubw_copy_flat", 3 * pieces, FLAT_COPY_BLOCK) in seen
            assert not any(k == "gpubw_copy" for k, _, _ in seen)
            ((slot, buf),) = checks
            if offset is None:
                buf.check_verified(slot)
                continue
            with pytest.raises(VerificationError) as info:
                buf.check_verified(slot)
            assert info.value.offset == offset, where


def test_flat_copy_verifies_and_catches_planted_words(
    sim_system: SimSystemFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the simulated backend the flat copy is emulated: verified, planted words caught."""
    system = sim_system("h200x1")
    flat_copy_catches_planted_words(system, _launches(system, monkeypatch))


@pytest.fixture
def cuda_system() -> Iterator[System]:
    """A System on the real CUDA backend (skips without cuda-python, a driver or a GPU)."""
    cuda = pytest.importorskip("gpubw.backend.cuda")
    from gpubw.model.errors import NoDriverError
    from gpubw.model.options import RunOptions

    try:
        backend = cuda.CudaBackend()
    except NoDriverError:
        pytest.skip("no NVIDIA GPU/driver")
    with System(backend, RunOptions(samples=2, loops=2)) as system:
        yield system


@pytest.mark.gpu
def test_flat_copy_catches_planted_words_on_gpu(
    cuda_system: System, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gpubw_copy_flat on a real GPU copies every byte, and gpubw_verify catches a bad word
    planted before (in the short last piece) or after the flat copy."""
    flat_copy_catches_planted_words(cuda_system, _launches(cuda_system, monkeypatch))
