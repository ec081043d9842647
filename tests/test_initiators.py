"""Initiators: byte counting (SM truncation), launch shapes, and what they enqueue."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import MIB, SimSystemFactory
from gpubw.backend.presets import load_system
from gpubw.buffers import DeviceBuffer, HostBuffer
from gpubw.initiators import (
    CE,
    SM,
    SM_TRUNCATION_THRESHOLD,
    SPLIT_WARP,
    Initiator,
    copy_launch_shape,
    sm_truncated_bytes,
)
from gpubw.system import SRC_SEED

H200 = load_system("h200x1").devices[0]


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
        init.prepare(system, src, dst, checked=checked, stream=stream, exec_device=H200)
        init.enqueue(system, src, dst, nbytes=4 * MIB, loops=2, stream=stream, exec_device=H200)
        checks = init.enqueue_checks(
            src, dst, checked=checked, stream=stream, exec_device=H200, first_slot=0
        )
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
    CE.prepare(system, src, dst, checked=MIB, stream=stream, exec_device=system.devices[0])
    backend.synchronize(stream, 1.0)
    src.verify(SRC_SEED, MIB, stream=stream, exec_device=0)
    with pytest.raises(Exception, match="verification failed on Device 0"):
        dst.verify(SRC_SEED, MIB, stream=stream, exec_device=0)
    backend.destroy_stream(stream)


def test_enqueue_arguments_are_keyword_only(sim_system: SimSystemFactory) -> None:
    """enqueue, prepare and enqueue_checks refuse positional sizes, loops and devices (so no
    call can swap them silently)."""
    system = sim_system("h200x1")
    src, dst = HostBuffer.allocate(system, 0, MIB), DeviceBuffer.allocate(system, 0, MIB)
    with pytest.raises(TypeError):
        CE.enqueue(system, src, dst, MIB, 2, None, H200)  # type: ignore[misc]
    with pytest.raises(TypeError):
        CE.prepare(system, src, dst, MIB, None, H200)  # type: ignore[misc]
    with pytest.raises(TypeError):
        CE.enqueue_checks(src, dst, MIB, None, H200, 0)  # type: ignore[misc]
