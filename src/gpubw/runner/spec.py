"""What one run is: the :class:`RunSpec`, and the one way to build it (:func:`build_spec`).

Cut out of :mod:`gpubw.runner.core` along the seam between describing a run and running it.
The ``gpubw`` command and :func:`gpubw.run` both describe the run they want as a
:class:`RunRequest` (checked values: the selection's tokens, the :class:`RunOptions`, what
``--simulate`` names, the record of the command line) and get their :class:`RunSpec` from
:func:`build_spec`: the simulation resolved, the testcases selected, the invocation
recorded, alike for both. The Python API's own argument checks (a selection that is a list,
buffer sizes as ints or ``-b`` texts, option overrides) are here too, next to what they feed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from gpubw.model.errors import UsageError
from gpubw.model.events import RunListener
from gpubw.model.options import Invocation, RunOptions
from gpubw.model.sizes import parse_sizes
from gpubw.runner.listener_plugins import plugin_listeners
from gpubw.runner.registry import Registry, Selected
from gpubw.runner.simulation import Opener, Simulation, opener, resolve_simulation

#: what ``simulate`` accepts: None (real GPUs), a preset name, or a JSON system file's path
Simulate = str | os.PathLike[str] | None
#: one buffer size: bytes (int) or a size text as ``-b`` takes it ("512MiB", "1GiB", "64")
Size = int | str

__all__ = [
    "RunRequest",
    "RunSpec",
    "Simulate",
    "Size",
    "buffer_sizes",
    "build_spec",
    "check_run_arguments",
    "checked_selection",
    "run_options",
    "select",
]


def _selection(items: Iterable[Selected]) -> tuple[Selected, ...]:
    return tuple(items)


def _strs(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(items)


def _tokens(items: Iterable[str | int]) -> tuple[str, ...]:
    return tuple(str(item) for item in items)


def _listeners(items: Iterable[RunListener]) -> tuple[RunListener, ...]:
    return tuple(items)


@attrs.frozen
class RunSpec:
    """Everything one run needs, built the same way by the ``gpubw`` command and by
    :func:`gpubw.run` (:func:`build_spec`): what to run (``selection``, from
    :mod:`gpubw.runner.registry`), how (``options``, sizes included), on what
    (``simulation``: None for the real GPUs; or ``open_system``, a function of tests and
    tools that opens the System itself, with ``system_name`` for the report), the record of
    how it was asked for (``invocation``), warnings found while selecting, and who follows
    the run (``listeners``, in order: see :mod:`gpubw.model.events`). ``handle_signals``:
    SIGINT/SIGTERM stop the run (the command's, or a guard installed for it);
    ``capture_output``: what plugin code prints to standard output goes into its result's
    ``output``; ``stop_on_error``: nothing runs after a testcase that ended in Error
    (nvbandwidth's way: its process ends there)."""

    selection: tuple[Selected, ...] = attrs.field(converter=_selection)
    options: RunOptions = attrs.field(factory=RunOptions)
    simulation: Simulation | None = None
    open_system: Opener | None = None
    system_name: str = ""
    invocation: Invocation | None = None
    warnings: tuple[str, ...] = attrs.field(default=(), converter=_strs)
    listeners: tuple[RunListener, ...] = attrs.field(default=(), converter=_listeners)
    handle_signals: bool = False
    capture_output: bool = True
    stop_on_error: bool = False

    @property
    def name(self) -> str:
        """The simulated system's name for the report ("" on the real GPUs): the model's
        (a preset's name, a system file's ``name``, else that file's name without
        ``.json``); the record of what ``--simulate`` said is the invocation's."""
        return self.simulation.model.name if self.simulation is not None else self.system_name

    def opener(self) -> Opener:
        return self.open_system if self.open_system is not None else opener(self.simulation)


@attrs.frozen
class RunRequest:
    """A run as its caller asks for it, every value checked: the testcase keys or indexes
    (``testcases``) or key prefixes (``prefixes``; neither: the default suite), how to
    measure (``options``), the simulated system (``simulate``: None for the real GPUs), what
    only the report's record keeps (``format``, ``output``, ``perf_formatter``, ``argv``),
    warnings of the caller's own, and the run's ``listeners`` and flags (see
    :class:`RunSpec`)."""

    testcases: tuple[str, ...] = attrs.field(default=(), converter=_tokens)
    prefixes: tuple[str, ...] = attrs.field(default=(), converter=_strs)
    options: RunOptions = attrs.field(factory=RunOptions)
    simulate: Simulate = None
    format: str | None = None
    output: str | None = None
    perf_formatter: bool = False
    argv: tuple[str, ...] = attrs.field(default=(), converter=_strs)
    warnings: tuple[str, ...] = attrs.field(default=(), converter=_strs)
    listeners: tuple[RunListener, ...] = attrs.field(default=(), converter=_listeners)
    handle_signals: bool = False
    stop_on_error: bool = False


def build_spec(request: RunRequest) -> RunSpec:
    """The :class:`RunSpec` of ``request``: its simulation resolved (a bad one is a
    UsageError naming ``simulate``, which the command shows as ``--simulate``), its testcases
    selected (:func:`select`: its warnings lead the caller's), its invocation recorded, the
    installed listener plugins after the caller's listeners
    (:func:`gpubw.runner.listener_plugins.plugin_listeners`)."""
    try:
        simulation = resolve_simulation(request.simulate)
    except UsageError as exc:
        raise UsageError(str(exc), param="simulate") from None
    selection, warnings = select(request.testcases, request.prefixes)
    invocation = Invocation(
        testcase=request.testcases,
        testcase_prefixes=request.prefixes,
        format=request.format,
        output=request.output,
        simulate=None if simulation is None else simulation.name,
        perf_formatter=request.perf_formatter,
        argv=request.argv,
    )
    return RunSpec(
        selection,
        request.options,
        simulation=simulation,
        invocation=invocation,
        warnings=[*warnings, *(simulation.warnings if simulation else ()), *request.warnings],
        # --trace: its listener first, so that it marks a step before the others start
        # their work on it, and puts the trace in the Report before any of them writes it
        listeners=(*_tracing(request.options), *request.listeners, *plugin_listeners()),
        handle_signals=request.handle_signals,
        stop_on_error=request.stop_on_error,
    )


def _tracing(options: RunOptions) -> tuple[RunListener, ...]:
    """The trace's listener when the options ask for a trace (``--trace``), else none."""
    if not options.trace:
        return ()
    from gpubw.runner.tracing import TraceListener

    return (TraceListener(),)


def select(
    testcases: Iterable[str | int] = (), prefixes: Iterable[str] = ()
) -> tuple[list[Selected], list[str]]:
    """(what to run, warnings) for testcase keys or indexes, or key prefixes (neither: all),
    as ``gpubw -t`` / ``-p`` select them: an unknown key or index is kept as a Not Found
    entry; a prefix matching nothing and both at once raise :class:`UsageError` or
    :class:`gpubw.runner.registry.SelectionError`. The warnings name plugins that lost a
    duplicate testcase key."""
    registry = Registry.discover()
    selection = registry.select([str(t) for t in testcases], [str(p) for p in prefixes])
    warnings = [f"plugin {f.plugin!r}: {f.message}" for f in registry.unlisted_failures]
    return selection, warnings


# -- the Python API's arguments, checked -------------------------------------------------------
def buffer_sizes(sizes: Size | Sequence[Size]) -> tuple[int, ...]:
    """Sizes in bytes: an int is bytes; a string is read as ``-b`` reads it (a plain number
    is MiB; "1GiB", "64,512", "1MiB:4GiB:x2" work too). Raises :class:`UsageError`."""
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


def checked_selection(
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


def check_run_arguments(simulate: Any, options: Any, progress: Any, handle_signals: Any) -> None:
    """UsageError for an argument of :func:`gpubw.run` of the wrong kind, naming it."""
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


def run_options(
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
