"""The one exception hierarchy of gpubw.

Only :func:`gpubw.cli.command.main` turns these into messages and exit codes; everything
else raises.
"""

from __future__ import annotations


class GpubwError(Exception):
    """Base of every error gpubw raises on purpose."""


class UsageError(GpubwError):
    """Bad input from the user: an option value, a file, a name. Exit code 2.

    Only for what a user typed or pointed gpubw at. Code that calls gpubw's API wrongly (a
    plugin, a test) gets a :class:`TypeError` or :class:`ValueError`, or a
    :class:`PluginError` when a plugin's declaration is unusable.

    ``param`` names the library parameter at fault (e.g. ``"sizes"``, as in ``runner.run``),
    or None. The library never quotes command-line flags; :func:`gpubw.cli.command.main` maps
    ``param`` to the flag and puts it in front of the message."""

    def __init__(self, message: str = "", *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class NoDriverError(GpubwError):
    """No NVIDIA driver could be loaded (no libcuda), so no real GPU can be used."""


class CudaError(GpubwError):
    """A CUDA driver call returned something other than CUDA_SUCCESS.

    ``call`` names the driver function, ``result`` the CUresult name (e.g.
    ``CUDA_ERROR_OUT_OF_MEMORY``).
    """

    def __init__(self, call: str, result: str, detail: str = "") -> None:
        self.call = call
        self.result = result
        self.detail = detail
        text = f"{call} failed: {result}"
        if detail:
            text += f" ({detail})"
        super().__init__(text)

    @property
    def out_of_memory(self) -> bool:
        return self.result == "CUDA_ERROR_OUT_OF_MEMORY"


class KernelCompileError(GpubwError):
    """NVRTC could not compile one of gpubw's kernels; carries the compiler log."""


class VerificationError(GpubwError):
    """Copied data did not match the expected pattern."""

    def __init__(
        self, where: str, offset: int, expected: int | None = None, found: int | None = None
    ) -> None:
        self.where = where
        self.offset = offset
        text = f"verification failed on {where}: first bad 32-bit word at byte offset {offset}"
        if expected is not None and found is not None:
            text += f" (expected 0x{expected:08x}, found 0x{found:08x})"
        super().__init__(text)


class GateTimeoutError(GpubwError):
    """The spin gate or a stream did not finish within its bounded wait."""


class PluginError(GpubwError):
    """A testcase or writer plugin could not be loaded, declares something unusable (a
    malformed or clashing kernel module, a class that sets its own key) or misbehaved."""


class SimulationError(GpubwError):
    """A simulated fault, or a request the simulated system cannot model."""


class InterruptedRun(KeyboardInterrupt):
    """Raised inside a run when SIGINT/SIGTERM arrives; carries the signal number.

    Like KeyboardInterrupt (which it is), not an Exception: a plugin's ``except Exception``
    or gpubw's own ``except GpubwError`` clean-up cannot swallow it."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"interrupted by signal {signum}")
