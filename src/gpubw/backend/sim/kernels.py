"""Kernel emulation for the simulated backend: what each kernel does to memory and how long
it takes, as stream operations of :mod:`gpubw.backend.sim.engine`.

:data:`EMULATIONS` maps each built-in kernel's name (:data:`gpubw.kernels.KERNELS`) to the
function that builds its operation from the launch and the kernel's argument values. A plugin
kernel (:mod:`gpubw.kernels.modules`) runs through its module's ``simulate`` function, which
sees the launch as a :class:`gpubw.kernels.modules.SimulatedLaunch`
(:mod:`gpubw.backend.sim.plugin_kernels`, cut from here along that seam). Copies made with
``cuMemcpyAsync`` are built here too (:func:`memcpy_op`).
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

from gpubw.backend.sim.content import ZERO, Pattern, owned
from gpubw.backend.sim.engine import Engine, Op, Stream
from gpubw.backend.sim.faults import FaultInjector, corrupt_word
from gpubw.backend.sim.memory import Alloc, Memory
from gpubw.backend.sim.model import SimSystem, path, single_rate
from gpubw.backend.sim.rates import Flow
from gpubw.kernels import ELEMENT_BYTES, KERNELS, PATTERN_WORDS
from gpubw.model.errors import SimulationError

#: copies smaller than this are control traffic (a rank gate's flag word, a result slot):
#: no rate jitter is drawn for them, so the random stream the measured copies draw from does
#: not depend on how the protocol around them signals
MEASURED_MIN = 4096


@attrs.frozen
class Launch:
    """One launch being emulated: the parts of the simulated system it works on, its stream,
    the host time it was submitted at and its geometry."""

    model: SimSystem
    memory: Memory
    engine: Engine
    injector: FaultInjector
    stream: Stream
    now: float
    grid: int = 1
    block: int = 1

    def kernel_op(self, name: str, duration: float = 0.0) -> Op:
        """An operation of fixed length: the launch overhead plus ``duration``."""
        op = Op("fixed", self.now, name)
        op.duration = self.model.overheads.kernel_launch + duration
        return op

    def maybe_corrupt(self, alloc: Alloc, off: int, nbytes: int) -> None:
        """A measured copy just wrote [off, +nbytes) of ``alloc``: corrupt it if injected."""
        rel = self.injector.corruption_offset(nbytes)
        if rel is None:
            return
        pos = off + rel
        current = bytes(self.memory.read(alloc, pos, 4))
        self.memory.poke_word(alloc, pos, corrupt_word(current))


Emulation = Callable[..., Op]


# -- copies ---------------------------------------------------------------------------------
def memcpy_op(c: Launch, dst: int, src: int, nbytes: int) -> Op:
    """A copy engine copy of ``nbytes`` (> 0) from ``src`` to ``dst``; the op also makes the
    same copy again when it is queued right behind itself (:func:`repeat_copy`)."""
    memory = c.memory
    d_alloc, d_off = memory.location(dst, nbytes, "cuMemcpyAsync")
    s_alloc, s_off = memory.location(src, nbytes, "cuMemcpyAsync")
    op = Op("xfer", c.now, "memcpy")
    op.overhead = c.model.overheads.memcpy
    jit = c.engine.jitter() if nbytes >= MEASURED_MIN else 1.0
    staged = _staged(c, s_alloc, d_alloc)
    if d_alloc.members is not None:

        def refill(jitter: float) -> list[Flow]:
            return [multicast_flow(c, s_alloc.device, d_alloc, nbytes, "ce", jitter)]
    else:
        res, peak = path(c.model, s_alloc.device, d_alloc.device, "ce", staged)
        peak *= rate_factor(c, res, s_alloc, d_alloc)

        def refill(jitter: float) -> list[Flow]:
            return [Flow(res, peak, nbytes, jitter)]

    op.flows = refill(jit)
    measured = c.stream.gated and nbytes >= MEASURED_MIN
    if c.model.throttle is None:  # else the rate depends on the time of the call

        def again(dst_: int, src_: int, nbytes_: int) -> bool:
            return (
                dst_ == dst
                and src_ == src
                and nbytes_ == nbytes
                and not d_alloc.freed
                and not s_alloc.freed
                and _staged(c, s_alloc, d_alloc) == staged
            )

        op.again, op.refill, op.repeats = again, refill, deque()

    def effect() -> None:
        memory.check_live(d_alloc, s_alloc)
        for target in stored_to(d_alloc):
            memory.copy(target, d_off, s_alloc, s_off, nbytes)
        if measured:
            c.maybe_corrupt(d_alloc, d_off, nbytes)

    op.effect = effect
    return op


def _staged(c: Launch, s_alloc: Alloc, d_alloc: Alloc) -> bool:
    """Whether a copy between two devices goes through host memory: no peer link, or peer
    access neither enabled nor given by a mapping to the copying stream's device."""
    if d_alloc.device is None or s_alloc.device is None:
        return False
    a, b = s_alloc.device, d_alloc.device
    peer_enabled = c.memory.peer_enabled
    return a != b and not (
        c.model.peer_rate(a, b) is not None
        and (
            (a, b) in peer_enabled
            or (b, a) in peer_enabled
            or c.stream.device in d_alloc.mapped_by | s_alloc.mapped_by
        )
    )


def repeat_copy(engine: Engine, s: Stream, dst: int, src: int, nbytes: int, now: float) -> bool:
    """Queue a copy engine copy made at ``now`` as one more of the same copy, if the last
    op on ``s`` is that copy (the same arguments, buffers and path) and has work left to
    queue behind (not ended): its rate jitter is drawn now, as :func:`memcpy_op` draws it.
    Whether it was queued so."""
    last = s.queue[-1] if s.queue else s.cur
    if last is None or last.again is None or last.done or not last.again(dst, src, nbytes):
        return False
    assert last.repeats is not None
    last.repeats.append((now, engine.jitter() if nbytes >= MEASURED_MIN else 1.0))
    return True


def _copy_kernel(
    c: Launch, dst: int, src: int, elements: int, loops: int, split: bool, name: str = ""
) -> Op:
    memory = c.memory
    device = c.stream.device
    nbytes = elements * ELEMENT_BYTES
    op = Op("xfer", c.now, name or ("gpubw_copy_split_warp" if split else "gpubw_copy"))
    op.overhead = c.model.overheads.kernel_launch
    src_loc, dst_loc = memory.loc(src), memory.loc(dst)
    jit = c.engine.jitter()
    if split:
        odd_elems = (elements // 64) * 32 + max(0, elements % 64 - 32)
        even_elems = elements - odd_elems
        parts = [(src_loc, dst_loc, odd_elems), (dst_loc, src_loc, even_elems)]
    else:
        parts = [(src_loc, dst_loc, elements)]
    found = memory.find(dst, 1)
    mc = found[0] if found is not None and found[0].members is not None else None
    if mc is not None and not split:
        op.flows.append(multicast_flow(c, src_loc, mc, elements * ELEMENT_BYTES * loops, "sm", jit))
    else:
        ends = (memory.find(src, 1), found)
        s_alloc, d_alloc = (None if e is None else e[0] for e in ends)
        for a, b, count in parts:
            res, peak = path(c.model, a, b, "tma" if name == "gpubw_copy_tma" else "sm", False)
            peak *= rate_factor(c, res, s_alloc, d_alloc)
            op.flows.append(Flow(res, peak, count * ELEMENT_BYTES * loops, jit, a != device))
    measured = c.stream.gated and nbytes >= MEASURED_MIN

    def effect() -> None:
        if nbytes == 0 or loops == 0:
            return
        d_alloc, d_off = memory.device_view(device, dst, nbytes)
        s_alloc, s_off = memory.device_view(device, src, nbytes)
        if split:
            memory.copy(d_alloc, d_off, s_alloc, s_off, nbytes, parity=1)
            memory.copy(s_alloc, s_off, d_alloc, d_off, nbytes, parity=0)
        else:
            for target in stored_to(d_alloc):
                memory.copy(target, d_off, s_alloc, s_off, nbytes)
        if measured:
            c.maybe_corrupt(d_alloc, d_off, nbytes)

    op.effect = effect
    return op


def rate_factor(c: Launch, resources: Any, src: Alloc | None, dst: Alloc | None) -> float:
    """The share of its path's peak a copy between ``src`` and ``dst`` gets: pageable host
    memory (the driver stages it), host memory on another NUMA node than the GPU's, a GPU
    held down (the model's throttle, once its moment has passed)."""
    model = c.model
    factor = 1.0
    for host, other in ((src, dst), (dst, src)):
        if host is None or host.device is not None:
            continue
        if host.pageable:
            factor *= model.pageable_factor
        gpu = None if other is None else other.device
        gpu_node = None if gpu is None else model.devices[gpu].numa_node
        if host.numa_node is not None and gpu_node is not None and host.numa_node != gpu_node:
            factor *= model.remote_numa_factor
    if model.throttle is not None:
        factor *= model.throttle.factor_for(resources, c.now)
    return factor


def stored_to(alloc: Alloc) -> list[Alloc]:
    """Where a store to ``alloc`` lands: itself, and for a multicast mapping every member's
    physical memory too."""
    return [alloc] if alloc.members is None else [alloc, *alloc.members]


def multicast_flow(
    c: Launch, src: int | None, mc: Alloc, nbytes: int, engine: str, jitter: float
) -> Flow:
    """Stores from ``src``'s memory to a multicast mapping: one send from the issuing device
    (the switch replicates them), one receive per member device."""
    device = c.stream.device
    members = sorted({m.device for m in mc.members or () if m.device is not None})
    resources: list[Any] = [("tx", device)] + [("rx", m) for m in members if m != device]
    if src is not None and src == device:
        resources.append(("mem", device))
    peak = c.model.multicast_rate
    if peak is None:
        rates = [c.model.peer_rate(device, m) for m in members if m != device]
        known = [r.of(engine) for r in rates if r is not None]
        peak = min(known) if known else c.model.local_copy.of(engine)
    return Flow(tuple(resources), peak, nbytes, jitter)


def copy(c: Launch, dst: int, src: int, elements: int, loops: int) -> Op:
    return _copy_kernel(c, dst, src, elements, loops, split=False)


def copy_flat(c: Launch, dst: int, src: int, elements: int, loops: int) -> Op:
    """gpubw_copy_flat: the same bytes as gpubw_copy (the model times a copy by its traffic,
    not by its launch shape), whatever the grid; a plan of several launches is several ops."""
    return _copy_kernel(c, dst, src, elements, loops, split=False, name="gpubw_copy_flat")


def copy_split_warp(c: Launch, dst: int, src: int, elements: int, loops: int) -> Op:
    return _copy_kernel(c, dst, src, elements, loops, split=True)


def copy_tma(c: Launch, dst: int, src: int, elements: int, loops: int) -> Op:
    """gpubw_copy_tma: gpubw_copy's bytes at the SM rates (inside one device at the model's
    ``local_tma`` if set); below compute capability 9.0 the real kernel traps, so here too."""
    needs_tma(c, "gpubw_copy_tma")
    return _copy_kernel(c, dst, src, elements, loops, split=False, name="gpubw_copy_tma")


def needs_tma(c: Launch, kernel: str) -> None:
    """SimulationError where the launching device has no TMA (compute capability < 9.0)."""
    cc = c.model.devices[c.stream.device].compute_capability
    if tuple(cc) < (9, 0):
        raise SimulationError(
            f"{kernel} needs TMA (compute capability 9.0 or newer); device "
            f"{c.stream.device} has {cc[0]}.{cc[1]}"
        )


def one_way_op(c: Launch, name: str, pointer: int, nbytes: int, reads: bool) -> Op:
    """A kernel that only reads (``reads``) or only writes ``nbytes`` at ``pointer``: the
    device's own memory serves one direction at twice its copy rate (a copy counts each byte
    once but reads and writes it), as a plugin kernel's traffic (PluginLaunch.seconds)."""
    device = c.stream.device
    where = c.memory.loc(pointer)
    op = Op("xfer", c.now, name)
    op.overhead = c.model.overheads.kernel_launch
    alloc = c.memory.find(pointer, 1)
    ends = (alloc[0] if alloc else None, None) if reads else (None, alloc[0] if alloc else None)
    if where == device:
        res: tuple[Any, ...] = (("mem", device),)
        peak = (c.model.local_read if reads else c.model.local_write) or 2 * c.model.local_copy.sm
    else:
        res, peak = (
            path(c.model, where, device, "sm", False)
            if reads
            else path(c.model, device, where, "sm", False)
        )
    peak *= rate_factor(c, res, *ends)
    op.flows = [Flow(res, peak, nbytes, c.engine.jitter(), reads and where != device)]
    return op


def read(c: Launch, src: int, elements: int, loops: int, sink: int) -> Op:
    """gpubw_read: reads only; its sink stays untouched (the sentinel never matches here)."""
    return one_way_op(c, "gpubw_read", src, elements * ELEMENT_BYTES * loops, reads=True)


def write(c: Launch, dst: int, elements: int, value: int, loops: int) -> Op:
    """gpubw_write: every word of the elements = value (symbolically for large buffers)."""
    memory = c.memory
    nbytes = elements * ELEMENT_BYTES
    op = one_way_op(c, "gpubw_write", dst, nbytes * loops, reads=False)
    measured = c.stream.gated and nbytes >= MEASURED_MIN

    def effect() -> None:
        if nbytes == 0 or loops == 0:
            return
        alloc, off = memory.device_view(c.stream.device, dst, nbytes)
        if alloc.data is not None:
            word = int(value).to_bytes(4, "little")
            memory.write(alloc, off, np.frombuffer(word * (nbytes // 4), dtype=np.uint8))
        else:
            assert alloc.sym is not None
            alloc.generation += 1
            for cls in (0, 1):
                alloc.sym.cls[cls].assign(off, off + nbytes, Pattern(memory.constant_key(value), 0))
        if measured:
            c.maybe_corrupt(alloc, off, nbytes)

    op.effect = effect
    return op


def read_flat(c: Launch, src: int, elements: int, loops: int, sink: int) -> Op:
    """gpubw_read_flat: gpubw_read's bytes (the model times a kernel by its traffic, not by
    its grid)."""
    return read(c, src, elements, loops, sink)


def write_flat(c: Launch, dst: int, elements: int, value: int, loops: int) -> Op:
    """gpubw_write_flat: gpubw_write's bytes and effect."""
    return write(c, dst, elements, value, loops)


def verify_value(c: Launch, buf: int, words: int, value: int, first_bad: int) -> Op:
    """gpubw_verify_value: the first word that is not ``value`` lowers ``*first_bad``."""
    memory = c.memory
    device = c.stream.device
    nbytes = words * 4
    op = c.kernel_op("gpubw_verify_value", nbytes / single_rate(c.model, memory.loc(buf), device))

    def effect() -> None:
        if words == 0:
            return
        r_alloc, r_off = memory.device_view(device, first_bad, 8)
        b_alloc, b_off = memory.device_view(device, buf, nbytes)
        key = memory.constant_key(value)
        if b_alloc.data is not None:
            actual = memory.read(b_alloc, b_off, nbytes)
            expected = np.frombuffer(int(value).to_bytes(4, "little") * words, dtype=np.uint8)
            diff = np.flatnonzero(actual != expected)
            bad = int(diff[0]) if diff.size else None
        else:
            assert b_alloc.sym is not None
            bad = b_alloc.sym.first_mismatch(b_off, nbytes, key, memory.patterns)
        if bad is not None:
            record_first_bad(memory, r_alloc, r_off, bad // 4)

    op.effect = effect
    return op


def record_first_bad(memory: Memory, alloc: Alloc, off: int, word: int) -> None:
    """atomicMin of a check kernel: the u64 result slot at ``alloc + off`` keeps the smaller
    of what it holds and ``word`` (the first mismatching 32-bit word)."""
    current = int.from_bytes(memory.read(alloc, off, 8).tobytes(), "little")
    smaller = min(current, word)
    memory.write(alloc, off, np.frombuffer(smaller.to_bytes(8, "little"), dtype=np.uint8))


# -- the spin gate --------------------------------------------------------------------------
def gate_wait(c: Launch, flag: int, timeout_ns: int, status: int) -> Op:
    """Holds its stream until the int at ``flag`` is non-zero; after ``timeout_ns`` it gives
    up and writes 1 to ``*status``, like the real kernel."""
    memory = c.memory
    op = Op("gate", c.now, "gpubw_gate_wait")
    op.duration = timeout_ns * 1e-9
    # The flag's allocation, its generation when last read, and what was read then: a gate
    # is re-probed when its allocation was written (``op.watch``: the engine's index of
    # waiting gates), and its flag is read again only if that allocation was written since
    # (addresses are never reused).
    seen: Alloc | None = None
    seen_generation = -1
    released = False

    def probe() -> bool | None:
        nonlocal seen, seen_generation, released
        if seen is not None and not seen.freed and seen.generation == seen_generation:
            return released
        found = memory.find(flag, 4)
        if found is None:
            return None
        if found[0].foreign:
            # a flag another process releases (a real MPI run of simulated ranks): that store
            # cannot be seen here; by the cross-rank protocol it comes right after every rank
            # queued its copies, so the gate is open as soon as it runs
            return True
        seen, seen_generation = found[0], found[0].generation
        released = bool(struct.unpack("<i", memory.read(found[0], found[1], 4).tobytes())[0])
        return released

    def on_timeout() -> None:
        found = memory.find(status, 4)
        if found is not None:
            memory.write(found[0], found[1], np.frombuffer(struct.pack("<i", 1), np.uint8))

    op.probe = probe
    op.on_timeout = on_timeout
    found = memory.find(flag, 4)
    op.remote = found is not None and found[0].device is not None
    op.watch = None if found is None else found[0]  # probed only after its writes
    c.stream.gated = True
    return op


def gate_relay(c: Launch, host_flag: int, device_flag: int, timeout_ns: int, status: int) -> Op:
    """The first rank's gate across ranks: holds its stream like :func:`gate_wait` on
    ``host_flag``; then - released, or timed out (which writes ``*status``) - stores 1 to the
    int at ``device_flag`` (device memory the other ranks' gates wait on), as the kernel."""
    memory = c.memory
    op = gate_wait(c, host_flag, timeout_ns, status)
    op.name = "gpubw_gate_relay"

    def effect() -> None:
        alloc, off = memory.device_view(c.stream.device, device_flag, 4)
        memory.write(alloc, off, np.frombuffer(struct.pack("<i", 1), np.uint8))
        c.engine.release_gates()

    op.effect = effect
    return op


# -- fill, verify, clear --------------------------------------------------------------------
def fill(c: Launch, dst: int, pattern: int, words: int) -> Op:
    memory = c.memory
    device = c.stream.device
    nbytes = words * 4
    op = c.kernel_op("gpubw_fill", nbytes / single_rate(c.model, device, memory.loc(dst)))

    def effect() -> None:
        if words == 0:
            return
        d_alloc, d_off = memory.device_view(device, dst, nbytes)
        p_alloc, p_off = memory.device_view(device, pattern, min(words, PATTERN_WORDS) * 4)
        if words < PATTERN_WORDS:
            memory.write(d_alloc, d_off, memory.read(p_alloc, p_off, nbytes))
            return
        key = memory.pattern_key(p_alloc, p_off)
        if d_alloc.data is not None:
            d_alloc.generation += 1
            owned(d_alloc)[d_off : d_off + nbytes] = np.resize(memory.patterns[key], nbytes)
        else:
            assert d_alloc.sym is not None
            d_alloc.generation += 1
            for cls in (0, 1):
                d_alloc.sym.cls[cls].assign(d_off, d_off + nbytes, Pattern(key, d_off))

    op.effect = effect
    return op


def verify(c: Launch, buf: int, pattern: int, words: int, first_bad: int) -> Op:
    memory = c.memory
    device = c.stream.device
    nbytes = words * 4
    op = c.kernel_op("gpubw_verify", nbytes / single_rate(c.model, memory.loc(buf), device))

    def effect() -> None:
        r_alloc, r_off = memory.device_view(device, first_bad, 8)
        if words == 0:
            return
        b_alloc, b_off = memory.device_view(device, buf, nbytes)
        p_alloc, p_off = memory.device_view(device, pattern, min(words, PATTERN_WORDS) * 4)
        bad: int | None
        if words < PATTERN_WORDS or b_alloc.data is not None:
            expected = np.resize(memory.read(p_alloc, p_off, min(words, PATTERN_WORDS) * 4), nbytes)
            actual = memory.read(b_alloc, b_off, nbytes)
            diff = np.flatnonzero(actual != expected)
            bad = int(diff[0]) if diff.size else None
        else:
            assert b_alloc.sym is not None
            key = memory.pattern_key(p_alloc, p_off)
            bad = b_alloc.sym.first_mismatch(b_off, nbytes, key, memory.patterns)
        if bad is not None:
            record_first_bad(memory, r_alloc, r_off, bad // 4)

    op.effect = effect
    return op


def clear_warp_parity(c: Launch, buf: int, elements: int, parity: int) -> Op:
    memory = c.memory
    device = c.stream.device
    nbytes = elements * ELEMENT_BYTES
    op = c.kernel_op(
        "gpubw_clear_warp_parity", nbytes / 2 / single_rate(c.model, device, memory.loc(buf))
    )

    def effect() -> None:
        if nbytes == 0:
            return
        alloc, off = memory.device_view(device, buf, nbytes)
        if alloc.sym is not None:
            alloc.generation += 1
            for cls in memory.classes(off, parity & 1):
                alloc.sym.cls[cls].assign(off, off + nbytes, ZERO)
        else:
            memory.write(alloc, off, np.zeros(nbytes, dtype=np.uint8), parity=parity & 1)

    op.effect = effect
    return op


# -- latency --------------------------------------------------------------------------------
def pointer_chase(
    c: Launch, start: int, steps: int, target: int, sink: int, name: str = "gpubw_pointer_chase"
) -> Op:
    memory = c.memory
    device = c.stream.device
    active = target < c.grid
    loc = memory.loc(start)
    lat = c.model.latency
    per_access = lat.host if loc is None else lat.local if loc == device else lat.peer
    op = c.kernel_op(name, steps * per_access if active else 0.0)

    def effect() -> None:
        if not active:
            return
        p = start
        if steps:
            p = memory.chase(device, start, steps)
        alloc, off = memory.device_view(device, sink, 8)
        memory.write(alloc, off, np.frombuffer(p.to_bytes(8, "little"), dtype=np.uint8))

    op.effect = effect
    return op


def pointer_chase_tma(c: Launch, start: int, steps: int, target: int, sink: int) -> Op:
    """gpubw_pointer_chase_tma: the walk of gpubw_pointer_chase at the model's latencies (it
    has no separate TMA latency: docs/simulate.md); TMA needs compute capability 9.0."""
    needs_tma(c, "gpubw_pointer_chase_tma")
    return pointer_chase(c, start, steps, target, sink, name="gpubw_pointer_chase_tma")


#: Built-in kernel name -> the function that builds its operation from the launch and the
#: kernel's argument values (in the order of its KernelSpec's params).
EMULATIONS: dict[str, Emulation] = {
    "gpubw_gate_wait": gate_wait,
    "gpubw_copy": copy,
    "gpubw_copy_flat": copy_flat,
    "gpubw_copy_split_warp": copy_split_warp,
    "gpubw_fill": fill,
    "gpubw_verify": verify,
    "gpubw_clear_warp_parity": clear_warp_parity,
    "gpubw_pointer_chase": pointer_chase,
    "gpubw_read": read,
    "gpubw_write": write,
    "gpubw_read_flat": read_flat,
    "gpubw_write_flat": write_flat,
    "gpubw_verify_value": verify_value,
    "gpubw_copy_tma": copy_tma,
    "gpubw_pointer_chase_tma": pointer_chase_tma,
}
if "gpubw_gate_relay" in KERNELS:  # the multinode gate's kernel, where it is catalogued
    EMULATIONS["gpubw_gate_relay"] = gate_relay
