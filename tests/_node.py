"""Test support for the node check (issue 21): the command run in-process, its JSON report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from _cli import run_cli

FAST = ("-b", "64MiB", "-i", "3")


def json_run(capsys: Any, tmp_path: Path, *argv: str) -> tuple[int, dict[str, Any], str]:
    """The command with ``-j -o``: exit code, the report, standard error."""
    out = tmp_path / "r.json"
    code, _, err = run_cli(capsys, *argv, "-j", "-o", str(out))
    doc = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
    return code, doc, err


def system_file(tmp_path: Path, doc: dict[str, Any], name: str = "sys.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return str(path)


def values(doc: dict[str, Any], key: str) -> list[list[float | None]]:
    """The first matrix of testcase ``key`` in a JSON report."""
    (t,) = [t for t in doc["testcases"] if t["key"] == key]
    return t["matrices"][0]["values"]
