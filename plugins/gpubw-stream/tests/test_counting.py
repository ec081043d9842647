"""Bytes counted per kernel, element types, and the settings a testcase reads."""

from __future__ import annotations

import pytest
from gpubw import UsageError

from gpubw_stream.dtypes import DTYPES, FP16, FP32, FP64, dtype, resolve_dtype
from gpubw_stream.initiators import (
    AddKernel,
    CopyKernel,
    ReadKernel,
    ScaleKernel,
    StreamKernel,
    TriadKernel,
    WriteKernel,
)
from gpubw_stream.testcases import StreamStridedRead, StreamTestcase

from _stream_devices import H200

MIB = 1 << 20

#: (kernel, arrays read + written per pass, arrays in the working set)
TRAFFIC = [
    (CopyKernel, 2, 2),
    (ScaleKernel, 2, 2),
    (AddKernel, 3, 3),
    (TriadKernel, 3, 3),
    (ReadKernel, 1, 1),
    (WriteKernel, 1, 1),
]


@pytest.mark.parametrize(("kernel", "arrays", "working"), TRAFFIC)
def test_counted_bytes_are_read_plus_write(
    kernel: type[StreamKernel], arrays: int, working: int
) -> None:
    """Each kernel counts arrays read + written x whole 16-byte vectors, and its working set."""
    for size in (MIB, 512 * MIB, 4096 * MIB):
        assert kernel.counted(size, FP32) == arrays * size
        assert kernel.working_set(size, FP32) == working * size
    # whole 16-byte vectors only
    assert kernel.counted(MIB + 15, FP32) == arrays * MIB
    assert kernel.counted(15, FP32) == 0


@pytest.mark.parametrize(("kernel", "arrays", "working"), TRAFFIC)
def test_counted_bytes_do_not_depend_on_the_element_type(
    kernel: type[StreamKernel], arrays: int, working: int
) -> None:
    """A kernel's counted bytes for a given array size are the same in every element type."""
    for size in (MIB, 3 * MIB + 48, 1 << 32):
        counts = {kernel.counted(size, t) for t in DTYPES.values()}
        assert len(counts) == 1


def test_strided_bytes_do_not_depend_on_the_element_type(monkeypatch: pytest.MonkeyPatch) -> None:
    """Strided-read useful and moved bytes are the same in fp16 and fp32, and right for k = 2."""
    monkeypatch.delenv("GPUBW_STREAM_STRIDE", raising=False)
    tc = StreamStridedRead.__new__(StreamStridedRead)
    for k in (1, 2, 4):
        monkeypatch.setenv("GPUBW_STREAM_STRIDE", str(k))
        f32, f16 = tc.traffic(256 * MIB, FP32), tc.traffic(256 * MIB, FP16)
        assert f32[0] * 2 == f16[0]  # twice the elements ...
        assert f32[1:] == f16[1:]  # ... the same useful and moved bytes
    monkeypatch.setenv("GPUBW_STREAM_STRIDE", "2")
    _, useful, moved = tc.traffic(256 * MIB, FP32)
    assert useful == 256 * MIB  # half of x read + as much written
    assert moved == 256 * MIB + 128 * MIB  # every sector of x + y's written half
    assert tc.working_set(256 * MIB, FP32) == 384 * MIB


def test_the_read_scratch_holds_the_partial_sums_of_either_form(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The read's scratch is a double per flat piece (256 x V vectors) or per resident block,
    whichever is more; the copy kernel needs none."""
    monkeypatch.delenv("GPUBW_KERNEL_DEFINES", raising=False)
    assert ReadKernel.scratch_bytes(H200, 512 * MIB) == 8 * (512 * MIB // 16 // 512)  # V = 2
    assert ReadKernel.scratch_bytes(H200, 256 * 1024) == 8 * 64  # 64 blocks > 32 pieces
    assert ReadKernel.scratch_bytes(H200, 4096) == 8  # 256 vectors: one block, one piece
    monkeypatch.setenv("GPUBW_KERNEL_DEFINES", "STREAM_UNROLL=8,STREAM_READ_FLAT_V=4")
    assert ReadKernel.scratch_bytes(H200, 512 * MIB) == 8 * (512 * MIB // 16 // 1024)
    assert CopyKernel.scratch_bytes(H200, 512 * MIB) == 0


def test_expected_results_are_exact_in_every_type() -> None:
    """Each kernel's expected value is exact in every element type, with the right bit patterns."""
    import struct

    for kernel in (CopyKernel, ScaleKernel, AddKernel, TriadKernel, WriteKernel):
        for t in DTYPES.values():
            (back,) = struct.unpack("<" + t.struct_code, t.vector(kernel.expected)[: t.itemsize])
            assert back == kernel.expected
    assert FP16.pattern(1.0) == (0x3C003C003C003C00, 0x3C003C003C003C00)
    assert FP32.pattern(3.0) == (0x4040000040400000, 0x4040000040400000)
    assert FP64.pattern(2.0) == (0x4000000000000000, 0x4000000000000000)


def test_dtype_names_and_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    """Element types resolve by alias; a class attribute beats the environment beats fp32; a
    bad attribute is a ValueError, a bad environment setting a UsageError."""
    assert dtype("float16") is FP16
    assert dtype("HALF") is FP16
    assert dtype("double") is FP64
    with pytest.raises(ValueError, match="unknown STREAM element type"):
        dtype("int8")
    with pytest.raises(ValueError, match="'int8'"):
        resolve_dtype("int8")  # a class attribute: the testcase's bug, not the user's
    monkeypatch.setenv("GPUBW_STREAM_DTYPE", "int8")
    with pytest.raises(UsageError, match="GPUBW_STREAM_DTYPE: unknown STREAM element type"):
        resolve_dtype(None)  # the user's setting
    monkeypatch.delenv("GPUBW_STREAM_DTYPE", raising=False)
    assert resolve_dtype(None) is FP32  # the default
    monkeypatch.setenv("GPUBW_STREAM_DTYPE", "fp16")
    assert resolve_dtype(None) is FP16  # the environment
    assert resolve_dtype("fp64") is FP64  # a class attribute wins

    class Half(StreamTestcase):
        dtype = "fp16"

    monkeypatch.setenv("GPUBW_STREAM_DTYPE", "fp64")
    assert Half.__new__(Half).element_type() is FP16


def test_stride_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stride is a class attribute, else a valid GPUBW_STREAM_STRIDE, else 2; a bad
    attribute is a ValueError, a bad environment setting a UsageError."""
    tc = StreamStridedRead.__new__(StreamStridedRead)
    monkeypatch.delenv("GPUBW_STREAM_STRIDE", raising=False)
    assert tc.element_stride() == 2
    monkeypatch.setenv("GPUBW_STREAM_STRIDE", "8")
    assert tc.element_stride() == 8
    for bad in ("0", "-1", "two"):
        monkeypatch.setenv("GPUBW_STREAM_STRIDE", bad)
        with pytest.raises(UsageError, match=f"GPUBW_STREAM_STRIDE must be .* got '{bad}'"):
            tc.element_stride()
    for wrong in (0, "4", 2.0):  # a class attribute: the testcase's bug, not the user's
        broken = type("Broken", (StreamStridedRead,), {"stride": wrong})
        with pytest.raises(ValueError, match=r"Broken\.stride must be"):
            broken.__new__(broken).element_stride()

    class Every4th(StreamStridedRead):
        stride = 4

    monkeypatch.setenv("GPUBW_STREAM_STRIDE", "8")
    assert Every4th.__new__(Every4th).element_stride() == 4
