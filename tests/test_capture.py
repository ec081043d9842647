"""Tests for gpubw.runner.capture: plugin output kept off standard output."""

from __future__ import annotations

import os
import subprocess
import sys

from gpubw.runner import capture
from gpubw.runner.capture import MAX_OUTPUT_CHARS, OutputCapture


def test_print_fd_1_and_children_are_captured(capfd):
    """print(), os.write(1, ...) and a child process's output all end up in text."""
    with OutputCapture() as captured:
        print("one")
        sys.stdout.flush()
        os.write(1, b"two\n")
        subprocess.run([sys.executable, "-c", "print('three')"], check=True)
        assert capture.real_stdout_fd() != 1
    assert sorted(captured.text.splitlines()) == ["one", "three", "two"]
    assert capture.real_stdout_fd() == 1
    print("after")
    assert capfd.readouterr().out == "after\n"


def test_output_is_cut_at_the_limit():
    """A flood of output keeps the first MAX_OUTPUT_CHARS characters and says so."""
    with OutputCapture() as captured:
        os.write(1, b"x" * (MAX_OUTPUT_CHARS * 2))
    assert captured.text.startswith("x" * MAX_OUTPUT_CHARS)
    assert captured.text.endswith(f"[... output cut at {MAX_OUTPUT_CHARS} characters]")


def test_stdout_comes_back_after_an_exception(capfd):
    """An exception inside the block still puts standard output back."""
    saved = sys.stdout
    try:
        with OutputCapture():
            print("lost")
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert sys.stdout is saved
    os.write(1, b"back\n")
    assert capfd.readouterr().out == "back\n"
