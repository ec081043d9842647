"""Results as they happen: the report written testcase by testcase, and a progress display.

:class:`LiveOutput` is the runner's progress callback in the CLI. It drives a streaming
writer (:attr:`gpubw.writers.Writer.streams`) as the run goes when the report goes to
standard output: the header before the first testcase, each testcase as it finishes, the
rest at the end. A report written to a file (``-o``) is written whole at the end, atomically.
On standard error it shows the run's progress (:data:`PROGRESS_MODES`): a rich progress line
on a terminal ("bar"), one plain line per finished testcase elsewhere, for CI logs
("lines"), or nothing (``--quiet``: "off"). Standard output never carries progress.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from typing import IO, Any, TextIO

from gpubw.model.errors import GpubwError, PluginError
from gpubw.model.sizes import format_size

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


def finished_line(event: Any) -> str:
    """``[12/43] key (512 MiB) Passed 1.2 s``, and the first line of the message of a
    testcase that did not pass."""
    result = event.result
    line = f"[{event.done}/{event.total}] {_label(event.key, event.size)}"
    if result is None:
        return line
    line += f" {result.status.value} {result.duration_s:.1f} s"
    if not result.ok and result.message:
        first = result.message.splitlines()[0]
        line += f": {first[:157] + '...' if len(first) > 160 else first}"
    return line


class LiveOutput:
    """The CLI's progress callback: streams ``writer`` to ``stream`` (None: nothing is
    written during the run) and shows progress on ``err`` in ``mode``.

    Use it as a context manager around the run (it starts and stops the progress bar),
    then call :meth:`finish` with the report."""

    def __init__(
        self,
        writer: Any,
        name: str,
        *,
        stream: TextIO | None,
        mode: str = "off",
        err: TextIO | None = None,
    ) -> None:
        if mode not in PROGRESS_MODES:
            raise ValueError(f"progress mode {mode!r} is not one of {', '.join(PROGRESS_MODES)}")
        self.writer, self.name, self.mode = writer, name, mode
        self.err = err if err is not None else sys.stderr
        # only a writer that says it streams, and has the three calls, is driven as it goes
        self.stream = (
            stream
            if stream is not None
            and getattr(writer, "streams", False)
            and all(callable(getattr(writer, m, None)) for m in ("begin", "testcase", "end"))
            else None
        )
        self.begun = False
        self._bar: Any = None
        self._task: Any = None

    # -- the progress bar -------------------------------------------------------------------
    def __enter__(self) -> LiveOutput:
        if self.mode == "bar":
            self._bar, self._task = _rich_bar(self.err)
            self._bar.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    @contextlib.contextmanager
    def _bar_paused(self) -> Iterator[None]:
        """Take the bar off the terminal while the report is written to it."""
        bar = self._bar
        shared = bar is not None and self.stream is not None and _isatty(self.stream)
        if shared:
            bar.stop()
        try:
            yield
        finally:
            if shared:
                bar.start()

    # -- the runner's callback --------------------------------------------------------------
    def __call__(self, event: Any) -> None:
        if self.stream is not None and (event.phase == "end" or not self.begun):
            with self._bar_paused():
                self._write(event)
        if self._bar is not None:
            self._bar.update(
                self._task,
                total=event.total,
                completed=event.done,
                description=_label(event.key, event.size),
            )
        elif self.mode == "lines" and event.phase == "end":
            print(finished_line(event), file=self.err, flush=True)

    def _write(self, event: Any) -> None:
        header = getattr(event, "header", None)
        with self._writer_errors():
            if not self.begun and header is not None:
                self.writer.begin(header, self.stream)
                self.begun = True
            if self.begun and event.phase == "end" and event.result is not None:
                self.writer.testcase(event.result, self.stream)

    @contextlib.contextmanager
    def _writer_errors(self) -> Iterator[None]:
        """A writer's own bug becomes a PluginError naming it (gpubw's errors and OSError,
        e.g. a closed pipe, pass as they are)."""
        try:
            yield
        except (GpubwError, OSError):
            raise
        except BaseException as exc:  # SystemExit, a KeyboardInterrupt the writer raised
            text = str(exc).strip()
            what = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
            raise PluginError(f"writer {self.name!r} failed: {what}") from exc

    def finish(self, report: Any, output: Any, *, stdout: IO[str] | None = None) -> None:
        """Write what is left of ``report``: the end of a streamed report on the stream, else
        the whole report into ``output`` (:meth:`gpubw.cli.command._Output.stream`). ``stdout``
        replaces the standard output (the signal watchdog passes the real one)."""
        with self._writer_errors():
            if self.stream is not None and self.begun:
                target = self.stream if stdout is None else stdout
                self.writer.end(report, target)
                target.flush()
                return
            with output.stream(stdout) as stream:
                end = getattr(self.writer, "end", None)
                (end if callable(end) else self.writer.write)(report, stream)


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
