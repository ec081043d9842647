"""Text for people: control characters made visible, and the one way to standard error.

:func:`printable` is how every text output shows a name gpubw did not choose (a device name
from a system file or the driver, a testcase key, a plugin's docstring, a matrix label, a
message): a character that is not printable (a control character such as CR, LF or ESC, a
lone surrogate, an invisible format character) is written as its Python escape (``\\r``,
``\\x1b``, ``\\ud800``), so that it can neither forge a line of a report nor drive the
terminal. Tabs are kept. JSON output keeps every character as it is.

:func:`to_stderr` is the one way gpubw writes to standard error (errors, warnings, progress).
Standard error is never allowed to decide the fate of a report: the first write that fails
(closed, a full device such as ``/dev/full``, a pipe nobody reads) is ignored, and nothing is
written to that stream again; when it is the process's descriptor 2, /dev/null takes that
descriptor's place, so that buffered text and C libraries write there without failing.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (gpubw -l's start-up)
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

__all__ = ["printable", "printable_lines", "to_stderr"]


def _escape(char: str) -> str:
    return char.encode("unicode_escape").decode("ascii")


def printable(text: str) -> str:
    """``text`` with every non-printable character but TAB written as its Python escape
    (``"a\\r\\nb"`` -> ``"a\\\\r\\\\nb"``); printable text is returned as it is."""
    if text.isprintable():
        return text
    return "".join(c if c == "\t" or c.isprintable() else _escape(c) for c in text)


def printable_lines(lines: Iterable[str]) -> list[str]:
    """Each line through :func:`printable`: a line break inside one of them cannot start a
    line of its own."""
    return [printable(line) for line in lines]


#: the standard-error stream a write failed on (nothing is written to it again)
_broken: Any = None


def to_stderr(text: str, stream: Any = None) -> None:
    """Write the line ``text`` (made :func:`printable`) and a newline to ``stream`` (default:
    ``sys.stderr``, looked up now) and flush it; a failure is ignored, and that stream is not
    written to again (see the module's docstring)."""
    global _broken
    if stream is None:
        stream = sys.stderr
    if stream is None or stream is _broken:
        return
    try:
        stream.write(printable(text) + "\n")
        stream.flush()
    except (OSError, ValueError):  # closed, full, a reader that left
        _broken = stream
        _to_devnull(stream)


def _to_devnull(stream: Any) -> None:
    """Point descriptor 2 at /dev/null when ``stream`` writes to it, so that whatever it
    still buffers is flushed there without an error (at exit too)."""
    try:
        if stream.fileno() != 2:
            return
        null = os.open(os.devnull, os.O_WRONLY)
    except Exception:  # no descriptor (a StringIO), a closed stream
        return
    try:
        os.dup2(null, 2)
    except OSError:
        pass
    finally:
        os.close(null)
