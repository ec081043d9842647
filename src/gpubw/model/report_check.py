"""Whether a report document or a matrix is what gpubw's report schema says.

Cut from :mod:`gpubw.model.report_io` along the seam its docstring named (the report as JSON
data / *its schema* / reading it back): this module checks, that one converts (a Report to
JSON data and back, the file's layout, reading a file). It knows nothing of the command line.

The schema (draft 2020-12) ships inside the package, ``gpubw/schemas/report-v1.schema.json``,
and is loaded with importlib.resources (:mod:`gpubw.model.schemas`), so an installed gpubw
validates without the source tree.

Matrix validation (:func:`value_errors`) checks values and samples in plain Python up to
:data:`NUMPY_FROM_CELLS` cells and with numpy beyond (a 2000 x 2000 matrix takes a fraction
of a second; numpy is imported only then: its import cost ~0.1-0.25 s of every short run);
the rest of a matrix is checked with the schema (:func:`matrix_structure_errors`); the whole
document is validated with the schema before it is written (:func:`validate`).
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Callable, Mapping
from typing import Any

from gpubw.model import schemas
from gpubw.model.errors import GpubwError
from gpubw.model.results import Matrix

SCHEMA_VERSION = schemas.VERSIONS[schemas.REPORT]
SCHEMA_FILE = schemas.schema_file(schemas.REPORT)
#: how many violations a validation error lists
MAX_ERRORS = 5


# -- the schema --------------------------------------------------------------------------


def schema() -> dict[str, Any]:
    """The report schema, from the installed package."""
    return schemas.schema(schemas.REPORT)


_where = schemas.where


def validation_errors(doc: Any, *, closed: bool = True) -> list[str]:
    """Readable violations of the schema (``$.path: message``), most relevant first;
    ``closed`` (gpubw's own output): no member the schema does not describe (a reader
    ignores unknown members: docs/compatibility.md).

    The cells of the matrices are checked by their types first (:func:`_cells_fine`); the
    schema then sees only the rows of cells that are not fine, at their own indexes, so that
    it names their problems as before. It took ~20 s a 576 x 576 matrix, cell by cell."""
    return schemas.errors(schemas.REPORT, with_matrices(doc, _thin_cells), closed=closed)


#: a matrix's cell arrays: rows of cells (samples: rows of lists of cells, or null)
_GRIDS = ("values", "stdev", "cv")
_CELL_TYPES = {int, float, type(None)}  # the schema's nullable_number ("number": no bool)


def _cells_fine(grid: Any, depth: int, null_lists: bool) -> bool:
    """Whether ``grid`` is ``depth`` levels of lists whose innermost items are numbers or
    None (``null_lists``: the innermost lists may be None, as a samples cell is), checked by
    exact types (a subclass is left to the schema)."""
    level = [grid]
    for d in range(depth):
        allowed = {list, type(None)} if null_lists and d == depth - 1 else {list}
        if not set(map(type, level)) <= allowed:
            return False
        level = list(itertools.chain.from_iterable(filter(None, level)))
    return set(map(type, level)) <= _CELL_TYPES


def _thinned(grid: Any, depth: int, null_lists: bool = False) -> Any:
    """``grid`` with its fine rows emptied (all of it, if all are fine): the rows left keep
    their indexes, so the schema's errors name the same cells."""
    if _cells_fine(grid, depth, null_lists):
        return []
    if not isinstance(grid, list):
        return grid
    return [[] if _cells_fine(row, depth - 1, null_lists) else row for row in grid]


def with_matrices(doc: Any, change: Callable[[dict[str, Any]], None]) -> Any:
    """A copy of report ``doc`` in which ``change`` was applied to a copy of each matrix
    (its hosts' too): ``doc`` itself is kept. What is not shaped as a report is left as it
    is, for the schema to judge."""
    if not isinstance(doc, dict):
        return doc

    def testcase(t: Any) -> Any:
        if not isinstance(t, dict) or not isinstance(t.get("matrices"), list):
            return t
        matrices = []
        for m in t["matrices"]:
            if isinstance(m, dict):
                m = dict(m)
                change(m)
            matrices.append(m)
        return {**t, "matrices": matrices}

    out = dict(doc)
    if isinstance(doc.get("testcases"), list):
        out["testcases"] = [testcase(t) for t in doc["testcases"]]
    if isinstance(doc.get("hosts"), list):
        out["hosts"] = [
            {**h, "testcases": [testcase(t) for t in h["testcases"]]}
            if isinstance(h, dict) and isinstance(h.get("testcases"), list)
            else h
            for h in doc["hosts"]
        ]
    return out


def _thin_cells(m: dict[str, Any]) -> None:
    """Empty the fine rows of matrix ``m``'s cell arrays (:func:`_thinned`)."""
    for name in _GRIDS:
        if name in m:
            m[name] = _thinned(m[name], 2)
    if isinstance(m.get("samples"), list):
        m["samples"] = _thinned(m["samples"], 3, null_lists=True)


def validate(doc: Any, what: str = "report", *, closed: bool = True) -> None:
    """Raise :class:`GpubwError` listing the first violations if ``doc`` is not a valid
    gpubw report (``closed``: as gpubw writes one; a report read is checked open)."""
    errors = validation_errors(doc, closed=closed)
    if errors:
        shown = "\n  ".join(errors[:MAX_ERRORS])
        more = f"\n  ... and {len(errors) - MAX_ERRORS} more" if len(errors) > MAX_ERRORS else ""
        raise GpubwError(
            f"{what} does not match the gpubw report schema v{SCHEMA_VERSION} "
            f"({len(errors)} problem{'s' if len(errors) != 1 else ''}):\n  {shown}{more}"
        )


# -- matrix validation -------------------------------------------------------------------

#: from this many cells on, :func:`_numbers_ok` checks with numpy (imported then)
NUMPY_FROM_CELLS = 20_000


def _is_number_type(t: type) -> bool:
    if issubclass(t, bool):
        return False
    if issubclass(t, (int, float)):
        return True
    np = sys.modules.get("numpy")  # a numpy number exists only once numpy is imported
    return (
        np is not None and issubclass(t, (np.integer, np.floating)) and not issubclass(t, np.bool_)
    )


def _cell_problem(where: str, value: Any) -> str | None:
    """What is wrong with one cell (slow path: only used once something is known wrong)."""
    if value is None:
        return None
    if not _is_number_type(type(value)):
        return f"{where} is {value!r:.40} ({type(value).__name__}), not a number or None"
    try:
        x = float(value)
    except OverflowError:
        return f"{where} is an integer too large for a float ({len(str(abs(value)))} digits)"
    if not math.isfinite(x):
        return f"{where} is {value!r}, not a finite number (use None for N/A)"
    if x < 0:
        return f"{where} is {value!r}, negative (a bandwidth or latency is >= 0)"
    return None


def _numbers_ok(cells: Any, nones: int, types: set[type]) -> bool:
    """Fast check that ``cells`` (a flat list, or rows of equal length) holds only None and
    finite numbers >= 0; ``nones`` is how many Nones it holds, ``types`` the types of its
    cells. Plain Python for small matrices, numpy for large ones."""
    if not all(t is type(None) or _is_number_type(t) for t in types):
        return False
    flat = cells if not cells or not isinstance(cells[0], list | tuple) else None
    size = len(cells) if flat is not None else len(cells) * len(cells[0])
    if size < NUMPY_FROM_CELLS:
        values = flat if flat is not None else itertools.chain.from_iterable(cells)
        try:
            return all(v is None or (math.isfinite(v) and v >= 0) for v in values)
        except OverflowError:  # an int too large for a float
            return False
    import numpy as np

    try:
        arr = np.array(cells, dtype=np.float64)  # None -> NaN
    except (OverflowError, TypeError, ValueError):  # e.g. an int too large for a float
        return False
    finite = np.isfinite(arr)
    return int(finite.size - np.count_nonzero(finite)) == nones and bool((arr[finite] >= 0).all())


def value_errors(m: Matrix) -> list[str]:
    """Problems of values and samples: each cell None or a finite number >= 0 (a NaN, a
    negative figure or a string is a plugin bug, not N/A), each samples cell a sequence.
    The cells are checked with numpy; only a matrix known to be wrong is walked cell by cell
    to say where."""
    out: list[str] = []
    chain = itertools.chain.from_iterable
    nones = sum(row.count(None) for row in m.values)
    if not _numbers_ok(m.values, nones, set(map(type, chain(m.values)))):
        for r, row in enumerate(m.values):
            for c, v in enumerate(row):
                problem = _cell_problem(f"values[{r}][{c}]", v)
                if problem:
                    out.append(problem)
    for r, sample_row in enumerate(m.samples):
        if len(sample_row) != len(m.column_labels):
            out.append(
                f"samples[{r}] has {len(sample_row)} cells, {len(m.column_labels)} column labels"
            )
    cells = list(chain(m.samples))
    if not set(map(type, cells)) <= {tuple, list, type(None)}:
        for r, sample_row in enumerate(m.samples):
            for c, cell in enumerate(sample_row):
                if cell is not None and not isinstance(cell, (list, tuple)):
                    out.append(f"samples[{r}][{c}] is {type(cell).__name__}, not a list or None")
        return out
    flat: list[Any] = list(chain(filter(None, cells)))
    if flat and not _numbers_ok(flat, flat.count(None), set(map(type, flat))):
        for r, sample_row in enumerate(m.samples):
            for c, cell in enumerate(sample_row):
                for k, v in enumerate(cell or ()):
                    problem = _cell_problem(f"samples[{r}][{c}][{k}]", v)
                    if problem:
                        out.append(problem)
    return out


def matrix_structure_errors(doc: Mapping[str, Any]) -> list[str]:
    """Violations of the schema's ``matrix`` definition by one matrix's JSON data (written
    without its cells: unit, labels, notes, ...), in the order of where they are."""
    validator = schemas.validator(schemas.REPORT, closed_objects=True, ref="matrix")
    return [
        f"{_where(e.path, '').lstrip('.') or 'matrix'}: {e.message}"
        for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    ]


__all__ = [
    "MAX_ERRORS",
    "NUMPY_FROM_CELLS",
    "SCHEMA_FILE",
    "SCHEMA_VERSION",
    "matrix_structure_errors",
    "schema",
    "validate",
    "validation_errors",
    "value_errors",
    "with_matrices",
]
