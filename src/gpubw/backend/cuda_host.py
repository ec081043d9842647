"""The real backend's host memory: pinned buffers (``cuMemHostAlloc``), buffers gpubw maps
itself (huge pages with ``--host-huge-pages``, pages bound to a NUMA node with
``--host-numa``: mmap, then ``cuMemHostRegister``), pageable buffers, and host reads and
writes (a base of :class:`gpubw.backend.cuda.CudaBackend`).

Cut from the driver facade (:mod:`gpubw.backend.cuda`) along its sections: the facade keeps
the contexts, devices, device memory, streams, events, kernels and teardown; this module
keeps what host memory it made (``_host_memory``, ``_huge``, ``_pageable``) for the
facade's ``close`` to free. Driver calls go through the facade's ``_cu()`` and ``_call``.
"""

from __future__ import annotations

import ctypes

from gpubw.backend import numa
from gpubw.backend.base import Backend
from gpubw.backend.cuda_support import (
    HUGE_MMAP_FLAGS,
    PLAIN_MMAP_FLAGS,
    DriverCalls,
    map_anonymous,
    unmap,
)
from gpubw.model.errors import GpubwError, UsageError


class CudaHostMemory(DriverCalls, Backend):
    """Host memory calls of :class:`gpubw.backend.base.Backend` over the CUDA driver. The
    backend provides ``_cu()`` (the driver module), ``_call`` (the checked call),
    ``_use(device)`` and ``_device_index``."""

    def _init_host_memory(self) -> None:
        self._host_memory: dict[int, int] = {}  # pointer -> device whose context allocated it
        #: host buffers gpubw mapped and registered itself (huge pages, --host-numa):
        #: pointer -> mapped bytes
        self._huge: dict[int, int] = {}
        self._pageable: dict[int, int] = {}  # pageable host memory: pointer -> mapped bytes

    def alloc_host(self, nbytes: int, device: int | None, *, numa_node: int | None = None) -> int:
        cu = self._cu()
        if nbytes <= 0:
            raise UsageError(f"host allocation size must be positive, got {nbytes}")
        owner = 0 if device is None else self._device_index(device)
        self._use(owner)
        if self.host_huge_pages or numa_node is not None:
            pointer = self._alloc_huge(nbytes, numa_node)
        else:
            pointer = int(
                self._call("cuMemHostAlloc", cu.cuMemHostAlloc(nbytes, cu.CU_MEMHOSTALLOC_PORTABLE))
            )
        self._host_memory[pointer] = owner
        return pointer

    def _alloc_huge(self, nbytes: int, numa_node: int | None = None) -> int:
        """Host memory gpubw maps itself: from huge pages (mmap MAP_HUGETLB) with
        ``--host-huge-pages``, its pages bound to ``numa_node`` (mbind) with ``--host-numa``;
        pinned and mapped for every context with cuMemHostRegister (whose page faults place
        the pages); freed by :meth:`_free_huge`."""
        cu = self._cu()
        hp = self.huge_pages() if self.host_huge_pages else None
        page = (hp[0] if hp else 2 << 20) if self.host_huge_pages else 4096
        size = -(-nbytes // page) * page
        try:
            addr = map_anonymous(
                size, HUGE_MMAP_FLAGS if self.host_huge_pages else PLAIN_MMAP_FLAGS
            )
        except OSError as exc:
            if not self.host_huge_pages:
                raise GpubwError(f"mmap of {size} bytes failed: {exc.strerror}") from None
            raise GpubwError(
                f"mmap(MAP_HUGETLB) of {size} bytes failed: {exc.strerror} "
                f"(free huge pages: {hp[1] if hp else 'unknown'}; /proc/meminfo HugePages_Free)"
            ) from None
        try:
            if numa_node is not None:
                numa.bind(addr, size, numa_node)
            self._call(
                "cuMemHostRegister",
                cu.cuMemHostRegister(addr, size, cu.CU_MEMHOSTREGISTER_PORTABLE),
            )
        except OSError as exc:
            unmap(addr, size)
            raise GpubwError(
                f"host memory on NUMA node {numa_node}: {exc.strerror or exc}"
            ) from None
        except BaseException:
            unmap(addr, size)
            raise
        self._huge[addr] = size
        return addr

    def alloc_pageable(
        self, nbytes: int, device: int | None, *, numa_node: int | None = None
    ) -> int:
        """Plain anonymous memory (mmap), bound to ``numa_node`` if given, every page touched
        here (so first touch places it by the caller's affinity or the binding)."""
        if nbytes <= 0:
            raise UsageError(f"host allocation size must be positive, got {nbytes}")
        size = -(-nbytes // 4096) * 4096
        addr = map_anonymous(size, PLAIN_MMAP_FLAGS)
        try:
            if numa_node is not None:
                numa.bind(addr, size, numa_node)
            ctypes.memset(addr, 0, size)
        except OSError as exc:
            unmap(addr, size)
            raise GpubwError(
                f"host memory on NUMA node {numa_node}: {exc.strerror or exc}"
            ) from None
        self._pageable[addr] = size
        return addr

    def free_pageable(self, pointer: int) -> None:
        size = self._pageable.pop(pointer, None)
        if size is None:
            raise UsageError(f"0x{pointer:x} is not pageable memory allocated by this backend")
        unmap(pointer, size)

    def _free_huge(self, pointer: int) -> None:
        cu = self._cu()
        size = self._huge.pop(pointer)
        try:
            self._call("cuMemHostUnregister", cu.cuMemHostUnregister(pointer))
        finally:
            unmap(pointer, size)

    def free_host(self, pointer: int) -> None:
        cu = self._cu()
        owner = self._host_memory.pop(pointer, None)
        if owner is None:
            raise UsageError(f"0x{pointer:x} is not pinned memory allocated by this backend")
        self._use(owner)
        if pointer in self._huge:
            self._free_huge(pointer)
            return
        self._call("cuMemFreeHost", cu.cuMemFreeHost(pointer))

    def host_write(self, pointer: int, data: bytes) -> None:
        if data:
            ctypes.memmove(pointer, bytes(data), len(data))

    def host_read(self, pointer: int, nbytes: int) -> bytes:
        return ctypes.string_at(pointer, nbytes) if nbytes > 0 else b""
