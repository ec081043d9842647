"""On a real GPU (marked ``gpu``; skipped, with the reason, without one).

Run on the target machine with ``pytest plugins/gpubw-stream/tests -m gpu -rs``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from gpubw import Matrix, RunOptions, System

from gpubw_stream.testcases import (
    TESTCASES,
    StreamAdd,
    StreamCopy,
    StreamRead,
    StreamScale,
    StreamStridedRead,
    StreamTestcase,
    StreamTriad,
    StreamWrite,
)

from _stream_devices import gpu_unavailable

_WHY = gpu_unavailable()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(bool(_WHY), reason=f"needs a GPU: {_WHY}")]

MIB = 1 << 20
KEYS = {
    StreamCopy: "stream_copy",
    StreamScale: "stream_scale",
    StreamAdd: "stream_add",
    StreamTriad: "stream_triad",
    StreamRead: "stream_read",
    StreamWrite: "stream_write",
    StreamStridedRead: "stream_strided_read",
}


def keyed(cls: type[StreamTestcase], **attrs: Any) -> Callable[[System], StreamTestcase]:
    """Make ``cls`` (with ``attrs`` overridden) on a System as the runner does: the kernel
    modules it declares loaded, the key its entry point gives it."""

    def make(system: System) -> StreamTestcase:
        made = type(cls.__name__, (cls,), attrs) if attrs else cls
        system.load_kernel_modules(made.kernel_modules)
        return made(system, KEYS[cls])

    return make


def notes(m: Matrix) -> dict[str, Any]:
    return dict(m.notes)


@pytest.fixture(scope="module")
def gpu() -> Iterator[System]:
    from gpubw.backend.cuda import CudaBackend

    with System(CudaBackend(), RunOptions(samples=5, loops=8)) as system:
        yield system


@pytest.fixture(autouse=True)
def _defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUBW_STREAM_DTYPE", raising=False)
    monkeypatch.delenv("GPUBW_STREAM_STRIDE", raising=False)


def need_memory(system: System, nbytes: int) -> None:
    for d in system.devices:
        free, _ = system.backend.memory_info(d.ordinal)
        if free < nbytes + 512 * MIB:
            pytest.skip(f"device {d.ordinal} has {free >> 20} MiB free, needs {nbytes >> 20} MiB")


def test_every_testcase_compiles_runs_and_verifies(gpu: System) -> None:
    """On a GPU every STREAM testcase compiles, runs, verifies and stays under 105 % of nominal."""
    need_memory(gpu, 3 * 256 * MIB)
    assert TESTCASES
    for cls in TESTCASES:
        for m in keyed(cls)(gpu).run(256 * MIB, 8):
            assert all(v is not None and v > 0 for v in m.values[0]), m.key
            n = notes(m)
            assert all(p is not None and p > 0 for p in n["percent_of_nominal"]), m.key
            # a figure far above nominal at 256 MiB would mean the bytes are miscounted
            if not any(n["l2_fits"]):
                assert all(p < 105 for p in n["percent_of_nominal"]), (m.key, n)


def test_triad_plateau_is_a_plausible_share_of_nominal(gpu: System) -> None:
    """On a GPU, triad on 1 GiB arrays is beyond the L2 and reaches 50-100 % of nominal."""
    need_memory(gpu, 3 * 1024 * MIB)
    (m,) = keyed(StreamTriad)(gpu).run(1024 * MIB, 8)
    n = notes(m)
    assert n["l2_fits"] == tuple(False for _ in gpu.devices)
    for pct in n["percent_of_nominal"]:
        assert 50 < pct < 100, n  # the seed expects 75-90 %


def test_small_arrays_are_flagged_below_the_l2_knee(gpu: System) -> None:
    """On a GPU, 1 MiB arrays are flagged as fitting in the L2."""
    (m,) = keyed(StreamCopy)(gpu).run(MIB, 8)
    assert all(notes(m)["l2_fits"])


@pytest.mark.parametrize("cls", [StreamCopy, StreamScale, StreamAdd, StreamTriad, StreamRead])
def test_fp16_and_fp32_figures_agree(gpu: System, cls: type[StreamTestcase]) -> None:
    """On a GPU, fp16 and fp32 runs count the same bytes and agree within 5 %."""
    need_memory(gpu, 3 * 1024 * MIB)
    f32 = keyed(cls, dtype="fp32")(gpu).run(1024 * MIB, 8)[0]
    f16 = keyed(cls, dtype="fp16")(gpu).run(1024 * MIB, 8)[0]
    assert f16.bytes_per_copy == f32.bytes_per_copy
    for a, b in zip(f16.values[0], f32.values[0]):
        assert a is not None and b is not None
        assert a == pytest.approx(b, rel=0.05), (cls.__name__, a / 1e9, b / 1e9)


def test_strided_read_moves_whole_sectors(gpu: System) -> None:
    """On a GPU, strided read moves 1.5x its useful bytes, and its useful figure is below copy's."""
    need_memory(gpu, 2 * 1024 * MIB)
    useful, moved = keyed(StreamStridedRead)(gpu).run(1024 * MIB, 8)
    (copy,) = keyed(StreamCopy)(gpu).run(1024 * MIB, 8)
    for u, m, c in zip(useful.values[0], moved.values[0], copy.values[0]):
        assert u is not None and m is not None and c is not None
        assert u < c  # the useful bandwidth of a strided read is below the plateau
        assert m == pytest.approx(1.5 * u)
