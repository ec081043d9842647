"""Memory latency by pointer chasing, as nvbandwidth measures it.

A 2 MiB ring of 8-byte nodes (node i holds the address of node (i + 16) mod 262144, a 128-byte
stride) is walked by the ``gpubw_pointer_chase`` kernel. The kernel is launched with grid =
device 0's SM count (whichever device runs it), block 1, once per target block 0 .. SMs-1; only
the target block walks, floor(1,000,000 / SMs) steps from node 0. Each launch is bracketed by
events on the measuring stream and synchronised. The latency is the sum of the launch times
divided by exactly 1,000,000 (nvbandwidth's divisor, although only SMs x floor(10^6 / SMs)
dereferences happen); there is no warm-up and no statistic over samples (``-i``, ``-m`` and
the loop count do not apply).

One difference, measured (issue 36 item 3, benchmarks/README.md): nvbandwidth records the
start event and then calls the launch, so each launch's time includes the host's launch call
(a few microseconds of C++ per ~9 ms launch). gpubw's launch call from Python took longer and
read 0.6 % higher on an H100. So gpubw queues the start event, the kernel and the end event
behind the spin gate and then opens it: the events bracket the kernel's own time, the launch
call is outside, and what is divided by 10^6 is the chase alone.
"""

from __future__ import annotations

import sys
from typing import Any

import attrs

from gpubw.backend.base import ptr, u32, u64
from gpubw.memory.buffers import Buffer, DeviceBuffer, HostBuffer
from gpubw.memory.system import System
from gpubw.model.errors import GateTimeoutError
from gpubw.model.options import MIB

#: The ring's size; nvbandwidth's latency tests ignore ``-b``.
RING_BYTES = 2 * MIB
NODE_BYTES = 8
#: Node i points to node i + STRIDE_NODES (128 bytes on).
STRIDE_NODES = 16
#: nvbandwidth's access count and divisor.
ACCESSES = 1_000_000


def ring_bytes(base: int, nbytes: int = RING_BYTES) -> bytes:
    """The ring's contents for a buffer at address ``base``: node i = base + 8 x ((i + 16) mod
    nodes), little-endian 64-bit. Built with the standard library's ``array`` (~5 ms for the
    2 MiB ring): importing numpy only for this cost 65 ms of a default run, 0.2 s where numpy
    ships without byte-compiled files."""
    import array

    nodes = nbytes // NODE_BYTES
    if nodes == 0:
        return b""
    addresses = array.array("Q", range(base, base + nodes * NODE_BYTES, NODE_BYTES))
    shift = STRIDE_NODES % nodes
    ring = addresses[shift:] + addresses[:shift]  # node i holds the address of node i + 16
    if sys.byteorder != "little":
        ring.byteswap()
    return ring.tobytes()


def write_host_ring(buf: HostBuffer) -> None:
    """Write the ring straight into pinned host memory (nvbandwidth's #32)."""
    with buf.pool.trace.span("pattern_fill"):
        buf.write(ring_bytes(buf.ptr, buf.nbytes))


def write_device_ring(system: System, buf: DeviceBuffer) -> None:
    """Write the ring of device addresses into ``buf``: fill a pinned staging buffer on the host
    and copy it with one memcpy (nvbandwidth makes one tiny copy per node; same contents)."""
    assert buf.device is not None
    backend = system.backend
    with (
        HostBuffer.allocate(system, buf.device, buf.nbytes) as staging,
        system.trace.span("pattern_fill"),
    ):
        staging.write(ring_bytes(buf.ptr, buf.nbytes))
        with backend.stream(buf.device) as stream:
            backend.memcpy_async(buf.ptr, staging.ptr, buf.nbytes, stream)
            backend.synchronize(stream, system.options.sync_timeout_s)


@attrs.frozen
class LatencyMeasurement:
    """One pointer-chase measurement."""

    #: seconds per access: sum of the launch times / ACCESSES
    seconds: float
    #: per launch: its time x launches / ACCESSES (their mean is ``seconds``)
    launch_samples: tuple[float, ...]
    #: launches (device 0's SM count) and dereferences per launch
    launches: int
    steps: int


#: The pointer-chase kernels: each dereference a load (SM), or a TMA bulk copy into shared
#: memory (TMA; the ring's nodes visited are 128-byte aligned, as bulk copies need).
CHASE_KERNELS = {"SM": "gpubw_pointer_chase", "TMA": "gpubw_pointer_chase_tma"}


def _gated_launch(
    system: System,
    stream: object,
    events: tuple[object, object],
    kernel: str,
    args: tuple[Any, ...],
) -> float:
    """One chase launch bracketed by ``events`` behind the spin gate: the start event, the
    kernel and the end event are all queued before the gate opens, so the time between them
    is the kernel's own (the host's launch call is not in it). Seconds between the events."""
    backend = system.backend
    gate, options = system.gate, system.options
    start, end = events
    gate.close()
    gate.enqueue_wait(stream, options.gate_timeout_s)
    backend.record_event(start, stream)
    backend.launch(kernel, system.devices[0].sm_count, 1, args, stream)
    backend.record_event(end, stream)
    gate.open()
    backend.synchronize(stream, options.gate_timeout_s + options.sync_timeout_s)
    if gate.timed_out():
        raise GateTimeoutError(
            f"the spin gate timed out after {options.gate_timeout_s:g} s before a latency "
            "launch was queued; the launch would have been timed with its queuing, so the "
            "measurement is discarded"
        )
    return backend.elapsed_seconds(start, end)


def pointer_chase(
    system: System, exec_device: int, ring: Buffer, how: str = "SM"
) -> LatencyMeasurement:
    """Walk ``ring`` (from its node 0) with kernels on ``exec_device``; nvbandwidth's recipe.
    ``how`` picks the dereference: "SM" (a load) or "TMA" (a bulk copy), :data:`CHASE_KERNELS`."""
    kernel = CHASE_KERNELS[how]
    backend = system.backend
    sms = system.devices[0].sm_count
    steps = ACCESSES // sms
    system.load_kernels()
    elapsed: list[float] = []
    # Every handle is destroyed also when a launch, a sync or another destroy fails; the
    # first error is the one that propagates.
    with (
        DeviceBuffer.allocate(system, exec_device, NODE_BYTES) as sink,
        backend.stream(exec_device) as stream,
        backend.event(exec_device) as start,
        backend.event(exec_device) as end,
        system.trace.span("timed"),  # every launch is timed, start to end event
    ):
        for target in range(sms):
            args = (ptr(ring.ptr), u64(steps), u32(target), ptr(sink.ptr))
            elapsed.append(_gated_launch(system, stream, (start, end), kernel, args))
    return LatencyMeasurement(
        seconds=sum(elapsed) / ACCESSES,
        launch_samples=tuple(e * sms / ACCESSES for e in elapsed),
        launches=sms,
        steps=steps,
    )
