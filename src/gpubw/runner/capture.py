"""Keep what plugin code writes to standard output out of gpubw's own output.

While a testcase's plugin code runs, :class:`OutputCapture` sends both ``sys.stdout``
(``print``) and file descriptor 1 (``os.write(1, ...)``, C code, child processes) into a
buffer, so that a chatty plugin cannot corrupt ``gpubw -j`` on standard output. What it
printed becomes the testcase's ``output`` (kept in the report). Standard error is left
alone. The process has one descriptor 1: captures on several threads at once share one
redirection (:class:`_Redirect`), and the last one to end puts fd 1 and ``sys.stdout`` back
exactly; while any is active, :func:`real_stdout_fd` is a descriptor of the real standard
output (the signal watchdog writes the report there).

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
import threading
from typing import IO, Any

#: at most this many characters of a testcase's output are kept (the start of it)
MAX_OUTPUT_CHARS = 64 * 1024


class _Redirect:
    """The process's one redirection of standard output, shared by the captures active at
    the same time on several threads (concurrent :func:`gpubw.run` calls, a simulated rack's
    ranks): the first to start redirects ``sys.stdout`` and fd 1, the last to stop puts
    back exactly what it found. What is written meanwhile goes to the capture that stops
    first after it was written. Guarded by :data:`_lock`."""

    def __init__(self) -> None:
        self.users = 0
        #: a copy of the original fd 1 while fd 1 is redirected (None: not redirected)
        self.saved_fd: int | None = None
        self.saved_stdout: Any = None
        self.buffer = io.StringIO()
        self.tmp: IO[bytes] | None = None
        self.text_at = 0  # characters of ``buffer`` already handed out
        self.read_at = 0  # bytes of ``tmp`` already handed out

    def start(self) -> None:
        _flush(sys.stdout)
        _flush(sys.__stdout__)
        self.buffer, self.text_at, self.read_at = io.StringIO(), 0, 0
        self.saved_stdout = sys.stdout
        try:
            tmp = tempfile.TemporaryFile()  # noqa: SIM115 (closed by finish); unlinked at once
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
                self.tmp, self.saved_fd = tmp, saved
        sys.stdout = self.buffer

    def take(self) -> str:
        """What was written since the last take: through ``sys.stdout``, then through fd 1
        (the first bytes of it: enough for :data:`MAX_OUTPUT_CHARS` characters)."""
        value = self.buffer.getvalue()
        text, self.text_at = value[self.text_at :], len(value)
        _flush(sys.__stdout__)  # a plugin's writes through sys.__stdout__ go to the capture
        if self.tmp is not None:
            try:
                self.tmp.seek(self.read_at)
                raw = self.tmp.read(MAX_OUTPUT_CHARS * 4 + 1)
                self.read_at = self.tmp.seek(0, os.SEEK_END)
            except OSError:
                raw = b""
            text += raw.decode("utf-8", "replace")
        return text

    def finish(self) -> None:
        """Put back ``sys.stdout`` and fd 1 as :meth:`start` found them."""
        sys.stdout = self.saved_stdout
        self.saved_stdout = None
        if self.saved_fd is not None:
            with contextlib.suppress(OSError):
                os.dup2(self.saved_fd, 1)
            with contextlib.suppress(OSError):
                os.close(self.saved_fd)
            self.saved_fd = None
        if self.tmp is not None:
            self.tmp.close()
            self.tmp = None
        self.buffer = io.StringIO()


_redirect = _Redirect()
_lock = threading.Lock()


def real_stdout_fd() -> int:
    """The descriptor of the real standard output: fd 1, or, while a capture redirects fd 1,
    the copy of the original (the held copy while :func:`hold_stdout` holds it)."""
    if _hold is not None and _hold.saved is not None:
        return _hold.saved
    saved = _redirect.saved_fd
    return saved if saved is not None else 1


def active() -> bool:
    """Whether a capture redirects standard output now (on any thread)."""
    with _lock:
        return _redirect.users > 0


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
        self._active = False

    def __enter__(self) -> OutputCapture:
        with _lock:
            if _redirect.users == 0:
                _redirect.start()
            _redirect.users += 1
        self._active = True
        return self

    def __exit__(self, *exc: object) -> None:
        self.text = self.stop()

    def stop(self) -> str:
        """Put standard output back (once the last capture of the process stops); returns
        what was captured (idempotent)."""
        if not self._active:
            return self.text
        self._active = False
        with _lock:
            text = _redirect.take()
            _redirect.users -= 1
            if _redirect.users == 0:
                _redirect.finish()
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
    sys.stdout = _sink()
    if keep:  # flushed as the process ends (the command's quick exit runs atexit too)
        atexit.register(_flush, _hold.stream)


def _sink() -> io.TextIOWrapper:
    """``sys.stdout`` while held: text to ``os.devnull`` with no buffer, and so no lock.

    A late plugin thread that prints holds a buffered stream's lock while it writes; if the
    interpreter ends then, flushing that stream at shutdown cannot take the lock and CPython
    aborts the process ("could not acquire lock for <_io.BufferedWriter name='/dev/null'>
    at interpreter shutdown"). A text layer written through straight to the file (no
    BufferedWriter) has no such lock; ``.buffer`` and ``fileno()`` still work."""
    raw = io.FileIO(os.devnull, "w")
    return io.TextIOWrapper(raw, encoding="utf-8", write_through=True)


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
