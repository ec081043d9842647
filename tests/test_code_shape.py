"""The shape of gpubw's functions (issue 19): narrow and short, as docs/architecture.md asks."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).parents[1] / "src" / "gpubw"
#: the most parameters a function takes (self and cls not counted): more travel as a value
MAX_PARAMETERS = 7
#: the most lines a function's body has, its docstring not counted ("about a screen")
MAX_LINES = 60
#: the most lines a module has (cut longer ones along the seam their docstring names)
MAX_MODULE_LINES = 600


def _functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((f"{path.relative_to(SRC.parent)}:{node.lineno} {node.name}", node))
    return found


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = node.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    return len([n for n in names if n not in ("self", "cls")])


def _lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    first = node.body[0]
    docstring = (
        first.end_lineno - first.lineno + 1
        if isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
        and first.end_lineno is not None
        else 0
    )
    assert node.end_lineno is not None
    return node.end_lineno - node.lineno + 1 - docstring


def test_the_scan_sees_every_module() -> None:
    """The scan finds functions in every package (it is not looking at an empty folder)."""
    packages = {name.split("/")[1] for name, _ in _functions() if name.count("/") > 1}
    assert {"cli", "runner", "measure", "testcases", "writers", "model"} <= packages


def test_no_function_takes_more_than_seven_parameters() -> None:
    """No function in src/gpubw takes more than 7 parameters (self and cls aside)."""
    wide = [
        f"{name} ({_parameters(n)})" for name, n in _functions() if _parameters(n) > MAX_PARAMETERS
    ]
    assert wide == []


def test_no_function_is_longer_than_a_screen() -> None:
    """No function in src/gpubw is longer than 60 lines, its docstring aside."""
    long = [f"{name} ({_lines(n)} lines)" for name, n in _functions() if _lines(n) > MAX_LINES]
    assert long == []


def test_no_module_is_longer_than_600_lines() -> None:
    """No module in src/gpubw has more than 600 lines (issue 34)."""
    modules = sorted(SRC.rglob("*.py"))
    assert len(modules) > 100
    long = [
        f"{p.relative_to(SRC.parent)} ({n})"
        for p in modules
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert long == []
