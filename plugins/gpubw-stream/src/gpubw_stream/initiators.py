"""One :class:`gpubw.Initiator` per STREAM kernel: what it counts, launches, fills and checks.

gpubw's :class:`gpubw.MemcpyOperation` times a :class:`gpubw.Copy` (source, destination) with
its protocol (spin gate, warm-up, events, samples, median); the STREAM kernels touch one to
three arrays, so an initiator here is made for one measurement and holds all the arrays of
that kernel; :attr:`StreamKernel.copy` is the (source, destination) pair handed to
``measure()`` (it decides the executing device and the labels), and the methods below get
it back as a :class:`gpubw.CopyJob` (the pair, its sizes, the executing device, the stream).
Arrays are ``size`` bytes each; every kernel works on whole 16-byte vectors (``size // 16``
of them).

Arrays start as a = 1.0, b = 2.0, c = 0.5 (STREAM's spirit: exactly representable values in
every type), and the scalar is 3.0, so every result is exact in fp16, fp32 and fp64 and is
verified on the whole array by a kernel after each sample (unless ``-n``/no-verify).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import attrs
from gpubw import Buffer, Copy, CopyJob, DeviceInfo, Initiator, KernelArg, System, ptr, u32, u64

from gpubw_stream.dtypes import VECTOR_BYTES, DType
from gpubw_stream.kernels import (
    BLOCK,
    FLAT,
    flat_block,
    flat_launches,
    flat_piece,
    flat_pieces,
    launch_grid,
)
from gpubw_stream.metrics import strided_count

#: Initial values of the arrays called a, b and c.
A0, B0, C0 = 1.0, 2.0, 0.5


def vectors(nbytes: int) -> int:
    """16-byte vectors of an ``nbytes`` array (a trailing partial vector is not touched)."""
    return nbytes // VECTOR_BYTES


class StreamKernel(Initiator):
    """Base: an SM kernel over whole arrays of one device."""

    name = "SM"
    #: the operation, as STREAM writes it
    formula: ClassVar[str] = ""
    #: names of the arrays, in the order the testcase allocates them
    array_names: ClassVar[tuple[str, ...]] = ()
    #: their initial values
    initial: ClassVar[tuple[float, ...]] = ()
    #: array reads and writes per pass (counted bytes = (reads + writes) x array bytes)
    reads: ClassVar[int] = 0
    writes: ClassVar[int] = 0
    #: index of the array whose result is checked, and its expected value
    checked_array: ClassVar[int] = 0
    expected: ClassVar[float] = 0.0
    #: index of the measured pair's source and destination arrays
    pair: ClassVar[tuple[int, int]] = (0, 0)

    def __init__(
        self, dtype: DType, arrays: Sequence[Buffer], scratch: Buffer | None = None
    ) -> None:
        if len(arrays) != len(self.array_names):
            raise ValueError(
                f"{type(self).__name__} needs {len(self.array_names)} arrays, got {len(arrays)}"
            )
        self.dtype = dtype
        self.arrays = tuple(arrays)
        self.scratch = scratch

    # -- what the testcase needs to know -----------------------------------------------------
    @property
    def copy(self) -> Copy:
        """The pair handed to :meth:`gpubw.MemcpyOperation.measure`."""
        src, dst = self.pair
        return Copy(self.arrays[src], self.arrays[dst])

    @classmethod
    def scratch_bytes(cls, device: DeviceInfo, nbytes: int) -> int:
        """Bytes of extra device memory the kernel needs (the read's partial sums)."""
        return 0

    @classmethod
    def working_set(cls, nbytes: int, dtype: DType) -> int:
        """Bytes of every array the kernel touches (what must fit in L2 to be served by it)."""
        return len(cls.array_names) * vectors(nbytes) * VECTOR_BYTES

    @classmethod
    def counted(cls, nbytes: int, dtype: DType) -> int:
        """Bytes one pass reads plus writes."""
        return (cls.reads + cls.writes) * vectors(nbytes) * VECTOR_BYTES

    # -- Initiator ---------------------------------------------------------------------------
    def counted_bytes(self, nbytes: int, exec_device: DeviceInfo) -> int:
        return self.counted(nbytes, self.dtype)

    def checked_bytes(self, nbytes: int, exec_device: DeviceInfo) -> int:
        return vectors(nbytes) * VECTOR_BYTES

    def kernel(self) -> str:
        raise NotImplementedError

    def args(self, vecs: int, loops: int) -> tuple[KernelArg, ...]:
        raise NotImplementedError

    def flat(self, job: CopyJob) -> bool:
        """Whether the measured passes use the kernel's "_flat" variant: beyond L2, one
        block per (pass, piece) (kernels.FLAT says why); within L2 the resident grid-stride
        kernel (block starts would cap the flat one there)."""
        base = self.kernel().removesuffix(f"_{self.dtype.suffix}")
        return base in FLAT and self.working_set(job.nbytes, self.dtype) > job.exec_device.l2_bytes

    def enqueue(self, job: CopyJob, *, loops: int) -> None:
        vecs = vectors(job.nbytes)
        kernel = self.kernel()
        launch = job.system.backend.launch
        if self.flat(job):
            block = flat_block(kernel)
            for grid, passes in flat_launches(vecs, loops, flat_piece(kernel)):
                launch(f"{kernel}_flat", grid, block, self.args(vecs, passes), job.stream)
            return
        grid = launch_grid(job.exec_device.sm_count, vecs)
        launch(kernel, grid, BLOCK, self.args(vecs, loops), job.stream)

    def fill(self, system: System, buf: Buffer, value: float, stream: Any, sm_count: int) -> None:
        """Set every whole vector of ``buf`` to ``value`` (one pass of stream_write)."""
        vecs = vectors(buf.nbytes)
        lo, hi = self.dtype.pattern(value)
        system.backend.launch(
            "stream_write",
            launch_grid(sm_count, vecs),
            BLOCK,
            (ptr(buf.ptr), u64(vecs), u64(lo), u64(hi), u32(1)),
            stream,
        )

    def prepare(self, job: CopyJob) -> None:
        sm_count = job.exec_device.sm_count
        for buf, value in zip(self.arrays, self.initial):
            self.fill(job.system, buf, value, job.stream, sm_count)

    def enqueue_checks(self, job: CopyJob, *, first_slot: int) -> list[tuple[int, Buffer]]:
        buf = self.arrays[self.checked_array]
        vecs = vectors(job.checked)
        if vecs == 0:
            return []
        lo, hi = self.dtype.pattern(self.expected)
        buf.enqueue_check(
            "stream_check",
            launch_grid(job.exec_device.sm_count, vecs),
            BLOCK,
            (ptr(buf.ptr), u64(vecs), u64(lo), u64(hi)),
            stream=job.stream,
            exec_device=job.exec_device.ordinal,
            slot=first_slot,
        )
        return [(first_slot, buf)]


class CopyKernel(StreamKernel):
    formula = "c = a"
    array_names = ("a", "c")
    initial = (A0, C0)
    reads, writes = 1, 1
    pair = (0, 1)
    checked_array, expected = 1, A0

    def kernel(self) -> str:
        return "stream_copy"  # 16-byte vectors: the element type does not enter

    def args(self, vecs: int, loops: int) -> tuple[KernelArg, ...]:
        a, c = self.arrays
        return (ptr(c.ptr), ptr(a.ptr), u64(vecs), u32(loops))


class ScaleKernel(StreamKernel):
    formula = "b = 3·c"
    array_names = ("c", "b")
    initial = (C0, B0)
    reads, writes = 1, 1
    pair = (0, 1)
    checked_array, expected = 1, 3.0 * C0

    def kernel(self) -> str:
        return f"stream_scale_{self.dtype.suffix}"

    def args(self, vecs: int, loops: int) -> tuple[KernelArg, ...]:
        c, b = self.arrays
        return (ptr(b.ptr), ptr(c.ptr), u64(vecs), u32(loops))


class AddKernel(StreamKernel):
    formula = "c = a + b"
    array_names = ("a", "b", "c")
    initial = (A0, B0, C0)
    reads, writes = 2, 1
    pair = (0, 2)
    checked_array, expected = 2, A0 + B0

    def kernel(self) -> str:
        return f"stream_add_{self.dtype.suffix}"

    def args(self, vecs: int, loops: int) -> tuple[KernelArg, ...]:
        a, b, c = self.arrays
        return (ptr(c.ptr), ptr(a.ptr), ptr(b.ptr), u64(vecs), u32(loops))


class TriadKernel(StreamKernel):
    formula = "a = b + 3·c"
    array_names = ("a", "b", "c")
    initial = (A0, B0, C0)
    reads, writes = 2, 1
    pair = (1, 0)
    checked_array, expected = 0, B0 + 3.0 * C0

    def kernel(self) -> str:
        return f"stream_triad_{self.dtype.suffix}"

    def args(self, vecs: int, loops: int) -> tuple[KernelArg, ...]:
        a, b, c = self.arrays
        return (ptr(a.ptr), ptr(b.ptr), ptr(c.ptr), u64(vecs), u32(loops))


class WriteKernel(StreamKernel):
    formula = "a = 3"
    array_names = ("a",)
    initial = (C0,)
    reads, writes = 0, 1
    pair = (0, 0)
    checked_array, expected = 0, 3.0

    def kernel(self) -> str:
        return "stream_write"

    def args(self, vecs: int, loops: int) -> tuple[KernelArg, ...]:
        lo, hi = self.dtype.pattern(self.expected)
        (a,) = self.arrays
        return (ptr(a.ptr), u64(vecs), u64(lo), u64(hi), u32(loops))


class ReadKernel(StreamKernel):
    """sum(a): every byte of a read once per pass; one partial sum (a double) per block of
    the resident kernel, or per piece of the flat one (one 8-byte sum per 8 KiB of a with
    the default STREAM_READ_FLAT_V = 2), goes to a scratch buffer whose bytes are not counted
    (they are named in the bytes-counted line)."""

    formula = "sum(a)"
    array_names = ("a",)
    initial = (A0,)
    reads, writes = 1, 0
    pair = (0, 0)

    @classmethod
    def scratch_bytes(cls, device: DeviceInfo, nbytes: int) -> int:
        """Room for the partial sums of either form (the check sums those written)."""
        vecs = vectors(nbytes)
        pieces = flat_pieces(vecs, flat_piece("stream_read"))
        return 8 * max(launch_grid(device.sm_count, vecs), pieces)

    def partial_sums(self, job: CopyJob) -> int:
        """Partial sums each pass writes: one per piece of the flat kernel, else one per
        block of the resident grid."""
        vecs = vectors(job.nbytes)
        if self.flat(job):
            return flat_pieces(vecs, flat_piece(self.kernel()))
        return launch_grid(job.exec_device.sm_count, vecs)

    def kernel(self) -> str:
        return f"stream_read_{self.dtype.suffix}"

    def args(self, vecs: int, loops: int) -> tuple[KernelArg, ...]:
        assert self.scratch is not None
        (a,) = self.arrays
        return (ptr(a.ptr), u64(vecs), ptr(self.scratch.ptr), u32(loops))

    def enqueue_checks(self, job: CopyJob, *, first_slot: int) -> list[tuple[int, Buffer]]:
        # every element of a is 1.0, so the partial sums add up to the element count
        assert self.scratch is not None
        vecs = vectors(job.checked)
        if vecs == 0:
            return []
        elements = vecs * VECTOR_BYTES // self.dtype.itemsize
        count = self.partial_sums(job)
        self.scratch.enqueue_check(
            "stream_check_sum",
            1,
            1,
            (ptr(self.scratch.ptr), u64(count), u64(elements)),
            stream=job.stream,
            exec_device=job.exec_device.ordinal,
            slot=first_slot,
        )
        return [(first_slot, self.scratch)]


class StridedReadKernel(StreamKernel):
    """y[i] = x[i * k] + 1 (the seed's ``x[::k] + 1``): every k-th element of x is read, and
    the results are written contiguously to the first ceil(elements / k) elements of y.
    Scalar accesses (one element each), so the memory moves whole 32-byte sectors of x."""

    formula = "y = x[::k] + 1"
    array_names = ("x", "y")
    initial = (A0, 0.0)
    pair = (0, 1)
    checked_array, expected = 1, A0 + 1.0

    def __init__(
        self,
        dtype: DType,
        arrays: Sequence[Buffer],
        scratch: Buffer | None = None,
        *,
        stride: int = 2,
    ) -> None:
        super().__init__(dtype, arrays, scratch)
        if stride < 1:
            raise ValueError(f"stride must be >= 1, got {stride}")
        self.stride = stride

    def count(self, nbytes: int) -> int:
        """Elements read (and written): ceil(elements of x / k)."""
        return strided_count(nbytes, self.stride, self.dtype.itemsize)

    @classmethod
    def working_set(cls, nbytes: int, dtype: DType) -> int:
        # x whole (its sectors are all in play for small k) and the written part of y; the
        # stride is not known to a classmethod, so the testcase computes the exact figure
        return 2 * nbytes

    def counted_bytes(self, nbytes: int, exec_device: DeviceInfo) -> int:
        """Useful bytes: the elements read plus the elements written."""
        return 2 * self.count(nbytes) * self.dtype.itemsize

    def kernel(self) -> str:
        return f"stream_strided_{self.dtype.suffix}"

    def enqueue(self, job: CopyJob, *, loops: int) -> None:
        m = self.count(job.nbytes)
        x, y = self.arrays
        job.system.backend.launch(
            self.kernel(),
            launch_grid(job.exec_device.sm_count, m),
            BLOCK,
            (ptr(y.ptr), ptr(x.ptr), u64(m), u32(self.stride), u32(loops)),
            job.stream,
        )

    def enqueue_checks(self, job: CopyJob, *, first_slot: int) -> list[tuple[int, Buffer]]:
        # the whole vectors of y's written prefix (a last partial vector is not checked)
        written = self.count(job.checked) * self.dtype.itemsize
        return super().enqueue_checks(attrs.evolve(job, checked=written), first_slot=first_slot)
