"""Tests for gpubw.runner.interrupts: the signal guard and its watchdog."""

from __future__ import annotations

import os
import signal
import threading
import time
import types
from typing import Any

import pytest

from gpubw.model.errors import InterruptedRun
from gpubw.runner import interrupts
from gpubw.runner.interrupts import SignalGuard


def wait_until(condition: Any, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not condition() and time.monotonic() < end:
        time.sleep(0.01)


def test_install_records_and_uninstall_restores():
    """Signals outside interruptible() are only recorded; the old handlers come back."""
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    guard = SignalGuard()
    assert guard.install() and interrupts.current() is guard
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.02)  # the handler runs, and raises nothing
    finally:
        guard.uninstall()
    assert guard.signum == signal.SIGTERM and guard.count == 2
    assert interrupts.current() is None
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_interruptible_raises_inside_and_for_an_earlier_signal():
    """Inside interruptible() a signal raises; one that came before raises at its start."""
    guard = SignalGuard()
    guard.install()
    try:
        with pytest.raises(InterruptedRun) as raised, guard.interruptible():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        assert raised.value.signum == signal.SIGINT
        with pytest.raises(InterruptedRun), guard.interruptible():
            raise AssertionError("not reached: the signal came before the block")
    finally:
        guard.uninstall()


def test_install_elsewhere_than_the_main_thread_is_a_no_op():
    """Handlers can only be installed from the main thread: elsewhere install() says no."""
    got: list[bool] = []
    t = threading.Thread(target=lambda: got.append(SignalGuard().install()))
    t.start()
    t.join()
    assert got == [False] and interrupts.current() is None


def _stuck_after_two_signals(monkeypatch, final: object = None) -> tuple[list[object], list[int]]:
    """SIGTERM then SIGINT to a guard whose run never ends (its report made ``final`` first,
    if given): what the watchdog wrote and the exit codes it chose."""
    exits: list[int] = []
    monkeypatch.setattr(interrupts.os, "_exit", exits.append)
    written: list[object] = []
    guard = SignalGuard(grace_s=0.1)
    guard.snapshot = lambda: "the report so far"
    guard.emergency_write = written.append
    guard.install()
    try:
        if final is not None:
            guard.final(final)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)
        wait_until(lambda: exits)
    finally:
        guard.uninstall()
    return written, exits


def test_watchdog_writes_the_snapshot_and_exits_after_a_second_signal(monkeypatch):
    """Two signals and a main thread that does not finish: after the grace period the
    watchdog writes the snapshot and exits 128 + the first signal."""
    assert _stuck_after_two_signals(monkeypatch) == (["the report so far"], [143])


def test_watchdog_after_the_report_was_final_exits_with_the_reports_code(monkeypatch):
    """Two signals once the report is final and a run that still does not end: the watchdog
    writes that report and exits with its exit code (the signal was absorbed), not 128 + n."""
    final = types.SimpleNamespace(exit_code=3)
    assert _stuck_after_two_signals(monkeypatch, final) == ([final], [3])


def test_watchdog_stands_down_when_the_run_ends_in_time(monkeypatch):
    """A run that finishes within the grace period: no emergency write, no exit."""
    exits: list[int] = []
    monkeypatch.setattr(interrupts.os, "_exit", exits.append)
    written: list[str] = []
    guard = SignalGuard(grace_s=600)  # "in time" whatever the machine's load
    guard.snapshot = lambda: "the report so far"
    guard.emergency_write = written.append
    guard.install()
    try:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        wait_until(lambda: guard._watchdog is not None)
        assert guard._watchdog is not None, "a second signal starts the watchdog"
    finally:
        guard.uninstall()
    guard._watchdog.join(timeout=60)
    assert not guard._watchdog.is_alive()
    assert written == [] and exits == []


class _Elapsed(threading.Event):
    """The run's end, as the watchdog sees it: its first grace period is over at once."""

    def wait(self, timeout: float | None = None) -> bool:
        return self.is_set()


class _WatchedLock:
    """The report's write lock, saying when the watchdog starts waiting for it."""

    def __init__(self, lock: Any) -> None:
        self.lock = lock
        self.watchdog_waits = threading.Event()

    def acquire(self, *args: Any, **kwargs: Any) -> bool:
        if threading.current_thread().name == "gpubw-signal-watchdog":
            self.watchdog_waits.set()
        return bool(self.lock.acquire(*args, **kwargs))

    def release(self) -> None:
        self.lock.release()


def test_watchdog_waits_for_the_complete_report_being_written(monkeypatch):
    """While the main thread writes the complete report, the watchdog does not write its
    own (it waits for the write, past its first grace period); once the main thread is done,
    it stands down. No step depends on how fast the machine is."""
    exits: list[int] = []
    monkeypatch.setattr(interrupts.os, "_exit", exits.append)
    written: list[str] = []
    guard = SignalGuard(grace_s=600)
    guard._done = _Elapsed()
    lock = guard._write_lock = _WatchedLock(guard._write_lock)
    guard.snapshot = lambda: "partial"
    guard.emergency_write = written.append
    guard.install()
    try:
        guard.writing()
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        assert lock.watchdog_waits.wait(60), "the watchdog waits for the report's write"
    finally:
        guard.uninstall()
    assert guard._watchdog is not None
    guard._watchdog.join(timeout=60)
    assert not guard._watchdog.is_alive()
    assert written == [] and exits == []


def test_a_stuck_writer_after_two_signals_leaves_no_temporary_file(monkeypatch, tmp_path, capfd):
    """The complete report's writer stuck mid-write, then two signals: after the grace
    periods the half-written temporary file is removed and standard error says that no
    report was written (issue 33 item 10; before: a .tmp left and not a word)."""
    import contextlib

    from gpubw.model.outfile import atomic_file

    exits: list[int] = []
    monkeypatch.setattr(interrupts.os, "_exit", exits.append)
    guard = SignalGuard(grace_s=0.1)
    guard.snapshot = lambda: "partial"
    guard.emergency_write = lambda report: None
    guard.install()
    try:
        with contextlib.suppress(OSError), atomic_file(str(tmp_path / "r.json")) as f:
            f.write('{"half')
            f.flush()
            guard.writing()
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            wait_until(lambda: exits)
            assert list(tmp_path.iterdir()) == []
    finally:
        guard.uninstall()
    assert exits == [130]
    assert "no report was written" in capfd.readouterr().err
