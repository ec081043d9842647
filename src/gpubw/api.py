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

This module is also where the CLI gets its System and its selection from, so both take the
same path.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from gpubw.memory.system import System
from gpubw.model.errors import UsageError
from gpubw.model.options import Invocation, RunOptions
from gpubw.model.results import Report

if TYPE_CHECKING:
    from gpubw.runner.simulation import Opener

#: what ``simulate`` accepts: None (real GPUs), a preset name, or a JSON system file's path
Simulate = str | os.PathLike[str] | None
#: one buffer size: bytes (int) or a size text as ``-b`` takes it ("512MiB", "1GiB", "64")
Size = int | str


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


def select(
    testcases: Iterable[str | int] = (), prefixes: Iterable[str] = ()
) -> tuple[list[Any], list[str]]:
    """(what to run, warnings) for testcase keys or indexes, or key prefixes (neither: all),
    as ``gpubw -t`` / ``-p`` select them: an unknown key or index is kept as a Not Found entry;
    a prefix matching nothing and both at once raise :class:`UsageError` or
    :class:`gpubw.runner.registry.SelectionError`. The warnings name plugins that lost a duplicate
    testcase key."""
    from gpubw.runner.registry import Registry

    registry = Registry.discover()
    selection = registry.select([str(t) for t in testcases], [str(p) for p in prefixes])
    warnings = [f"plugin {f.plugin!r}: {f.message}" for f in registry.unlisted_failures]
    return selection, warnings


def buffer_sizes(sizes: Size | Sequence[Size]) -> tuple[int, ...]:
    """Sizes in bytes: an int is bytes; a string is read as ``-b`` reads it (a plain number
    is MiB; "1GiB", "64,512", "1MiB:4GiB:x2" work too). Raises :class:`UsageError`."""
    from gpubw.model.sizes import parse_sizes

    items = [sizes] if isinstance(sizes, (int, str)) else _sequence("sizes", sizes)
    out: list[int] = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (int, str)):
            raise UsageError(
                f"invalid buffer size {item!r}: expected a number of bytes (int) or a size "
                "text such as '512MiB'"
            )
        if isinstance(item, str):
            out += parse_sizes(item)
        elif item < 1:
            raise UsageError(f"invalid buffer size {item!r}: a number of bytes must be >= 1")
        else:
            out.append(item)
    if not out:
        raise UsageError("sizes is empty: give at least one buffer size")
    return tuple(out)


def _sequence(param: str, value: Any) -> list[Any]:
    """``value``, a list or other iterable of items (not one text, one number or bytes), as a
    list; else a UsageError naming ``param`` and what it takes."""
    what = {
        "testcases": "a list of testcase keys or indexes (['device_local_copy', 0])",
        "prefixes": "a list of testcase key prefixes (['device_local'])",
        "sizes": "a buffer size (an int of bytes or a text such as '512MiB') or a list of them",
    }[param]
    if isinstance(value, (str, bytes, bytearray)):
        one = value.decode(errors="replace") if isinstance(value, (bytes, bytearray)) else value
        hint = repr(one) if param == "sizes" else repr([one])
        raise UsageError(
            f"{param} must be {what}, not a {type(value).__name__}: pass {hint}",
            param=_PARAMS[param],
        )
    try:
        return list(value)
    except TypeError:
        raise UsageError(
            f"{param} must be {what}, got {type(value).__name__} {value!r}",
            param=_PARAMS[param],
        ) from None


#: gpubw.run's arguments -> the parameter names UsageError.param uses (the CLI's flags)
_PARAMS = {"testcases": "testcases", "prefixes": "testcase_prefixes", "sizes": "sizes"}


def _selection(
    testcases: Iterable[str | int] | None, prefixes: Iterable[str] | None
) -> tuple[list[str | int], list[str]]:
    """``gpubw.run``'s testcases and prefixes, checked: None is "not given"; an empty list
    selects nothing and is refused (None, or leaving it out, runs every testcase)."""
    out: dict[str, list[Any]] = {}
    for param, value in (("testcases", testcases), ("prefixes", prefixes)):
        items = [] if value is None else _sequence(param, value)
        if value is not None and not items:
            raise UsageError(
                f"{param}=[] selects nothing; pass None (or leave {param} out) for every testcase",
                param=_PARAMS[param],
            )
        kinds = (str, int) if param == "testcases" else (str,)
        for item in items:
            if isinstance(item, bool) or not isinstance(item, kinds):
                raise UsageError(
                    f"{param} items must be {' or '.join(k.__name__ for k in kinds)}, got "
                    f"{type(item).__name__} {item!r}",
                    param=_PARAMS[param],
                )
        out[param] = items
    return out["testcases"], out["prefixes"]


def _check_run_arguments(simulate: Any, options: Any, progress: Any, handle_signals: Any) -> None:
    """UsageError for an argument of :func:`run` of the wrong kind, naming it."""
    if simulate is not None and not isinstance(simulate, (str, os.PathLike)):
        raise UsageError(
            "simulate must be None (the real GPUs), a preset name or a system file's path, "
            f"got {type(simulate).__name__} {simulate!r}"
        )
    if options is not None and not isinstance(options, RunOptions):
        raise UsageError(f"options must be a RunOptions or None, got {type(options).__name__}")
    if progress is not None and not callable(progress):
        raise UsageError(
            "progress must be a function taking a gpubw.Progress, or None; got "
            f"{type(progress).__name__} {progress!r}"
        )
    if not isinstance(handle_signals, bool):
        raise UsageError(f"handle_signals must be True or False, got {handle_signals!r}")


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
    list (it selects nothing). ``sizes`` are buffer sizes (:func:`buffer_sizes`; default
    512 MiB). ``options`` is how to measure (default :class:`RunOptions`); keyword
    ``overrides`` replace its fields (``samples=5``, ``loops``, ``statistic``, ``verify``,
    ``affinity``, ``gate_timeout_s``, ...). ``simulate`` None runs on this machine's GPUs,
    else on a simulated preset or system file. ``progress`` receives a
    :class:`gpubw.Progress` per step start and end.

    Testcase failures are in the Report (``report.exit_code`` is gpubw's exit code for it);
    the run itself raises :class:`UsageError` for bad arguments (naming the argument and
    what it takes; an option of the wrong type too, such as ``verify="no"``),
    :class:`NoDriverError` when there is no NVIDIA driver. Ctrl-C raises KeyboardInterrupt
    (the System is closed first) unless ``handle_signals=True``, which installs SIGINT/SIGTERM
    handlers for the run (main thread only): the current testcase is then Interrupted and the
    partial Report returned.
    """
    from gpubw.runner import core as runner
    from gpubw.runner.simulation import resolve_simulation

    _check_run_arguments(simulate, options, progress, handle_signals)
    run_options = _options(options, sizes, overrides)
    testcases, prefixes = _selection(testcases, prefixes)
    simulation = resolve_simulation(simulate)
    selection, warnings = select(testcases, prefixes)
    invocation = Invocation(
        testcase=[str(t) for t in testcases],
        testcase_prefixes=prefixes,
        format=None,
        simulate=None if simulation is None else simulation.name,
    )
    listeners = () if progress is None else (runner.ProgressListener(progress),)
    spec = runner.RunSpec(
        selection,
        run_options,
        simulation=simulation,
        invocation=invocation,
        warnings=warnings,
        listeners=listeners,
        handle_signals=handle_signals,
    )
    return runner.run(spec)


def _options(
    options: RunOptions | None, sizes: Size | Sequence[Size] | None, overrides: dict[str, Any]
) -> RunOptions:
    """``options`` (default RunOptions) with ``sizes`` and the ``overrides`` of its fields
    (None: left as it is); UsageError for a field that does not exist or a bad value."""
    fields = {f.name for f in attrs.fields(RunOptions)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise UsageError(
            f"gpubw.run() got unknown option(s) {', '.join(unknown)}; RunOptions fields: "
            f"{', '.join(sorted(fields))}"
        )
    changes = {k: v for k, v in overrides.items() if v is not None}
    if sizes is not None:
        changes["buffer_sizes"] = buffer_sizes(sizes)
    try:
        return attrs.evolve(options or RunOptions(), **changes)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"invalid run option: {exc}") from None


def report_to_dict(report: Report) -> dict[str, Any]:
    """The report as the plain data of its JSON document (schema ``report-v1``)."""
    from gpubw.model import report_io

    return report_io.report_to_dict(report)


def report_to_json(report: Report) -> str:
    """The schema-validated JSON text that ``gpubw -j`` writes for ``report``."""
    from gpubw.model import report_io

    return report_io.dumps(report)
