"""The plugin seam: subclass :class:`Testcase`, register it in ``gpubw.testcases``.

A testcase's key is its entry-point name; its description is its docstring. ``filter()``
says whether this system can run it (return ``self.waive("reason")`` to waive);
``run(size, loops)`` measures and returns :class:`gpubw.results.Matrix` objects. It never
prints.

Minimal example (a third-party package)::

    from gpubw import Testcase, Matrix, CE, MemcpyOperation, Copy, DeviceBuffer, one_by_n

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

from gpubw.results import Matrix
from gpubw.system import System


class Testcase:
    """Base class of every testcase."""

    #: the entry-point name; set by the registry (a class may also set it itself)
    key: ClassVar[str] = ""
    #: True for testcases that ignore the buffer size (latency): the runner runs them once
    fixed_size: ClassVar[bool] = False

    def __init__(self, system: System) -> None:
        self.system = system
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

    def needs_peers(self) -> bool:
        """The common filter of peer testcases (nvbandwidth's): at least one ordered pair of
        distinct devices with peer access."""
        n = self.system.device_count
        if self.system.peer_pairs():
            return True
        if n < 2:
            return self.waive(f"needs 2 devices with peer access; found {n} device")
        return self.waive(
            f"needs 2 devices with peer access; none of the {n} devices can access another"
        )
