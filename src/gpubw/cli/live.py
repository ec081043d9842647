"""Results as they happen: the report written testcase by testcase, and a progress display.

:class:`LiveOutput` is the command's listener of a run (:mod:`gpubw.model.events`). It
drives a streaming writer (:class:`gpubw.writers.StreamingWriter`) as the run goes when the
report goes to standard output: the header before the first testcase, each testcase as it
finishes, the rest at the end. A report written to a file (``-o``) is written whole at the
end, atomically (:func:`gpubw.writers.write_whole`: a streaming writer gets the same three
calls there). :class:`PartialWrites` keeps an MPI run's ``-o`` file valid after each
testcase.
On standard error it shows the run's progress (:data:`PROGRESS_MODES`): a rich progress line
on a terminal ("bar"), one plain line per finished testcase elsewhere, for CI logs
("lines"), or nothing (``--quiet``: "off"). Standard output never carries progress.
"""

from __future__ import annotations

import contextlib
import os
import sys
import types
import typing
from collections.abc import Callable, Iterator
from typing import Any, TextIO

import attrs

from gpubw.model.console import printable, to_stderr
from gpubw.model.errors import UsageError
from gpubw.model.events import Finished, RunListener, Step
from gpubw.model.results import Report, TestcaseResult
from gpubw.model.sizes import format_size
from gpubw.runner.capture import report_stdout
from gpubw.runner.plugin_errors import writer_errors
from gpubw.writers import StreamingWriter, write_whole

#: "bar" (a terminal), "lines" (one line per finished testcase) or "off"
PROGRESS_MODES = ("bar", "lines", "off")


def progress_mode(quiet: bool, err: TextIO) -> str:
    """The progress display for standard error ``err``: off when quiet, a bar on a terminal,
    else plain lines."""
    if quiet:
        return "off"
    isatty = getattr(err, "isatty", None)
    return "bar" if isatty is not None and isatty() else "lines"


def _label(key: str, size: int | None) -> str:
    return key + (f" ({format_size(size)})" if size is not None else "")


def finished_line(step: Step, result: TestcaseResult | None) -> str:
    """``[12/43] key (512 MiB) Passed 1.2 s``, and the first line of the message of a
    testcase that did not pass."""
    line = f"[{step.done + 1}/{step.total}] {_label(step.key, step.size)}"
    if result is None:
        return line
    line += f" {result.status.value} {result.duration_s:.1f} s"
    if not result.ok and result.message:
        first = result.message.splitlines()[0]
        line += f": {first[:157] + '...' if len(first) > 160 else first}"
    return line


class Output:
    """Where the report goes: stdout, or ``-o FILE`` by
    :class:`gpubw.model.outfile.OutputTarget`'s rules (atomic for a regular file, in place
    for a device or FIFO, checked up front so that an unwritable FILE is a usage error before
    anything runs)."""

    def __init__(self, path: str | None) -> None:
        from gpubw.model.outfile import OutputTarget

        self.path = path
        self._target = None if path is None else OutputTarget(path).check()
        _refuse_a_closed_stream(self._target)

    @property
    def to_stdout(self) -> bool:
        """True when the report goes to standard output (no ``-o``, or ``-o -``): then it is
        written as the run goes."""
        return self._target is None or self._target.is_stdout

    @property
    def rewritable(self) -> bool:
        """True when the report goes into a regular file, replaced whole at each write: it
        can be rewritten as the run goes. Standard output, a device, a FIFO or a descriptor
        would get every rewrite one after another."""
        return self._target is not None and not (self._target.is_stdout or self._target.is_direct)

    @contextlib.contextmanager
    def stream(self, stdout: TextIO | None = None) -> Iterator[TextIO]:
        """The stream to write the report to; ``stdout`` replaces ``sys.stdout`` where the
        report goes to standard output."""
        if self._target is None or self._target.is_stdout:
            out = report_stdout() if stdout is None else stdout
            yield out
            out.flush()
            return
        with self._target.open("w") as f:
            yield typing.cast(TextIO, f)


def _refuse_a_closed_stream(target: Any) -> None:
    """UsageError when ``-o`` names standard output or error (``-``, ``/dev/stdout``,
    ``/proc/self/fd/2``) and that descriptor was closed as the command started: it leads to
    /dev/null now, and a run that wrote its report there would lose it and exit 0."""
    from gpubw.cli._startup import closed_at_start

    fd = None if target is None else target.descriptor
    if fd is not None and fd in closed_at_start:
        name = {0: "standard input", 1: "standard output", 2: "standard error"}[fd]
        raise UsageError(
            f"-o/--output {target.path!r}: {name} (descriptor {fd}) was closed when gpubw "
            "started, so the report would be lost; give a file name, or run gpubw with "
            f"{name} open"
        )


class LiveOutput(RunListener):
    """The command's report and progress, as a run's listener: streams ``writer`` to
    ``output`` when that is standard output and the writer streams; writes the report at the
    run's end (atomically into ``-o FILE``), or from the signal watchdog when the run is
    stuck; shows progress on ``err`` in ``mode``.

    Use it as a context manager around the run (it starts and stops the progress bar)."""

    def __init__(
        self,
        writer: Any,
        name: str,
        output: Output,
        *,
        mode: str = "off",
        err: TextIO | None = None,
    ) -> None:
        if mode not in PROGRESS_MODES:
            raise ValueError(f"progress mode {mode!r} is not one of {', '.join(PROGRESS_MODES)}")
        self.writer, self.name, self.output, self.mode = writer, name, output, mode
        self.err = err if err is not None else sys.stderr
        live = output.to_stdout and isinstance(writer, StreamingWriter)
        self.stream: TextIO | None = report_stdout() if live else None
        self.begun = False
        self._bar: Any = None
        self._task: Any = None

    # -- the progress bar -------------------------------------------------------------------
    def __enter__(self) -> LiveOutput:
        if self.mode == "bar":
            self._bar, self._task = _rich_bar(self.err)
            self._on_bar("start")
        return self

    def _on_bar(self, method: str, *args: Any, **kwargs: Any) -> None:
        """Call the progress bar's ``method``; a bar that fails to draw (standard error
        gone) is dropped: progress never decides the fate of the report."""
        if self._bar is None:
            return
        try:
            getattr(self._bar, method)(*args, **kwargs)
        except Exception:
            bar, self._bar = self._bar, None
            with contextlib.suppress(Exception):
                bar.stop()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        self._on_bar("stop")
        self._bar = None

    @contextlib.contextmanager
    def _bar_paused(self) -> Iterator[None]:
        """Take the bar off the terminal while the report is written to it."""
        shared = self._bar is not None and self.stream is not None and _isatty(self.stream)
        if shared:
            self._on_bar("stop")
        try:
            yield
        finally:
            if shared:
                self._on_bar("start")

    def _show(self, step: Step, done: int, finished: Finished | None = None) -> None:
        if self._bar is not None:
            self._on_bar(
                "update",
                self._task,
                total=step.total,
                completed=done,
                description=printable(_label(step.key, step.size)),
            )
        elif self.mode == "lines" and finished is not None:
            to_stderr(finished_line(step, finished.result), self.err)

    # -- the run's events -------------------------------------------------------------------
    def run_started(self, header: Report, system: Any) -> Report:
        if self.stream is not None:
            with self._bar_paused(), writer_errors(self.name):
                self.writer.begin(header, self.stream)
            self.begun = True
        return header

    def testcase_started(self, step: Step) -> None:
        self._show(step, step.done)

    def testcase_finished(self, finished: Finished, so_far: Report) -> Finished:
        if self.stream is not None and self.begun:
            result = attrs.evolve(finished.result, verdicts=finished.verdicts)
            with self._bar_paused(), writer_errors(self.name):
                self.writer.testcase(result, self.stream)
        self._show(finished.step, finished.step.done + 1, finished)
        return finished

    def run_finished(self, report: Report) -> Report:
        self.finish(report)
        return report

    def interrupted(self, report: Report) -> None:
        """The watchdog's write: the same writer and output, standard output being the real
        one (a capture may be redirecting the process's fd 1 and ``sys.stdout`` now)."""
        from gpubw.runner.capture import real_stdout_fd

        with os.fdopen(
            os.dup(real_stdout_fd()), "w", encoding="utf-8", errors="backslashreplace"
        ) as stdout:
            self.finish(report, stdout=stdout)

    def finish(self, report: Report, *, stdout: TextIO | None = None) -> None:
        """Write what is left of ``report``: the end of a streamed report on the stream, else
        the whole report into the output. ``stdout`` replaces the standard output."""
        with writer_errors(self.name):
            if self.stream is not None and self.begun:
                target = self.stream if stdout is None else stdout
                self.writer.end(report, target)
                target.flush()
                return
            with self.output.stream(stdout) as stream:
                write_whole(self.writer, report, stream)


class PartialWrites(RunListener):
    """Rank 0 of an MPI run with ``-o FILE``: the report so far rewritten into the file after
    every testcase, so that a run the launcher kills (a rank lost) leaves a valid partial
    report. Never fatal: the final write reports problems."""

    def __init__(self, make: Callable[[], Any], output: Output) -> None:
        self.make, self.output = make, output

    def testcase_finished(self, finished: Finished, so_far: Report) -> Finished:
        with contextlib.suppress(Exception), self.output.stream() as stream:
            write_whole(self.make(), so_far, stream)
        return finished


def _isatty(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if isatty is not None else False
    except ValueError:  # closed
        return False


def _rich_bar(err: TextIO) -> tuple[Any, Any]:
    """A transient rich progress line on ``err`` (not redirecting stdout: the report goes
    there)."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    bar = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(file=err),
        transient=True,
        redirect_stdout=False,
        redirect_stderr=False,
    )
    return bar, bar.add_task("starting", total=None)
