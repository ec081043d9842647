"""Initiators: *how* a copy is made. CopyEngine (cuMemcpyAsync), KernelCopy (SM kernel), TmaCopy
(TMA bulk copies), and the one-way SM kernels LocalRead and LocalWrite.

An initiator knows how many bytes one copy call moves (``counted_bytes``, the figure that
bandwidth is computed from), how many bytes are filled and checked (``checked_bytes``), how to
enqueue ``loops`` copies on a stream, and how to prepare and check the buffers. What it
prepares, enqueues and checks is one :class:`CopyJob`: the pair, its sizes, the executing
device and the stream.
"""

from __future__ import annotations

import abc
from typing import Any

import attrs

from gpubw.backend.base import MAX_GRID, DeviceInfo, ptr, u32, u64
from gpubw.kernels import ELEMENT_BYTES
from gpubw.kernels.patterns import DST_SEED, SRC_SEED
from gpubw.memory.buffers import Buffer, DeviceBuffer
from gpubw.memory.system import System
from gpubw.model.options import MIB

#: nvbandwidth's SM truncation applies to kernel copies of this size or more.
SM_TRUNCATION_THRESHOLD = 64 * MIB
#: nvbandwidth's striding kernel: 512 threads per block, one block per SM.
SM_TRUNCATION_THREADS = 512


def sm_truncated_bytes(nbytes: int, sm_count: int) -> int:
    """nvbandwidth's SM-copy size rule: below 64 MiB whole 16-byte elements; from 64 MiB on, a
    multiple of 16 x SMs x 512 bytes (16 x T x floor(E / T), T = SMs x 512, E = nbytes // 16)."""
    elements = nbytes // ELEMENT_BYTES
    if nbytes < SM_TRUNCATION_THRESHOLD:
        return elements * ELEMENT_BYTES
    threads = sm_count * SM_TRUNCATION_THREADS
    return ELEMENT_BYTES * threads * (elements // threads)


@attrs.frozen(kw_only=True)
class CopyJob:
    """One copy as an initiator sees it: ``src`` -> ``dst`` (``nbytes`` each), issued by
    ``exec_device`` on ``stream`` (a stream of that device's context); the first ``checked``
    bytes are filled before the copies and compared after them. ``system`` is the run's (its
    backend launches, its pool lends scratch). Fields are keyword-only, so that no call swaps
    the two sizes silently."""

    system: System
    src: Buffer
    dst: Buffer
    #: bytes one copy call moves (the buffers' size)
    nbytes: int
    #: bytes filled with the pattern and compared after the copy
    checked: int
    exec_device: DeviceInfo
    stream: Any


class Initiator(abc.ABC):
    """How a copy is made."""

    #: "CE", "SM" or "SM split-warp" (shown in reports)
    name: str = ""

    @abc.abstractmethod
    def counted_bytes(self, nbytes: int, exec_device: DeviceInfo) -> int:
        """Bytes one copy call of a ``nbytes`` pair is counted as moving."""

    def checked_bytes(self, nbytes: int, exec_device: DeviceInfo) -> int:
        """Bytes filled with the pattern and compared after the copy."""
        return nbytes

    @abc.abstractmethod
    def enqueue(self, job: CopyJob, *, loops: int) -> None:
        """Queue ``loops`` copies of the job's pair on its stream."""

    def prepare(self, job: CopyJob) -> None:
        """Fill the destination with one pattern and the source with the expected one."""
        stream, device = job.stream, job.exec_device.ordinal
        job.dst.fill(DST_SEED, job.checked, stream=stream, exec_device=device)
        job.src.fill(SRC_SEED, job.checked, stream=stream, exec_device=device)

    def enqueue_checks(self, job: CopyJob, *, first_slot: int) -> list[tuple[int, Buffer]]:
        """Queue the compares on the job's stream, the first in result slot ``first_slot``;
        return (slot, buffer) for each, to be checked after a sync."""
        stream, device = job.stream, job.exec_device.ordinal
        job.dst.enqueue_verify(
            SRC_SEED, job.checked, stream=stream, exec_device=device, slot=first_slot
        )
        return [(first_slot, job.dst)]


class CopyEngine(Initiator):
    """Copies made by the copy engines: ``loops`` separate cuMemcpyAsync calls."""

    name = "CE"

    def counted_bytes(self, nbytes: int, exec_device: DeviceInfo) -> int:
        return nbytes

    def enqueue(self, job: CopyJob, *, loops: int) -> None:
        memcpy_async = job.system.backend.memcpy_async
        for _ in range(loops):
            memcpy_async(job.dst.ptr, job.src.ptr, job.nbytes, job.stream)


#: Threads per block of the copy kernels (at most GPUBW_COPY_BLOCK in kernels/gpubw.cu).
COPY_BLOCK = 512
#: Resident blocks per SM the copy kernels are compiled for (GPUBW_COPY_MIN_BLOCKS: their
#: register budget guarantees this many 512-thread blocks fit on one SM).
COPY_BLOCKS_PER_SM = 2


def copy_launch_shape(device: DeviceInfo, elements: int) -> tuple[int, int]:
    """Grid and block for gpubw's copy kernels (grid-stride, 8 independent 16-byte loads in
    flight per thread): exactly the blocks that are resident at once (COPY_BLOCKS_PER_SM per
    SM, so no block waits for a second wave), fewer when the copy has less than one element
    per thread, so that small copies still spread over as many SMs as they can use."""
    block = COPY_BLOCK
    grid = min(device.sm_count * COPY_BLOCKS_PER_SM, max(1, -(-elements // block)))
    return grid, block


#: Threads per block of gpubw_copy_flat (device-local SM copies beyond L2), one 16-byte element
#: per thread: a 128-thread piece moves 4 KiB (4,294-4,318 GB/s read + write at 4 GiB on an
#: H200, 256-thread blocks 4,233-4,274; benchmarks/README.md).
FLAT_COPY_BLOCK = 128


def flat_copy_launches(elements: int, loops: int) -> list[tuple[int, int]]:
    """(grid, passes) of each launch of gpubw_copy_flat copying ``elements`` 16-byte elements
    ``loops`` times: one block per (pass, piece of FLAT_COPY_BLOCK elements), all ``loops``
    passes in as few launches as the grid limit allows (one, unless pieces x loops exceeds
    it), so there is no gap between passes. The passes add up to ``loops``. (Beyond
    MAX_GRID pieces - 4 TiB - a launch has MAX_GRID blocks, which the kernel's block-stride
    loop covers.)"""
    pieces = max(1, -(-elements // FLAT_COPY_BLOCK))
    per = max(1, min(loops, MAX_GRID // pieces))
    out = []
    left = loops
    while left > 0:
        n = min(per, left)
        out.append((min(pieces * n, MAX_GRID), n))
        left -= n
    return out


def flat_copy_applies(src: Buffer, dst: Buffer, elements: int, exec_device: DeviceInfo) -> bool:
    """Whether a KernelCopy uses gpubw_copy_flat: a copy between two buffers in the executing
    device's own memory (not host, peer or shared/multicast memory: over links the resident
    kernel's 8 loads in flight per thread cover the latency) whose working set (source and
    destination, ``2 x elements x 16`` bytes) does not fit in the device's L2. Within L2 the
    resident kernel stays: a one-shot grid's block starts cap it there (benchmarks/README.md:
    16 MiB 5,890 vs 9,694 GB/s resident), and beyond L2 the flat grid is faster on HBM."""
    return (
        type(src) is DeviceBuffer
        and type(dst) is DeviceBuffer
        and src.device == dst.device == exec_device.ordinal
        and 2 * elements * ELEMENT_BYTES > exec_device.l2_bytes
    )


def one_way_flat_applies(buf: Buffer, elements: int, exec_device: DeviceInfo) -> bool:
    """Whether LocalRead / LocalWrite use their flat kernels (gpubw_read_flat,
    gpubw_write_flat): ``buf`` is in the executing device's own memory and its
    ``elements x 16`` bytes do not fit in the device's L2 (as :func:`flat_copy_applies`; on an
    H100 at 4 GiB the flat grid reads 3.6 % and writes 2.9 % faster than the resident one)."""
    return (
        type(buf) is DeviceBuffer
        and buf.device == exec_device.ordinal
        and elements * ELEMENT_BYTES > exec_device.l2_bytes
    )


#: Threads per block of the split-warp kernel (its __launch_bounds__ in kernels/gpubw.cu).
SPLIT_WARP_BLOCK = 1024


def split_warp_launch_shape(device: DeviceInfo, elements: int) -> tuple[int, int]:
    """One thread per 16-byte element (each thread copies its element ``loops`` times in a
    row, as nvbandwidth's split-warp kernel; see gpubw_copy_split_warp)."""
    return max(1, min(2**31 - 1, -(-elements // SPLIT_WARP_BLOCK))), SPLIT_WARP_BLOCK


class KernelCopy(Initiator):
    """Copies made by a copy kernel on the executing device's SMs (one launch loops)."""

    name = "SM"
    kernel = "gpubw_copy"

    def launch_shape(self, device: DeviceInfo, elements: int) -> tuple[int, int]:
        return copy_launch_shape(device, elements)

    def counted_bytes(self, nbytes: int, exec_device: DeviceInfo) -> int:
        return sm_truncated_bytes(nbytes, exec_device.sm_count)

    def checked_bytes(self, nbytes: int, exec_device: DeviceInfo) -> int:
        return sm_truncated_bytes(nbytes, exec_device.sm_count)

    def copied_elements(self, nbytes: int, exec_device: DeviceInfo) -> int:
        return sm_truncated_bytes(nbytes, exec_device.sm_count) // ELEMENT_BYTES

    def enqueue(self, job: CopyJob, *, loops: int) -> None:
        device, launch = job.exec_device, job.system.backend.launch
        elements = self.copied_elements(job.nbytes, device)
        if elements == 0:
            return
        args = (ptr(job.dst.ptr), ptr(job.src.ptr), u64(elements))
        if self.kernel == "gpubw_copy" and flat_copy_applies(job.src, job.dst, elements, device):
            for grid, passes in flat_copy_launches(elements, loops):
                launch("gpubw_copy_flat", grid, FLAT_COPY_BLOCK, (*args, u32(passes)), job.stream)
            return
        grid, block = self.launch_shape(device, elements)
        launch(self.kernel, grid, block, (*args, u32(loops)), job.stream)


class SplitWarpCopy(KernelCopy):
    """One kernel moving half the 16-byte elements each way between the pair's buffers
    (odd 32-element groups source->destination, even groups destination->source).

    Counted bytes are half the buffer: the bytes that travel in each direction, which is
    nvbandwidth's figure (it divides bytes/time by 2)."""

    name = "SM split-warp"
    kernel = "gpubw_copy_split_warp"

    def launch_shape(self, device: DeviceInfo, elements: int) -> tuple[int, int]:
        return split_warp_launch_shape(device, elements)

    def copied_elements(self, nbytes: int, exec_device: DeviceInfo) -> int:
        return nbytes // ELEMENT_BYTES  # not SM-truncated, as nvbandwidth

    def counted_bytes(self, nbytes: int, exec_device: DeviceInfo) -> int:
        return (nbytes // ELEMENT_BYTES) * ELEMENT_BYTES // 2

    def checked_bytes(self, nbytes: int, exec_device: DeviceInfo) -> int:
        return (nbytes // ELEMENT_BYTES) * ELEMENT_BYTES

    def prepare(self, job: CopyJob) -> None:
        stream, device = job.stream, job.exec_device.ordinal
        job.dst.fill(SRC_SEED, job.checked, stream=stream, exec_device=device)
        job.src.fill(SRC_SEED, job.checked, stream=stream, exec_device=device)
        job.dst.clear_warp_parity(job.checked, 1, stream=stream)
        job.src.clear_warp_parity(job.checked, 0, stream=stream)

    def enqueue_checks(self, job: CopyJob, *, first_slot: int) -> list[tuple[int, Buffer]]:
        stream, device = job.stream, job.exec_device.ordinal
        job.dst.enqueue_verify(
            SRC_SEED, job.checked, stream=stream, exec_device=device, slot=first_slot
        )
        job.src.enqueue_verify(
            SRC_SEED, job.checked, stream=stream, exec_device=device, slot=first_slot + 1
        )
        return [(first_slot, job.dst), (first_slot + 1, job.src)]


#: The oldest compute capability with TMA (the Tensor Memory Accelerator's bulk copies).
TMA_MIN_CAPABILITY = (9, 0)
#: Threads per block of gpubw_copy_tma (one of them issues the bulk copies) and its blocks
#: per SM: each block keeps GPUBW_TMA_STAGES x GPUBW_TMA_CHUNK bytes (32 KiB) of shared
#: memory in flight, so 4 blocks keep 128 KiB per SM moving.
TMA_BLOCK = 32
TMA_BLOCKS_PER_SM = 4
#: Bytes one block moves per bulk copy (GPUBW_TMA_CHUNK in kernels/gpubw.cu).
TMA_CHUNK = 8192


def has_tma(device: DeviceInfo) -> bool:
    """Whether ``device`` can make TMA bulk copies (compute capability 9.0 or newer)."""
    return tuple(device.compute_capability) >= TMA_MIN_CAPABILITY


def tma_launch_shape(device: DeviceInfo, elements: int) -> tuple[int, int]:
    """Grid and block of gpubw_copy_tma: TMA_BLOCKS_PER_SM blocks per SM, fewer when the
    copy has fewer chunks (each block copies whole chunks of TMA_CHUNK bytes)."""
    chunks = max(1, -(-elements * ELEMENT_BYTES // TMA_CHUNK))
    return min(device.sm_count * TMA_BLOCKS_PER_SM, chunks), TMA_BLOCK


class TmaCopy(KernelCopy):
    """Copies made by the executing device's TMA: bulk asynchronous copies global -> shared ->
    global (gpubw_copy_tma, sm_90+), several chunks in flight per block. Moves (and counts)
    the whole 16-byte elements of the buffer: the SM truncation rule is the striding kernel's,
    not TMA's."""

    name = "TMA"
    kernel = "gpubw_copy_tma"

    def launch_shape(self, device: DeviceInfo, elements: int) -> tuple[int, int]:
        return tma_launch_shape(device, elements)

    def copied_elements(self, nbytes: int, exec_device: DeviceInfo) -> int:
        return nbytes // ELEMENT_BYTES

    def counted_bytes(self, nbytes: int, exec_device: DeviceInfo) -> int:
        return (nbytes // ELEMENT_BYTES) * ELEMENT_BYTES

    def checked_bytes(self, nbytes: int, exec_device: DeviceInfo) -> int:
        return (nbytes // ELEMENT_BYTES) * ELEMENT_BYTES


#: What gpubw_write stores (every 32-bit word), and what its check expects.
WRITE_VALUE = 0x5A5AA5A5


class LocalRead(KernelCopy):
    """A read-only kernel over the pair's source (gpubw_read): counted bytes are the bytes
    read (SM-truncated, as the SM copies). The source is filled with the source pattern and
    checked after the reads (nothing may have changed it); the destination is not touched."""

    name = "SM read"
    kernel = "gpubw_read"

    def enqueue(self, job: CopyJob, *, loops: int) -> None:
        elements = self.copied_elements(job.nbytes, job.exec_device)
        if elements == 0:
            return
        launch = job.system.backend.launch
        if one_way_flat_applies(job.src, elements, job.exec_device):
            for grid, passes in flat_copy_launches(elements, loops):
                args = (ptr(job.src.ptr), u64(elements), u32(passes), ptr(0))
                launch("gpubw_read_flat", grid, FLAT_COPY_BLOCK, args, job.stream)
            return
        grid, block = self.launch_shape(job.exec_device, elements)
        launch(
            self.kernel,
            grid,
            block,
            (ptr(job.src.ptr), u64(elements), u32(loops), ptr(0)),
            job.stream,
        )

    def prepare(self, job: CopyJob) -> None:
        job.src.fill(SRC_SEED, job.checked, stream=job.stream, exec_device=job.exec_device.ordinal)

    def enqueue_checks(self, job: CopyJob, *, first_slot: int) -> list[tuple[int, Buffer]]:
        stream, device = job.stream, job.exec_device.ordinal
        job.src.enqueue_verify(
            SRC_SEED, job.checked, stream=stream, exec_device=device, slot=first_slot
        )
        return [(first_slot, job.src)]


class LocalWrite(KernelCopy):
    """A write-only kernel over the pair's destination (gpubw_write, every word
    WRITE_VALUE): counted bytes are the bytes written (SM-truncated, as the SM copies). The
    destination is filled with the destination pattern first and checked for WRITE_VALUE
    after the writes; the source is not touched."""

    name = "SM write"
    kernel = "gpubw_write"

    def enqueue(self, job: CopyJob, *, loops: int) -> None:
        elements = self.copied_elements(job.nbytes, job.exec_device)
        if elements == 0:
            return
        launch = job.system.backend.launch
        if one_way_flat_applies(job.dst, elements, job.exec_device):
            for grid, passes in flat_copy_launches(elements, loops):
                args = (ptr(job.dst.ptr), u64(elements), u32(WRITE_VALUE), u32(passes))
                launch("gpubw_write_flat", grid, FLAT_COPY_BLOCK, args, job.stream)
            return
        grid, block = self.launch_shape(job.exec_device, elements)
        args = (ptr(job.dst.ptr), u64(elements), u32(WRITE_VALUE), u32(loops))
        launch(self.kernel, grid, block, args, job.stream)

    def prepare(self, job: CopyJob) -> None:
        job.dst.fill(DST_SEED, job.checked, stream=job.stream, exec_device=job.exec_device.ordinal)

    def enqueue_checks(self, job: CopyJob, *, first_slot: int) -> list[tuple[int, Buffer]]:
        words = job.checked // 4
        if words:
            job.dst.enqueue_check(
                "gpubw_verify_value",
                *copy_launch_shape(job.exec_device, max(1, words // 4)),
                (ptr(job.dst.ptr), u64(words), u32(WRITE_VALUE)),
                stream=job.stream,
                exec_device=job.exec_device.ordinal,
                slot=first_slot,
            )
        return [(first_slot, job.dst)]


CE = CopyEngine()
SM = KernelCopy()
SPLIT_WARP = SplitWarpCopy()
TMA = TmaCopy()
SM_READ = LocalRead()
SM_WRITE = LocalWrite()
