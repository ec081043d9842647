"""The shape of nvbandwidth's ``-j`` document, checked before it is read: every member of a
wrong type is one UsageError naming the member, its value and what is allowed (never a
traceback from deep inside the reader, :mod:`gpubw.model.nvbandwidth_json`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gpubw.model.errors import UsageError

#: the members of a testcase that hold one number (nvbandwidth writes them as numbers)
NUMBERS = ("sum", "min", "max", "average")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _bad(where: str, value: Any, allowed: str) -> UsageError:
    return UsageError(f"nvbandwidth JSON: {where} is {_shown(value)}; expected {allowed}")


def _number(value: Any) -> bool:
    """A JSON number (not a boolean) or a string that reads as one."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return False
        return True
    return False


def _cell(value: Any) -> bool:
    return (
        value is None or (isinstance(value, str) and value.strip() in ("N/A", "")) or _number(value)
    )


def check_document(nv: Mapping[str, Any]) -> None:
    """Check the ``"nvbandwidth"`` object's members that the reader uses; UsageError on the
    first of a wrong type."""
    devices = nv.get("GPU Device list")
    if devices is not None and not (
        isinstance(devices, list) and all(isinstance(d, str) for d in devices)
    ):
        raise _bad('"GPU Device list"', devices, "a list of strings")
    cuda = nv.get("CUDA Runtime Version")
    if cuda is not None and not _number(cuda):
        raise _bad('"CUDA Runtime Version"', cuda, "a number")
    cases = nv.get("testcases")
    if cases is None:
        return
    if not isinstance(cases, list):
        raise _bad('"testcases"', cases, "a list of testcase objects")
    for i, tc in enumerate(cases):
        if not isinstance(tc, Mapping):
            raise _bad(f"testcases[{i}]", tc, "a testcase object")
        _check_testcase(i, tc)


def _check_testcase(i: int, tc: Mapping[str, Any]) -> None:
    name = tc.get("name", "")
    if not isinstance(name, str):
        raise _bad(f'testcases[{i}] "name"', name, "a string")
    where = f"testcase {name or i!r}" if name else f"testcases[{i}]"
    for key in ("status", "bandwidth_description"):
        value = tc.get(key, "")
        if not isinstance(value, str):
            raise _bad(f'{where} "{key}"', value, "a string")
    for key in NUMBERS:
        value = tc.get(key)
        if value is not None and not _number(value):
            raise _bad(f'{where} "{key}"', value, "a number")
    matrix = tc.get("bandwidth_matrix")
    if matrix is None:
        return
    if not isinstance(matrix, list) or not all(isinstance(row, list) for row in matrix):
        raise _bad(f'{where} "bandwidth_matrix"', matrix, "a list of rows (lists of cells)")
    for r, row in enumerate(matrix):
        for c, cell in enumerate(row):
            if not _cell(cell):
                raise _bad(f"{where} cell [{r}][{c}]", cell, 'a number or "N/A"')


def bad_figure(value: float | None) -> bool:
    """A figure no measurement can give: NaN, infinite, zero or negative (None: N/A)."""
    return value is not None and not (math.isfinite(value) and value > 0)
