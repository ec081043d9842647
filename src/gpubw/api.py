"""The Python API for tools that embed gpubw: open a system, run testcases, get a Report.

>>> import gpubw
>>> report = gpubw.run(["device_local_copy", 0], sizes=["64MiB"], simulate="h200x2")
>>> report.exit_code
0

:func:`run` makes the same selection (keys, indexes, prefixes), gives the same Waived, Error
and Not Found entries and the same schema-valid Report as the ``gpubw`` command, but prints
nothing and leaves the process's signal handlers alone unless ``handle_signals=True`` (what
the CLI passes). :func:`open_system` opens the System a testcase runs on, for tools that
drive testcases or measurements themselves.

The run is described and built as the command builds its own
(:func:`gpubw.runner.spec.build_spec`), so both take the same path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from gpubw.memory.system import System
from gpubw.model.options import RunOptions
from gpubw.model.results import Report

if TYPE_CHECKING:
    from gpubw.runner.simulation import Opener
    from gpubw.runner.spec import Simulate, Size


def system_opener(simulate: Simulate = None) -> Opener:
    """A function that opens the System for given RunOptions (and a world; None: one rank
    holding every GPU): on the real GPUs when ``simulate`` is None (the CUDA driver is
    loaded only when it is called), else on the simulated system ``simulate`` names. A
    preset name or system file is checked now (:func:`gpubw.runner.simulation.
    resolve_simulation`): an unknown name or a bad file raises :class:`UsageError` naming it
    and what is allowed."""
    from gpubw.runner.simulation import opener, resolve_simulation

    return opener(resolve_simulation(simulate))


def open_system(simulate: Simulate = None, options: RunOptions | None = None) -> System:
    """Open a :class:`System`: every GPU of this machine when ``simulate`` is None, else the
    simulated system ``simulate`` names (a preset such as ``"h200x2"``, or a JSON system
    file). Use it as a context manager (``with gpubw.open_system("h200x2") as system:``)
    or call ``system.close()``: closing frees every buffer, stream and event it holds.

    Raises :class:`UsageError` for an unknown preset or a bad system file,
    :class:`NoDriverError` when ``simulate`` is None and there is no NVIDIA driver, and
    :class:`CudaError` when CUDA cannot start.
    """
    return system_opener(simulate)(options or RunOptions())


def run(
    testcases: Iterable[str | int] | None = None,
    *,
    prefixes: Iterable[str] | None = None,
    sizes: Size | Sequence[Size] | None = None,
    options: RunOptions | None = None,
    simulate: Simulate = None,
    progress: Callable[[Any], None] | None = None,
    handle_signals: bool = False,
    **overrides: Any,
) -> Report:
    """Run testcases and return the :class:`Report`, as ``gpubw`` would, without printing.

    ``testcases`` are keys or indexes (``["device_local_copy", 0]``); or ``prefixes``
    (``["device_local"]``); with neither (None), every testcase runs. Both are lists: a
    single text is refused (it is not iterated character by character), and so is an empty
    list (it selects nothing). ``sizes`` are buffer sizes
    (:func:`gpubw.runner.spec.buffer_sizes`; default 512 MiB). ``options`` is how to measure
    (default :class:`RunOptions`); keyword ``overrides`` replace its fields (``samples=5``,
    ``loops``, ``statistic``, ``verify``, ``affinity``, ``gate_timeout_s``, ...).
    ``simulate`` None runs on this machine's GPUs, else on a simulated preset or system
    file. ``progress`` receives a :class:`gpubw.Progress` per step start and end.

    Testcase failures are in the Report (``report.exit_code`` is gpubw's exit code for it);
    the run itself raises :class:`UsageError` for bad arguments (naming the argument and
    what it takes; an option of the wrong type too, such as ``verify="no"``),
    :class:`NoDriverError` when there is no NVIDIA driver. Ctrl-C raises KeyboardInterrupt
    (the System is closed first) unless ``handle_signals=True``, which installs SIGINT/SIGTERM
    handlers for the run (main thread only): the current testcase is then Interrupted and the
    partial Report returned.
    """
    from gpubw.runner import core as runner
    from gpubw.runner import spec as runs

    runs.check_run_arguments(simulate, options, progress, handle_signals)
    run_options = runs.run_options(options, sizes, overrides)
    testcases, prefixes = runs.checked_selection(testcases, prefixes)
    request = runs.RunRequest(
        testcases,
        prefixes,
        run_options,
        simulate,
        listeners=() if progress is None else (runner.ProgressListener(progress),),
        handle_signals=handle_signals,
    )
    return runner.run(runs.build_spec(request))


def report_to_dict(report: Report) -> dict[str, Any]:
    """The report as the plain data of its JSON document (schema ``report-v1``)."""
    from gpubw.model import report_io

    return report_io.report_to_dict(report)


def report_to_json(report: Report) -> str:
    """The schema-validated JSON text that ``gpubw -j`` writes for ``report``."""
    from gpubw.model import report_io

    return report_io.dumps(report)
