"""The plugin seam: subclass :class:`Testcase`, register it in ``gpubw.testcases``.

A testcase's key is its entry-point name: the registry passes it to the constructor (a class
never states it; the same class may serve under several keys). Its description is its
docstring; ``kernel_modules`` names the CUDA kernel modules it launches kernels of, which the
runner has the System load before ``run()`` (:class:`gpubw.kernels.modules.KernelModule`;
code that runs a testcase itself calls ``system.load_kernel_modules(tc.kernel_modules)``
first). ``filter()``
says whether this system can run it (return ``self.waive("reason")`` to waive);
``run(size, loops)`` measures and returns :class:`gpubw.model.results.Matrix` objects. It never
prints.

Minimal example (a third-party package)::

    from gpubw import BANDWIDTH, CE, Copy, DeviceBuffer, Kind, Matrix, MemcpyOperation, Testcase

    class LocalCopy(Testcase):
        \"\"\"Copy engine copy inside each device.\"\"\"

        def run(self, size, loops):
            op = MemcpyOperation(self.system, CE, loops=loops)
            ...
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import ClassVar

from gpubw.backend.base import MULTICAST_OFF, multicast_disabled
from gpubw.kernels.modules import GPUBW, KernelModule
from gpubw.measure.initiators import TMA_MIN_CAPABILITY, has_tma
from gpubw.memory.system import System
from gpubw.model.results import Matrix

__all__ = ["BOUNCE_BUFFERS", "MULTICAST_OFF", "Testcase", "multicast_disabled"]

#: why a testcase is waived under Confidential Computing (nvbandwidth v0.10's words)
BOUNCE_BUFFERS = "bounce-buffer confidential computing enabled"


class Testcase:
    """Base class of every testcase."""

    __test__ = False  # not a pytest class, whatever the test module imports

    #: the kernel modules whose kernels the testcase launches, loaded by the System before
    #: it runs with gpubw's protocol kernels (the spin gate, fill, verify: every measurement
    #: uses them): gpubw's copy kernels by default; ``()`` for a testcase whose copies are the
    #: copy engine's (it never waits for gpubw.cu to compile); a plugin adds its own,
    #: ``kernel_modules = (*Testcase.kernel_modules, MODULE)``
    kernel_modules: ClassVar[tuple[KernelModule, ...]] = (GPUBW,)
    #: True for testcases that ignore the buffer size (latency): the runner runs them once
    fixed_size: ClassVar[bool] = False
    #: False for testcases that run only when named (``-t``/``-p``), not in the default suite
    #: (the pageable copies: seconds each, and not nvbandwidth's)
    in_default_suite: ClassVar[bool] = True

    #: the entry-point name this instance runs under (given by the registry; results are
    #: keyed by it)
    key: str

    def __init__(self, system: System, key: str) -> None:
        if not isinstance(key, str):
            raise TypeError(f"a testcase's key is its entry-point name (a str), got {key!r}")
        if not key:
            raise ValueError("a testcase's key is its entry-point name; got an empty one")
        self.system = system
        self.key = key
        self.waive_reason = ""

    @classmethod
    def description(cls) -> str:
        """The class docstring, dedented (what ``gpubw -l`` shows)."""
        return inspect.cleandoc(cls.__doc__ or "").strip()

    def filter(self) -> bool:
        """Whether this system can run the testcase. Return ``self.waive(reason)`` if not."""
        return True

    def waive(self, reason: str) -> bool:
        """Record why the testcase cannot run here; returns False (for ``filter``)."""
        self.waive_reason = reason
        return False

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        """Measure with buffers of ``size`` bytes and ``loops`` copies per sample."""
        raise NotImplementedError(f"{type(self).__name__}.run() is not implemented")

    # -- conveniences ---------------------------------------------------------------------
    @property
    def device_count(self) -> int:
        return self.system.device_count

    def selected(self, index: int) -> bool:
        """Whether row/column ``index`` (a GPU) is measured in this run: every one, unless
        ``--devices``/``--pair`` named some; the cells of the others stay None. A plugin's
        testcase that walks the GPUs itself should skip the ones this says no to."""
        return self.system.selected(index)

    def needs_multicast(self) -> bool:
        """The filter of any testcase that would create NVLink multicast objects: waived when
        the environment disables multicast (NCCL_NVLS_ENABLE=0,
        TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1 or
        GPUBW_DISABLE_MULTICAST=1), checked before
        anything touches a device, or when a device does not support it."""
        setting = multicast_disabled()
        if setting:
            return self.waive(
                f"NVLink multicast is disabled here ({setting}); gpubw never "
                "creates multicast objects then"
            )
        lacking = [d.ordinal for d in self.system.devices if not d.multicast_supported]
        if lacking:
            return self.waive(
                "needs devices with NVLink multicast support; device(s) "
                f"{', '.join(map(str, lacking))} have none"
            )
        return True

    def no_bounce_buffers(self) -> bool:
        """The filter of the host <-> device testcases whose figures mean nothing where
        Confidential Computing sends CPU <-> GPU traffic through encrypted bounce buffers
        (nvbandwidth v0.10's CC filter; docs/compatibility.md lists them): waived there,
        run where CC is off or unknown."""
        if self.system.confidential_compute():
            return self.waive(BOUNCE_BUFFERS)
        return True

    def needs_tma(self) -> bool:
        """The filter of the TMA testcases: waived where a measured device has no TMA (compute
        capability below 9.0), naming them. Here, not in a testcase module, so that ``-t KEY``
        imports only KEY's module."""
        lacking = [d for d in self.system.devices if self.selected(d.ordinal) and not has_tma(d)]
        if not lacking:
            return True
        major, minor = TMA_MIN_CAPABILITY
        found = ", ".join(
            f"{d.ordinal} ({d.compute_capability[0]}.{d.compute_capability[1]})" for d in lacking
        )
        return self.waive(
            f"needs TMA (compute capability {major}.{minor} or newer); device(s) {found} have none"
        )

    def needs_peers(self) -> bool:
        """The common filter of peer testcases (nvbandwidth's): at least one ordered pair of
        distinct devices with peer access."""
        n = self.system.device_count
        pairs = self.system.peer_pairs()
        chosen = self.system.selection
        if (
            pairs
            and chosen is not None
            and not any(self.system.selected(a) and self.system.selected(b) for a, b in pairs)
        ):  # --devices/--pair left no pair to measure: every cell would be null
            gpus = ", ".join(str(d) for d in sorted(chosen))
            return self.waive(
                f"needs 2 selected devices with peer access; the selection has {len(chosen)} "
                f"(GPU {gpus})"
            )
        if pairs:
            return True
        if n < 2:
            return self.waive(f"needs 2 devices with peer access; found {n} device")
        return self.waive(
            f"needs 2 devices with peer access; none of the {n} devices can access another"
        )
