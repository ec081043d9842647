"""The flat read (stream_read_*_flat) on gpubw's simulated backend with real bytes: an H200
whose L2 is shrunk to 1 MiB, so 4 MiB arrays (held as real bytes) are beyond it and the
simulation computes every piece's partial sum, which the check adds up."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from gpubw import CopyJob, RunOptions, System, VerificationError
from gpubw.backend.sim.backend import SimulatedBackend
from gpubw.backend.sim.presets import h200x1

from gpubw_stream.initiators import ReadKernel
from gpubw_stream.testcases import StreamRead

MIB = 1 << 20
#: beyond the shrunk L2, held as real bytes, and not a whole number of pieces for any V
SIZE = 4 * MIB + 48
VECS = SIZE // 16
LOOPS = 4


@pytest.fixture(autouse=True)
def _defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUBW_STREAM_DTYPE", raising=False)
    monkeypatch.delenv("GPUBW_KERNEL_DEFINES", raising=False)


#: one launch: (kernel, grid, block, argument values)
Launch = tuple[str, int, int, tuple[int, ...]]


@pytest.fixture
def launches() -> list[Launch]:
    """The launches of one run."""
    return []


def run(launches: list[Launch], kernel: type[ReadKernel] = ReadKernel) -> None:
    """stream_read (with ``kernel``) over SIZE-byte arrays on the small-L2 H200."""
    preset = h200x1()
    (dev,) = preset.devices
    backend = SimulatedBackend(attrs.evolve(preset, devices=(attrs.evolve(dev, l2_bytes=MIB),)))
    real = backend.launch

    def spy(name: str, grid: int, blk: int, args: Any, stream: Any) -> None:
        launches.append((name, grid, blk, tuple(a.value for a in args)))
        real(name, grid, blk, args, stream)

    setattr(backend, "launch", spy)  # noqa: B010 (a spy on this backend only)
    made: type[StreamRead] = type("StreamRead", (StreamRead,), {"kernel": kernel})
    with System(backend, RunOptions(samples=2, loops=LOOPS)) as system:
        system.load_kernel_modules(made.kernel_modules)
        made(system, "stream_read").run(SIZE, LOOPS)


@pytest.mark.parametrize("v", [1, 2, 4])
@pytest.mark.parametrize(("dtype", "sfx"), [("fp16", "f16"), ("fp32", "f32"), ("fp64", "f64")])
def test_every_piece_is_summed_and_checked(
    monkeypatch: pytest.MonkeyPatch, launches: list[Launch], v: int, dtype: str, sfx: str
) -> None:
    """Beyond L2 the read runs flat (loops x pieces blocks of 256 x V vectors), and the check
    adds one partial sum per piece, which verifies."""
    monkeypatch.setenv("GPUBW_KERNEL_DEFINES", f"STREAM_READ_FLAT_V={v}")
    monkeypatch.setenv("GPUBW_STREAM_DTYPE", dtype)
    run(launches)
    pieces = -(-VECS // (256 * v))
    measured = [x for x in launches if x[0] == f"stream_read_{sfx}_flat"]
    assert measured and {(x[1], x[2]) for x in measured} == {(LOOPS * pieces, 256)}
    assert not [x for x in launches if x[0] == f"stream_read_{sfx}"]
    checks = [x for x in launches if x[0] == "stream_check_sum"]
    assert checks and {x[3][1] for x in checks} == {pieces}  # (partials, count, ...)
    assert {x[3][2] for x in checks} == {VECS * 16 // {"fp16": 2, "fp32": 4, "fp64": 8}[dtype]}


def corrupted(vector: int) -> type[ReadKernel]:
    """ReadKernel whose array gets one fp32 element 2.0 instead of 1.0 (first element of
    ``vector``) after it is filled."""

    def prepare(self: Any, job: CopyJob) -> None:
        ReadKernel.prepare(self, job)
        junk = job.system.pool.host_scratch("corrupt element", 4096)
        junk.write((0x40000000).to_bytes(4, "little"))
        (a,) = self.arrays
        job.system.backend.memcpy_async(a.ptr + 16 * vector, junk.ptr, 4, job.stream)

    return type("CorruptedRead", (ReadKernel,), {"prepare": prepare})


@pytest.mark.parametrize("vector", [0, 512 * 5 + 3, VECS - 1])
def test_a_corrupted_element_fails_verification(launches: list[Launch], vector: int) -> None:
    """One element off by 1.0 in the first, a middle or the last piece fails the check."""
    with pytest.raises(VerificationError):
        run(launches, corrupted(vector))
    assert any(x[0] == "stream_read_f32_flat" for x in launches)


def test_the_check_needs_every_partial_sum(launches: list[Launch]) -> None:
    """A check that leaves out the last piece's partial sum fails: every piece counts."""

    def fewer(self: Any, job: CopyJob) -> int:
        return ReadKernel.partial_sums(self, job) - 1

    with pytest.raises(VerificationError):
        run(launches, type("FewerSums", (ReadKernel,), {"partial_sums": fewer}))


def test_a_skipped_vector_fails_verification(launches: list[Launch]) -> None:
    """A read told one vector fewer than the array holds sums short and fails."""

    def args(self: Any, vecs: int, loops: int) -> Any:
        return ReadKernel.args(self, vecs - 1, loops)

    with pytest.raises(VerificationError):
        run(launches, type("ShortRead", (ReadKernel,), {"args": args}))
