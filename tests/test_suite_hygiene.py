"""Habits of the test suite itself that CI's machine would otherwise catch only sometimes."""

from __future__ import annotations

import ast
from pathlib import Path

HERE = Path(__file__).parent
ROOTS = (HERE, HERE.parent / "plugins", HERE.parent / "benchmarks")


def _locale_decoded_calls(path: Path) -> list[int]:
    """Lines of ``path`` that call something with ``text=True`` or ``universal_newlines=True``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        for kw in node.keywords
        if kw.arg in ("text", "universal_newlines")
        and isinstance(kw.value, ast.Constant)
        and kw.value.value is True
    ]


def test_no_child_output_is_decoded_with_the_locale() -> None:
    """Child processes' output is decoded as UTF-8, never with the locale's encoding, which
    is ASCII where CI (or a library the suite imports) runs in the C locale."""
    found = [
        f"{path.relative_to(HERE.parent)}:{line}"
        for root in ROOTS
        for path in sorted(root.rglob("*.py"))
        for line in _locale_decoded_calls(path)
    ]
    assert found == [], "use encoding='utf-8' instead of text=True: " + ", ".join(found)


def _deadlines(path: Path) -> list[int]:
    """Lines of ``path`` that give Hypothesis a ``deadline`` other than None."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        for kw in node.keywords
        if kw.arg == "deadline"
        and not (isinstance(kw.value, ast.Constant) and kw.value.value is None)
    ]


def test_no_property_test_has_a_deadline() -> None:
    """Property tests run without Hypothesis's per-example deadline (conftest's profile): a
    deadline fails a test on a loaded machine, not a property."""
    from hypothesis import settings

    assert settings().deadline is None, "tests/conftest.py loads a profile without deadline"
    found = [
        f"{path.relative_to(HERE.parent)}:{line}"
        for root in ROOTS
        for path in sorted(root.rglob("tests/*.py")) + sorted(root.glob("test_*.py"))
        for line in _deadlines(path)
    ]
    assert found == [], "no deadline= but None in property tests: " + ", ".join(found)
