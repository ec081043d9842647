"""Run the selected testcases and build the :class:`gpubw.results.Report`.

The run's :class:`RunOptions` travel one way: :func:`run` hands them to the function that
opens the System, and everything below reads ``system.options``. For each selected testcase,
in order (duplicates kept, as nvbandwidth), and for each buffer size (a ``fixed_size``
testcase runs once): construct it with the run's System, ``filter()`` (False: Waived with its
reason), ``run(size, loops)`` (Passed with its matrices). Anything a plugin raises becomes an
Error entry with the message, and the run goes on; the results of completed testcases are
always kept. With ``handle_signals=True`` (the CLI) SIGINT/SIGTERM stop the run: the current
testcase is Interrupted, nothing further runs, and the System is still closed. Without it no
handler is touched: Ctrl-C raises KeyboardInterrupt out of :func:`run` (the System closed).

Nothing here prints: progress goes to an optional callback, everything else into the Report.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.metadata
import platform
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from gpubw.errors import GpubwError, InterruptedRun, NoDriverError, UsageError
from gpubw.options import DEFAULT_BUFFER_SIZE, Invocation, RunOptions
from gpubw.ranks import Ranks
from gpubw.registry import Entry, Selected, Unresolved
from gpubw.report_io import device_record, matrix_problem
from gpubw.results import Matrix, Report, Status, TestcaseResult
from gpubw.sizes import format_size
from gpubw.system import System
from gpubw.version import __version__
from gpubw.world import WorldError

#: nvbandwidth's warning for a buffer smaller than the default; its "(64MB)" is stale
#: (the default is 512 MiB), so gpubw names the right figure.
SMALL_BUFFER_NOTE = (
    "NOTE: You have chosen a buffer size that is smaller than the default buffer size. "
    "It is suggested to use the default buffer size (512 MiB) to achieve maximal peak "
    "bandwidth."
)
#: the signals that stop a run when :func:`run` handles signals
HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@attrs.frozen
class Progress:
    """One step of the run, for a progress display.

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


def _now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="milliseconds")


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def software_versions(backend_versions: dict[str, Any]) -> dict[str, Any]:
    """The backend's versions plus Python's and the CUDA Python packages' (read from their
    metadata, without importing them)."""
    versions = dict(backend_versions)
    versions.setdefault("python", platform.python_version())
    versions.setdefault("cuda_bindings", _dist_version("cuda-bindings"))
    versions.setdefault("cuda_core", _dist_version("cuda-core"))
    return versions


def small_buffer_warnings(selection: Sequence[Selected], sizes: Sequence[int]) -> list[str]:
    """nvbandwidth's NOTE when a buffer is smaller than the 512 MiB default (only if some
    selected testcase uses the size at all)."""
    sized = any(isinstance(s, Entry) and not s.fixed_size for s in selection)
    if sized and any(size < DEFAULT_BUFFER_SIZE for size in sizes):
        return [SMALL_BUFFER_NOTE]
    return []


def check_sizes(system: System, selection: Sequence[Selected], sizes: Sequence[int]) -> None:
    """Refuse, before anything runs, a buffer size that cannot fit: larger than the total
    memory of the smallest device, or than the host's physical memory (pinned buffers).
    Only sizes that some selected testcase uses count. Raises :class:`UsageError`."""
    sized = any(isinstance(s, Entry) and s.cls is not None and not s.fixed_size for s in selection)
    if not sized or not sizes:
        return
    largest = max(sizes)
    if system.devices:
        small = min(system.devices, key=lambda d: d.memory_bytes)
        if largest > small.memory_bytes:
            raise UsageError(
                f"buffer size {format_size(largest)} ({largest} bytes) is larger than the "
                f"memory of device {small.ordinal} ({small.name}, {format_size(small.memory_bytes)}"
                f"); it must be at most {small.memory_bytes} bytes",
                param="sizes",
            )
    host = system.backend.host_memory_bytes()
    if host is not None and largest > host:
        raise UsageError(
            f"buffer size {format_size(largest)} ({largest} bytes) is larger than the host's "
            f"memory ({format_size(host)}); it must be at most {host} bytes",
            param="sizes",
        )


def _steps(item: Selected, sizes: Sequence[int]) -> list[int | None]:
    """The sizes one selected item runs at (None: once, without a size)."""
    if isinstance(item, Entry) and item.cls is not None and not item.cls.fixed_size:
        return list(sizes)
    return [None]


def _describe(exc: BaseException) -> str:
    """A message for a testcase error: gpubw's own errors as they are, others with their
    type (they are plugin bugs)."""
    if isinstance(exc, GpubwError):
        return str(exc)
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _check_matrices(value: object) -> tuple[Matrix, ...] | str:
    """The matrices ``run`` returned, or what is wrong with its return value."""
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
        problem = matrix_problem(m)
        if problem:
            return f"run() returned matrix {m.key!r:.60} that breaks the report schema: {problem}"
    return tuple(value)


class _Signals:
    """SIGINT/SIGTERM handlers for the duration of a run: while testcases run, every signal
    raises :class:`InterruptedRun` in the main thread (a second Ctrl-C still stops a plugin
    that swallowed the first); once clean-up has begun they are only recorded."""

    def __init__(self, enabled: bool = True) -> None:
        #: False: install() is a no-op (the process's handlers stay as they are)
        self.enabled = enabled
        self.signum: int | None = None
        #: False once testcases are over: a signal during clean-up is only recorded
        self.raising = True
        self._old: dict[int, Any] = {}

    def _handler(self, signum: int, _frame: object) -> None:
        if self.signum is None:
            self.signum = signum
        if self.raising:
            raise InterruptedRun(self.signum)

    def install(self) -> None:
        """Install the handlers (only when enabled, and only possible in the main thread;
        elsewhere a no-op)."""
        if self.enabled and threading.current_thread() is threading.main_thread():
            for sig in HANDLED_SIGNALS:
                self._old[sig] = signal.signal(sig, self._handler)

    def uninstall(self) -> None:
        """Put back the handlers that were there before."""
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()


def _release(system: System) -> None:
    """Free whatever buffers the last testcase left behind (errors while freeing are not the
    testcase's result; the System's close reports them at the end)."""
    with contextlib.suppress(Exception):
        system.release_leaked()


def _run_one(
    entry: Entry, system: System, size: int | None
) -> tuple[Status, str, tuple[Matrix, ...]]:
    """filter() then run(); returns (status, message, matrices). InterruptedRun passes."""
    assert entry.cls is not None
    try:
        testcase = entry.create(system)
        if not testcase.filter():
            return Status.WAIVED, testcase.waive_reason, ()
    except InterruptedRun:
        raise
    except Exception as exc:
        return Status.ERROR, f"{entry.plugin} {entry.key}: filter() failed: {_describe(exc)}", ()
    try:
        system.load_kernel_modules(testcase.kernel_modules)
        loops = system.options.loops
        value = testcase.run(size if size is not None else DEFAULT_BUFFER_SIZE, loops)
    except InterruptedRun:
        raise
    except GpubwError as exc:  # a CUDA error, a verification mismatch, ...: as it is
        return Status.ERROR, str(exc), ()
    except Exception as exc:  # a plugin bug: name the distribution and the testcase
        return Status.ERROR, f"{entry.plugin} {entry.key}: run() failed: {_describe(exc)}", ()
    checked = _check_matrices(value)
    if isinstance(checked, str):
        return Status.ERROR, f"{entry.plugin} {entry.key}: {checked}", ()
    return Status.PASSED, "", checked


def run(
    open_system: Callable[[RunOptions], System],
    selection: Sequence[Selected],
    options: RunOptions | None = None,
    *,
    invocation: Invocation | None = None,
    system_name: str = "",
    warnings: Sequence[str] = (),
    progress: ProgressCallback | None = None,
    handle_signals: bool = False,
    partial: Callable[[Report], None] | None = None,
) -> Report:
    """Run ``selection`` at every size of ``options.buffer_sizes`` on the System that
    ``open_system(options)`` opens.

    ``invocation`` is recorded in the Report as it is. A failure to open the System becomes
    the Report's ``error`` (except :class:`NoDriverError`, which is raised for the caller to
    explain). A buffer size that cannot fit in a device's or the host's memory raises
    :class:`UsageError` before anything runs (:func:`check_sizes`). ``handle_signals``
    installs SIGINT/SIGTERM handlers for the run (main thread only) and puts the old ones
    back. The System is always closed. ``partial`` (if given) receives the Report so far
    after each testcase (rank 0 of an MPI run writes it to ``-o``, so a killed run leaves
    a valid partial report). In a world of several ranks (the System's) each step runs as
    :class:`gpubw.ranks.Ranks` says.
    """
    options = options or RunOptions()
    sizes = options.buffer_sizes
    started, t0 = _now(), time.perf_counter()
    all_warnings = [*warnings, *small_buffer_warnings(selection, sizes)]
    meta: dict[str, Any] = dict(
        tool="gpubw",
        tool_version=__version__,
        system_name=system_name,
        host=socket.gethostname(),
        run_options=options,
        invocation=invocation,
    )

    try:
        system = open_system(options)
    except NoDriverError:
        raise
    except GpubwError as exc:
        return Report(
            backend="simulated" if system_name else "cuda",
            simulated=bool(system_name),
            versions=software_versions({}),
            devices=(),
            warnings=all_warnings,
            error=f"could not start: {exc}",
            started=started,
            finished=_now(),
            duration_s=time.perf_counter() - t0,
            **meta,
        )

    if system.options != options:
        system.close()
        raise ValueError(
            f"open_system must open the System with the options it is given: it was given "
            f"{options!r} and opened one with {system.options!r}"
        )
    try:
        check_sizes(system, selection, sizes)
    except UsageError:
        system.close()
        raise

    results: list[TestcaseResult] = []
    signals = _Signals(handle_signals)
    backend = system.backend
    meta.update(backend=backend.name, simulated=bool(backend.simulated), versions={}, devices=())
    ranks: Ranks | None = None

    def snapshot() -> None:
        if partial is not None:
            extra = ranks.report_fields() if ranks is not None else {}
            # never fatal here: the other ranks go on, and the final write reports problems
            with contextlib.suppress(Exception):
                partial(Report(testcases=results, warnings=all_warnings, **{**meta, **extra}))

    try:
        signals.install()
        meta.update(
            versions=software_versions(backend.versions()),
            devices=tuple(device_record(d) for d in system.devices),
        )
        ranks = Ranks(system)
        all_warnings += ranks.warnings
        if progress is not None:
            fields = {**meta, **ranks.report_fields()}
            header = Report(warnings=list(all_warnings), started=started, **fields)
            progress = _with_header(progress, header)
        _run_all(system, selection, signals, results, progress, ranks, snapshot)
    except InterruptedRun:
        pass  # recorded in signals; the interrupted testcase, if any, is in results
    except WorldError as exc:  # the ranks could not even meet: the run could not start
        all_warnings.append(f"the ranks could not start the run together: {exc}")
    finally:
        signals.raising = False
        if ranks is not None:
            with contextlib.suppress(Exception):
                meta.update(ranks.report_fields())
        try:
            system.close()
        except Exception as exc:
            all_warnings.append(f"freeing the system's resources failed: {_describe(exc)}")
        finally:
            signals.uninstall()

    stopped_by = None if signals.signum is None else signal.Signals(signals.signum).name
    return Report(
        testcases=results,
        warnings=all_warnings,
        signal=stopped_by,
        started=started,
        finished=_now(),
        duration_s=time.perf_counter() - t0,
        **meta,
    )


def _with_header(progress: ProgressCallback, header: Report) -> ProgressCallback:
    """``progress`` with every event carrying the run's ``header``."""

    def call(event: Progress) -> None:
        progress(attrs.evolve(event, header=header))

    return call


def _run_all(
    system: System,
    selection: Sequence[Selected],
    signals: _Signals,
    results: list[TestcaseResult],
    progress: ProgressCallback | None,
    ranks: Ranks,
    after_step: Callable[[], None],
) -> None:
    """Every step in order, appending to ``results``; stops after an interrupted one (or
    once the world of ranks broke)."""
    sizes = system.options.buffer_sizes
    total = sum(len(_steps(item, sizes)) for item in selection)
    done = 0
    for item in selection:
        for size in _steps(item, sizes):
            key = item.key if isinstance(item, Entry) else item.token
            if progress is not None:
                progress(Progress("start", done, total, key, size))
            result = ranks.step(_step, item, system, size, signals)
            results.append(result)
            done += 1
            if progress is not None:
                progress(Progress("end", done, total, key, size, result))
            after_step()
            if signals.signum is not None or ranks.stopped:
                return


def _step(item: Selected, system: System, size: int | None, signals: _Signals) -> TestcaseResult:
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
    t0 = time.perf_counter()
    try:
        status, message, matrices = _run_one(item, system, size)
    except InterruptedRun as exc:
        name = signal.Signals(exc.signum).name
        status, message, matrices = Status.INTERRUPTED, f"interrupted by {name}", ()
    finally:
        _release(system)
    if status is not Status.PASSED and status is not Status.WAIVED:
        # a failed testcase's buffers may sit idle in the pool: give the memory back
        with contextlib.suppress(Exception):
            system.release_pool()
    if signals.signum is not None and status is not Status.INTERRUPTED:
        # the signal arrived while the plugin swallowed it (a broad except): still stop
        name = signal.Signals(signals.signum).name
        status, message, matrices = Status.INTERRUPTED, f"interrupted by {name}", ()
    return TestcaseResult(
        status=status,
        message=message,
        matrices=matrices,
        duration_s=time.perf_counter() - t0,
        **common,
    )
