"""Habits of the test suite itself that CI's machine would otherwise catch only sometimes."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).parent
ROOTS = (HERE, HERE.parent / "plugins", HERE.parent / "benchmarks")


def _is(value: object) -> Callable[[ast.expr], bool]:
    """A check of a keyword's value: the constant ``value`` (True, None)."""
    return lambda node: isinstance(node, ast.Constant) and node.value is value


def _calls_with(pattern: str, names: tuple[str, ...], bad: Callable[[ast.expr], bool]) -> list[str]:
    """``path:line`` of every call, in the files under ROOTS matching ``pattern``, that
    passes a keyword of ``names`` whose value is ``bad``."""
    found = []
    for root in ROOTS:
        for path in sorted(root.rglob(pattern)):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            found += [
                f"{path.relative_to(HERE.parent)}:{node.lineno}"
                for node in ast.walk(tree)
                if isinstance(node, ast.Call)
                for kw in node.keywords
                if kw.arg in names and bad(kw.value)
            ]
    return found


def test_no_child_output_is_decoded_with_the_locale() -> None:
    """Child processes' output is decoded as UTF-8, never with the locale's encoding, which
    is ASCII where CI (or a library the suite imports) runs in the C locale."""
    found = _calls_with("*.py", ("text", "universal_newlines"), _is(True))
    assert found == [], "use encoding='utf-8' instead of text=True: " + ", ".join(found)


def test_no_property_test_has_a_deadline() -> None:
    """Property tests run without Hypothesis's per-example deadline (conftest's profile): a
    deadline fails a test on a loaded machine, not a property."""
    from hypothesis import settings

    assert settings().deadline is None, "tests/conftest.py loads a profile without deadline"
    found = _calls_with("*.py", ("deadline",), lambda node: not _is(None)(node))
    assert found == [], "no deadline= but None in property tests: " + ", ".join(found)
