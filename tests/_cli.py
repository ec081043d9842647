"""Test support: the gpubw command run in this process, its exit code and what it printed."""

from __future__ import annotations

from typing import Any

from gpubw.cli import command as cli


def run_cli(capsys: Any, *argv: str) -> tuple[int, str, str]:
    """``gpubw ARGV`` in-process: (exit code, stdout, stderr); never a traceback on stderr."""
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


def usage_error(capsys: Any, *argv: str) -> str:
    """Exit 2, exactly one ``gpubw: error:`` line and nothing on stdout; that line."""
    code, out, err = run_cli(capsys, *argv)
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpubw: error: "), err
    assert out == ""
    return lines[0]
