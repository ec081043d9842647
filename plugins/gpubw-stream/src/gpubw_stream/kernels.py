"""The kernel module "gpubw_stream": its CUDA source, catalogue and simulations.

The STREAM testcases declare :data:`MODULE` in their ``kernel_modules``, so gpubw's System
loads it (on both backends) before one of them runs; importing this module registers
nothing. The source is ``stream.cu`` beside this file. "vecs" are 16-byte vectors; ``loops``
passes run in one launch.

Each kernel also has a model for gpubw's simulated backend: it reports the launch's memory
traffic (every pass) and, where the simulated system holds the buffers' bytes, computes the
result so that verification is exercised on CI.
"""

from __future__ import annotations

import os
from importlib import resources
from typing import TYPE_CHECKING, Any

from gpubw import KernelModule, KernelSpec, SimulatedLaunch, UsageError

from gpubw_stream.dtypes import DTYPES, VECTOR_BYTES, DType
from gpubw_stream.metrics import strided_traffic

if TYPE_CHECKING:
    import numpy as np

MODULE_NAME = "gpubw_stream"
#: the STREAM scalar (STREAM's own value)
SCALAR = 3.0
#: Threads per block of every kernel (the source's STREAM_BLOCK).
BLOCK = 256
#: Resident blocks per SM the launch grid of the grid-stride kernels is sized for.
BLOCKS_PER_SM = 4
#: The largest grid of one launch (CUDA's gridDim.x limit).
MAX_GRID = (1 << 31) - 1
#: Kernels with a "_flat" variant (same parameters; see stream.cu's unary_flat), which the
#: measured passes use when the arrays do not fit in L2: one launch of loops x pieces blocks,
#: each block one piece (one vector per thread) of one pass. Within L2 the resident
#: grid-stride kernels stay (16 MiB triad: 9,694 GB/s resident, 5,890 flat, whose block
#: starts cap it there). benchmarks/tune_copy.py flat, 4 GiB fp32 on an H200: copy 4,275
#: vs 3,942 GB/s for the resident grid-stride kernels, triad 4,387 vs 4,105, write 4,710 vs
#: 4,310 (benchmarks/results/tune-flat-h200-2026-11-30.json). The read's flat form sums
#: STREAM_READ_FLAT_V vectors per thread per piece (benchmarks/tune_oneway.py, 4 GiB on an
#: H100: a flat read of one vector per thread in 256-thread blocks 3,216 GB/s, the resident
#: grid-stride read 3,105, PyTorch's sum 3,111).
FLAT = ("stream_copy", "stream_write", "stream_scale", "stream_add", "stream_triad", "stream_read")
#: Threads per block of the flat kernels: 128 for the kernels that read (a 128-thread copy
#: piece moves 4 KiB: gpubw_copy_flat 4,318 GB/s vs 4,274 with 256), 256 for the write-only
#: one (128-thread pieces of 2 KiB start too many blocks: 3,389 vs 4,694 GB/s).
FLAT_BLOCK = 128
FLAT_WRITE_BLOCK = 256
#: Threads per block of the flat read (the shape measured above).
FLAT_READ_BLOCK = 256
#: The source's define of the flat read's vectors per thread, its default and allowed values.
READ_FLAT_V = "STREAM_READ_FLAT_V"
READ_FLAT_V_DEFAULT = 2
READ_FLAT_V_CHOICES = (1, 2, 4)
#: gpubw's variable of extra compile macros ("NAME=VALUE,..."), which sets READ_FLAT_V too.
DEFINES_ENV = "GPUBW_KERNEL_DEFINES"


def source() -> str:
    """The CUDA C source of the module."""
    return resources.files(__package__).joinpath("stream.cu").read_text(encoding="utf-8")


def launch_grid(sm_count: int, work: int) -> int:
    """Blocks for ``work`` items per pass (vectors, or elements of the strided read): a
    grid-stride grid of BLOCKS_PER_SM blocks per SM, fewer when there is less work."""
    return max(1, min(sm_count * BLOCKS_PER_SM, -(-work // BLOCK)))


def read_flat_vectors() -> int:
    """Vectors per thread of the flat read: STREAM_READ_FLAT_V as ``$GPUBW_KERNEL_DEFINES``
    sets it for the compile (the launch plan and the partial sums must agree with the
    compiled kernel), else 2; UsageError if not 1, 2 or 4."""
    value = str(READ_FLAT_V_DEFAULT)
    for item in os.environ.get(DEFINES_ENV, "").split(","):
        name, _, given = item.strip().partition("=")
        if name == READ_FLAT_V:
            value = given.strip() or "1"  # a bare NAME is NAME=1, as the compile reads it
    if value not in {str(v) for v in READ_FLAT_V_CHOICES}:
        allowed = ", ".join(map(str, READ_FLAT_V_CHOICES))
        raise UsageError(f"{DEFINES_ENV}: {READ_FLAT_V} must be one of {allowed}, got {value!r}")
    return int(value)


def flat_block(kernel: str) -> int:
    """Threads per block of the flat variant of ``kernel`` (FLAT_BLOCK, FLAT_WRITE_BLOCK,
    FLAT_READ_BLOCK)."""
    if kernel.startswith("stream_write"):
        return FLAT_WRITE_BLOCK
    return FLAT_READ_BLOCK if kernel.startswith("stream_read") else FLAT_BLOCK


def flat_piece(kernel: str) -> int:
    """Vectors of one piece (one block's share of a pass) of the flat variant of ``kernel``:
    its block, times read_flat_vectors() for the read."""
    per_thread = read_flat_vectors() if kernel.startswith("stream_read") else 1
    return flat_block(kernel) * per_thread


def flat_pieces(vecs: int, piece: int) -> int:
    """Pieces of ``piece`` vectors covering ``vecs`` vectors (at least one)."""
    return max(1, -(-vecs // piece))


def flat_launches(vecs: int, loops: int, piece: int = FLAT_BLOCK) -> list[tuple[int, int]]:
    """(grid, loops) of each launch of a "_flat" kernel over ``vecs`` vectors, ``loops``
    passes: one block per (pass, piece of ``piece`` vectors: flat_piece), as few launches
    as MAX_GRID allows."""
    pieces = flat_pieces(vecs, piece)
    per = max(1, min(loops, MAX_GRID // pieces))
    out = []
    left = loops
    while left > 0:
        n = min(per, left)
        out.append((pieces * n, n))
        left -= n
    return out


# -- the simulations ---------------------------------------------------------------------------


def _np() -> Any:
    import numpy

    return numpy


def _array(launch: SimulatedLaunch, pointer: int, nbytes: int, dt: DType) -> np.ndarray | None:
    data = launch.read(pointer, nbytes)
    if data is None:
        return None
    return _np().frombuffer(data, dtype=dt.numpy_name)


def _store(launch: SimulatedLaunch, pointer: int, values: np.ndarray, dt: DType) -> None:
    launch.write(pointer, values.astype(dt.numpy_name).tobytes())


def sim_copy(launch: SimulatedLaunch, c: int, a: int, vecs: int, loops: int) -> None:
    n = vecs * VECTOR_BYTES
    launch.traffic(a, read=n * loops)
    launch.traffic(c, written=n * loops)
    data = launch.read(a, n)
    if data is not None:
        launch.write(c, data)


def sim_write(launch: SimulatedLaunch, dst: int, vecs: int, lo: int, hi: int, loops: int) -> None:
    n = vecs * VECTOR_BYTES
    launch.traffic(dst, written=n * loops)
    if launch.holds(dst, n):
        launch.write(dst, (lo.to_bytes(8, "little") + hi.to_bytes(8, "little")) * vecs)


def sim_check(
    launch: SimulatedLaunch, buf: int, vecs: int, lo: int, hi: int, first_bad: int
) -> None:
    n = vecs * VECTOR_BYTES
    launch.traffic(buf, read=n)
    data = launch.read(buf, n)
    if data is None:
        return
    np = _np()
    got = np.frombuffer(data, dtype="<u8").reshape(vecs, 2)
    bad = np.flatnonzero((got[:, 0] != lo) | (got[:, 1] != hi))
    if bad.size:
        _report_bad(launch, first_bad, 4 * int(bad[0]))


def sim_check_sum(
    launch: SimulatedLaunch, partials: int, count: int, expected: int, first_bad: int
) -> None:
    launch.traffic(partials, read=count * 8)
    data = launch.read(partials, count * 8)
    if data is None:
        return
    sums = _np().frombuffer(data, dtype="<f8")
    if _np().isnan(sums).all():
        return  # the simulated read could not see its array (see sim read): not checkable
    if float(sums.sum()) != float(expected):
        _report_bad(launch, first_bad, 0)


def _report_bad(launch: SimulatedLaunch, first_bad: int, word: int) -> None:
    old = launch.read(first_bad, 8)
    current = int.from_bytes(old, "little") if old is not None else (1 << 64) - 1
    launch.write(first_bad, min(current, word).to_bytes(8, "little"))


def _typed(dt: DType) -> dict[str, Any]:
    """The simulations of the typed kernels of ``dt``."""

    def unary(launch: SimulatedLaunch, dst: int, src: int, vecs: int, loops: int) -> None:
        n = vecs * VECTOR_BYTES
        launch.traffic(src, read=n * loops)
        launch.traffic(dst, written=n * loops)
        x = _array(launch, src, n, dt)
        if x is not None:
            _store(launch, dst, x * _np().dtype(dt.numpy_name).type(SCALAR), dt)

    def binary(triad: bool) -> Any:
        def run(launch: SimulatedLaunch, dst: int, p: int, q: int, vecs: int, loops: int) -> None:
            n = vecs * VECTOR_BYTES
            launch.traffic(p, read=n * loops)
            launch.traffic(q, read=n * loops)
            launch.traffic(dst, written=n * loops)
            x, y = _array(launch, p, n, dt), _array(launch, q, n, dt)
            if x is not None and y is not None:
                s = _np().dtype(dt.numpy_name).type(SCALAR)
                _store(launch, dst, x + s * y if triad else x + y, dt)

        return run

    def read(launch: SimulatedLaunch, a: int, vecs: int, partials: int, loops: int) -> None:
        n = vecs * VECTOR_BYTES
        grid = launch.grid
        launch.traffic(a, read=n * loops)
        launch.traffic(partials, written=grid * 8 * loops)
        x = _array(launch, a, n, dt)
        np = _np()
        if x is None:
            # The simulated system does not hold this array's bytes, so the sums are unknown:
            # NaN partials tell the simulated check so (a real kernel never writes NaN here).
            launch.write(partials, np.full(grid, np.nan, dtype="<f8").tobytes())
            return
        # Vector i is read by global thread i mod T, which is in block (i mod T) // block.
        per_vector = x.astype(np.float64).reshape(vecs, -1).sum(axis=1)
        threads = grid * launch.block
        owner = (np.arange(vecs) % threads) // launch.block
        sums = np.bincount(owner, weights=per_vector, minlength=grid)
        launch.write(partials, sums.astype("<f8").tobytes())

    def read_flat(launch: SimulatedLaunch, a: int, vecs: int, partials: int, loops: int) -> None:
        n = vecs * VECTOR_BYTES
        piece = launch.block * read_flat_vectors()
        pieces = -(-vecs // piece)
        launch.traffic(a, read=n * loops)
        launch.traffic(partials, written=pieces * 8 * loops)
        x = _array(launch, a, n, dt)
        np = _np()
        if x is None:  # not held: NaN partials, as in read above
            launch.write(partials, np.full(pieces, np.nan, dtype="<f8").tobytes())
            return
        # Vector i is in piece i // piece, whose block writes partials[i // piece].
        per_vector = x.astype(np.float64).reshape(vecs, -1).sum(axis=1)
        owner = np.arange(vecs) // piece
        sums = np.bincount(owner, weights=per_vector, minlength=pieces)
        launch.write(partials, sums.astype("<f8").tobytes())

    def strided(launch: SimulatedLaunch, y: int, x: int, m: int, stride: int, loops: int) -> None:
        moved_read, moved_written = strided_traffic(m, stride, dt.itemsize)
        launch.traffic(x, read=moved_read * loops)
        launch.traffic(y, written=moved_written * loops)
        span = ((m - 1) * stride + 1) * dt.itemsize if m else 0
        src = _array(launch, x, span, dt)
        if src is not None:
            one = _np().dtype(dt.numpy_name).type(1.0)
            _store(launch, y, src[::stride][:m] + one, dt)

    return {
        f"stream_scale_{dt.suffix}": unary,
        f"stream_add_{dt.suffix}": binary(triad=False),
        f"stream_triad_{dt.suffix}": binary(triad=True),
        f"stream_read_{dt.suffix}": read,
        f"stream_read_{dt.suffix}_flat": read_flat,
        f"stream_strided_{dt.suffix}": strided,
    }


# -- the catalogue -----------------------------------------------------------------------------


def _typed_specs(dt: DType) -> tuple[KernelSpec, ...]:
    t, s = dt.name, dt.suffix
    return (
        KernelSpec(
            f"stream_scale_{s}",
            ("ptr", "ptr", "u64", "u32"),
            f"(b, c, vecs, loops): b = 3 * c over vecs 16-byte vectors of {t}, loops times.",
        ),
        KernelSpec(
            f"stream_add_{s}",
            ("ptr", "ptr", "ptr", "u64", "u32"),
            f"(c, a, b, vecs, loops): c = a + b over vecs 16-byte vectors of {t}, loops times.",
        ),
        KernelSpec(
            f"stream_triad_{s}",
            ("ptr", "ptr", "ptr", "u64", "u32"),
            f"(a, b, c, vecs, loops): a = b + 3 * c over vecs 16-byte vectors of {t}, loops times.",
        ),
        KernelSpec(
            f"stream_read_{s}",
            ("ptr", "u64", "ptr", "u32"),
            f"(a, vecs, partials, loops): each block sums the {t} elements it reads of vecs "
            "16-byte vectors (grid-stride) and writes the sum (a double) to "
            "partials[blockIdx.x], every pass, loops passes.",
        ),
        KernelSpec(
            f"stream_strided_{s}",
            ("ptr", "ptr", "u64", "u32", "u32"),
            f"(y, x, m, stride, loops): y[i] = x[i * stride] + 1 for i < m {t} elements "
            "(scalar accesses), loops times.",
        ),
    )


SPECS: tuple[KernelSpec, ...] = (
    KernelSpec(
        "stream_copy",
        ("ptr", "ptr", "u64", "u32"),
        "(c, a, vecs, loops): c = a over vecs 16-byte vectors, loops times (any element type).",
    ),
    KernelSpec(
        "stream_write",
        ("ptr", "u64", "u64", "u64", "u32"),
        "(dst, vecs, lo, hi, loops): every 16-byte vector of dst = the pattern lo | hi << 64, "
        "loops times (the write test, and every fill).",
    ),
    KernelSpec(
        "stream_check",
        ("ptr", "u64", "u64", "u64", "ptr"),
        "(buf, vecs, lo, hi, first_bad): atomicMin(first_bad, 4 * i) for each 16-byte vector "
        "i that is not the pattern (first_bad counts 32-bit words and starts at ~0).",
    ),
    KernelSpec(
        "stream_check_sum",
        ("ptr", "u64", "u64", "ptr"),
        "(partials, count, expected, first_bad): *first_bad = 0 unless the count doubles add "
        "up to expected (launch one thread).",
    ),
    *(spec for dt in DTYPES.values() for spec in _typed_specs(dt)),
)

SIMULATE: dict[str, Any] = {
    "stream_copy": sim_copy,
    "stream_write": sim_write,
    "stream_check": sim_check,
    "stream_check_sum": sim_check_sum,
}
for _dt in DTYPES.values():
    SIMULATE.update(_typed(_dt))


def _flat_specs() -> tuple[KernelSpec, ...]:
    """The "_flat" variants: same parameters and result as the kernel they are named after."""
    by_name = {spec.name: spec for spec in SPECS}
    out = []
    for name, spec in by_name.items():
        if name.rsplit("_", 1)[0] in FLAT or name in FLAT:
            out.append(KernelSpec(f"{name}_flat", spec.params, _flat_doc(spec)))
    return tuple(out)


def _flat_doc(spec: KernelSpec) -> str:
    if spec.name.startswith("stream_read"):
        return (
            "(a, vecs, partials, loops): the read over the pass-major (pass, piece) space: "
            "a piece is blockDim x STREAM_READ_FLAT_V vectors, and the block of each (pass, "
            "piece) sums its elements and writes the sum (a double) to partials[piece] "
            "(pieces doubles), loops passes; launch loops x pieces blocks "
            "(kernels.flat_launches, flat_piece)."
        )
    return (
        f"{spec.doc} Flat: one 16-byte vector per thread over the pass-major "
        "(pass, blockDim-vector piece) space; launch loops x pieces blocks "
        "(kernels.flat_launches)."
    )


FLAT_SPECS = _flat_specs()
SPECS = (*SPECS, *FLAT_SPECS)
for _spec in FLAT_SPECS:
    SIMULATE.setdefault(_spec.name, SIMULATE[_spec.name.removesuffix("_flat")])

#: The kernel module the STREAM testcases declare (``StreamTestcase.kernel_modules``).
MODULE = KernelModule(name=MODULE_NAME, source=source(), kernels=SPECS, simulate=SIMULATE)
