"""Copies from and to pageable host memory, timed as a program sees them.

The copy engine cannot read pageable memory directly: the driver stages it through pinned
buffers of its own, and ``cuMemcpyAsync`` returns only once the host side is done (a stream
sync comes before a copy from pageable memory, and a copy into it returns when complete). So
nvbandwidth's spin gate cannot hold these copies (the host would wait for the gate it has not
released yet): each sample records a start event, issues ``loops`` copies one after another
(the host taking part in each), records an end event and synchronises. The figure is the
counted bytes x loops / (end - start), as for pinned memory.

Kernels cannot reach pageable memory either, so its data are filled and checked by copies:
the pattern is written into a device twin by the fill kernel and copied into the pageable
buffer, or the pageable buffer is copied back into the twin and checked there, outside the
timing.
"""

from __future__ import annotations

from typing import Any

from gpubw.kernels.patterns import DST_SEED, SRC_SEED
from gpubw.measure.measurement import CellMeasurement, bytes_per_second
from gpubw.memory.buffers import Buffer, DeviceBuffer, PageableHostBuffer
from gpubw.memory.system import System
from gpubw.model.errors import VerificationError
from gpubw.model.options import WARMUP_ITERATIONS


def measure_pageable(
    system: System,
    pageable: PageableHostBuffer,
    device: DeviceBuffer,
    twin: DeviceBuffer,
    *,
    to_device: bool,
    loops: int,
) -> CellMeasurement:
    """``samples`` samples of ``loops`` copies ``pageable -> device`` (``to_device``) or
    ``device -> pageable``, issued by the device; ``twin`` (on the same device, as large) fills
    and checks the pageable side."""
    backend = system.backend
    options = system.options
    g = device.device
    assert g is not None
    system.load_kernels()
    src, dst = (pageable, device) if to_device else (device, pageable)
    nbytes = pageable.nbytes
    samples: list[float] = []
    with backend.stream(g) as stream, backend.event(g) as start, backend.event(g) as end:
        for _ in range(options.samples):
            _fill(system, stream, pageable, device, twin, to_device)
            for _ in range(WARMUP_ITERATIONS):
                backend.memcpy_async(dst.ptr, src.ptr, nbytes, stream)
            backend.record_event(start, stream)
            for _ in range(loops):
                backend.memcpy_async(dst.ptr, src.ptr, nbytes, stream)
            backend.record_event(end, stream)
            backend.synchronize(stream, options.gate_timeout_s + options.sync_timeout_s)
            if options.verify:
                _check(system, stream, pageable, device, twin, to_device)
            samples.append(bytes_per_second(nbytes * loops, backend.elapsed_seconds(start, end)))
    return CellMeasurement(
        counted_bytes=(nbytes,),
        loops=loops,
        pair_samples=(tuple(samples),),
        total_samples=(),
        statistic=options.statistic,
        pair_labels=(f"{src.label} -> {dst.label}",),
    )


def _fill(
    system: System,
    stream: Any,
    pageable: PageableHostBuffer,
    device: DeviceBuffer,
    twin: DeviceBuffer,
    to_device: bool,
) -> None:
    """The source holds the source pattern, the destination the other one (so a copy that
    did nothing cannot pass), outside the timing."""
    g = device.device
    assert g is not None
    n = pageable.nbytes // 4 * 4
    twin.fill(DST_SEED if not to_device else SRC_SEED, n, stream=stream, exec_device=g)
    system.backend.memcpy_async(pageable.ptr, twin.ptr, pageable.nbytes, stream)
    device.fill(DST_SEED if to_device else SRC_SEED, n, stream=stream, exec_device=g)
    system.backend.synchronize(stream, system.options.sync_timeout_s)


def _check(
    system: System,
    stream: Any,
    pageable: PageableHostBuffer,
    device: DeviceBuffer,
    twin: DeviceBuffer,
    to_device: bool,
) -> None:
    """The destination holds the source pattern (a pageable destination is copied back into
    the twin and checked there); VerificationError naming the copy otherwise."""
    g = device.device
    assert g is not None
    checked: Buffer = device
    if not to_device:
        system.backend.memcpy_async(twin.ptr, pageable.ptr, pageable.nbytes, stream)
        checked = twin
    n = pageable.nbytes // 4 * 4
    src, dst = (pageable, device) if to_device else (device, pageable)
    try:
        checked.verify(SRC_SEED, n, stream=stream, exec_device=g)
    except VerificationError as exc:
        raise VerificationError(
            f"{dst.label} after the copy {src.label} -> {dst.label} issued by device {g}",
            exc.offset,
        ) from None
