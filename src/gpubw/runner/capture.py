"""Keep what plugin code writes to standard output out of gpubw's own output.

While a testcase's plugin code runs, :class:`OutputCapture` sends both ``sys.stdout``
(``print``) and file descriptor 1 (``os.write(1, ...)``, C code, child processes) into a
buffer, so that a chatty plugin cannot corrupt ``gpubw -j`` on standard output. What it
printed becomes the testcase's ``output`` (kept in the report). Standard error is left
alone. One capture at a time (it redirects the process's descriptor 1); while one is active,
:func:`real_stdout_fd` is a descriptor of the real standard output (the signal watchdog
writes the report there).

A plugin's thread may go on printing after its testcase returned. For the run of the
``gpubw`` command, :func:`hold_stdout` therefore keeps standard output away from everyone
for good: from then on descriptor 1 leads to ``os.devnull`` and ``sys.stdout`` is a sink,
between testcases too, and gpubw writes its report through :func:`report_stdout`, a copy of
the real standard output taken at that moment, which no plugin knows of.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from typing import IO, Any

#: at most this many characters of a testcase's output are kept (the start of it)
MAX_OUTPUT_CHARS = 64 * 1024

_active: OutputCapture | None = None


def active() -> OutputCapture | None:
    """The capture that redirects standard output now, if any (one at a time)."""
    return _active


def real_stdout_fd() -> int:
    """The descriptor of the real standard output: fd 1, or, while a capture redirects fd 1,
    the capture's copy of the original (the held copy while :func:`hold_stdout` holds it)."""
    if _hold is not None and _hold.saved is not None:
        return _hold.saved
    capture = _active
    if capture is not None and capture.saved_fd is not None:
        return capture.saved_fd
    return 1


def joined(*texts: str) -> str:
    """Captured texts one after the other, cut at :data:`MAX_OUTPUT_CHARS` as one capture is."""
    text = "".join(texts)
    if len(text) > MAX_OUTPUT_CHARS:
        text = text[:MAX_OUTPUT_CHARS] + f"\n[... output cut at {MAX_OUTPUT_CHARS} characters]"
    return text


def _flush(stream: Any) -> None:
    with contextlib.suppress(Exception):
        if stream is not None:
            stream.flush()


class OutputCapture:
    """Redirect standard output for a block; ``text`` is what was written meanwhile.

    >>> with OutputCapture() as captured:
    ...     print("hello")
    >>> captured.text
    'hello\\n'
    """

    def __init__(self) -> None:
        self.text = ""
        #: a copy of the original fd 1 while the capture is active (None: fd 1 not redirected)
        self.saved_fd: int | None = None
        self._tmp: IO[bytes] | None = None
        self._buffer: io.StringIO | None = None
        self._saved_stdout: Any = None

    def __enter__(self) -> OutputCapture:
        global _active
        _flush(sys.stdout)
        _flush(sys.__stdout__)
        self._buffer = io.StringIO()
        self._saved_stdout = sys.stdout
        try:
            tmp = tempfile.TemporaryFile()  # unlinked at once: nothing is left behind
            saved = os.dup(1)
        except OSError:  # fd 1 closed, no temporary folder: capture print() only
            pass
        else:
            try:
                os.dup2(tmp.fileno(), 1)
            except OSError:
                os.close(saved)
                tmp.close()
            else:
                self._tmp, self.saved_fd = tmp, saved
        sys.stdout = self._buffer
        _active = self
        return self

    def __exit__(self, *exc: object) -> None:
        self.text = self.stop()

    def stop(self) -> str:
        """Put standard output back; returns what was captured (idempotent)."""
        global _active
        if self._buffer is None:
            return self.text
        sys.stdout = self._saved_stdout
        text = self._buffer.getvalue()
        self._buffer = None
        _flush(sys.__stdout__)  # a plugin's writes through sys.__stdout__ go to the capture
        if self.saved_fd is not None and self._tmp is not None:
            with contextlib.suppress(OSError):
                os.dup2(self.saved_fd, 1)
            with contextlib.suppress(OSError):
                os.close(self.saved_fd)
            self.saved_fd = None
            try:
                self._tmp.seek(0)
                raw = self._tmp.read(MAX_OUTPUT_CHARS * 4 + 1)
            except OSError:
                raw = b""
            self._tmp.close()
            self._tmp = None
            text += raw.decode("utf-8", "replace")
        _active = None
        return joined(text)


# -- the report's own standard output ------------------------------------------------------
class _Hold:
    """What :func:`hold_stdout` took: the original ``sys.stdout`` and a copy of fd 1."""

    def __init__(self, keep: bool) -> None:
        self.keep = keep
        self.original = sys.stdout
        self.saved: int | None = None
        self.stream: Any = self.original
        _flush(self.original)
        try:
            saved = os.dup(1)
            null = os.open(os.devnull, os.O_WRONLY)
        except OSError:  # fd 1 closed: nothing to keep away from
            return
        try:
            os.dup2(null, 1)
        finally:
            os.close(null)
        self.saved = saved
        if _writes_to_fd_1(self.original):  # the report goes where fd 1 went
            self.stream = os.fdopen(
                saved,
                "w",
                encoding=getattr(self.original, "encoding", None) or "utf-8",
                errors=getattr(self.original, "errors", None) or "strict",
                closefd=False,
                # line-buffered as the original was (a terminal): a streamed report shows as
                # each testcase ends
                buffering=1 if getattr(self.original, "line_buffering", False) else -1,
            )

    def release(self) -> None:
        _flush(self.stream)
        sys.stdout = self.original
        if self.saved is not None:
            with contextlib.suppress(OSError):
                os.dup2(self.saved, 1)
            with contextlib.suppress(OSError):
                os.close(self.saved)
            self.saved = None


def _writes_to_fd_1(stream: Any) -> bool:
    try:
        return bool(stream.fileno() == 1)
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        return False


_hold: _Hold | None = None


def hold_stdout(*, keep: bool = False) -> None:
    """From now on fd 1 goes to ``os.devnull`` and ``sys.stdout`` to a sink, for everyone
    (a plugin's thread included); gpubw writes its report to :func:`report_stdout`.
    ``keep``: until the process ends (the gpubw command: late threads print nowhere up to
    the exit), else until :func:`release_stdout`. Once per process at a time."""
    global _hold
    if _hold is not None:
        return
    import atexit

    _hold = _Hold(keep)
    sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - held until released
    if keep:  # flushed as the process ends (the command's quick exit runs atexit too)
        atexit.register(_flush, _hold.stream)


def report_stdout() -> Any:
    """Where gpubw's report goes when it goes to standard output: the held copy of the real
    standard output while :func:`hold_stdout` holds it, else ``sys.stdout``."""
    return _hold.stream if _hold is not None else sys.stdout


def release_stdout() -> None:
    """Put standard output back as :func:`hold_stdout` found it (not a kept hold)."""
    global _hold
    hold = _hold
    if hold is None or hold.keep:
        return
    _hold = None
    sink = sys.stdout
    hold.release()
    if sink is not hold.original:
        with contextlib.suppress(Exception):
            sink.close()
