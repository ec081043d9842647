"""Memory latency by pointer chasing, as nvbandwidth measures it.

A 2 MiB ring of 8-byte nodes (node i holds the address of node (i + 16) mod 262144, a 128-byte
stride) is walked by the ``gpubw_pointer_chase`` kernel. The kernel is launched with grid =
device 0's SM count (whichever device runs it), block 1, once per target block 0 .. SMs-1; only
the target block walks, floor(1,000,000 / SMs) steps from node 0. Each launch is bracketed by
events on the measuring stream and synchronised. The latency is the sum of the launch times
divided by exactly 1,000,000 (nvbandwidth's divisor, although only SMs x floor(10^6 / SMs)
dereferences happen); launch overhead is included; there is no warm-up and no statistic over
samples (``-i``, ``-m`` and the loop count do not apply).
"""

from __future__ import annotations

import sys

import attrs

from gpubw.backend.base import ptr, u32, u64
from gpubw.memory.buffers import Buffer, DeviceBuffer, HostBuffer
from gpubw.memory.system import System
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
    buf.write(ring_bytes(buf.ptr, buf.nbytes))


def write_device_ring(system: System, buf: DeviceBuffer) -> None:
    """Write the ring of device addresses into ``buf``: fill a pinned staging buffer on the host
    and copy it with one memcpy (nvbandwidth makes one tiny copy per node; same contents)."""
    assert buf.device is not None
    backend = system.backend
    with HostBuffer.allocate(system, buf.device, buf.nbytes) as staging:
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
    ):
        for target in range(sms):
            backend.record_event(start, stream)
            backend.launch(
                kernel,
                sms,
                1,
                (ptr(ring.ptr), u64(steps), u32(target), ptr(sink.ptr)),
                stream,
            )
            backend.record_event(end, stream)
            backend.synchronize(stream, system.options.sync_timeout_s)
            elapsed.append(backend.elapsed_seconds(start, end))
    return LatencyMeasurement(
        seconds=sum(elapsed) / ACCESSES,
        launch_samples=tuple(e * sms / ACCESSES for e in elapsed),
        launches=sms,
        steps=steps,
    )
