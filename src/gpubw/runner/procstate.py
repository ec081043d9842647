"""The process state gpubw depends on, put back after every piece of plugin code.

Plugin code (a plugin module's import; a testcase's constructor, ``filter()`` and ``run()``)
runs in gpubw's own process, and what it changes there outlives it. :func:`kept` records,
before plugin code, what the rest of the run relies on and puts it back after:

* **the process**: a child that plugin code forked and that comes back into gpubw's code
  (it returned, or raised, ``sys.exit()`` included) ends at once with ``os._exit(0)``:
  only the process that ran the plugin goes on, writes the report and cleans up;
* **the current folder** (held by a descriptor, so a folder renamed meanwhile is still
  found), **the umask** (a relative path, a new file's mode) and **the recursion limit**
  (one lowered by plugin code would make writing the report a RecursionError);
* **file descriptors 1 and 2** when plugin code closed or replaced them, and
  ``sys.stdout`` / ``sys.stderr``;
* on the main thread, **signals**: the handlers of SIGINT and SIGTERM (the run's
  interrupt), SIGPIPE, SIGALRM, SIGVTALRM and SIGPROF, and the signal mask; a timer plugin
  code started (``signal.alarm``, ``setitimer``) is cancelled, and while plugin code runs
  the timer signals are ignored unless it sets its own handler, so an alarm it forgot
  cannot kill the run.

Cheap (a few system calls, ~20 µs); thread-safe in the sense that a simulated rack's rank
threads each put back the same values (signals are left to the main thread).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

#: the signals whose handlers plugin code may not keep
RESTORED_SIGNALS = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGPIPE,
    signal.SIGALRM,
    signal.SIGVTALRM,
    signal.SIGPROF,
)
#: each interval timer and the signal it sends
_TIMERS = (
    (signal.ITIMER_REAL, signal.SIGALRM),
    (signal.ITIMER_VIRTUAL, signal.SIGVTALRM),
    (signal.ITIMER_PROF, signal.SIGPROF),
)
#: the exit status of a forked child that came back into gpubw's code
FORKED_CHILD_EXIT = 0


def _dup(fd: int) -> int | None:
    try:
        return os.dup(fd)
    except OSError:
        return None


def _same_file(a: int, b: int) -> bool:
    try:
        sa, sb = os.fstat(a), os.fstat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


class ProcessState:
    """What :func:`kept` puts back (see the module docstring); :meth:`restore` once."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        try:
            self.cwd: int | None = os.open(".", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:  # the current folder was removed: nothing to go back to
            self.cwd = None
        self.umask = os.umask(0o077)
        os.umask(self.umask)
        self.recursion_limit = sys.getrecursionlimit()
        self.fds = {fd: _dup(fd) for fd in (1, 2)}
        self.streams = (sys.stdout, sys.stderr)
        self.main = threading.current_thread() is threading.main_thread()
        self.handlers: dict[int, Any] = {}
        self.mask: set[int] | None = None
        self.timers: dict[int, bool] = {}
        if self.main:
            self._keep_signals()

    def _keep_signals(self) -> None:
        for sig in RESTORED_SIGNALS:
            self.handlers[sig] = signal.getsignal(sig)
        self.mask = set(signal.pthread_sigmask(signal.SIG_BLOCK, []))
        for which, sig in _TIMERS:
            self.timers[which] = signal.getitimer(which) != (0.0, 0.0)
            if self.handlers[sig] is signal.SIG_DFL:  # a forgotten timer cannot kill the run
                signal.signal(sig, signal.SIG_IGN)

    def restore(self) -> None:
        """Put everything back; in a forked child, end it instead (``os._exit``)."""
        if os.getpid() != self.pid:
            os._exit(FORKED_CHILD_EXIT)
        if self.main:
            self._restore_signals()
        if self.cwd is not None:
            with contextlib.suppress(OSError):
                os.fchdir(self.cwd)
            with contextlib.suppress(OSError):
                os.close(self.cwd)
            self.cwd = None
        os.umask(self.umask)
        if sys.getrecursionlimit() != self.recursion_limit:
            with contextlib.suppress(RecursionError, ValueError):
                sys.setrecursionlimit(self.recursion_limit)
        sys.stdout, sys.stderr = self.streams
        for fd, saved in self.fds.items():
            if saved is None:
                continue
            if not _same_file(fd, saved):
                with contextlib.suppress(OSError):
                    os.dup2(saved, fd)
            with contextlib.suppress(OSError):
                os.close(saved)
        self.fds = {}

    def _restore_signals(self) -> None:
        for which, _sig in _TIMERS:
            if not self.timers.get(which):
                signal.setitimer(which, 0)  # started by plugin code: cancelled
        for sig, handler in self.handlers.items():
            if handler is not None and signal.getsignal(sig) is not handler:
                signal.signal(sig, handler)
        if self.mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self.mask)


@contextlib.contextmanager
def kept() -> Iterator[ProcessState]:
    """Run the block (plugin code) and put the process state back after it, however it
    ends; a forked child that leaves the block ends there (see the module docstring)."""
    state = ProcessState()
    try:
        yield state
    finally:
        state.restore()
