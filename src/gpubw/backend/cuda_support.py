"""Driver-free helpers of the real backend (:mod:`gpubw.backend.cuda`): checking and packing
kernel arguments, the registered kernel modules, UUID formatting, and the host facts read
from sysfs (NUMA node, local CPUs) and /proc (the kernel driver's version).

Nothing here calls the CUDA driver, so none of it needs ``cu``; every name is re-exported by
:mod:`gpubw.backend.cuda`, where callers and tests import it.
"""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpubw.backend.base import KernelArg
from gpubw.backend.nvrtc import SOURCE_NAME
from gpubw.kernels import KERNELS, KernelSpec
from gpubw.kernels.modules import (
    GPUBW,
    KernelModule,
    builtin_module,
    find_kernel,
    kernel_modules,
    register_kernel_module,
)
from gpubw.model.errors import UsageError

_SYSFS_PCI = Path("/sys/bus/pci/devices")
_DRIVER_VERSION_FILE = Path("/proc/driver/nvidia/version")

#: ctypes of each kernel parameter type, with the allowed value range.
_ARG_TYPES: dict[str, tuple[type[ctypes._SimpleCData[Any]], int, int]] = {
    "ptr": (ctypes.c_uint64, 0, (1 << 64) - 1),
    "u64": (ctypes.c_uint64, 0, (1 << 64) - 1),
    "u32": (ctypes.c_uint32, 0, (1 << 32) - 1),
    "i32": (ctypes.c_int32, -(1 << 31), (1 << 31) - 1),
}


def registered_modules() -> list[tuple[str, str, str, tuple[KernelSpec, ...]]]:
    """(module name, program name, CUDA C source, kernels) of every kernel module: gpubw's
    own first, then those plugins registered (:mod:`gpubw.kernels.modules`)."""
    return [(m.name, registered_program(m), m.source, tuple(m.kernels)) for m in kernel_modules()]


def registered_program(module: KernelModule) -> str:
    """The program name a module is compiled under (compiler messages, the cache key)."""
    return SOURCE_NAME if module is GPUBW else f"{module.name}.cu"


def register_builtin(kernel: str) -> None:
    """Register gpubw's own module that defines ``kernel`` (nothing for another name): a
    kernel launched though nothing declared its module is loaded at its launch."""
    module = builtin_module(kernel)
    if module is not None:
        register_kernel_module(module)


def kernel_spec(kernel: str) -> KernelSpec | None:
    """The catalogued spec of ``kernel`` (gpubw's own or a registered plugin's), or None."""
    spec = KERNELS.get(kernel)
    if spec is not None:
        return spec
    try:
        return find_kernel(kernel)[1]
    except KeyError:
        return None


def pack_kernel_args(kernel: str, args: Sequence[KernelArg]) -> tuple[list[Any], Any]:
    """Check ``args`` against the kernel's KernelSpec and build cuLaunchKernel's
    ``kernelParams``: (the ctypes values, which must stay alive, and the void*[] array)."""
    spec = kernel_spec(kernel)
    if spec is None:
        raise UsageError(f"unknown kernel {kernel!r}; gpubw's are: {', '.join(sorted(KERNELS))}")
    if len(args) != len(spec.params):
        raise UsageError(
            f"kernel {kernel} takes {len(spec.params)} arguments {spec.params}, got {len(args)}"
        )
    values: list[Any] = []
    for index, (arg, want) in enumerate(zip(args, spec.params)):
        if not isinstance(arg, KernelArg):
            raise UsageError(f"argument {index} of {kernel} is not a KernelArg: {arg!r}")
        if arg.ctype != want:
            raise UsageError(f"argument {index} of {kernel} must be {want}, got {arg.ctype}")
        ctype, low, high = _ARG_TYPES[want]
        if not low <= arg.value <= high:
            raise UsageError(f"argument {index} of {kernel} ({want}) out of range: {arg.value}")
        values.append(ctype(arg.value))
    array = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.addressof(v) for v in values])
    return values, array


def format_uuid(raw: bytes) -> str:
    """``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`` (lowercase hex) from 16 UUID bytes."""
    h = bytes(raw[:16]).hex()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def parse_cpulist(text: str) -> tuple[int, ...]:
    """Linux cpulist ("0-3,8,10-11") to a sorted tuple of CPU numbers."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            cpus.update(range(int(lo), int(hi) + 1))
        else:
            cpus.add(int(part))
    return tuple(sorted(cpus))


def read_numa(pci_bus_id: str, root: Path = _SYSFS_PCI) -> tuple[int | None, tuple[int, ...]]:
    """(NUMA node, local CPUs) of a PCI device from sysfs; (None, ()) where unknown."""
    node: int | None = None
    cpus: tuple[int, ...] = ()
    base = root / pci_bus_id
    try:
        value = int((base / "numa_node").read_text().strip())
        node = value if value >= 0 else None
    except (OSError, ValueError):
        node = None
    try:
        cpus = parse_cpulist((base / "local_cpulist").read_text())
    except (OSError, ValueError):
        cpus = ()
    return node, cpus


def read_pci_device_id(pci_bus_id: str, root: Path = _SYSFS_PCI) -> int | None:
    """The PCI device (product) id of a PCI device from sysfs (``device``: ``0x2335``);
    None where unknown."""
    try:
        return int((root / pci_bus_id / "device").read_text().strip(), 16)
    except (OSError, ValueError):
        return None


def driver_version_string(path: Path = _DRIVER_VERSION_FILE) -> str | None:
    """The kernel driver's version ("580.65.06") from /proc, or None where unknown."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    match = re.search(r"Kernel Module.*?\s(\d+\.\d+(?:\.\d+)?)\s", text)
    return match.group(1) if match else None


NO_DRIVER_MESSAGE = (
    "no NVIDIA driver was found (libcuda could not be loaded), so no real GPU can be used; "
    "run on a modelled system instead with --simulate h200x2 (or another model, e.g. "
    "--simulate h200x8)"
)
NO_DEVICE_MESSAGE = (
    "no CUDA device is visible (the NVIDIA driver loaded but reports no device; check "
    "CUDA_VISIBLE_DEVICES); run on a modelled system instead with --simulate h200x2"
)
#: the extra that pins cuda-bindings and NVRTC to a driver line, by CUDA major
DRIVER_LINE_EXTRAS = {12: "gpubw[cu12]", 13: "gpubw[cu13]"}


def bindings_version() -> str | None:
    """The installed cuda-bindings' version (``13.0.1``), None if it cannot be read."""
    from importlib import metadata

    try:
        return metadata.version("cuda-bindings")
    except metadata.PackageNotFoundError:
        return None


def driver_line_problem(driver_version: int, bindings: str | None) -> str | None:
    """One line saying what to install when cuda-bindings (version ``bindings``) is for a
    newer CUDA major than the driver's (``driver_version``: cuDriverGetVersion, 12080 for
    12.8); None when they fit (an older line runs on a newer driver) or either is unknown."""
    try:
        major = int(str(bindings).split(".")[0])
    except ValueError:
        return None
    driver_major, driver_minor = driver_version // 1000, driver_version % 1000 // 10
    if driver_version <= 0 or major <= driver_major:
        return None
    extra = DRIVER_LINE_EXTRAS.get(driver_major, f"gpubw[cu{driver_major}]")
    return (
        f"cuda-bindings {bindings} is for CUDA {major}, newer than this NVIDIA driver's CUDA "
        f"{driver_major}.{driver_minor}: install the CUDA {driver_major} line, pip install "
        f"'{extra}' (or a driver for CUDA {major})"
    )


#: mmap flags of a huge-page host buffer: MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB (Linux)
HUGE_MMAP_FLAGS = 0x02 | 0x20 | 0x40000
#: mmap flags of plain anonymous host memory: MAP_PRIVATE | MAP_ANONYMOUS
PLAIN_MMAP_FLAGS = 0x02 | 0x20


def result_name(result: Any) -> str:
    """A CUresult's name (``CUDA_ERROR_...``), or its number."""
    name = getattr(result, "name", None)
    return str(name) if name else f"CUresult {int(result)}"


def map_anonymous(size: int, flags: int) -> int:
    """``mmap(NULL, size, PROT_READ | PROT_WRITE, flags, -1, 0)``: the address, or OSError
    (with errno) when the kernel refuses (e.g. MAP_HUGETLB without free huge pages)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]  # fmt: skip
    addr = libc.mmap(None, size, 0x1 | 0x2, flags, -1, 0)  # PROT_READ | PROT_WRITE
    if addr in (None, ctypes.c_void_p(-1).value):
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(addr)


def unmap(addr: int, size: int) -> None:
    """``munmap`` what :func:`map_anonymous` mapped."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.munmap(ctypes.c_void_p(addr), ctypes.c_size_t(size))


class DriverCalls:
    """What the real backend's parts (host memory, sharing) call on it: ``_cu()`` (the
    driver module), ``_call`` (the checked call), ``_use(device)`` and ``_device_index``;
    :class:`gpubw.backend.cuda.CudaBackend` provides them."""

    def _cu(self) -> Any:
        raise NotImplementedError

    def _call(self, call: str, result: tuple[Any, ...]) -> Any:
        raise NotImplementedError

    def _use(self, device: int) -> None:
        raise NotImplementedError

    def _device_index(self, device: int) -> int:
        raise NotImplementedError
