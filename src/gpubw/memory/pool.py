"""The buffer pool: the run-scoped owner of every buffer's memory and of the run's scratch.

Cut from :mod:`gpubw.memory.buffers` along the seam its docstring named (buffers / the pool
that owns their memory): the buffers are there, the pool that hands them out is here.

The :class:`BufferPool` is run-scoped: it keeps closed buffers for reuse (a testcase allocates
the same sizes cell after cell; an idle pinned buffer up to twice a request's size serves it
as a view of its first bytes, since pinning is slow), knows which buffers are handed out (so
the runner can free what a failed testcase left), owns the run's scratch memory (verification
patterns, result words, staging, the spin gate's page), places host memory near a device's
CPUs or on the ``--host-numa`` node (:func:`host_numa_nodes`) and frees all of it in
:meth:`BufferPool.close`. The pool depends on the backend and the buffers only;
:class:`gpubw.memory.system.System` holds a pool.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from gpubw.backend.base import Backend, DeviceInfo
from gpubw.kernels import PATTERN_WORDS
from gpubw.kernels.patterns import pattern_bytes
from gpubw.memory.buffers import Buffer, DeviceBuffer, HostBuffer, PeerAccess, Pool
from gpubw.memory.gate import Gate
from gpubw.model.errors import CudaError, UsageError
from gpubw.model.options import RunOptions

__all__ = ["HOST_FIT_WASTE", "BufferPool", "host_numa_nodes"]

#: Bytes of each device's verification result words (u64 slots).
_VERIFY_BYTES = 4096
#: An idle pinned host buffer serves a smaller request of the same placement if it is at most
#: this many times the request's size (the CE bidirectional testcases' 2S interference buffers
#: serve later S requests; a 1 GiB buffer never serves a 64 KiB one).
HOST_FIT_WASTE = 2

_B = TypeVar("_B", bound=Buffer)


class BufferPool(Pool):
    """Run-scoped owner of buffer memory. Use :meth:`close` (the System does) to free it all."""

    def __init__(
        self,
        backend: Backend,
        devices: Sequence[DeviceInfo],
        options: RunOptions,
        *,
        home_device: int = 0,
    ) -> None:
        self.backend = backend
        self.devices = devices
        self.options = options
        #: the device whose context makes host memory that is near no device (the gate page,
        #: staging): one this process drives, so no other device gets a context for it
        self.home_device = home_device
        self.peers = PeerAccess(backend, len(devices))
        #: the spin gate; its page is pool scratch, allocated on first use
        self.gate = Gate(backend, lambda: self.host_scratch("gate", Gate.PAGE_BYTES).ptr)
        self._idle: dict[tuple[Any, ...], list[Buffer]] = {}
        self._live: set[Buffer] = set()
        self._scratch: dict[tuple[str, bool, int | None, int], Buffer] = {}
        #: --host-numa: device -> the NUMA node its host buffers are bound to (set by
        #: :meth:`check_host_numa`; empty: placed by affinity alone)
        self.host_nodes: dict[int, int] = {}
        self.closed = False

    # -- NUMA placement (--host-numa) -------------------------------------------------------
    def check_host_numa(self) -> None:
        """Where ``--host-numa`` puts each device's host buffers (:attr:`host_nodes`);
        UsageError when that node does not exist here (a remote node on a host of one node
        included)."""
        self.host_nodes = host_numa_nodes(self.options.host_numa, self.devices,
                                          self.backend.numa_nodes())  # fmt: skip

    def numa_node(self, buf: Buffer) -> int | None:
        """The NUMA node of a host buffer's memory (as the kernel or the model says)."""
        return self.backend.host_numa_node(buf.ptr) if buf.is_host else None

    # -- placement ------------------------------------------------------------------------
    def placement(self, device: int | None) -> frozenset[int] | None:
        """The CPUs a host buffer near ``device`` is allocated from (its pages land on their
        NUMA node), or None for "wherever": no device, affinity off (``-d``), CPUs unknown.
        Host buffers of one placement are interchangeable, so the pool keys them by it: on
        a host where every GPU has the same local CPUs, a buffer pinned for GPU 0 serves
        GPU 1 too (pinning 512 MiB took 0.2 s on 2 x H200, eight times in a suite)."""
        if device is None or not self.options.affinity or not hasattr(os, "sched_setaffinity"):
            return None
        allowed = frozenset(self.devices[device].local_cpus) & frozenset(range(os.cpu_count() or 1))
        return allowed or None

    @contextlib.contextmanager
    def near(self, device: int | None) -> Iterator[None]:
        """Run the body with the CPU affinity set to ``device``'s local CPUs (if known and not
        disabled with ``-d``), then restore the previous affinity. Pinned pages are first
        touched by this thread, so they land on the device's NUMA node."""
        allowed = self.placement(device)
        if allowed is None:
            yield
            return
        before = os.sched_getaffinity(0)
        try:
            os.sched_setaffinity(0, allowed)
            yield
        finally:
            os.sched_setaffinity(0, before)

    def _idle_key(
        self, host: bool, device: int | None, nbytes: int, pageable: bool = False
    ) -> tuple[Any, ...]:
        """Which idle buffers can serve a request: device memory by device, host memory by
        kind (pinned or pageable) and placement (:meth:`placement`, the bound node)."""
        if not host:
            return (False, device, nbytes)
        node = None if device is None else self.host_nodes.get(device)
        return (True, (pageable, self.placement(device), node), nbytes)

    def allocate_memory(
        self, host: bool, device: int | None, nbytes: int, *, pageable: bool = False
    ) -> int:
        """Allocate raw memory, retrying once after freeing the idle buffers on out-of-memory."""
        category = "host_registration" if host and not pageable else "allocation"
        with self.trace.span(category):
            return self._allocate(host, device, nbytes, pageable)

    def _allocate(self, host: bool, device: int | None, nbytes: int, pageable: bool) -> int:
        """:meth:`allocate_memory`'s work."""
        for attempt in (0, 1):
            try:
                if host:
                    with self.near(device):
                        owner = self.home_device if device is None else device
                        node = None if device is None else self.host_nodes.get(device)
                        placed = {} if node is None else {"numa_node": node}
                        if pageable:
                            return self.backend.alloc_pageable(nbytes, owner, **placed)
                        return self.backend.alloc_host(nbytes, owner, **placed)
                assert device is not None
                return self.backend.alloc_device(device, nbytes)
            except CudaError as exc:
                if attempt == 0 and exc.out_of_memory and self._idle:
                    self.release_idle()
                    continue
                raise
        raise AssertionError("unreachable")

    def check_request(self, host: bool, device: int | None, nbytes: int) -> None:
        """Refuse a buffer request that cannot be meant: a size that is not a positive int, a
        device that does not exist (None is allowed for host memory only)."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
            raise ValueError(f"buffer size must be a positive number of bytes, got {nbytes!r}")
        if device is None and host:
            return
        if isinstance(device, bool) or not isinstance(device, int):
            raise ValueError(f"device must be a device ordinal, got {device!r}")
        if not 0 <= device < len(self.devices):
            raise ValueError(
                f"no device {device}: devices are 0..{len(self.devices) - 1}"
                if self.devices
                else f"no device {device}: there are no devices"
            )

    # -- handed-out and idle buffers -------------------------------------------------------
    def take(self, kind: type[_B], device: int | None, nbytes: int) -> _B:
        """A handed-out buffer of ``kind``: an idle one of the same place and size, a view of
        ``nbytes`` at the start of a larger idle host buffer (:meth:`_fit`), or new."""
        self.check_request(kind.is_host, device, nbytes)
        backing = self._fit(kind.is_host, device, nbytes, kind.pageable)
        buf: Buffer
        if backing is None:
            memory = self.allocate_memory(kind.is_host, device, nbytes, pageable=kind.pageable)
            buf = kind(self, memory, nbytes, device)
        elif backing.nbytes == nbytes:
            buf = backing
        else:
            buf = kind(self, backing.ptr, nbytes, device, backing=backing)
        assert isinstance(buf, kind)
        self._live.add(buf)
        return buf

    def _fit(self, host: bool, device: int | None, nbytes: int, pageable: bool) -> Buffer | None:
        """Take the idle buffer that best serves a request, or None: one of exactly the size,
        else (host memory only) the smallest idle one of the same placement that is larger but
        at most :data:`HOST_FIT_WASTE` times the request. Pinning is slow (0.28 s for 512 MiB
        on 2 x H200) while device allocations are cheap and device memory is what large
        buffer sizes run short of, so device buffers are only reused at their exact size."""
        exact = self._idle.get(self._idle_key(host, device, nbytes, pageable))
        if exact:
            return exact.pop()
        if not host:
            return None
        placement = self._idle_key(host, device, nbytes, pageable)[1]
        sizes = [
            size
            for (is_host, where, size), idle in self._idle.items()
            if is_host and where == placement and idle and nbytes < size <= HOST_FIT_WASTE * nbytes
        ]
        return self._idle[(True, placement, min(sizes))].pop() if sizes else None

    def give_back(self, buf: Buffer) -> None:
        """Keep a handed-out buffer's memory for reuse (after the run: free it). A view's
        backing buffer becomes idle at its full size; the view itself is spent."""
        if self.closed:
            buf.free()
        elif buf in self._live:
            self._live.discard(buf)
            memory = buf.detach()
            key = self._idle_key(memory.is_host, memory.device, memory.nbytes, memory.pageable)
            self._idle.setdefault(key, []).append(memory)

    def forget(self, buf: Buffer) -> None:
        """``buf`` has been freed: it is no longer handed out."""
        self._live.discard(buf)

    def release_idle(self) -> None:
        """Really free every idle buffer (on out-of-memory, and after a testcase that failed,
        so that device and pinned memory are back where they were before it)."""
        idle = [buf for lst in self._idle.values() for buf in lst]
        self._idle.clear()
        _free_all(idle)

    def release_leaked(self) -> int:
        """Really free every buffer still handed out (the runner calls this after each
        testcase, so one that failed or leaked does not hold memory for the rest of the
        run); returns how many there were."""
        leaked = list(self._live)
        self._live.clear()
        _free_all(leaked)
        return len(leaked)

    @property
    def live_buffers(self) -> int:
        """Buffers handed out and not closed (idle buffers not counted)."""
        return len(self._live)

    # -- scratch owned by the pool ---------------------------------------------------------
    def host_scratch(self, purpose: str, nbytes: int) -> HostBuffer:
        """Pinned host memory of ``nbytes`` for ``purpose`` (staging, flags), made on first
        use and freed by :meth:`close`; the same purpose and size give the same buffer."""
        buf = self._scratch_buffer(HostBuffer, purpose, None, nbytes)
        assert isinstance(buf, HostBuffer)
        return buf

    def device_scratch(self, purpose: str, device: int, nbytes: int) -> DeviceBuffer:
        """Device memory of ``nbytes`` on ``device`` for ``purpose``, as :meth:`host_scratch`."""
        buf = self._scratch_buffer(DeviceBuffer, purpose, device, nbytes)
        assert isinstance(buf, DeviceBuffer)
        return buf

    def _scratch_buffer(
        self, kind: type[Buffer], purpose: str, device: int | None, nbytes: int
    ) -> Buffer:
        key = (purpose, kind.is_host, device, nbytes)
        if key not in self._scratch:
            self.check_request(kind.is_host, device, nbytes)
            pointer = self.allocate_memory(kind.is_host, device, nbytes)
            self._scratch[key] = kind(self, pointer, nbytes, device)
        return self._scratch[key]

    def verify_slots(self, device: int) -> int:
        """Device pointer to ``device``'s verification result words (u64 slots)."""
        return self.device_scratch("verify", device, _VERIFY_BYTES).ptr

    def pattern(self, device: int, seed: int) -> int:
        """Device pointer to the 2 MiB verification pattern of ``seed`` on ``device``."""
        purpose = f"pattern {seed:#010x}"
        key = (purpose, DeviceBuffer.is_host, device, PATTERN_WORDS * 4)
        if key not in self._scratch:
            nbytes = PATTERN_WORDS * 4
            self.check_request(False, device, nbytes)
            buf = DeviceBuffer(self, self.allocate_memory(False, device, nbytes), nbytes, device)
            try:
                staging = self.host_scratch("staging", PATTERN_WORDS * 4)
                with self.trace.span("pattern_fill"):
                    self.backend.host_write(staging.ptr, pattern_bytes(seed))
                    with self.backend.stream(device) as stream:
                        self.backend.memcpy_async(buf.ptr, staging.ptr, buf.nbytes, stream)
                        self.backend.synchronize(stream, self.options.sync_timeout_s)
            except BaseException:
                with contextlib.suppress(Exception):  # the first error is the one to report
                    buf.free()
                raise
            self._scratch[key] = buf
        return self._scratch[key].ptr

    # -- teardown -------------------------------------------------------------------------
    def close(self) -> None:
        """Free everything: handed-out, idle and scratch buffers (each tried; the first
        failure is raised after all were tried). Safe to call twice."""
        if self.closed:
            return
        self.closed = True
        buffers = [*self._scratch.values(), *self._live]
        buffers.extend(buf for lst in self._idle.values() for buf in lst)
        self._scratch.clear()
        self._live.clear()
        self._idle.clear()
        _free_all(buffers)


def _free_all(buffers: Sequence[Buffer]) -> None:
    """Free every buffer, also when some fail; then raise the first failure."""
    errors: list[BaseException] = []
    for buf in buffers:
        try:
            buf.free()
        except BaseException as exc:  # keep freeing the rest
            errors.append(exc)
    if errors:
        raise errors[0]


def host_numa_nodes(
    spec: str | None, devices: Sequence[DeviceInfo], nodes: Sequence[int]
) -> dict[int, int]:
    """device -> NUMA node of its host buffers for ``--host-numa spec`` (``N``, ``local`` or
    ``remote``), on a host with ``nodes``; {} for None. UsageError naming the value and the
    nodes when the node does not exist (also: ``remote`` on a host of one node, a GPU whose
    own node is unknown)."""
    if spec is None:
        return {}
    have = ", ".join(map(str, nodes))
    where = f"this host's NUMA nodes: {have} (/sys/devices/system/node/)"
    if spec.isdecimal():
        if int(spec) not in nodes:
            raise UsageError(f"--host-numa {spec}: there is no NUMA node {spec}; {where}")
        return {d.ordinal: int(spec) for d in devices}
    out = {}
    for d in devices:
        own = d.numa_node if d.numa_node is not None else (nodes[0] if len(nodes) == 1 else None)
        if own is None:
            raise UsageError(
                f"--host-numa {spec}: the NUMA node of GPU {d.ordinal} ({d.pci_bus_id}) is "
                f"unknown (its sysfs numa_node is -1); give a node number; {where}"
            )
        others = [n for n in nodes if n != own]
        if spec == "local":
            out[d.ordinal] = own
        elif not others:
            raise UsageError(
                f"--host-numa remote: this host has one NUMA node ({have}), so no memory is "
                "remote to any GPU; run on a host of two or more nodes, or give local"
            )
        else:  # the next node after the GPU's own, round the list
            out[d.ordinal] = min(others, key=lambda n: (n < own, n))
    return out
