"""On a real GPU: the flat kernels' results are verified, and a planted corruption or a skipped
vector is caught (marked ``gpu``; skipped, with the reason, without one)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from gpubw import CopyJob, RunOptions, System, VerificationError

from gpubw_stream.initiators import CopyKernel, ReadKernel, StreamKernel, TriadKernel, WriteKernel
from gpubw_stream.kernels import FLAT
from gpubw_stream.testcases import StreamCopy, StreamRead, StreamTestcase, StreamTriad, StreamWrite

from _stream_devices import gpu_unavailable

_WHY = gpu_unavailable()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(bool(_WHY), reason=f"needs a GPU: {_WHY}")]

MIB = 1 << 20
CASES = [
    (StreamCopy, CopyKernel, "stream_copy"),
    (StreamTriad, TriadKernel, "stream_triad"),
    (StreamWrite, WriteKernel, "stream_write"),
]
#: a 32-bit word inside the checked array (vector 194,444, not on a piece boundary)
BAD_WORD = 777_776


@pytest.fixture(scope="module")
def gpu() -> Iterator[System]:
    from gpubw.backend.cuda import CudaBackend

    with System(CudaBackend(), RunOptions(samples=2, loops=4)) as system:
        yield system


def planted(base: type[StreamKernel]) -> type[StreamKernel]:
    """``base`` whose measured passes are followed by a 4-byte write of junk into the checked
    array (on the same stream, so before the verification kernel)."""

    def enqueue(self: Any, job: CopyJob, *, loops: int) -> None:
        base.enqueue(self, job, loops=loops)
        junk = job.system.pool.host_scratch("planted junk", 4096)
        junk.write(b"\x13\x37\x13\x37")
        buf = self.arrays[self.checked_array]
        job.system.backend.memcpy_async(buf.ptr + 4 * BAD_WORD, junk.ptr, 4, job.stream)

    return type(f"Planted{base.__name__}", (base,), {"enqueue": enqueue})


def short(base: type[StreamKernel]) -> type[StreamKernel]:
    """``base`` whose kernel is told one vector fewer than the array holds."""

    def args(self: Any, vecs: int, loops: int) -> Any:
        return base.args(self, vecs - 1, loops)

    return type(f"Short{base.__name__}", (base,), {"args": args})


def keyed_testcase(
    cls: type[StreamTestcase], key: str, kernel: type[StreamKernel]
) -> Callable[[System], StreamTestcase]:
    """``cls`` with ``kernel``, made as the runner makes it: modules loaded, key given."""

    def make(system: System) -> StreamTestcase:
        made = type(cls.__name__, (cls,), {"kernel": kernel})
        system.load_kernel_modules(made.kernel_modules)
        return made(system, key)

    return make


@pytest.mark.parametrize(("cls", "kernel", "key"), CASES)
def test_flat_kernels_measure_and_verify(
    gpu: System, cls: type[StreamTestcase], kernel: type[StreamKernel], key: str
) -> None:
    """The flat path (one launch of loops x pieces blocks; arrays far beyond L2) runs,
    verifies and gives a figure."""
    assert key in FLAT
    (m,) = keyed_testcase(cls, key, kernel)(gpu).run(128 * MIB + 48, 4)
    assert all(v is not None and v > 0 for v in m.values[0])


@pytest.mark.parametrize(("cls", "kernel", "key"), CASES)
def test_a_planted_bad_word_is_caught(
    gpu: System, cls: type[StreamTestcase], kernel: type[StreamKernel], key: str
) -> None:
    """Junk written into the result after the flat kernel fails verification at its word."""
    with pytest.raises(VerificationError) as info:
        keyed_testcase(cls, key, planted(kernel))(gpu).run(128 * MIB, 4)
    assert 4 * BAD_WORD <= info.value.offset < 4 * BAD_WORD + 16  # the vector holding it


@pytest.mark.parametrize(("cls", "kernel", "key"), CASES)
def test_a_skipped_vector_is_caught(
    gpu: System, cls: type[StreamTestcase], kernel: type[StreamKernel], key: str
) -> None:
    """A flat kernel that leaves the last vector unwritten fails verification."""
    with pytest.raises(VerificationError):
        keyed_testcase(cls, key, short(kernel))(gpu).run(128 * MIB, 4)


def corrupted_read() -> type[StreamKernel]:
    """ReadKernel whose array gets junk in one word after it is filled (so the sums are off)."""

    def prepare(self: Any, job: CopyJob) -> None:
        ReadKernel.prepare(self, job)
        junk = job.system.pool.host_scratch("planted junk", 4096)
        junk.write(b"\x00\x00\x00\x40")  # fp32 2.0 where 1.0 was
        job.system.backend.memcpy_async(self.arrays[0].ptr + 4 * BAD_WORD, junk.ptr, 4, job.stream)

    return type("CorruptedReadKernel", (ReadKernel,), {"prepare": prepare})


@pytest.mark.parametrize("kernel", [ReadKernel, corrupted_read(), short(ReadKernel)])
def test_the_flat_read_sums_every_piece(gpu: System, kernel: type[StreamKernel]) -> None:
    """The flat read (arrays far beyond L2, a last piece cut short) verifies; a corrupted
    element or a skipped vector fails the sum of its partial sums."""
    assert "stream_read" in FLAT
    run = keyed_testcase(StreamRead, "stream_read", kernel)(gpu).run
    if kernel is ReadKernel:
        (m,) = run(128 * MIB + 48, 4)
        assert all(v is not None and v > 0 for v in m.values[0])
    else:
        with pytest.raises(VerificationError):
            run(128 * MIB + 48, 4)
