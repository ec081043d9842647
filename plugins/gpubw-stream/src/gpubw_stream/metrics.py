"""The arithmetic behind the notes: percent of nominal, the L2 knee, sectors of a strided read.

Pure functions of numbers and :class:`gpubw.DeviceInfo`, so they are tested without a device.
"""

from __future__ import annotations

from gpubw import DeviceInfo

#: DRAM moves whole 32-byte sectors: the granularity of a strided read's real traffic.
SECTOR_BYTES = 32


def percent_of_nominal(bandwidth: float | None, device: DeviceInfo) -> float | None:
    """``bandwidth`` (bytes/s, read + write) as a percentage of the device's nominal memory
    bandwidth (bus width x memory clock x 2, :attr:`gpubw.DeviceInfo.nominal_memory_bandwidth`;
    H200: 4815 GB/s, T4: 320 GB/s). None when either is unknown."""
    nominal = device.nominal_memory_bandwidth
    if bandwidth is None or nominal <= 0:
        return None
    return 100.0 * bandwidth / nominal


def l2_fits(working_set: int, device: DeviceInfo) -> bool:
    """Whether ``working_set`` bytes (every array the kernel touches) fit in the device's L2:
    below this knee the figure may be L2 bandwidth, not memory bandwidth."""
    return 0 < working_set <= device.l2_bytes


def sectors_touched(count: int, stride: int, itemsize: int) -> int:
    """32-byte sectors holding the elements 0, stride, 2*stride, ... (``count`` of them) of
    an array of ``itemsize``-byte elements starting on a sector boundary."""
    if count <= 0:
        return 0
    step = stride * itemsize
    if step >= SECTOR_BYTES:
        return count  # every element is in a sector of its own (elements never straddle)
    # consecutive elements are less than a sector apart: no sector between them is skipped
    return ((count - 1) * step) // SECTOR_BYTES + 1


def strided_traffic(count: int, stride: int, itemsize: int) -> tuple[int, int]:
    """(bytes read, bytes written) that the memory really moves for y[i] = x[i * stride] + 1,
    i < count: whole sectors of x touched, whole sectors of the contiguous y."""
    read = sectors_touched(count, stride, itemsize) * SECTOR_BYTES
    written = sectors_touched(count, 1, itemsize) * SECTOR_BYTES
    return read, written


def strided_count(nbytes: int, stride: int, itemsize: int) -> int:
    """Elements the strided read reads (and writes) from an ``nbytes`` array: x[::stride] of
    its whole elements (ceil(elements / stride))."""
    elements = nbytes // itemsize
    return -(-elements // stride) if elements else 0
