"""How the run command speaks: gpubw's own way, or that of another command that runs gpubw
underneath (``gpubw-nvbandwidth``).

Cut out of the command's dispatcher as its own light module: :mod:`gpubw.cli.nvbandwidth`
names its flavour before the run's modules are imported (they are imported under the run's
signal guard), and the dispatcher needs the type only.
"""

from __future__ import annotations

from collections.abc import Callable

from gpubw.cli.listing import PROG

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from gpubw.model.results import Report


class Flavour:
    """How the run command speaks: gpubw's own way (:data:`GPUBW`), or another command's
    that runs gpubw underneath (``gpubw-nvbandwidth``: :mod:`gpubw.cli.nvbandwidth`). The
    command line it is given is always gpubw's own; the flavour decides only how the run
    ends: the name on error lines, the exit code of a usage error, the exit code of a run
    (``exit_code(report)``) and the error line it prints after one (``failure(report)``, ""
    for none), whether a testcase Error stops the run, extra warnings for the report, and
    how to suggest a simulated system when there is no driver (``simulate_hint``: its
    words before ``NAME`` replace ``--simulate `` in the driver's message)."""

    __slots__ = ("exit_code", "failure", "prog", "simulate_hint", "stop_on_error",
                 "usage_exit", "warnings")  # fmt: skip

    def __init__(
        self,
        *,
        prog: str = PROG,
        usage_exit: int = 2,
        exit_code: Callable[[Report], int] | None = None,
        failure: Callable[[Report], str] | None = None,
        stop_on_error: bool = False,
        warnings: tuple[str, ...] = (),
        simulate_hint: str = "",
    ) -> None:
        self.prog, self.usage_exit, self.stop_on_error = prog, usage_exit, stop_on_error
        self.exit_code = exit_code or (lambda report: int(report.exit_code))
        self.failure = failure or (lambda report: str(report.error))
        self.warnings = warnings
        self.simulate_hint = simulate_hint or f"{PROG} --simulate NAME"


#: the gpubw command's own flavour
GPUBW = Flavour()
