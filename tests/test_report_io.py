"""gpubw.model.report_io and gpubw.model.report_check: matrix validation, Matrix
kind/bytes_counting, dict round trips."""

from __future__ import annotations

import json
import time
from pathlib import Path

import attrs
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from _writer_reports import full_report, passed, report, sweep_results
from gpubw.model import schemas
from gpubw.model.errors import UsageError
from gpubw.model.report_check import validation_errors
from gpubw.model.report_io import (
    dumps,
    load_report,
    matrix_errors,
    matrix_from_dict,
    matrix_to_dict,
    read_report,
    report_from_dict,
    report_to_dict,
)
from gpubw.model.results import BANDWIDTH, LATENCY, Axes, Matrix


def _matrix(values, samples=(), **kw) -> Matrix:
    rows = len(values)
    cols = len(values[0]) if rows else 0
    return Matrix(
        key="k",
        description="d",
        unit=kw.pop("unit", BANDWIDTH),
        row_labels=[str(r) for r in range(rows)],
        column_labels=[str(c) for c in range(cols)],
        values=values,
        samples=samples,
        **kw,
    )


def test_large_matrix_validates_fast() -> None:
    """A 2000 x 2000 matrix (numpy or tuples, a None in it) validates in < 1 s of CPU."""
    values = np.random.default_rng(0).random((2000, 2000)) * 1e9
    m = _matrix(values)
    assert isinstance(m.values[0][0], float)  # numpy arrays become Python floats
    rows = [list(r) for r in m.values]
    rows[7][7] = None
    for matrix in (m, _matrix(rows)):
        t0 = time.process_time()  # CPU time: the test machine's cores are shared
        assert matrix_errors(matrix) == []
        assert time.process_time() - t0 < 1.0


@pytest.mark.parametrize(
    ("cell", "why"),
    [
        (float("nan"), "not a finite number"),
        (float("inf"), "not a finite number"),
        (-1.0, "negative"),
        (np.float32(-2.0), "negative"),
        ("12", "not a number or None"),
        (True, "not a number or None"),
        (10**400, "integer too large for a float"),
    ],
)
def test_bad_cells_are_named(cell: object, why: str) -> None:
    """A bad value or sample is reported with its position and what is wrong."""
    errors = matrix_errors(_matrix([[1.0, cell]]))
    assert len(errors) == 1 and errors[0].startswith("values[0][1] is") and why in errors[0]
    errors = matrix_errors(_matrix([[1.0, 2.0]], samples=[[(1.0, cell), None]]))
    assert len(errors) == 1 and errors[0].startswith("samples[0][0][1] is") and why in errors[0]


def test_numpy_scalars_and_arrays_are_accepted() -> None:
    """numpy scalars in values and numpy arrays as sample cells are valid and written."""
    m = _matrix(
        [[np.float32(1.5), np.int64(3), None]], samples=[[np.array([1.0, 2.0]), None, None]]
    )
    assert matrix_errors(m) == []
    doc = matrix_to_dict(m)
    assert doc["values"] == [[1.5, 3.0, None]] and doc["samples"][0][0] == [1.0, 2.0]
    json.dumps(doc, allow_nan=False)


def test_kind_and_bytes_counting_defaults() -> None:
    """Without the fields, kind follows the unit and bytes_counting is none for latency,
    read+write where the matrix notes percent_of_nominal, else once."""
    assert (_matrix([[1.0]]).kind, _matrix([[1.0]]).bytes_counting) == ("bandwidth", "once")
    lat = _matrix([[1e-6]], unit=LATENCY)
    assert (lat.kind, lat.bytes_counting) == ("latency", "none")
    rw = _matrix([[1.0]], notes=(("percent_of_nominal", (50.0,)),))
    assert rw.bytes_counting == "read+write"
    assert _matrix([[1.0]], bytes_counting="read+write").bytes_counting == "read+write"


@pytest.mark.parametrize(
    ("kw", "why"),
    [
        ({"kind": "speed"}, "kind 'speed' is not one of"),
        ({"kind": "latency"}, "does not match unit"),
        ({"bytes_counting": "twice"}, "bytes_counting 'twice' is not one of"),
        ({"bytes_counting": "none"}, "does not fit a bandwidth matrix"),
        ({"unit": LATENCY, "bytes_counting": "once"}, "does not fit a latency matrix"),
    ],
)
def test_kind_and_bytes_counting_are_validated(kw: dict, why: str) -> None:
    """Unknown or inconsistent kind / bytes_counting values are refused when built."""
    with pytest.raises(ValueError, match=why):
        _matrix([[1.0]], **kw)


def test_fields_are_written_and_read_back(tmp_path: Path) -> None:
    """kind and bytes_counting go into the JSON and come back; a report written without
    them (older gpubw) still loads, with both inferred."""
    rep = report(sweep_results())
    path = tmp_path / "r.json"
    path.write_text(dumps(rep))
    doc = load_report(path)
    m = doc["testcases"][0]["matrices"][0]
    assert (m["kind"], m["bytes_counting"]) == ("bandwidth", "read+write")

    def fields(r):
        return [(m.key, m.kind, m.bytes_counting) for t in r.testcases for m in t.matrices]

    assert fields(report_from_dict(doc)) == fields(rep)
    for t in doc["testcases"]:
        for md in t["matrices"]:
            del md["kind"], md["bytes_counting"]
    path.write_text(json.dumps(doc))
    again = report_from_dict(load_report(path))
    assert again.testcases[0].matrices[0].bytes_counting == "read+write"
    assert fields(again) == fields(rep)


def test_full_report_round_trip() -> None:
    """report_to_dict -> JSON -> report_from_dict -> report_to_dict gives the same data."""
    doc = json.loads(json.dumps(report_to_dict(full_report())))
    assert report_to_dict(report_from_dict(doc)) == doc


def test_schema_refuses_inconsistent_kind() -> None:
    """The schema ties the optional kind to the unit."""
    m = _matrix([[1.0]])
    doc = json.loads(dumps(report([passed("k", [m])])))
    doc["testcases"][0]["matrices"][0]["kind"] = "latency"
    from gpubw.model.report_check import validation_errors

    assert any("kind" in e for e in validation_errors(doc))
    with pytest.raises(ValueError):
        matrix_from_dict(doc["testcases"][0]["matrices"][0])


def test_load_report_errors(tmp_path: Path) -> None:
    """Unreadable, non-JSON or nvbandwidth files are usage errors naming the file."""
    with pytest.raises(UsageError, match="cannot read report"):
        load_report(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(UsageError, match="is not JSON"):
        load_report(bad)
    bad.write_text('{"nvbandwidth": {}}')
    with pytest.raises(UsageError, match="nvbandwidth's own JSON"):
        load_report(bad)


def test_evolve_keeps_explicit_fields() -> None:
    """attrs.evolve keeps kind and bytes_counting (a plugin may derive matrices)."""
    m = _matrix([[1.0]], bytes_counting="read+write")
    assert attrs.evolve(m, key="x").bytes_counting == "read+write"


def test_small_reports_do_not_import_numpy() -> None:
    """Validating and writing a small report never imports numpy (its import is most of a
    short run's start-up where numpy has no byte-compiled files)."""
    import subprocess
    import sys

    code = (
        "import sys; from gpubw.model.report_io import matrix_errors, report_to_dict, dumps\n"
        "from gpubw.model.results import BANDWIDTH, Matrix\n"
        "m = Matrix(key='k', description='d', unit=BANDWIDTH, row_labels=['0'],"
        " column_labels=['0', '1'], values=[[1.0, None]], samples=[[[1.0], None]])\n"
        "assert matrix_errors(m) == []\n"
        "bad = Matrix(key='k', description='d', unit=BANDWIDTH, row_labels=['0'],"
        " column_labels=['0'], values=[[-1.0]])\n"
        "assert 'negative' in matrix_errors(bad)[0]\n"
        "assert 'numpy' not in sys.modules, 'numpy was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, encoding="utf-8")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("bad", [float("nan"), -2.0, 10**400, "x"])
def test_large_and_small_matrices_catch_the_same_cells(bad) -> None:
    """The plain-Python check (small) and the numpy check (large) refuse the same cells."""
    from gpubw.model.report_check import NUMPY_FROM_CELLS

    for cols in (3, NUMPY_FROM_CELLS // 2 + 1):
        values = [[1.0] * cols, [2.0] * cols]
        values[1][-1] = bad
        errors = matrix_errors(_matrix(values))
        assert errors and f"values[1][{cols - 1}]" in errors[0], (cols, errors)


def test_axes_stay_out_of_the_json_and_come_back_from_the_header() -> None:
    """A matrix's axes are not written (the report's JSON is unchanged by them); read back,
    the matrix reads the same axes from its nvbandwidth header."""
    header = "memcpy CE CPU(row) <-> GPU(column) bandwidth (GB/s)"
    given = Axes("host", "gpu", "both")
    m = attrs.evolve(_matrix([[1.0, 2.0]]), description=header, axes=given)
    d = matrix_to_dict(m)
    assert d == matrix_to_dict(attrs.evolve(m, axes=None))
    assert "axes" not in json.dumps(d)
    back = matrix_from_dict(json.loads(json.dumps(d)))
    assert back.axes == given and back == attrs.evolve(m, axes=None)


def test_read_report_reads_gpubw_and_nvbandwidth_json(tmp_path: Path) -> None:
    """read_report: gpubw's report as is, nvbandwidth's -j converted, anything else refused."""
    mine = tmp_path / "gpubw.json"
    mine.write_text(dumps(full_report()))
    assert read_report(mine) == report_from_dict(json.loads(mine.read_text()))
    real = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
    theirs = read_report(real / "nvbandwidth-v0.8-h200x2-2026-12-01.json")
    assert theirs.tool == "nvbandwidth" and len(theirs.testcases) == 35
    assert theirs.devices[1]["pci_bus_id"] == "00000000:00:07"
    assert theirs.testcases[0].matrices[0].values[0][0] == pytest.approx(55.5031e9)
    junk = tmp_path / "junk.json"
    junk.write_text("[1, 2")
    with pytest.raises(UsageError, match="is not JSON"):
        read_report(junk)


def _doc_with_cells(**cells: object) -> dict:
    """A valid report (one 1 x 1 matrix) whose matrix's cell arrays are ``cells``."""
    doc = json.loads(dumps(report([passed("k", [_matrix([[1.0]], samples=[[(1.0, 2.0)]])])])))
    doc["testcases"][0]["matrices"][0].update(cells)
    return doc


_CELL = st.one_of(
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(),
    st.booleans(),
    st.text(max_size=2),
)
_ITEM = st.one_of(_CELL, st.lists(_CELL, max_size=2), st.tuples(_CELL))


@given(
    values=st.lists(st.one_of(st.lists(_ITEM, max_size=3), st.tuples(_CELL)), max_size=3),
    samples=st.one_of(
        st.none(), st.lists(st.lists(st.one_of(st.none(), st.lists(_ITEM, max_size=2)), max_size=2))
    ),
)
def test_cell_arrays_get_the_schemas_own_errors(values: list, samples: object) -> None:
    """Whatever the cells hold, the report's errors are those the schema gives cell by cell."""
    doc = _doc_with_cells(values=values, samples=samples, cv=values)
    full = schemas.errors(schemas.REPORT, doc, closed=True)
    assert validation_errors(doc) == full


def test_a_576_gpu_report_validates_without_the_schema_walking_its_cells(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Eight 576 x 576 matrices (a sampled 8-rack run): the schema sees none of their cells
    (it took ~20 s a matrix), and of a bad one only its row, where it names the cell; the
    document itself is left as it was."""
    seen: list[dict] = []
    schema_errors = schemas.errors

    def spy(name: str, doc: dict, **kw: bool) -> list[str]:
        seen.append(doc)
        return schema_errors(name, doc, **kw)

    monkeypatch.setattr(schemas, "errors", spy)
    n = 576
    values = [[None] * n for _ in range(n)]
    samples = [[None] * n for _ in range(n)]
    for i in range(n):
        values[i][(i + 1) % n] = 1.5e11
        samples[i][(i + 1) % n] = [1.4e11, 1.5e11, 1.6e11]
    doc = _doc_with_cells(values=values, samples=samples, stdev=values, cv=values)
    doc["testcases"] *= 8
    assert validation_errors(doc) == []
    grids = [{g: m[g] for g in ("values", "samples", "stdev", "cv")} for m in _matrices(seen[-1])]
    assert grids == [{"values": [], "samples": [], "stdev": [], "cv": []}] * 8
    samples[300][301] = [1.4e11, "fast"]
    assert validation_errors(doc) == [
        f"$.testcases[{k}].matrices[0].samples[300][301][1]: 'fast' is not of type 'number', 'null'"
        for k in range(8)
    ]
    for m in _matrices(seen[-1]):  # only the bad row reaches the schema, at its own index
        assert [r for r, row in enumerate(m["samples"]) if row] == [300]
        assert m["values"] == []
    assert doc["testcases"][0]["matrices"][0]["values"] is values
    assert doc["testcases"][0]["matrices"][0]["samples"] is samples


def _matrices(doc: dict) -> list[dict]:
    return [m for t in doc["testcases"] for m in t["matrices"]]


def test_a_matrix_is_written_a_row_a_line_and_reads_back_the_same() -> None:
    """Each row of values, samples, stdev and cv is one line (a host's matrices too); the
    text is the same JSON data as the report's."""
    m = _matrix([[1.0, None], [2.5, 3.0]], samples=[[(1.0, 1.5), None], [(2.5,), (3.0, 3.5)]])
    note = "a note \x00rows-0 that looks like the layout's mark"
    r = attrs.evolve(
        report([passed("k", [attrs.evolve(m, notes=(("values", note),))])]),
        hosts=(("host2", (passed("k", [m]),)),),
    )
    text = dumps(r)
    assert json.loads(text) == report_to_dict(r)
    lines = text.splitlines()
    for row in ("[1.0, null]", "[2.5, 3.0]", "[[1.0, 1.5], null]", "[[2.5], [3.0, 3.5]]"):
        assert sum(line.strip().rstrip(",") == row for line in lines) == 2, row
    assert json.loads(text)["testcases"][0]["matrices"][0]["notes"] == {"values": note}
