"""gpubw.model.schemas: every JSON output gpubw prints carries schema_version and matches
its schema in gpubw/schemas/; output schemas stay open to added members, gpubw's own output
is held closed."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gpubw.cli import command as cli
from gpubw.model import schemas
from gpubw.model.errors import GpubwError
from gpubw.model.report_check import validate
from gpubw.model.report_io import load_report

SOURCE = Path(__file__).parents[1] / "schemas"
#: the simulated run every output below is made from
RUN = ("--simulate", "h200x2", "-t", "0", "38", "-b", "4MiB", "-i", "3", "--loop-count", "2")


def _cli(capsys: Any, *argv: str) -> tuple[int, Any]:
    code = cli.main(list(argv))
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else None


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A judged simulated run's JSON report."""
    path = tmp_path_factory.mktemp("run") / "r.json"
    assert cli.main([*RUN, "--outlier-pct", "90", "-j", "-o", str(path), "-q"]) == 0
    return path


@pytest.mark.parametrize("name", sorted(schemas.VERSIONS))
def test_every_schema_is_valid_and_in_the_source_tree(name: str) -> None:
    """Each output's schema is a valid draft 2020-12 schema whose schema_version is the
    current one; schemas/ at the top of the tree shows the packaged file."""
    doc = schemas.schema(name)
    jsonschema.Draft202012Validator.check_schema(doc)
    jsonschema.Draft202012Validator.check_schema(schemas.closed_schema(doc))
    assert doc["properties"]["schema_version"]["const"] == schemas.VERSIONS[name]
    assert doc["$id"] == f"urn:gpubw:schema:{name}-v{schemas.VERSIONS[name]}"
    assert json.loads((SOURCE / schemas.schema_file(name)).read_text()) == doc


def test_list_info_check_compare_expect_from_carry_their_version(
    capsys: Any, saved: Path, tmp_path: Path
) -> None:
    """-l -j, info -j, check -j, compare --format json and expect-from each print a document
    with schema_version that its schema (held closed, as gpubw writes) accepts."""
    outputs = {
        schemas.LIST: _cli(capsys, "-l", "-j"),
        schemas.INFO: _cli(capsys, "info", "--simulate", "h200x2", "-j"),
        schemas.CHECK: _cli(capsys, "check", str(saved), "-j"),
        schemas.COMPARE: _cli(capsys, "compare", str(saved), str(saved), "--format", "json"),
        schemas.EXPECT: _cli(capsys, "expect-from", str(saved)),
    }
    for name, (code, doc) in outputs.items():
        assert code == 0, name
        assert doc["schema_version"] == schemas.VERSIONS[name], name
        assert schemas.errors(name, doc, closed=True) == [], name


def test_a_regression_matches_the_compare_schema(capsys: Any, saved: Path, tmp_path: Path) -> None:
    """A failing comparison (exit 3) is described by the schema too."""
    doc = json.loads(saved.read_text(encoding="utf-8"))
    doc["testcases"][0]["matrices"][0]["values"][0][0] *= 0.5
    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps(doc))
    code, out = _cli(capsys, "compare", str(slow), str(saved), "--format", "json")
    assert code == out["exit_code"] == 3
    assert schemas.errors(schemas.COMPARE, out, closed=True) == []


def _closed_paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The schema paths of the objects marked closed."""
    found = [path] if isinstance(node, dict) and node.get(schemas.CLOSED) else []
    if isinstance(node, dict):
        for k, v in node.items():
            found += _closed_paths(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found += _closed_paths(v, (*path, i))
    return found


def test_output_schemas_are_open_and_gpubw_holds_its_own_output_closed(saved: Path) -> None:
    """A member a newer gpubw adds at any level is accepted by a reader (the open schema,
    gpubw's own load_report) and refused in what gpubw writes (closed)."""
    doc = json.loads(saved.read_text(encoding="utf-8"))
    assert len(_closed_paths(schemas.schema(schemas.REPORT))) == 6
    newer = copy.deepcopy(doc)
    newer["added_in_a_minor_version"] = 1
    newer["testcases"][0]["new_member"] = "x"
    newer["testcases"][0]["matrices"][0]["new_member"] = [1]
    assert schemas.errors(schemas.REPORT, newer) == []
    with pytest.raises(GpubwError, match="added_in_a_minor_version"):
        validate(newer)
    path = saved.parent / "newer.json"
    path.write_text(json.dumps(newer))
    assert load_report(path)["added_in_a_minor_version"] == 1


def test_expectations_stay_closed() -> None:
    """Expectations are gpubw's input: an unknown member is an error, never ignored, and no
    object of their schema is marked as an open output's."""
    doc = schemas.schema(schemas.EXPECT)
    assert _closed_paths(doc) == [] and doc["additionalProperties"] is False
    bad = {"format": "gpubw-expect-v1", "schema_version": "1", "rules": [], "colour": 1}
    assert any("colour" in e for e in schemas.errors(schemas.EXPECT, bad))
