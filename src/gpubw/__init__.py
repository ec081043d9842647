"""gpubw: measure how fast bytes move on NVIDIA GPU systems.

Public API for testcase plugins (import from ``gpubw`` only; everything else is internal):
"""

from __future__ import annotations

__version__ = "0.1.0"

from gpubw.backend.base import Backend, DeviceInfo, KernelArg, i32, ptr, u32, u64
from gpubw.buffers import Buffer, DeviceBuffer, HostBuffer
from gpubw.errors import (
    CudaError,
    GateTimeoutError,
    GpubwError,
    NoDriverError,
    PluginError,
    UsageError,
    VerificationError,
)
from gpubw.initiators import CE, SM, SPLIT_WARP, CopyEngine, Initiator, KernelCopy, SplitWarpCopy
from gpubw.kernels import KernelSpec
from gpubw.kernels.modules import KernelModule, SimulatedLaunch, register_kernel_module
from gpubw.measurement import CellMeasurement, Copy, Kind, MemcpyOperation, Prefer
from gpubw.options import RunOptions
from gpubw.results import BANDWIDTH, LATENCY, Matrix, Report, Status, TestcaseResult
from gpubw.system import System
from gpubw.testcase import Testcase, multicast_disabled

__all__ = [
    "BANDWIDTH",
    "CE",
    "LATENCY",
    "SM",
    "SPLIT_WARP",
    "Backend",
    "Buffer",
    "CellMeasurement",
    "Copy",
    "CopyEngine",
    "CudaError",
    "DeviceBuffer",
    "DeviceInfo",
    "GateTimeoutError",
    "GpubwError",
    "HostBuffer",
    "Initiator",
    "KernelArg",
    "KernelCopy",
    "KernelModule",
    "KernelSpec",
    "Kind",
    "Matrix",
    "MemcpyOperation",
    "NoDriverError",
    "PluginError",
    "Prefer",
    "Report",
    "RunOptions",
    "SimulatedLaunch",
    "SplitWarpCopy",
    "Status",
    "System",
    "Testcase",
    "TestcaseResult",
    "UsageError",
    "VerificationError",
    "__version__",
    "i32",
    "multicast_disabled",
    "ptr",
    "register_kernel_module",
    "u32",
    "u64",
]
