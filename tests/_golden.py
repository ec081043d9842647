"""Golden text of modelled figures compared with a tolerance (issue 37): the simulator may move
a modelled figure by at most 1e-6 of itself (a sample's copies emulated in fewer engine
steps changes their last bits), so the text around the figures must match exactly and each
printed number must be the rounding of a value within ``rel`` of the golden one's."""

from __future__ import annotations

import re
from decimal import Decimal

#: a printed number: an optional sign, digits, an optional fraction
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _interval(token: str) -> tuple[Decimal, Decimal]:
    """The values that print as ``token`` (half a unit of its last place either side)."""
    value = Decimal(token)
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int)
    half = Decimal(5).scaleb(exponent - 1)
    return value - half, value + half


def close(actual: str, expected: str, rel: float) -> bool:
    """Whether two printed numbers can be roundings of values within ``rel`` of each other."""
    if actual == expected:
        return True
    lo_a, hi_a = _interval(actual)
    lo_e, hi_e = _interval(expected)
    slack = Decimal(rel) * max(abs(lo_e), abs(hi_e))
    return lo_a <= hi_e + slack and lo_e <= hi_a + slack


def figures_differ(actual: str, expected: str, rel: float = 1e-6) -> str | None:
    """The first difference beyond ``rel`` between two texts (a line of each), or None: the
    words and layout must match exactly, the numbers within ``rel``."""
    got, want = actual.splitlines(), expected.splitlines()
    if len(got) != len(want):
        return f"{len(got)} lines, the golden file has {len(want)}"
    for n, (a, e) in enumerate(zip(got, want), 1):
        if a == e:
            continue
        if _NUMBER.sub("#", a) != _NUMBER.sub("#", e):
            return f"line {n}: {a!r} != {e!r}"
        for x, y in zip(_NUMBER.findall(a), _NUMBER.findall(e)):
            if not close(x, y, rel):
                return f"line {n}: {x} != {y} (beyond {rel:g} of it): {a!r}"
    return None
