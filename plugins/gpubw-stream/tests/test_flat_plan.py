"""The flat kernels' launch plan (kernels.flat_launches, flat_block) and that the measured
passes use it, on gpubw's simulated backend (no GPU needed)."""

from __future__ import annotations

from typing import Any

import pytest
from gpubw import RunOptions, System, UsageError
from gpubw.backend.sim.presets import from_preset

from gpubw_stream.kernels import (
    FLAT_BLOCK,
    FLAT_READ_BLOCK,
    FLAT_WRITE_BLOCK,
    MAX_GRID,
    flat_block,
    flat_launches,
    flat_piece,
    read_flat_vectors,
)
from gpubw_stream.testcases import StreamCopy, StreamRead, StreamTestcase, StreamWrite

MIB = 1 << 20
#: an array size whose working set is beyond the simulated H200's L2 (60 MiB)
SIZE = 64 * MIB


def test_one_launch_holds_every_pass_while_the_grid_allows() -> None:
    """loops x pieces blocks in one launch; split over launches only past the grid limit."""
    assert flat_launches(4096, 16, 256) == [(16 * 16, 16)]
    assert flat_launches(0, 3, 128) == [(3, 3)]  # no vectors: one idle block per pass
    pieces = MAX_GRID // 2 + 1  # two passes no longer fit in one grid
    plan = flat_launches(pieces * 128, 5, 128)
    assert [n for _, n in plan] == [1] * 5
    assert all(g == pieces for g, _ in plan)


def test_blocks_per_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The write-only kernel and the read get larger blocks than the other kernels that read;
    a read piece is V vectors per thread."""
    monkeypatch.delenv("GPUBW_KERNEL_DEFINES", raising=False)
    assert flat_block("stream_write") == FLAT_WRITE_BLOCK == 256
    assert flat_block("stream_copy") == flat_block("stream_triad_f32") == FLAT_BLOCK == 128
    assert flat_block("stream_read_f16") == FLAT_READ_BLOCK == 256
    assert flat_piece("stream_copy") == 128 and flat_piece("stream_write") == 256
    assert flat_piece("stream_read_f32") == 512  # V = 2 by default


@pytest.mark.parametrize("v", [1, 2, 4])
def test_the_read_vectors_per_thread_follow_the_compile_defines(
    monkeypatch: pytest.MonkeyPatch, v: int
) -> None:
    """STREAM_READ_FLAT_V in GPUBW_KERNEL_DEFINES (what the compile gets) sets the host's V."""
    monkeypatch.setenv("GPUBW_KERNEL_DEFINES", f"STREAM_UNROLL=8, STREAM_READ_FLAT_V={v}")
    assert read_flat_vectors() == v
    assert flat_piece("stream_read_f64") == 256 * v


@pytest.mark.parametrize("value", ["3", "8", "0", "two"])
def test_a_bad_read_vectors_per_thread_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """A V other than 1, 2 or 4 is refused with one line naming it and what is allowed."""
    monkeypatch.setenv("GPUBW_KERNEL_DEFINES", f"STREAM_READ_FLAT_V={value}")
    with pytest.raises(
        UsageError, match=f"STREAM_READ_FLAT_V must be one of 1, 2, 4, got '{value}'"
    ):
        read_flat_vectors()


@pytest.mark.parametrize(
    ("cls", "key", "kernel", "block"),
    [
        (StreamCopy, "stream_copy", "stream_copy_flat", 128),
        (StreamWrite, "stream_write", "stream_write_flat", 256),
        (StreamRead, "stream_read", "stream_read_f32_flat", 256),
    ],
)
def test_measured_passes_use_the_flat_kernels(
    monkeypatch: pytest.MonkeyPatch, cls: type[StreamTestcase], key: str, kernel: str, block: int
) -> None:
    """Beyond L2 the measured launches are the flat kernel with loops x pieces blocks."""
    backend = from_preset("h200x1")
    launches: list[tuple[str, int, int, Any]] = []
    real = backend.launch

    def spy(name: str, grid: int, blk: int, args: Any, stream: Any) -> None:
        launches.append((name, grid, blk, args))
        real(name, grid, blk, args, stream)

    monkeypatch.setattr(backend, "launch", spy)
    with System(backend, RunOptions(samples=1, loops=4)) as system:
        _made(system, cls, key).run(SIZE, 4)
    measured = [x for x in launches if x[0] == kernel]
    assert measured, [x[0] for x in launches]
    assert {x[2] for x in measured} == {block}
    assert {x[1] for x in measured} >= {4 * (SIZE // 16) // flat_piece(kernel)}


def test_within_l2_the_resident_kernels_stay(monkeypatch: pytest.MonkeyPatch) -> None:
    """Arrays that fit in L2 together are measured with the resident grid-stride kernel."""
    backend = from_preset("h200x1")
    names: list[str] = []
    real = backend.launch

    def spy(name: str, grid: int, blk: int, args: Any, stream: Any) -> None:
        names.append(name)
        real(name, grid, blk, args, stream)

    monkeypatch.setattr(backend, "launch", spy)
    with System(backend, RunOptions(samples=1, loops=4)) as system:
        _made(system, StreamCopy, "stream_copy").run(16 * MIB, 4)
    assert "stream_copy" in names and "stream_copy_flat" not in names


def _made(system: System, cls: type[StreamTestcase], key: str) -> StreamTestcase:
    """``cls`` on ``system`` as the runner makes it: its kernel modules loaded, its key given."""
    system.load_kernel_modules(cls.kernel_modules)
    return cls(system, key)
