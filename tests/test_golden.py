"""The tolerant comparison of modelled figures in golden text (tests/_golden.py)."""

from __future__ import annotations

import pytest

from _golden import close, figures_differ


@pytest.mark.parametrize(
    ("actual", "expected", "ok"),
    [
        ("1.000000500", "1.000000000", True),  # 5e-7
        ("1.000002000", "1.000000000", False),  # 2e-6
        ("0.999998000", "1.000000000", False),
        ("123.46", "123.45", True),  # a rounding flip: one unit of the last place
        ("123.47", "123.45", False),
        ("700", "700", True),
    ],
)
def test_close_allows_1e_6_and_one_rounding_flip(actual: str, expected: str, ok: bool) -> None:
    """5e-7 passes, 2e-6 fails; a printed figure may flip its last digit, never two units."""
    assert close(actual, expected, 1e-6) is ok
    line = f"SUM x {actual}"
    assert (figures_differ(line, f"SUM x {expected}") is None) is ok


def test_words_and_layout_must_match_exactly() -> None:
    """Only the numbers get a tolerance: a changed word, a moved column or a missing line
    is a difference, named with its line."""
    golden = "SUM x 700.00\n 0    1.00\n"
    assert figures_differ("SUM x 700.00\n 0    1.00\n", golden) is None
    assert figures_differ("SUM y 700.00\n 0    1.00\n", golden) == (
        "line 1: 'SUM y 700.00' != 'SUM x 700.00'"
    )
    assert figures_differ("SUM x 700.00\n 0     1.00\n", golden) is not None
    assert figures_differ("SUM x 700.00\n", golden) == "1 lines, the golden file has 2"
    assert figures_differ("SUM x 700.02\n 0    1.00\n", golden) is not None
