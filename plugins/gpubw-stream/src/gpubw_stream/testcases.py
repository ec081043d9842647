"""The STREAM testcases (entry-point group ``gpubw.testcases``, keys ``stream_*``).

Each measures, on every device in turn, one kernel over arrays of ``size`` bytes (the ``-b``
value) in that device's memory, with gpubw's protocol (:class:`gpubw.MemcpyOperation`: spin
gate, warm-up, events, ``loops`` passes of one launch per sample, median of samples). The
result is one 1 x N matrix (a column per device) in bytes/s, counted as bytes read plus bytes
written, with notes:

* ``percent_of_nominal`` -- per column, the figure over the device's nominal memory bandwidth
  (bus width x memory clock x 2);
* ``l2_fits`` -- per column, whether all the arrays together fit in the device's L2 (below
  this knee a figure can be L2 bandwidth, not memory bandwidth: sweep sizes far above it);
* ``dtype`` and ``working_set_bytes`` (the bytes per pass are ``Matrix.bytes_per_copy``).

Every STREAM testcase declares the "gpubw_stream" kernel module (:mod:`.kernels`) in its
``kernel_modules``; gpubw loads it before the testcase runs.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from typing import Any, ClassVar

from gpubw import (
    BANDWIDTH,
    COUNTED_READ_WRITE,
    CellMeasurement,
    DeviceBuffer,
    Kind,
    Matrix,
    MemcpyOperation,
    Testcase,
    UsageError,
)

from gpubw_stream.dtypes import VECTOR_BYTES, DType, resolve_dtype
from gpubw_stream.initiators import (
    AddKernel,
    CopyKernel,
    ReadKernel,
    ScaleKernel,
    StreamKernel,
    StridedReadKernel,
    TriadKernel,
    WriteKernel,
)
from gpubw_stream.kernels import MODULE
from gpubw_stream.metrics import (
    l2_fits,
    percent_of_nominal,
    sectors_touched,
    strided_count,
    strided_traffic,
)

#: Environment variable of the strided read's stride k (elements), default 2.
STRIDE_ENV = "GPUBW_STREAM_STRIDE"
DEFAULT_STRIDE = 2


def _size_text(nbytes: int) -> str:
    mib = 1 << 20
    return f"{nbytes // mib} MiB" if nbytes and nbytes % mib == 0 else f"{nbytes} bytes"


class StreamTestcase(Testcase):
    """Base of the STREAM testcases (not an entry point itself)."""

    #: gpubw's own kernels (the spin gate) and the STREAM kernels
    kernel_modules = (*Testcase.kernel_modules, MODULE)
    #: the kernel's initiator class
    kernel: ClassVar[type[StreamKernel]] = StreamKernel
    #: element type (fp32, fp16, fp64); None: ``$GPUBW_STREAM_DTYPE``, else fp32
    dtype: ClassVar[str | None] = None
    #: what the counted bytes are, in words (after "read + write: ")
    traffic_words: ClassVar[str] = ""

    def element_type(self) -> DType:
        return resolve_dtype(self.dtype)

    def make_kernel(self, dtype: DType, arrays: Sequence[DeviceBuffer], scratch: Any) -> Any:
        return self.kernel(dtype, arrays, scratch)

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        if size < VECTOR_BYTES:
            raise UsageError(
                f"{self.key} needs arrays of at least {VECTOR_BYTES} bytes, got {size}"
            )
        dtype = self.element_type()
        cells: list[CellMeasurement] = []
        for dev in self.system.devices:
            with contextlib.ExitStack() as stack:
                arrays = []
                for _ in self.kernel.array_names:
                    buf = DeviceBuffer.allocate(self.system, dev.ordinal, size)
                    stack.callback(buf.close)
                    arrays.append(buf)
                scratch = None
                extra = self.kernel.scratch_bytes(dev, size)
                if extra:
                    scratch = DeviceBuffer.allocate(self.system, dev.ordinal, extra)
                    stack.callback(scratch.close)
                kernel = self.make_kernel(dtype, arrays, scratch)
                op = MemcpyOperation(self.system, kernel, kind=Kind.FIRST, loops=loops)
                cells.append(op.measure([kernel.copy]))
        return self.matrices(size, loops, dtype, cells)

    # -- the result ----------------------------------------------------------------------------
    def working_set(self, size: int, dtype: DType) -> int:
        return self.kernel.working_set(size, dtype)

    def header(self, dtype: DType, what: str = "") -> str:
        """nvbandwidth-style header, e.g. ``stream_triad a = b + 3·c (fp32) GPU(column)
        bandwidth (GB/s)``."""
        return f"{self.key} {self.formula()} ({dtype.name}{what}) GPU(column) bandwidth (GB/s)"

    def formula(self) -> str:
        return self.kernel.formula

    def counted_text(self, size: int, loops: int, dtype: DType) -> str:
        per_pass = self.kernel.counted(size, dtype)
        whole = vectors_text(size)
        return (
            f"read + write: {self.traffic_words} = {_size_text(per_pass)} per pass{whole} "
            f"x {loops} passes of one kernel per sample"
        )

    def matrices(
        self, size: int, loops: int, dtype: DType, cells: Sequence[CellMeasurement]
    ) -> list[Matrix]:
        return [
            self.matrix(
                self.key,
                self.header(dtype),
                cells,
                self.counted_text(size, loops, dtype),
                self.notes(size, dtype, cells, 1.0),
            )
        ]

    def notes(
        self, size: int, dtype: DType, cells: Sequence[CellMeasurement], scale: float
    ) -> tuple[tuple[str, Any], ...]:
        devices = self.system.devices
        working = self.working_set(size, dtype)
        values = [c.value(Kind.FIRST) * scale for c in cells]
        return (
            (
                "percent_of_nominal",
                tuple(percent_of_nominal(v, d) for v, d in zip(values, devices)),
            ),
            ("l2_fits", tuple(l2_fits(working, d) for d in devices)),
            ("dtype", dtype.name),
            ("working_set_bytes", working),
        )

    def matrix(
        self,
        key: str,
        header: str,
        cells: Sequence[CellMeasurement],
        counted: str,
        notes: tuple[tuple[str, Any], ...],
        scale: float = 1.0,
    ) -> Matrix:
        per_copy = {round(c.counted_bytes[0] * scale) for c in cells}
        return Matrix(
            key=key,
            description=header,
            unit=BANDWIDTH,
            row_labels=("0",),
            column_labels=tuple(str(d.ordinal) for d in self.system.devices),
            values=[[c.value(Kind.FIRST) * scale for c in cells]],
            samples=[[tuple(x * scale for x in c.samples(Kind.FIRST)) for c in cells]],
            bytes_counted=counted,
            statistic=self.system.options.statistic,
            initiator="SM",
            bandwidth_kind=Kind.FIRST.value,
            bytes_per_copy=per_copy.pop() if len(per_copy) == 1 else None,
            notes=notes,
            bytes_counting=COUNTED_READ_WRITE,  # every byte read and every byte written
        )


def vectors_text(size: int) -> str:
    whole = size // VECTOR_BYTES * VECTOR_BYTES
    if whole == size:
        return ""
    return f" (arrays of {size} bytes used as {whole} bytes: whole 16-byte vectors)"


class StreamCopy(StreamTestcase):
    """STREAM copy c = a in each device's memory; bytes read + written (2 x array)."""

    kernel = CopyKernel
    traffic_words = "a read + c written (2 x array)"


class StreamScale(StreamTestcase):
    """STREAM scale b = 3·c in each device's memory; bytes read + written (2 x array)."""

    kernel = ScaleKernel
    traffic_words = "c read + b written (2 x array)"


class StreamAdd(StreamTestcase):
    """STREAM add c = a + b in each device's memory; bytes read + written (3 x array)."""

    kernel = AddKernel
    traffic_words = "a and b read + c written (3 x array)"


class StreamTriad(StreamTestcase):
    """STREAM triad a = b + 3·c in each device's memory; bytes read + written (3 x array)."""

    kernel = TriadKernel
    traffic_words = "b and c read + a written (3 x array)"


class StreamRead(StreamTestcase):
    """Read-only sum(a) in each device's memory; bytes read (1 x array).

    Each block (resident, within L2) or each piece of a (flat, beyond L2) writes one partial
    sum; those doubles are not counted."""

    kernel = ReadKernel
    traffic_words = (
        "a read (1 x array; the partial sums, a double per block or per piece of a, not counted)"
    )


class StreamWrite(StreamTestcase):
    """Write-only fill a = 3 in each device's memory; bytes written (1 x array)."""

    kernel = WriteKernel
    traffic_words = "a written (1 x array)"


class StreamStridedRead(StreamTestcase):
    """Strided read y = x[::k] + 1 in each device's memory; useful and moved bytes.

    Every k-th element of x is read (k = $GPUBW_STREAM_STRIDE or the class's ``stride``,
    default 2). Two matrices of the same timing: useful bytes (elements read + written) and
    moved bytes (whole 32-byte sectors of x touched + sectors of y written)."""

    kernel = StridedReadKernel
    #: the stride k in elements; None: ``$GPUBW_STREAM_STRIDE``, else 2
    stride: ClassVar[int | None] = None

    def element_stride(self) -> int:
        """The class's ``stride`` (ValueError if not an integer >= 1: the testcase's own bug),
        else ``$GPUBW_STREAM_STRIDE`` (UsageError if not one: the user's setting), else 2."""
        if self.stride is not None:
            if isinstance(self.stride, bool) or not isinstance(self.stride, int):
                raise ValueError(
                    f"{type(self).__name__}.stride must be an int, got {self.stride!r}"
                )
            if self.stride < 1:
                raise ValueError(f"{type(self).__name__}.stride must be >= 1, got {self.stride}")
            return self.stride
        value = os.environ.get(STRIDE_ENV, "") or str(DEFAULT_STRIDE)
        try:
            k = int(value)
        except ValueError:
            k = 0
        if k < 1:
            raise UsageError(f"{STRIDE_ENV} must be a positive integer, got {value!r}")
        return k

    def formula(self) -> str:
        return f"y = x[::{self.element_stride()}] + 1"

    def make_kernel(self, dtype: DType, arrays: Sequence[DeviceBuffer], scratch: Any) -> Any:
        return StridedReadKernel(dtype, arrays, scratch, stride=self.element_stride())

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        self.element_stride()  # a bad stride is a usage error before anything is allocated
        return super().run(size, loops)

    def traffic(self, size: int, dtype: DType) -> tuple[int, int, int]:
        """(count, useful bytes, moved bytes) of one pass."""
        k = self.element_stride()
        m = strided_count(size, k, dtype.itemsize)
        read, written = strided_traffic(m, k, dtype.itemsize)
        return m, 2 * m * dtype.itemsize, read + written

    def working_set(self, size: int, dtype: DType) -> int:
        k = self.element_stride()
        m = strided_count(size, k, dtype.itemsize)
        return (sectors_touched(m, k, dtype.itemsize) + sectors_touched(m, 1, dtype.itemsize)) * 32

    def matrices(
        self, size: int, loops: int, dtype: DType, cells: Sequence[CellMeasurement]
    ) -> list[Matrix]:
        k = self.element_stride()
        m, useful, moved = self.traffic(size, dtype)
        ratio = moved / useful if useful else 0.0
        common = (
            f"y[i] = x[i * {k}] + 1 for {m} {dtype.name} elements ({dtype.itemsize} bytes) of a "
            f"{_size_text(size)} x"
        )
        per = f" x {loops} passes of one kernel per sample"
        useful_text = (
            f"useful bytes, read + write: {common}: {m} elements read + {m} written = "
            f"{useful} bytes per pass{per}"
        )
        moved_text = (
            f"moved bytes, read + write: {common}: whole 32-byte sectors of x touched + "
            f"sectors of y written = {moved} bytes per pass{per} (same timing as "
            f"{self.key}; {ratio:.3g} x the useful bytes)"
        )
        extra = (("stride", k), ("useful_bytes_per_pass", useful), ("moved_bytes_per_pass", moved))
        return [
            self.matrix(
                self.key,
                self.header(dtype, ", useful bytes"),
                cells,
                useful_text,
                self.notes(size, dtype, cells, 1.0) + extra,
            ),
            self.matrix(
                f"{self.key}_moved",
                self.header(dtype, ", moved bytes: 32-byte sectors"),
                cells,
                moved_text,
                self.notes(size, dtype, cells, ratio) + extra,
                scale=ratio,
            ),
        ]


TESTCASES: tuple[type[StreamTestcase], ...] = (
    StreamCopy,
    StreamScale,
    StreamAdd,
    StreamTriad,
    StreamRead,
    StreamWrite,
    StreamStridedRead,
)
