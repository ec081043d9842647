"""The JSON writer and its schema: valid documents, rejected ones, NaN, simulated flag."""

from __future__ import annotations

import io
import json
from pathlib import Path

import attrs
import jsonschema
import pytest

from _writer_reports import full_report, one_by_n, passed, report, sweep_results
from gpubw.model.errors import GpubwError, UsageError
from gpubw.model.report_check import schema, validate, validation_errors
from gpubw.model.report_io import dumps, load_report, report_to_dict
from gpubw.model.results import BANDWIDTH, Matrix, Status, TestcaseResult
from gpubw.writers.json import JsonWriter

SOURCE_SCHEMA = Path(__file__).parents[1] / "schemas" / "report-v1.schema.json"


def write(rep) -> dict:
    buf = io.StringIO()
    JsonWriter().write(rep, buf)
    return json.loads(buf.getvalue())


def test_schema_is_valid_draft_2020_12() -> None:
    """The packaged schema is itself a valid draft 2020-12 schema with an $id."""
    s = schema()
    jsonschema.Draft202012Validator.check_schema(s)
    assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert s["$id"]
    assert s["properties"]["schema_version"]["const"] == "1"


def test_schema_in_source_tree_is_the_packaged_one() -> None:
    """schemas/ at the top of the tree shows the same file the package loads."""
    assert json.loads(SOURCE_SCHEMA.read_text()) == schema()


def _described(node: object, path: str = "$") -> list[str]:
    """Paths of properties that lack a description."""
    missing = []
    if isinstance(node, dict):
        for name, sub in node.get("properties", {}).items():
            if isinstance(sub, dict) and "description" not in sub:
                missing.append(f"{path}.{name}")
        for key, sub in node.items():
            if isinstance(sub, (dict, list)) and key != "allOf":  # allOf: unit consistency
                missing += _described(sub, f"{path}.{key}")
    elif isinstance(node, list):
        for i, sub in enumerate(node):
            missing += _described(sub, f"{path}[{i}]")
    return missing


def test_every_schema_field_is_described() -> None:
    """Every property in the schema carries a description."""
    assert _described(schema()) == []


def test_full_report_validates() -> None:
    """Every shape (matrices, waived, error, not found, sweep) gives a valid document."""
    rep = attrs.evolve(
        full_report(verbose=True),
        testcases=[*full_report(verbose=True).testcases, *sweep_results()],
    )
    doc = write(rep)
    assert validation_errors(doc) == []
    statuses = [t["status"] for t in doc["testcases"]]
    assert {"Passed", "Waived", "Error", "Not Found"} <= set(statuses)


def test_values_in_base_units_with_display_scale() -> None:
    """Values stay in bytes/s or s; display_unit and scale say how to show them."""
    doc = write(full_report())
    m = doc["testcases"][0]["matrices"][0]
    assert m["unit"] == "bytes/s" and m["display_unit"] == "GB/s" and m["scale"] == 1e-9
    assert m["values"][0][0] == pytest.approx(54.8731e9)
    lat = doc["testcases"][3]["matrices"][0]
    assert lat["unit"] == "s" and lat["display_unit"] == "ns" and lat["scale"] == 1e9
    assert lat["values"][0] == [None, pytest.approx(830.12e-9)]


def test_simulated_flag_always_present() -> None:
    """simulated is written for both kinds of report; a simulated one carries the notice."""
    real = write(full_report())
    sim = write(full_report(simulated=True))
    assert real["simulated"] is False and "notice" not in real
    assert sim["simulated"] is True
    assert sim["notice"] == "SIMULATED SYSTEM dgx-h200-2: these figures are modelled, not measured"
    doc = report_to_dict(full_report())
    del doc["simulated"]
    assert any("simulated" in e for e in validation_errors(doc))


def test_nan_and_inf_become_null() -> None:
    """NaN and infinities in values, samples, notes and sums are written as null."""
    nan, inf = float("nan"), float("inf")
    m = Matrix(
        key="k",
        description="h",
        unit=BANDWIDTH,
        row_labels=["0"],
        column_labels=["0", "1"],
        values=[[nan, 5e9]],
        samples=[[(nan, 1e9), None]],
        notes=(("percent_of_nominal", inf), ("per_column", (nan, 1.0))),
    )
    text = dumps(report([passed("k", [m])]))
    assert "NaN" not in text and "Infinity" not in text
    doc = json.loads(text)
    mm = doc["testcases"][0]["matrices"][0]
    assert mm["values"] == [[None, 5e9]]
    assert mm["samples"] == [[[None, 1e9], None]]
    assert mm["notes"] == {"percent_of_nominal": None, "per_column": [None, 1.0]}
    nan_sum = Matrix("k", "h", BANDWIDTH, ["0"], ["0"], [[inf]])
    assert (
        json.loads(dumps(report([passed("k", [nan_sum])])))["testcases"][0]["matrices"][0]["sum"]
        is None
    )


def test_wrong_status_is_rejected_clearly() -> None:
    """A document with an unknown status fails validation with a readable path and reason."""
    doc = report_to_dict(full_report())
    doc["testcases"][0]["status"] = "Running"
    with pytest.raises(GpubwError) as info:
        validate(doc)
    text = str(info.value)
    assert "$.testcases[0].status" in text
    assert "'Running' is not one of" in text
    assert "schema v1" in text


def test_writer_validates_before_writing(monkeypatch: pytest.MonkeyPatch) -> None:
    """An invalid report raises GpubwError and writes nothing."""
    import gpubw.model.report_io as jw

    real = jw.testcase_to_dict

    def broken(t: TestcaseResult) -> dict:
        d = real(t)
        d["status"] = "Bogus"
        return d

    monkeypatch.setattr(jw, "testcase_to_dict", broken)
    buf = io.StringIO()
    with pytest.raises(GpubwError, match="does not match the gpubw report schema"):
        JsonWriter().write(report([passed("k", [one_by_n()])]), buf)
    assert buf.getvalue() == ""


def test_many_violations_are_summarised() -> None:
    """Only the first few violations are listed, with a count of the rest."""
    doc = report_to_dict(full_report())
    for t in doc["testcases"]:
        t["status"] = "Nope"
    with pytest.raises(GpubwError, match=r"(?s)7 problems.*and 2 more"):
        validate(doc)


def test_unit_and_display_unit_agree() -> None:
    """The schema rejects a bandwidth matrix whose display unit is ns."""
    doc = report_to_dict(full_report())
    doc["testcases"][0]["matrices"][0]["display_unit"] = "ns"
    assert validation_errors(doc)


def test_load_report_round_trip(tmp_path: Path) -> None:
    """load_report reads and validates a written report; bad files give clear errors."""
    path = tmp_path / "r.json"
    path.write_text(dumps(full_report()))
    assert load_report(path)["testcases"][1]["key"] == "device_to_device_memcpy_read_ce"
    path.write_text("{not json")
    with pytest.raises(UsageError, match="is not JSON"):
        load_report(path)
    with pytest.raises(UsageError, match="cannot read"):
        load_report(tmp_path / "missing.json")
    path.write_text(json.dumps({"nvbandwidth": {}}))
    with pytest.raises(UsageError, match="nvbandwidth's own JSON"):
        load_report(path)
    path.write_text(json.dumps({"schema_version": "1"}))
    with pytest.raises(GpubwError, match="required property"):
        load_report(path)


def test_interrupted_and_not_found_statuses() -> None:
    """Interrupted and Not Found testcases and an interrupted run validate."""
    rep = attrs.evolve(
        report(
            [
                TestcaseResult("x", Status.INTERRUPTED, message="SIGINT"),
                TestcaseResult("99", Status.NOT_FOUND, message="Testcase index 99 out of bound!"),
            ]
        ),
        signal="SIGINT",
    )
    doc = write(rep)
    assert doc["interrupted"] is True and doc["exit_code"] == 130
    assert [t["status"] for t in doc["testcases"]] == ["Interrupted", "Not Found"]
