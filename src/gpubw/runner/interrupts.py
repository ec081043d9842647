"""SIGINT and SIGTERM during a run: stop the running testcase, never lose the report.

A :class:`SignalGuard` is installed for a whole run (the ``gpubw`` command installs one from
the moment it starts until the report is written; :func:`gpubw.run` with
``handle_signals=True`` for the run only). Its rules:

* Every signal is recorded (the first one's number is the one the run reports).
* A signal raises :class:`InterruptedRun` only while plugin code runs, inside
  :meth:`SignalGuard.interruptible` (the runner's per-testcase guard catches it: that testcase
  is Interrupted, nothing further runs). Anywhere else (start-up, clean-up, report writing)
  it is only recorded and the run stops at its next step, so a burst of signals cannot tear
  down gpubw's own clean-up or the report being written.
* From the second signal on, when the owner set :attr:`SignalGuard.emergency_write` (the
  command does), a watchdog thread waits :data:`GRACE_S` seconds. If the run has not
  finished by then (a plugin that swallows the interrupt, or a hung clean-up), it writes the
  report as it stands (:attr:`SignalGuard.snapshot`: the finished testcases plus the running
  one as Interrupted) and ends the process with ``os._exit(128 + signal)`` without waiting
  for the plugin (the driver frees GPU resources at process exit). If the complete report
  is being written at that moment, it waits for that instead (up to :data:`GRACE_S` more).
* A signal that arrives once the complete report is final (:meth:`SignalGuard.final`: the
  runner built it; :meth:`SignalGuard.writing`: it is being written) is absorbed: the report
  stays complete and the exit code is the report's, so the process's exit code and the
  report's ``exit_code`` never differ.

The ranks of a simulated rack run on a thread of their own, where no signal handler runs:
each gets a :class:`RankSignals`, which sees the guard's signal at the ranks' next
collective (all ranks at the same step) and raises it there while the rank runs a testcase;
rank 0's also hands its report to the guard (the watchdog writes it after a second signal).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from gpubw.model.console import to_stderr
from gpubw.model.errors import InterruptedRun
from gpubw.model.options import exit_status
from gpubw.model.outfile import discard_temporary_files

#: the signals a guard handles
HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: seconds the running testcase has, after a second signal, before gpubw writes the report
#: without it and exits
GRACE_S = 2.0

_current: SignalGuard | None = None


def current() -> SignalGuard | None:
    """The guard whose handlers are installed now, if any."""
    return _current


class SignalGuard:
    """SIGINT/SIGTERM handlers for one run (see the module docstring)."""

    def __init__(self, *, grace_s: float = GRACE_S) -> None:
        self.grace_s = grace_s
        #: the first signal that arrived (its number), None while none has
        self.signum: int | None = None
        #: how many signals arrived
        self.count = 0
        #: the Report as it stands now (set by the runner; the complete one once it is built)
        self.snapshot: Callable[[], Any] | None = None
        #: writes a Report from the watchdog thread; None: no report to write
        self.emergency_write: Callable[[Any], None] | None = None
        #: the process is the command: after a second signal the watchdog ends it even
        #: before there is a report to write (a plugin's import that swallows the signal);
        #: False (the Python API): a watchdog only once the run has set emergency_write
        self.owns_process = False
        self._armed = False
        self._old: dict[int, Any] = {}
        self._previous: SignalGuard | None = None
        self._installed = False
        self._write_lock = threading.Lock()
        self._writing = False
        #: True once the complete report is final (:meth:`final`, :meth:`writing`): a signal then
        #: changes neither the report nor the exit code, which is the report's
        self.report_final = False
        self._done = threading.Event()
        self._watchdog: threading.Thread | None = None

    @property
    def installed(self) -> bool:
        return self._installed

    def install(self) -> bool:
        """Install the handlers (main thread only; elsewhere a no-op that returns False)."""
        global _current
        if threading.current_thread() is not threading.main_thread():
            return False
        for sig in HANDLED_SIGNALS:
            self._old[sig] = signal.signal(sig, self._handler)
        self._previous, _current = _current, self
        self._installed = True
        return True

    def uninstall(self, replacement: Any = None) -> None:
        """Put back the handlers that were there before (or install ``replacement``
        instead); the watchdog, if any, stands down."""
        global _current
        self._done.set()
        for sig, old in self._old.items():
            if replacement is not None:
                old = replacement
            signal.signal(sig, signal.SIG_DFL if old is None else old)
        self._old.clear()
        if self._installed:
            _current = self._previous
            self._installed = False
        if self._writing:
            self._writing = False
            self._write_lock.release()

    def adopt(self, signum: int) -> None:
        """A signal that arrived before this guard (an MPI rank's, recorded at start-up, or
        another rank's, agreed before the run) is the run's: the run stops at its next step."""
        self.count += 1
        if self.signum is None:
            self.signum = signum

    def _handler(self, signum: int, _frame: object) -> None:
        self.count += 1
        if self.signum is None:
            self.signum = signum
        if self.count >= 2:
            self._start_watchdog()
        if self._armed:
            raise InterruptedRun(self.signum)

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        """The block (plugin code) may be interrupted: a signal raises InterruptedRun in it;
        one that arrived just before the block raises at its start."""
        armed, self._armed = self._armed, True  # nested (a plugin imported mid-testcase)
        try:
            if self.signum is not None:
                raise InterruptedRun(self.signum)
            yield
        finally:
            self._armed = armed

    def final(self, report: Any) -> None:
        """The run's report is complete (``report``): the watchdog writes this one if it must
        write any, and a signal from now on is absorbed (the exit code is the report's)."""
        self.snapshot = lambda: report
        self.report_final = True

    def writing(self) -> None:
        """The caller is about to write the complete report: a watchdog lets it finish (up
        to the grace period) instead of writing its own. Held until :meth:`uninstall`."""
        self.report_final = True
        if not self._writing:
            self._write_lock.acquire()
            self._writing = True

    # -- the watchdog ------------------------------------------------------------------
    def _start_watchdog(self) -> None:
        writes = self.emergency_write is not None or self.owns_process
        if self._watchdog is not None or not writes or self._done.is_set():
            return
        self._watchdog = threading.Thread(
            target=self._watch, name="gpubw-signal-watchdog", daemon=True
        )
        self._watchdog.start()

    def _watch(self) -> None:
        if self._done.wait(self.grace_s):
            return  # the run ended in time
        got = self._write_lock.acquire(timeout=self.grace_s)
        if self._done.is_set():
            if got:
                self._write_lock.release()
            return
        code = exit_status(signal=self.signum)
        if got:
            report = None
            with contextlib.suppress(BaseException):
                report = self.snapshot() if self.snapshot is not None else None
                if report is not None and self.report_final:
                    code = int(report.exit_code)  # the signal was absorbed: the report's
                if report is not None and self.emergency_write is not None:
                    self.emergency_write(report)
            with contextlib.suppress(BaseException):
                written = report is not None and self.emergency_write is not None
                to_stderr(
                    f"gpubw: the running testcase did not stop within {self.grace_s:g} s of "
                    "a second signal; the report was written without waiting for it"
                    if written
                    else f"gpubw: the running step (a plugin's import?) did not stop within "
                    f"{self.grace_s:g} s of a second signal; no report was written (the run "
                    "had not begun)"
                )
        else:  # the complete report's writer is stuck: its half-written file goes
            discard_temporary_files()
            with contextlib.suppress(BaseException):
                to_stderr(
                    f"gpubw: the report's writer did not finish within {2 * self.grace_s:g} s "
                    "of a second signal; no report was written"
                )
        discard_temporary_files()
        os._exit(code)


class Signals(Protocol):
    """What a run reads of its signal handling: a :class:`SignalGuard`, or a simulated
    rank's :class:`RankSignals`."""

    grace_s: float
    snapshot: Callable[[], Any] | None

    @property
    def signum(self) -> int | None: ...

    def interruptible(self) -> contextlib.AbstractContextManager[None]: ...

    def final(self, report: Any) -> None: ...


class RankSignals:
    """The signals of one rank of a simulated rack (see the module docstring): ``guard`` is
    the run's, in the main thread; ``world`` the rank's (a
    :class:`gpubw.world.simulated.SimulatedWorld` of a cooperative cluster whose ``stop`` is
    :meth:`stop_of` the guard); ``root``: rank 0, whose report the guard keeps."""

    def __init__(self, guard: SignalGuard, world: Any, root: bool) -> None:
        self.guard = guard
        self.world = world
        self.root = root
        self.grace_s = guard.grace_s

    @staticmethod
    def stop_of(guard: SignalGuard) -> Callable[[], BaseException | None]:
        """The cluster's ``stop``: the guard's first signal, as the InterruptedRun the
        ranks raise."""
        return lambda: None if guard.signum is None else InterruptedRun(guard.signum)

    @property
    def signum(self) -> int | None:
        """The signal every rank has seen (at the same collective), or None."""
        stopped = self.world.stopped
        return None if stopped is None else getattr(stopped, "signum", None)

    @property
    def snapshot(self) -> Callable[[], Any] | None:
        return self.guard.snapshot if self.root else None

    @snapshot.setter
    def snapshot(self, value: Callable[[], Any] | None) -> None:
        if self.root:
            self.guard.snapshot = value

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        """The block (a testcase) is interrupted at its next collective once the signal is
        seen; a signal seen already raises at its start."""
        self.world.interruptible = True
        try:
            if self.signum is not None:
                raise InterruptedRun(self.signum)
            yield
        finally:
            self.world.interruptible = False

    def final(self, report: Any) -> None:
        """Rank 0's report is complete: the guard's, from now on."""
        if self.root:
            self.guard.final(report)
