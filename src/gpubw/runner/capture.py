"""Keep what plugin code writes to standard output out of gpubw's own output.

While a testcase's plugin code runs, :class:`OutputCapture` sends both ``sys.stdout``
(``print``) and file descriptor 1 (``os.write(1, ...)``, C code, child processes) into a
buffer, so that a chatty plugin cannot corrupt ``gpubw -j`` on standard output. What it
printed becomes the testcase's ``output`` (kept in the report). Standard error is left
alone. One capture at a time (it redirects the process's descriptor 1); while one is active,
:func:`real_stdout_fd` is a descriptor of the real standard output (the signal watchdog
writes the report there).
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


def real_stdout_fd() -> int:
    """The descriptor of the real standard output: fd 1, or, while a capture redirects fd 1,
    the capture's copy of the original."""
    capture = _active
    if capture is not None and capture.saved_fd is not None:
        return capture.saved_fd
    return 1


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
        if len(text) > MAX_OUTPUT_CHARS:
            text = text[:MAX_OUTPUT_CHARS] + f"\n[... output cut at {MAX_OUTPUT_CHARS} characters]"
        return text
