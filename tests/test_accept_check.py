"""gpubw check and --expect never read PASS where nothing was judged; nvbandwidth JSON of a
wrong shape or with impossible figures is one clear line; the outlier rule is fast."""

from __future__ import annotations

import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

from _cli import run_cli
from gpubw.acceptance.expect import evaluate, median_without
from gpubw.model.nvbandwidth_json import to_report

H2D = "host_to_device_memcpy_ce"


def nvbandwidth_doc(cells: list[list[str]], key: str = H2D, desc: str = "") -> dict[str, Any]:
    """nvbandwidth -j output of one Passed testcase with these cells."""
    n = len(cells[0])
    return {
        "nvbandwidth": {
            "CUDA Runtime Version": 13000,
            "Driver Version": "580.00",
            "GPU Device list": [
                f"{i}: NVIDIA H200 (00000000:{i + 16:02x}:00): (vm)" for i in range(n)
            ],
            "git_version": "v0.10",
            "version": "v0.10.0",
            "testcases": [
                {
                    "name": key,
                    "status": "Passed",
                    "bandwidth_description": desc
                    or "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
                    "bandwidth_matrix": cells,
                    "sum": 1.0,
                }
            ],
        }
    }


def _write(tmp_path: Path, doc: Any, name: str = "nv.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def test_builtin_on_nvbandwidth_json_of_ones_is_refused(capsys, tmp_path):
    """Every cell "1" GB/s: the built-in floors (512 MiB) cannot judge a report without a size:
    exit 2 naming why, never PASS (it passed with exit 0)."""
    path = _write(tmp_path, nvbandwidth_doc([["1", "1"]]))
    code, out, err = run_cli(capsys, "check", path, "--expect", "builtin")
    assert code == 2 and out == "" and "PASS" not in err
    assert f"has floors for {H2D} only at 512 MiB" in err and "records no buffer size" in err


def test_builtin_at_another_size_is_refused(capsys, tmp_path):
    """A gpubw report at 64 MiB: check --expect builtin refuses; the run refuses before it
    starts (both judged nothing and printed PASS)."""
    report = tmp_path / "r.json"
    argv = ("--simulate", "h200x2", "-t", H2D, "-b", "64M")
    code, _, _ = run_cli(capsys, *argv, "-j", "-o", str(report))
    assert code == 0
    code, out, err = run_cli(capsys, "check", str(report), "--expect", "builtin")
    assert code == 2 and f"{H2D} (64 MiB) only at 512 MiB" in err and "PASS" not in out
    code, out, err = run_cli(capsys, *argv, "--expect", "builtin")
    assert code == 2 and "are for 512 MiB buffers and this run measures 64 MiB" in err
    assert "add -b 512M" in err and "Running" not in out


def test_a_partly_judged_run_names_what_was_not_judged(capsys, tmp_path):
    """-b 64M,512M with --expect builtin: the 64 MiB testcase is listed NOT JUDGED, in the
    text and in the report's expectations.not_judged."""
    report = tmp_path / "r.json"
    argv = ("--simulate", "h200x2", "-t", H2D, "-b", "64M,512M", "--expect", "builtin")
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0
    assert f"NOT JUDGED by NVIDIA H200 SXM (built-in) (no rule for them at their size): {H2D} " \
        "(64 MiB)" in out  # fmt: skip
    assert "PASS: every judged cell is as fast as expected (1 testcase(s) not judged)" in out
    run_cli(capsys, *argv, "-j", "-o", str(report))
    assert json.loads(report.read_text())["expectations"]["not_judged"] == [f"{H2D} (64 MiB)"]


def test_an_empty_nvbandwidth_report_is_not_accepted(capsys, tmp_path):
    """{"nvbandwidth": {}}: no testcase, nothing judged: exit 1, never PASS."""
    code, out, _ = run_cli(capsys, "check", _write(tmp_path, {"nvbandwidth": {}}))
    assert code == 1 and "PASS" not in out
    assert "NOTHING JUDGED: the report holds no testcase" in out and "NOT ACCEPTED" in out


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda t: t.update(sum="abc"), "\"sum\" is 'abc'; expected a number"),
        (
            lambda t: t.update(bandwidth_matrix={"a": 1}),
            "\"bandwidth_matrix\" is {'a': 1}; expected a list of rows",
        ),
        (lambda t: t.update(bandwidth_matrix=[{"a": 1}]), "expected a list of rows"),
        (
            lambda t: t.update(bandwidth_matrix=[[[1]]]),
            'cell [0][0] is [1]; expected a number or "N/A"',
        ),
        (lambda t: t.update(name=["x"]), "testcases[0] \"name\" is ['x']; expected a string"),
        (lambda t: t.update(status=3), '"status" is 3; expected a string'),
    ],
)
def test_wrong_types_are_one_line(capsys, tmp_path, change, said):
    """A member of a wrong type: one line naming it and what is allowed, exit 2 (it was a
    traceback), for check and expect-from alike."""
    doc = nvbandwidth_doc([["55.1", "55.2"]])
    change(doc["nvbandwidth"]["testcases"][0])
    path = _write(tmp_path, doc)
    for argv in (("check", path), ("expect-from", path)):
        code, out, err = run_cli(capsys, *argv)
        assert code == 2 and out == "" and said in err, err
        assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("cell", "shown"),
    [("nan", "nan GB/s"), ("-3", "-3 GB/s"), ("0", "0 GB/s"), ("inf", "inf GB/s")],
)
def test_impossible_figures_are_refused(capsys, tmp_path, cell, shown):
    """NaN, infinite, negative or zero bandwidth: no measurement; check and expect-from refuse
    it naming the cell (check accepted it; compare flags it INVALID)."""
    path = _write(tmp_path, nvbandwidth_doc([["55.1", cell]]))
    for argv in (("check", path), ("expect-from", path)):
        code, _, err = run_cli(capsys, *argv)
        assert code == 2
        assert f"testcase '{H2D}', matrix '{H2D}', cell [0][1] is {shown}; a figure must be a " \
            "finite number > 0 (or N/A)" in err  # fmt: skip


def test_median_without_is_statistics_median():
    """The median of the others, from the sorted group, is statistics.median's float."""
    rng = random.Random(7)
    for n in range(1, 40):
        values = [rng.choice([1.0, 2.5, 3.0, rng.uniform(0, 10)]) for _ in range(n)]
        ordered = sorted(values)
        for v in values:
            others = list(values)
            others.remove(v)
            assert median_without(ordered, v) == (statistics.median(others) if others else None)


def _d2d(n: int, seed: int) -> tuple[Any, list[float]]:
    """An n x n device-to-device report and its figures (bytes/s)."""
    rng = random.Random(seed)
    cells = [["N/A" if i == j else f"{rng.choice([100.0, 110.0, rng.uniform(50, 120)]):.2f}"
              for j in range(n)] for i in range(n)]  # fmt: skip
    doc = nvbandwidth_doc(cells, "device_to_device_memcpy_read_ce",
                          "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)")  # fmt: skip
    return to_report(doc), [float(c) * 1e9 for row in cells for c in row if c != "N/A"]


def test_the_outlier_rule_gives_the_rules_verdicts():
    """Each flagged cell is below 90 % of statistics.median of the other cells, and only
    those (the rule's definition, computed the slow way)."""
    report, values = _d2d(40, 5)
    verdicts = evaluate(report, None, 90.0, None, include_passed=True)
    assert len(verdicts) == len(values)
    for v, x in zip(verdicts, values):
        others = list(values)
        others.remove(x)
        med = statistics.median(others)
        assert (v.measured, v.reference, v.severity == "fail") == (x, med, x < 0.9 * med)


def test_the_outlier_rule_is_fast_on_a_large_matrix():
    """200 x 200 GPUs (~40k cells) judged in seconds (the rule cost ~cells^2: minutes)."""
    report, _ = _d2d(200, 3)
    start = time.monotonic()
    verdicts = evaluate(report, None, 90.0, None)
    assert time.monotonic() - start < 20 and verdicts
