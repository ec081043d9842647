"""Standard output and error that are closed, full, a pipe nobody reads, or not UTF-8
(docs/failures.md, "Standard streams"): progress and warnings never decide the fate of the
report, and a reader of standard output that leaves ends gpubw quietly, exit 141.

Each case runs a real ``python -m gpubw`` with its descriptors set up before it starts (a
pipe's read end closed before the process starts: no race with its writes)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpubw.cli import command as cli
from gpubw.cli.live import LiveOutput, Output
from gpubw.model import console
from gpubw.model.report_check import validate

RUN = ["--simulate", "h200x1", "-t", "0", "host_to_device_memcpy_sm", "-b", "1", "-i", "1"]
RUN += ["--loop-count", "1"]


def gpubw(
    *argv: str,
    close: tuple[int, ...] = (),
    stdout: Any = subprocess.PIPE,
    stderr: Any = subprocess.PIPE,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """``python -m gpubw argv`` with the descriptors ``close`` closed as it starts."""

    def closing() -> None:  # in the child, after its descriptors are set up
        for fd in close:
            os.close(fd)

    return subprocess.run(
        [sys.executable, "-m", "gpubw", *argv],
        stdout=stdout,
        stderr=stderr,
        stdin=subprocess.DEVNULL,
        preexec_fn=closing if close else None,
        env=env,
        timeout=300,
        check=False,
    )


@pytest.fixture
def dead_pipe() -> Iterator[int]:
    """The write end of a pipe whose read end is already closed."""
    read, write = os.pipe()
    os.close(read)
    yield write
    os.close(write)


def valid_report(text: str | bytes) -> dict[str, Any]:
    doc = json.loads(text)
    validate(doc)
    assert doc["exit_code"] == 0
    return doc


# -- standard error ---------------------------------------------------------------------------
def test_closed_stderr_leaves_the_json_on_stdout_clean(tmp_path: Path) -> None:
    """``2>&-``: progress went to stdout (print to a None sys.stderr) and into the JSON; now
    fd 2 is /dev/null from the start, so no later open (the -o file) becomes fd 2 either."""
    proc = gpubw(*RUN, "-j", close=(2,))
    assert proc.returncode == 0
    valid_report(proc.stdout)
    target = tmp_path / "r.json"
    proc = gpubw(*RUN, "-j", "-o", str(target), close=(2,))
    assert (proc.returncode, proc.stdout) == (0, b"")
    valid_report(target.read_text())


def test_closed_stdout_still_writes_the_o_file(tmp_path: Path) -> None:
    """``>&-`` with ``-o``: the report goes into the file, exit 0."""
    target = tmp_path / "r.json"
    proc = gpubw(*RUN, "-j", "-o", str(target), close=(1,))
    assert proc.returncode == 0, proc.stderr
    assert b"Traceback" not in proc.stderr
    valid_report(target.read_text())


@pytest.mark.parametrize("where", ["full", "dead pipe"])
def test_unwritable_stderr_does_not_lose_the_report(
    tmp_path: Path, dead_pipe: int, where: str
) -> None:
    """Standard error on /dev/full or on a pipe nobody reads: the report is written (stdout
    and -o) and the exit code is the run's (was: exit 1, no report)."""
    with open("/dev/full", "wb") as full:
        err = full if where == "full" else dead_pipe
        proc = gpubw(*RUN, "-j", stderr=err)
        assert proc.returncode == 0
        valid_report(proc.stdout)
        target = tmp_path / "r.txt"
        proc = gpubw(*RUN, "-o", str(target), stderr=err)
        assert (proc.returncode, proc.stdout) == (0, b"")
        assert "SUM host_to_device_memcpy_sm" in target.read_text()
        proc = gpubw(*RUN, "-b", "-1", stderr=err)  # the error line cannot be said: still 2
        assert (proc.returncode, proc.stdout) == (2, b"")


# -- standard output ----------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [RUN, [*RUN, "-j"], ["-l"], ["info", "--simulate", "h200x1"]])
def test_a_reader_that_left_ends_gpubw_quietly_with_141(dead_pipe: int, argv: list[str]) -> None:
    """``gpubw ... | head``: the reader of stdout left; gpubw stops and exits 141 (128 +
    SIGPIPE, as the shell shows a program SIGPIPE killed), nothing on stderr (was: exit 1)."""
    proc = gpubw(*argv, stdout=dead_pipe)
    assert proc.returncode == cli.EXIT_PIPE_CLOSED == 141
    said = [line for line in proc.stderr.decode().splitlines() if not line.startswith("[")]
    assert said == []  # progress lines only: no error, no traceback


def test_a_reader_that_left_does_not_stop_the_o_file(tmp_path: Path, dead_pipe: int) -> None:
    target = tmp_path / "r.json"
    proc = gpubw(*RUN, "-j", "-o", str(target), stdout=dead_pipe)
    assert (proc.returncode, proc.stderr.count(b"Traceback")) == (0, 0)
    valid_report(target.read_text())


def test_a_broken_pipe_elsewhere_is_an_error_not_141(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A BrokenPipeError that is not standard output's (``-o FIFO`` whose reader left): said,
    exit 1; standard output (still readable) is left alone."""
    from gpubw.writers.json import JsonWriter

    def broken(*args: object) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(JsonWriter, "write", broken)
    assert cli.main([*RUN, "-q", "-j", "-o", str(tmp_path / "r.json")]) == 1
    out, err = capsys.readouterr()
    assert (out, err) == ("", "gpubw: error: Broken pipe\n")


# -- encodings ----------------------------------------------------------------------------------
def test_an_ascii_stdout_gets_escapes_not_a_traceback() -> None:
    """``PYTHONIOENCODING=ascii``: ``-l`` (a middle dot in gpubw-stream's description) and a
    run of that testcase print it as ``\\xb7`` (was: a UnicodeEncodeError traceback, and a
    lost report)."""
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    proc = gpubw("-l", env=env)
    assert proc.returncode == 0 and proc.stderr == b""
    assert b"3\\xb7c" in proc.stdout
    proc = gpubw("--simulate", "h200x1", "-t", "stream_scale", "-b", "1", "-i", "1", env=env)
    assert proc.returncode == 0, proc.stderr
    assert b"SUM stream_scale" in proc.stdout and b"Traceback" not in proc.stderr


# -- the helper ---------------------------------------------------------------------------------
class Failing(io.StringIO):
    """A stream whose every write fails (as /dev/full does)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        raise OSError(28, "No space left on device")


def test_stderr_failures_are_ignored_after_the_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first failing write is swallowed and nothing is written to that stream again."""
    err = Failing()
    monkeypatch.setattr(sys, "stderr", err)
    console.to_stderr("one")
    console.to_stderr("two")
    assert err.writes == 1
    fresh = io.StringIO()  # another stream (a later run's) is written as usual
    console.to_stderr("three\x1b[2J", fresh)
    assert fresh.getvalue() == "three\\x1b[2J\n"


def test_progress_that_cannot_be_shown_does_not_stop_the_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """In-process: progress lines into a failing stderr; the -o report is still written."""
    monkeypatch.setattr(sys, "stderr", Failing())
    target = tmp_path / "r.json"
    assert cli.main([*RUN, "-j", "-o", str(target)]) == 0
    valid_report(target.read_text())


def test_a_bar_that_fails_to_draw_is_dropped() -> None:
    """The progress bar's errors (a terminal gone) end the bar, not the run."""

    class Bar:
        def update(self, *a: object, **k: object) -> None:
            raise OSError(5, "Input/output error")

        def stop(self) -> None:
            pass

    live = LiveOutput(None, "json", Output(None), mode="off")
    live._bar = Bar()
    live._on_bar("update", 0, completed=1)
    assert live._bar is None
