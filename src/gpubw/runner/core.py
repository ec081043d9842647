"""Run the selected testcases and build the :class:`gpubw.model.results.Report`.

The run's :class:`RunOptions` travel one way: :func:`run` hands them to the function that
opens the System, and everything below reads ``system.options``. For each selected testcase,
in order (duplicates kept, as nvbandwidth), and for each buffer size (a ``fixed_size``
testcase runs once): construct it with the run's System, ``filter()`` (False: Waived with its
reason), ``run(size, loops)`` (Passed with its matrices). Anything a plugin raises becomes an
Error entry with the message, and the run goes on; the results of completed testcases are
always kept. Plugin code (constructor, ``filter()``, ``run()``) and the check of what it
returned run inside one guard: any ``BaseException`` there -- ``SystemExit``, a
``KeyboardInterrupt`` the plugin raised itself, anything else -- becomes that testcase's Error;
what the plugin printed to standard output is captured (:mod:`gpubw.runner.capture`) and kept as the
result's ``output``. With ``handle_signals=True`` (the CLI) SIGINT/SIGTERM stop the run
(:mod:`gpubw.runner.interrupts`): the current testcase is Interrupted, nothing further runs, and
the System is still closed. Without it no handler is touched: Ctrl-C raises
KeyboardInterrupt out of :func:`run` (the System closed), so a ``KeyboardInterrupt`` from a
plugin is then taken for Ctrl-C and not caught.

Nothing here prints: progress goes to an optional callback, everything else into the Report.
What a run is (:class:`gpubw.runner.spec.RunSpec`), the checks before it starts
(:mod:`gpubw.runner.checks`) and its state as it goes (:mod:`gpubw.runner.state`) were cut out
of this module along those seams; it keeps the loop over testcases and sizes.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from gpubw.memory.system import System
from gpubw.model.errors import GpubwError, InterruptedRun, NoDriverError
from gpubw.model.events import Finished, RunEvents, RunListener, Step
from gpubw.model.options import DEFAULT_BUFFER_SIZE
from gpubw.model.report_io import device_record, matrix_problem
from gpubw.model.results import Matrix, Report, Status, TestcaseResult
from gpubw.model.sizes import format_size
from gpubw.runner.capture import OutputCapture, joined
from gpubw.runner.checks import check_sizes_everywhere, sample_pairs_note
from gpubw.runner.interrupts import HANDLED_SIGNALS, RankSignals, SignalGuard, Signals, current
from gpubw.runner.plugin_errors import describe
from gpubw.runner.procstate import kept
from gpubw.runner.ranks import Ranks
from gpubw.runner.registry import Entry, Selected, Unresolved
from gpubw.runner.simulation import Opener, run_rack
from gpubw.runner.spec import RunSpec
from gpubw.runner.state import RunState, software_versions, start_state
from gpubw.world import SingleWorld, World, WorldError

__all__ = ["HANDLED_SIGNALS", "Progress", "ProgressCallback", "ProgressListener", "run"]


@attrs.frozen
class Progress:
    """One step of the run, as :func:`gpubw.run`'s ``progress`` callback receives it.

    ``phase`` is "start" (``result`` None) or "end" (``result`` set); ``done`` counts the
    steps finished before this event, out of ``total`` (one step per testcase and size).
    ``header`` is the run's Report so far without testcases (system, devices, versions,
    options, warnings): what a streaming writer prints before the first testcase.
    """

    phase: str
    done: int
    total: int
    key: str
    size: int | None
    result: TestcaseResult | None = None
    header: Report | None = None


ProgressCallback = Callable[[Progress], None]


class ProgressListener(RunListener):
    """A ``progress`` callback as a run listener: one :class:`Progress` at the start and one
    at the end of every step, each carrying the run's header."""

    def __init__(self, callback: ProgressCallback) -> None:
        self.callback = callback
        self.header: Report | None = None

    def run_started(self, header: Report, system: Any) -> Report:
        self.header = header
        return header

    def testcase_started(self, step: Step) -> None:
        self.callback(
            Progress("start", step.done, step.total, step.key, step.size, None, self.header)
        )

    def testcase_finished(self, finished: Finished, so_far: Report) -> Finished:
        step = finished.step
        self.callback(
            Progress(
                "end", step.done + 1, step.total, step.key, step.size, finished.result, self.header
            )
        )
        return finished


def _steps(item: Selected, sizes: Sequence[int]) -> list[int | None]:
    """The sizes one selected item runs at (None: once, without a size)."""
    if isinstance(item, Entry) and item.cls is not None and not item.cls.fixed_size:
        return list(sizes)
    return [None]


def _check_matrices(value: object, *, structure: bool = True) -> tuple[Matrix, ...] | str:
    """The matrices ``run`` returned, or what is wrong with its return value. ``structure``:
    also check each matrix against the schema's matrix definition (a plugin's); gpubw's own
    testcases build theirs by the same code every run, proven against the schema by the
    tests, so only their values are checked (jsonschema's import, 30-90 ms, then waits for
    the report's own validation at the end)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        return f"run() returned {type(value).__name__} {value!r:.80}, not Matrix results"
    bad = [v for v in value if not isinstance(v, Matrix)]
    if bad:
        return (
            f"run() returned a {type(value).__name__} holding {type(bad[0]).__name__} "
            f"{bad[0]!r:.80}, not Matrix results"
        )
    if not value:
        return "run() returned no Matrix results"
    for m in value:
        problem = matrix_problem(m, structure=structure)
        if problem:
            return f"run() returned matrix {m.key!r:.60} that breaks the report schema: {problem}"
    return tuple(value)


def _release(system: System) -> None:
    """Free whatever buffers the last testcase left behind (errors while freeing are not the
    testcase's result; the System's close reports them at the end)."""
    with contextlib.suppress(Exception):
        system.release_leaked()


def _name(signum: int) -> str:
    """A signal's name ("SIGINT"); a number that is no signal, as "signal N"."""
    try:
        return signal.Signals(signum).name
    except (ValueError, TypeError):
        return f"signal {signum}"


def _passes(exc: BaseException, guard: Signals | None) -> bool:
    """True for what must leave the per-testcase guard: the interrupt of a signal that
    arrived; without a signal guard, any KeyboardInterrupt (Ctrl-C under Python's default
    handler cannot be told from one a plugin raised)."""
    if guard is None:
        return isinstance(exc, KeyboardInterrupt)
    return isinstance(exc, InterruptedRun) and guard.signum is not None


def _run_one(
    entry: Entry, system: System, size: int | None, guard: Signals | None
) -> tuple[Status, str, tuple[Matrix, ...]]:
    """filter() then run() then the check of what it returned; returns (status, message,
    matrices). Anything raised is an Error, except a signal's interrupt (:func:`_passes`)."""
    assert entry.cls is not None
    stage = "filter()"
    try:
        testcase = entry.create(system)
        if not testcase.filter():
            return Status.WAIVED, str(testcase.waive_reason), ()
        stage = "run()"
        system.load_kernel_modules(testcase.kernel_modules)
        loops = system.options.loops
        value = testcase.run(size if size is not None else DEFAULT_BUFFER_SIZE, loops)
        stage = "checking what run() returned"
        checked = _check_matrices(value, structure=not entry.builtin)
    except BaseException as exc:  # SystemExit, a plugin's own KeyboardInterrupt, ...
        if _passes(exc, guard):
            raise
        if isinstance(exc, GpubwError) and stage == "run()":
            return Status.ERROR, str(exc), ()  # a CUDA error, a verification mismatch: as is
        return Status.ERROR, f"{entry.plugin} {entry.key}: {stage} failed: {describe(exc)}", ()
    if isinstance(checked, str):
        return Status.ERROR, f"{entry.plugin} {entry.key}: {checked}", ()
    return Status.PASSED, "", checked


def run(spec: RunSpec, world: World | None = None) -> Report:
    """Run ``spec``: its selection at every size of its options' buffer sizes, on the System
    its simulation (or ``open_system``) opens in ``world`` (None: one rank, every GPU), its
    listeners told of every step (:mod:`gpubw.model.events`); returns the Report as the last
    listener's ``run_finished`` left it.

    A failure to open the System becomes the Report's ``error`` (except
    :class:`NoDriverError`, which is raised for the caller to explain). A buffer size that
    cannot fit in a device's or the host's memory raises :class:`UsageError` before anything
    runs (:func:`gpubw.runner.checks.check_sizes`), and so does a listener's ``run_started``. With
    ``handle_signals`` the installed :class:`gpubw.runner.interrupts.SignalGuard` (the
    command's) is used, or one is installed for the run (main thread only); a signal that
    arrived before the System opened gives an interrupted Report with no testcases. The
    System is always closed. A simulated system of several hosts (a rack), run by one
    process, has its ranks emulated here (:func:`gpubw.runner.simulation.run_rack`)."""
    events = RunEvents(spec.listeners)
    world = world if world is not None else SingleWorld()
    rack = spec.simulation is not None and spec.simulation.hosts is not None
    rack = rack and world.size == 1 and spec.open_system is None
    guard = current() if spec.handle_signals else None
    own = None
    if spec.handle_signals and guard is None:
        own = SignalGuard()
        guard = own if own.install() else None
    try:
        if guard is not None and events.writes_when_interrupted:
            guard.emergency_write = events.interrupted
        report = _run_rack(spec, guard, events) if rack else _run(spec, world, guard, events)
        if guard is not None:
            guard.writing()  # from here a signal is only recorded; a watchdog waits for this
        return events.run_finished(report)
    finally:
        if own is not None:
            own.uninstall()


def _run_rack(spec: RunSpec, guard: SignalGuard | None, events: RunEvents) -> Report:
    """A simulated rack: its ranks emulated as threads taking turns (rank 0's steps told to
    the listeners). A signal stops every rank at its next collective (the running testcase
    Interrupted, as in one process; :class:`gpubw.runner.interrupts.RankSignals`), while
    this thread waits for rank 0's report."""
    assert spec.simulation is not None

    def run_rank(open_rank: Opener, world: World) -> Report:
        mine = events if world.rank == 0 else RunEvents()
        signals = None if guard is None else RankSignals(guard, world, world.rank == 0)
        return _run(attrs.evolve(spec, open_system=open_rank), world, signals, mine)

    stop = None if guard is None else RankSignals.stop_of(guard)
    report: Report = run_rack(spec.simulation, run_rank, spec.options.world_timeout_s, stop)
    if guard is not None and guard.signum is not None and report.signal is None:
        # the signal came after rank 0's last collective: the run had finished
        report = attrs.evolve(report, signal=signal.Signals(guard.signum).name)
    return report


def _open(spec: RunSpec, world: World, state: RunState, guard: Signals | None) -> System | Report:
    """The run's System, open, checked (versions read, sizes fit on every rank); or the
    Report of a run that could not start."""
    try:
        system = spec.opener()(spec.options, world)
    except NoDriverError:
        raise
    except GpubwError as exc:
        # a signal that came while the System opened is the run's too (exit 128 + n)
        signum = None if guard is None else guard.signum
        report = attrs.evolve(state.report(signum), error=f"could not start: {exc}")
        if guard is not None:
            guard.final(report)
        return report
    if system.options != spec.options:
        system.close()
        raise ValueError(
            f"open_system must open the System with the options it is given: it was given "
            f"{spec.options!r} and opened one with {system.options!r}"
        )
    try:
        # before the sizes check, which waits for every device's context: the versions need
        # none, and loading NVRTC for its version (~40 ms) overlaps the contexts still being
        # made on the command's start-up thread (issue 11 item 5)
        versions = software_versions(system.backend.versions())
        note = sample_pairs_note(spec.options, max(system.world.size, len(system.devices)))
        check_sizes_everywhere(system, spec.selection, spec.options.buffer_sizes)
    except BaseException:
        system.close()
        raise
    if note is not None:
        state.warnings.append(note)
    state.meta.update(
        backend=system.backend.name,
        simulated=bool(system.backend.simulated),
        versions=versions,
        devices=tuple(device_record(d) for d in system.devices),
    )
    return system


def _run(spec: RunSpec, world: World, guard: Signals | None, events: RunEvents) -> Report:
    state = start_state(spec)
    if guard is not None:
        guard.snapshot = lambda: state.snapshot(guard)
        if guard.signum is not None:  # stopped before anything started
            return _final(state, guard)
    system = _open(spec, world, state, guard)
    if isinstance(system, Report):
        return system
    ranks: Ranks | None = None
    try:
        ranks = Ranks(system)
        state.warnings += ranks.warnings
        state.rank_fields = ranks.report_fields
        header = Report(warnings=list(state.warnings), started=state.started, **state.fields())
        events.run_started(header, system)
        _run_all(_Steps(spec, system, guard, state, ranks, events))
    except WorldError as exc:  # the ranks could not even meet: the run could not start
        state.warnings.append(f"the ranks could not start the run together: {exc}")
    finally:
        if ranks is not None:
            with contextlib.suppress(Exception):
                state.meta.update(ranks.report_fields())
        try:
            system.close()
        except Exception as exc:
            state.warnings.append(f"freeing the system's resources failed: {describe(exc)}")
    return _final(state, guard)


def _final(state: RunState, guard: Signals | None) -> Report:
    """The run's Report, final: the guard's snapshot becomes it, and a later signal is
    absorbed (:meth:`gpubw.runner.interrupts.SignalGuard.final`)."""
    report = state.report(None if guard is None else guard.signum)
    if guard is not None:
        guard.final(report)
    return report


@attrs.frozen
class _Steps:
    """What every step of one run shares."""

    spec: RunSpec
    system: System
    guard: Signals | None
    state: RunState
    ranks: Ranks
    events: RunEvents


def _run_all(run: _Steps) -> None:
    """Every step in order, appending to the state's results; stops once a signal arrived
    (or once the world of ranks broke, or after an Error with ``stop_on_error``: the ranks
    agree on every status, so they all stop at the same step). With ``--soak`` the whole
    selection repeats until its time is up on the backend's clock (the simulated one's is
    modelled time) or on the wall clock, whichever comes first (a simulated soak is never
    longer than asked, nor its report bigger than the wall time allows); the last repetition
    begun runs to its end, so every repetition has every cell."""
    sizes = run.system.options.buffer_sizes
    per_repetition = sum(len(_steps(item, sizes)) for item in run.spec.selection)
    soak = run.system.options.soak_s
    clock = run.system.backend.clock
    began, wall = clock(), time.monotonic()
    repetition = 0
    while _run_selection(run, per_repetition, repetition if soak is not None else None):
        repetition += 1
        if soak is None:
            return
        over = clock() - began >= soak or time.monotonic() - wall >= soak
        if run.system.world.size > 1:  # the ranks' clocks differ: rank 0's decides for all
            over = bool(run.system.world.allgather(over)[0])
        if over:
            return


def _run_selection(run: _Steps, per_repetition: int, repetition: int | None) -> bool:
    """The selection once (one repetition of a soak); False when the run must stop."""
    sizes = run.system.options.buffer_sizes
    first = (repetition or 0) * per_repetition
    total = first + per_repetition
    done = first
    for item in run.spec.selection:
        for size in _steps(item, sizes):
            if run.guard is not None and run.guard.signum is not None:
                return False
            key = item.key if isinstance(item, Entry) else item.token
            step = Step(done, total, key, size, repetition)
            run.events.testcase_started(step)
            result = run.ranks.step(
                lambda it, sys_, sz, _: _step(it, sys_, sz, run), item, run.system, size, run.guard
            )
            if repetition is not None:
                result = attrs.evolve(result, repetition=repetition)
            run.state.results.append(result)
            run.state.current = None
            done += 1
            run.events.testcase_finished(Finished(step, result), run.state.so_far(total))
            if run.ranks.stopped:
                run.state.warnings.append(_not_run(run, step, total - done))
                return False
            if run.spec.stop_on_error and _failed_anywhere(run, result):
                return False  # nvbandwidth's behaviour, and its output: nothing more said
    return True


def _not_run(run: _Steps, step: Step, left: int) -> str:
    """The warning of a run whose ranks broke: where it stopped, why, and how many selected
    steps never ran (rank 0's report would otherwise just end)."""
    where = step.key if step.size is None else f"{step.key} ({format_size(step.size)})"
    scope = "repetition" if step.repetition is not None else "run"
    return (
        f"WARNING: the run stopped after {where}: the ranks can no longer work together "
        f"({run.system.world.broken}); {left} selected step(s) of this {scope} did not run"
    )


def _failed_anywhere(run: _Steps, result: TestcaseResult) -> bool:
    """Whether this step ended in Error on any rank (``stop_on_error``). A single-node
    testcase's status is not agreed between the ranks (each host's first rank runs it), so
    the ranks agree on it here: every rank stops at the same step or none does."""
    failed = result.status is Status.ERROR
    world = run.system.world
    if world.size == 1:
        return failed
    try:
        return not world.agree(result.message if failed else None).ok
    except WorldError:
        return True


def _step(item: Selected, system: System, size: int | None, run: _Steps) -> TestcaseResult:
    """One testcase at one size, always as a TestcaseResult (Interrupted included)."""
    if isinstance(item, Unresolved):
        return TestcaseResult(item.token, Status.NOT_FOUND, item.message)
    common: dict[str, Any] = dict(
        key=item.key,
        index=item.index,
        description=item.description,
        plugin=item.plugin,
        size=size,
    )
    if item.cls is None:
        assert item.failure is not None
        return TestcaseResult(
            status=Status.ERROR,
            message=f"plugin {item.plugin!r} could not be loaded: {item.failure.message}",
            **common,
        )
    guard, state = run.guard, run.state
    t0 = time.perf_counter()
    state.current = (common, t0, len(state.results))
    capture = OutputCapture() if run.spec.capture_output else None
    try:
        with (
            capture or contextlib.nullcontext(),
            kept(),  # folder, umask, signals, fds 1/2 put back; a forked child ends here
            guard.interruptible() if guard is not None else contextlib.nullcontext(),
        ):
            status, message, matrices = _run_one(item, system, size, guard)
    except InterruptedRun as exc:
        signum = guard.signum if guard is not None and guard.signum is not None else exc.signum
        status, message, matrices = Status.INTERRUPTED, f"interrupted by {_name(signum)}", ()
    finally:
        _release(system)
    if status is not Status.PASSED and status is not Status.WAIVED:
        # a failed testcase's buffers may sit idle in the pool: give the memory back
        with contextlib.suppress(Exception):
            system.release_pool()
    if guard is not None and guard.signum is not None and status is not Status.INTERRUPTED:
        # the signal arrived while the plugin swallowed it (a broad except): still stop
        name = signal.Signals(guard.signum).name
        status, message, matrices = Status.INTERRUPTED, f"interrupted by {name}", ()
    return TestcaseResult(
        status=status,
        message=message,
        matrices=matrices,
        duration_s=time.perf_counter() - t0,
        # what its module printed while imported (the first result only), then while it ran
        output=joined(item.take_output(), capture.text if capture is not None else ""),
        **common,
    )
