"""gpubw: measure how fast bytes move on NVIDIA GPU systems.

The public API is what this module exports (``gpubw.__all__``); every submodule is internal
and may change. Values are in base units: bytes, seconds, bytes/s.

Embedding gpubw in a tool (see README "Use it from Python"):

=======================  ================================================================
``run``                  run testcases as the ``gpubw`` command does; returns a Report
``Progress``             what ``run``'s ``progress`` callback receives at the start and
                         the end of each testcase and size: ``phase``, ``done``,
                         ``total``, ``key``, ``size``, ``result``, ``header``
``open_system``          open the real GPUs or a simulated system (a context manager)
``Report``               one run: ``testcases``, ``exit_code``, ``records()`` (one dict
                         per cell, for pandas), ``run_options``, ``signal``
``report_to_dict``       a Report as the data of its JSON document
``report_to_json``       a Report as the schema-validated JSON text ``gpubw -j`` writes
``TestcaseResult``       one testcase at one size: ``status``, ``message``, ``matrices``
``Status``               Passed, Waived, Error, Not Found, Interrupted
``Matrix``               one result matrix: labels, ``values`` and raw ``samples``
``Axes``                 ``Matrix.axes``: what rows and columns are (host, gpu, rank,
                         peers, none) and which way cells read (row->column, ...)
``RunOptions``           how a run measures: sizes, samples, loops, statistic, ...
``BANDWIDTH``            the unit of bandwidth matrices ("bytes/s")
``LATENCY``              the unit of latency matrices ("s")
``KIND_BANDWIDTH``,      ``Matrix.kind``: what a matrix measures
``KIND_LATENCY``
``COUNTED_ONCE``,        ``Matrix.bytes_counting``: each copied byte once (nvbandwidth),
``COUNTED_READ_WRITE``,  every byte read and every byte written (STREAM), or none
``COUNTED_NONE``         (latency)
=======================  ================================================================

Writing a testcase plugin (entry-point group ``gpubw.testcases``):

=======================  ================================================================
``Testcase``             base class: ``filter()``, ``run(size, loops) -> [Matrix]``
``System``               the run's devices, peers, buffer pool (``testcase.system``)
``DeviceInfo``           one device's properties (``system.devices``)
``Buffer``               base of the buffers a Copy moves between
``DeviceBuffer``         device memory (``DeviceBuffer.allocate(system, device, nbytes)``)
``HostBuffer``           pinned host memory
``MemcpyOperation``      times copies: gate, events, samples, statistic
``CellMeasurement``      what MemcpyOperation.measure returns for one cell
``Copy``                 one copy of a cell: source -> destination (``measure`` gets them)
``Kind``                 which bandwidth a cell reports (first, sum, total, ...)
``Prefer``               which buffer's context issues a copy
``Initiator``            base of the engines that move bytes (subclass for a kernel)
``CopyJob``              one copy as an Initiator's ``prepare``, ``enqueue`` and
                         ``enqueue_checks`` get it: buffers, sizes, device, stream
``CE``, ``SM``,          the built-in initiators: copy engine, SM copy kernel,
``SPLIT_WARP``           SM split-warp kernel
``device_labels``        nvbandwidth's row/column labels "0".."n-1" for n devices
``format_size``          a byte count as its exact binary form ("512 MiB", "3000 B")
=======================  ================================================================

Shipping CUDA kernels with a plugin:

=========================  ==============================================================
``KernelModule``           a plugin's CUDA source and its kernels
``KernelSpec``             one kernel's name and parameters
``register_kernel_module`` make a KernelModule's kernels launchable
``SimulatedLaunch``        how the simulated backend models a kernel launch
``KernelArg``              one typed kernel argument; ``i32``, ``u32``, ``u64``, ``ptr``
                           make them
=========================  ==============================================================

Writing a writer plugin (entry-point group ``gpubw.writers``):

=======================  ================================================================
``ReportWriter``         the protocol of a writer that writes a whole Report: ``write``
``StreamingWriter``      the protocol of one that writes as the run goes: ``begin``,
                         ``testcase`` (a TestcaseResult), ``end``
``Writer``               base class of the built-in (whole-report) writers
``WriterOption``         a command-line option a writer declares (its ``options``)
``Verdict``              the judgement of one cell (``result.verdicts``, ``Report.verdicts``)
``Endpoint``             one end of a verdict's cell: the host or a GPU
=======================  ================================================================

Testing a plugin without a GPU: :mod:`gpubw.testing` (a pytest plugin too).

Errors: ``GpubwError`` is the base; ``UsageError`` (bad input), ``CudaError``,
``NoDriverError`` (no NVIDIA driver), ``PluginError``, ``VerificationError`` (a copy's
data did not match).
"""

from __future__ import annotations

import importlib

from gpubw.version import __version__

# typing.TYPE_CHECKING without importing typing (~5 ms of gpubw -l's start-up; deleted below)
TYPE_CHECKING = False
if TYPE_CHECKING:  # the names below are imported on first use (__getattr__)
    from typing import Any

    from gpubw.api import open_system, report_to_dict, report_to_json, run
    from gpubw.backend.base import DeviceInfo, KernelArg, i32, ptr, u32, u64
    from gpubw.kernels import KernelSpec
    from gpubw.kernels.modules import KernelModule, SimulatedLaunch, register_kernel_module
    from gpubw.measure.initiators import CE, SM, SPLIT_WARP, CopyJob, Initiator
    from gpubw.measure.measurement import CellMeasurement, Copy, Kind, MemcpyOperation, Prefer
    from gpubw.memory.buffers import Buffer, DeviceBuffer, HostBuffer
    from gpubw.memory.system import System
    from gpubw.model.errors import (
        CudaError,
        GpubwError,
        NoDriverError,
        PluginError,
        UsageError,
        VerificationError,
    )
    from gpubw.model.options import RunOptions
    from gpubw.model.results import (
        BANDWIDTH,
        COUNTED_NONE,
        COUNTED_ONCE,
        COUNTED_READ_WRITE,
        KIND_BANDWIDTH,
        KIND_LATENCY,
        LATENCY,
        Axes,
        Matrix,
        Report,
        Status,
        TestcaseResult,
    )
    from gpubw.model.sizes import format_size
    from gpubw.model.verdicts import Endpoint, Verdict
    from gpubw.runner.core import Progress
    from gpubw.testcases.base import Testcase
    from gpubw.testcases.shapes import labels as device_labels
    from gpubw.writers import ReportWriter, StreamingWriter, Writer, WriterOption

#: Public name -> (module, name in it). Imported on first use, so that ``gpubw -l`` and
#: ``gpubw --version`` load only the modules they need (issue 11: start-up time); every name
#: of ``__all__`` is here or defined above.
_LAZY: dict[str, tuple[str, str]] = {
    "open_system": ("gpubw.api", "open_system"),
    "report_to_dict": ("gpubw.api", "report_to_dict"),
    "report_to_json": ("gpubw.api", "report_to_json"),
    "run": ("gpubw.api", "run"),
    "DeviceInfo": ("gpubw.backend.base", "DeviceInfo"),
    "KernelArg": ("gpubw.backend.base", "KernelArg"),
    "i32": ("gpubw.backend.base", "i32"),
    "ptr": ("gpubw.backend.base", "ptr"),
    "u32": ("gpubw.backend.base", "u32"),
    "u64": ("gpubw.backend.base", "u64"),
    "Buffer": ("gpubw.memory.buffers", "Buffer"),
    "DeviceBuffer": ("gpubw.memory.buffers", "DeviceBuffer"),
    "HostBuffer": ("gpubw.memory.buffers", "HostBuffer"),
    "CudaError": ("gpubw.model.errors", "CudaError"),
    "GpubwError": ("gpubw.model.errors", "GpubwError"),
    "NoDriverError": ("gpubw.model.errors", "NoDriverError"),
    "PluginError": ("gpubw.model.errors", "PluginError"),
    "UsageError": ("gpubw.model.errors", "UsageError"),
    "VerificationError": ("gpubw.model.errors", "VerificationError"),
    "CE": ("gpubw.measure.initiators", "CE"),
    "SM": ("gpubw.measure.initiators", "SM"),
    "SPLIT_WARP": ("gpubw.measure.initiators", "SPLIT_WARP"),
    "Initiator": ("gpubw.measure.initiators", "Initiator"),
    "CopyJob": ("gpubw.measure.initiators", "CopyJob"),
    "KernelSpec": ("gpubw.kernels", "KernelSpec"),
    "KernelModule": ("gpubw.kernels.modules", "KernelModule"),
    "SimulatedLaunch": ("gpubw.kernels.modules", "SimulatedLaunch"),
    "register_kernel_module": ("gpubw.kernels.modules", "register_kernel_module"),
    "CellMeasurement": ("gpubw.measure.measurement", "CellMeasurement"),
    "Copy": ("gpubw.measure.measurement", "Copy"),
    "Kind": ("gpubw.measure.measurement", "Kind"),
    "MemcpyOperation": ("gpubw.measure.measurement", "MemcpyOperation"),
    "Prefer": ("gpubw.measure.measurement", "Prefer"),
    "RunOptions": ("gpubw.model.options", "RunOptions"),
    "BANDWIDTH": ("gpubw.model.results", "BANDWIDTH"),
    "COUNTED_NONE": ("gpubw.model.results", "COUNTED_NONE"),
    "COUNTED_ONCE": ("gpubw.model.results", "COUNTED_ONCE"),
    "COUNTED_READ_WRITE": ("gpubw.model.results", "COUNTED_READ_WRITE"),
    "KIND_BANDWIDTH": ("gpubw.model.results", "KIND_BANDWIDTH"),
    "KIND_LATENCY": ("gpubw.model.results", "KIND_LATENCY"),
    "LATENCY": ("gpubw.model.results", "LATENCY"),
    "Axes": ("gpubw.model.results", "Axes"),
    "Matrix": ("gpubw.model.results", "Matrix"),
    "Report": ("gpubw.model.results", "Report"),
    "Status": ("gpubw.model.results", "Status"),
    "TestcaseResult": ("gpubw.model.results", "TestcaseResult"),
    "format_size": ("gpubw.model.sizes", "format_size"),
    "System": ("gpubw.memory.system", "System"),
    "Testcase": ("gpubw.testcases.base", "Testcase"),
    "device_labels": ("gpubw.testcases.shapes", "labels"),
    "Writer": ("gpubw.writers", "Writer"),
    "ReportWriter": ("gpubw.writers", "ReportWriter"),
    "StreamingWriter": ("gpubw.writers", "StreamingWriter"),
    "WriterOption": ("gpubw.writers", "WriterOption"),
    "Progress": ("gpubw.runner.core", "Progress"),
    "Verdict": ("gpubw.model.verdicts", "Verdict"),
    "Endpoint": ("gpubw.model.verdicts", "Endpoint"),
}


if not TYPE_CHECKING:  # (for mypy the names are the imports above: a typo stays an error)

    def __getattr__(name: str) -> Any:
        """A public name, imported from its module on first use (PEP 562); a submodule's
        name (``gpubw.api`` after ``import gpubw``) imports that submodule."""
        if name in _LAZY:
            module, attribute = _LAZY[name]
            value = getattr(importlib.import_module(module), attribute)
            globals()[name] = value
            return value
        if not name.startswith("_"):
            try:
                return importlib.import_module(f"{__name__}.{name}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{__name__}.{name}":
                    raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


del TYPE_CHECKING


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "BANDWIDTH",
    "CE",
    "COUNTED_NONE",
    "COUNTED_ONCE",
    "COUNTED_READ_WRITE",
    "KIND_BANDWIDTH",
    "KIND_LATENCY",
    "LATENCY",
    "SM",
    "SPLIT_WARP",
    "Axes",
    "Buffer",
    "CellMeasurement",
    "Copy",
    "CopyJob",
    "CudaError",
    "DeviceBuffer",
    "DeviceInfo",
    "Endpoint",
    "GpubwError",
    "HostBuffer",
    "Initiator",
    "KernelArg",
    "KernelModule",
    "KernelSpec",
    "Kind",
    "Matrix",
    "MemcpyOperation",
    "NoDriverError",
    "PluginError",
    "Prefer",
    "Progress",
    "Report",
    "ReportWriter",
    "RunOptions",
    "SimulatedLaunch",
    "Status",
    "StreamingWriter",
    "System",
    "Testcase",
    "TestcaseResult",
    "UsageError",
    "Verdict",
    "VerificationError",
    "Writer",
    "WriterOption",
    "__version__",
    "device_labels",
    "format_size",
    "i32",
    "open_system",
    "ptr",
    "register_kernel_module",
    "report_to_dict",
    "report_to_json",
    "run",
    "u32",
    "u64",
]
