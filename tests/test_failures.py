"""Failure behaviour: every bad input and fault, as docs/failures.md lists them.

Each test here is one row (or a few) of docs/failures.md: the input or fault, what gpubw does
(message, status, exit code, what the report keeps) and nothing else. Runs use simulated
systems with small buffers, one sample and one or two copies, so the whole file stays fast.
"""

from __future__ import annotations

import json
import math
import os
import signal
import string
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpubw
from _cli import run_cli, usage_error
from _plugin_fixtures import BROKEN, BROKEN_DIST, GOOD, copy_fixtures, installed, subprocess_env
from _run import run as run_with
from gpubw import DeviceBuffer, HostBuffer, RunOptions, System
from gpubw.backend.base import Backend
from gpubw.backend.sim.backend import SimulatedBackend
from gpubw.backend.sim.faults import Faults
from gpubw.backend.sim.presets import load_system, system_from_dict
from gpubw.cli import command as cli
from gpubw.model.errors import UsageError
from gpubw.model.report_check import validate
from gpubw.model.report_io import load_report
from gpubw.model.results import Status
from gpubw.runner import core as runner
from gpubw.runner.registry import Entry, Registry
from gpubw.runner.writer_registry import Writers

MIB = 1 << 20
PRESET = "h200x2"
FAST = ["-b", "1", "-i", "1", "--loop-count", "1"]
FAST_OPTIONS = RunOptions(samples=1, loops=1, gate_timeout_s=0.05)


# -- helpers ------------------------------------------------------------------------------
def json_run(capsys: Any, *argv: str) -> tuple[int, dict[str, Any], str]:
    """Run argv with -j; the output must be a schema-valid report."""
    code, out, err = run_cli(capsys, *argv, "-j")
    doc = json.loads(out)
    validate(doc)
    return code, doc, err


def statuses(doc: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {t["key"]: (t["status"], t["message"]) for t in doc["testcases"]}


def system_file(tmp_path: Path, doc: Any, name: str = "system.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def must_not_run(monkeypatch: Any) -> None:
    def boom(*a: Any, **k: Any) -> None:
        raise AssertionError("a testcase ran")

    monkeypatch.setattr(runner, "_run_one", boom)


@pytest.fixture
def plugins(tmp_path):
    with installed(tmp_path / "site", GOOD, BROKEN) as paths:
        yield paths


# == 1. Bad input ==========================================================================
def test_unknown_testcase_key_is_not_found(capsys):
    """-t with an unknown key: Not Found (nvbandwidth's message), the others still run."""
    code, doc, _ = json_run(capsys, "--simulate", PRESET, *FAST, "-t", "nope", "0")
    assert code == 1
    assert [(t["key"], t["status"]) for t in doc["testcases"]] == [
        ("nope", "Not Found"),
        ("host_to_device_memcpy_ce", "Passed"),
    ]
    assert doc["testcases"][0]["message"] == "Testcase nope not found"


def test_testcase_index_out_of_range(capsys):
    """-t 999: Not Found with 'Testcase index 999 out of bound', exit 1 (text output)."""
    code, out, _ = run_cli(capsys, "--simulate", PRESET, *FAST, "-t", "999")
    assert code == 1
    assert "Testcase index 999 out of bound" in out


def test_testcase_with_prefix_is_a_usage_error(capsys, monkeypatch):
    """-t together with -p is a usage error saying so, before any testcase runs."""
    must_not_run(monkeypatch)
    line = usage_error(capsys, "--simulate", PRESET, "-t", "0", "-p", "host")
    assert line == (
        "gpubw: error: -t/--testcase with -p/--testcase-prefixes: testcases and testcase "
        "prefixes cannot be used together; give one of them"
    )


def test_prefix_matching_nothing_exits_1(capsys, monkeypatch):
    """-p matching no testcase: exit 1, nothing on stdout, one error line pointing to gpubw -l."""
    must_not_run(monkeypatch)
    code, out, err = run_cli(capsys, "--simulate", PRESET, "-p", "zzz_nothing")
    assert code == 1 and out == ""
    assert err.strip() == (
        "gpubw: error: the testcase prefixes 'zzz_nothing' match no testcase (see gpubw -l)"
    )


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("0", "is zero"),
        ("0.0GiB", "is zero"),
        ("-5", "is negative"),
        ("-1GiB", "is negative"),
        ("-0.5", "is negative"),
    ],
)
def test_buffer_size_zero_or_negative(capsys, value, why):
    """A zero or negative -b is a usage error saying which, asking for a positive number of MiB."""
    line = usage_error(capsys, "--simulate", PRESET, "-b", value)
    assert f"invalid buffer size {value!r}" in line and why in line
    assert "expected a positive number of MiB" in line


@pytest.mark.parametrize("value", ["abc", "12XB", "0x10", "nan", "inf", "1,,2"])
def test_buffer_size_not_a_number(capsys, value):
    """A -b that is not a finite number with a unit is a usage error listing the accepted units."""
    line = usage_error(capsys, "--simulate", PRESET, "-b", value)
    assert f"invalid buffer size {value!r}" in line
    assert "a number with a unit B, KiB, MiB, GiB" in line


@pytest.mark.parametrize("value", ["1e400", "9e999999999GiB", "1e99999999999999999999"])
def test_buffer_size_absurdly_large(capsys, value):
    """Sizes beyond any memory are refused while parsing (once they were a traceback)."""
    line = usage_error(capsys, "--simulate", PRESET, "-b", value)
    assert f"invalid buffer size {value!r}" in line
    assert "larger than" in line or "out of range" in line


def test_buffer_size_larger_than_device_memory(capsys, monkeypatch, tmp_path):
    """-b above the smallest device's memory: usage error before any run, no -o or temp file."""
    must_not_run(monkeypatch)
    target = tmp_path / "r.json"
    line = usage_error(capsys, "--simulate", PRESET, "-b", "200GiB", "-t", "0", "-o", str(target))
    assert "buffer size 200 GiB (214748364800 bytes) is larger than the memory of device 0" in line
    assert "(NVIDIA H200, 143771 MiB)" in line and "must be at most 150211657728 bytes" in line
    assert list(tmp_path.iterdir()) == []


def test_buffer_size_check_counts_the_context_reserve(capsys, monkeypatch):
    """A size between what a device can allocate and its total memory is refused (the
    context keeps 512 MiB, gpubw 6 MiB); the largest size accepted really allocates."""
    # Before the check counted the reserve, 143500 MiB passed it and every testcase then
    # failed with CUDA_ERROR_OUT_OF_MEMORY.
    line = usage_error(capsys, "--simulate", PRESET, "-b", "143500MiB", "-t", "0")
    assert "143259 MiB free (512 MiB kept by the CUDA context" in line
    assert "must be at most 150211657728 bytes" in line
    code, doc, _ = json_run(
        capsys, "--simulate", "h200x1", "-b", "150211657728B", "-i", "1", "-s", "-t", "0", "1"
    )
    assert [t["status"] for t in doc["testcases"]] == ["Passed", "Passed"], doc["testcases"]
    assert code == 0


def test_buffer_size_larger_than_host_memory(capsys, monkeypatch, tmp_path):
    """-b above the host's memory: usage error naming both sizes, before anything runs."""
    # Simulated: the system's host_memory_bytes; real: SC_PHYS_PAGES x SC_PAGE_SIZE.
    must_not_run(monkeypatch)
    path = system_file(tmp_path, {"base": "h200x1", "host_memory_bytes": 1 << 30})
    line = usage_error(capsys, "--simulate", path, "-b", "2GiB", "-t", "0")
    assert "buffer size 2 GiB (2147483648 bytes) is larger than the host's memory (1 GiB)" in line


def test_host_memory_of_a_real_backend_is_physical_memory():
    """The check's figure for real hardware: the host's physical memory."""
    expected = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert Backend.host_memory_bytes(SimulatedBackend.__new__(SimulatedBackend)) == expected


def test_fixed_size_testcases_ignore_the_size_check(capsys):
    """Only testcases that use the size are checked: latency testcases run at any -b."""
    code, doc, _ = json_run(
        capsys, "--simulate", "h200x1", "-b", "200GiB", "-i", "1", "-t", "host_device_latency_sm"
    )
    assert code == 0
    assert doc["testcases"][0]["status"] == "Passed"


@pytest.mark.parametrize("option", ["-i", "--samples", "--testSamples", "--loop-count"])
@pytest.mark.parametrize("value", ["0", "-1", "-20"])
def test_samples_or_loop_count_zero_or_negative(capsys, option, value):
    """A sample or loop count below 1, under any of its option names, is a usage error."""
    line = usage_error(capsys, "--simulate", PRESET, option, value)
    assert f"{value!r} must be at least 1" in line


@pytest.mark.parametrize("option", ["--gate-timeout", "--world-timeout"])
@pytest.mark.parametrize("value", ["0", "-1", "soon", "inf", "nan"])
def test_gate_timeout_not_positive(capsys, option, value):
    """A --gate-timeout or --world-timeout that is not a finite positive number is a usage
    error naming the option, the value and what is allowed."""
    line = usage_error(capsys, "--simulate", PRESET, f"{option}={value}")
    assert option in line and repr(value) in line
    assert "must be a positive, finite number" in line or "is not a number of seconds" in line


@pytest.mark.parametrize("option", ["--gate-timeout", "--world-timeout"])
def test_timeout_past_a_day(capsys, option):
    """A timeout past 86400 s is refused, saying the bound."""
    line = usage_error(capsys, "--simulate", PRESET, option, "1e9")
    assert option in line and "must be at most 86400 seconds" in line


@pytest.mark.parametrize("value", ["0.001", "1e-300", "0.05", "0.99"])
def test_world_timeout_below_a_second(capsys, value):
    """A --world-timeout under 1 s (where a healthy rank on a busy host reads as a dead one)
    is refused, saying the bound; RunOptions refuses it too."""
    line = usage_error(capsys, "--simulate", PRESET, "--world-timeout", value)
    assert "--world-timeout" in line and "must be at least 1 seconds" in line
    with pytest.raises(ValueError, match="world_timeout_s must be at least 1"):
        RunOptions(world_timeout_s=float(value))


def test_unknown_writer(capsys, monkeypatch):
    """An unknown --format is a usage error listing the allowed formats, before anything runs."""
    must_not_run(monkeypatch)
    line = usage_error(capsys, "--simulate", PRESET, "--format", "yaml", "-t", "0")
    allowed = Writers.discover().names  # the built-ins and the installed plugins' writers
    assert {"csv", "json", "nvbandwidth", "nvbandwidth-json", "openmetrics", "text"} <= set(allowed)
    assert line == f"gpubw: error: unknown output format 'yaml'; allowed: {', '.join(allowed)}"


@pytest.mark.parametrize("where", ["missing_dir", "is_dir", "proc"])
def test_unwritable_output_path(capsys, monkeypatch, tmp_path, where):
    """An -o path that cannot be written (no such dir, a dir, /proc) is a usage error up front."""
    must_not_run(monkeypatch)
    target = {
        "missing_dir": str(tmp_path / "no" / "report.json"),
        "is_dir": str(tmp_path),
        "proc": "/proc/gpubw-report.json",
    }[where]
    line = usage_error(capsys, "--simulate", PRESET, "-t", "0", "-o", target)
    assert f"-o/--output {target!r}" in line


def test_missing_simulate_file(capsys, monkeypatch, tmp_path):
    """A missing --simulate file is a usage error naming the path and the OS error."""
    must_not_run(monkeypatch)
    path = str(tmp_path / "nowhere.json")
    line = usage_error(capsys, "--simulate", path, "-t", "0")
    assert f"cannot read simulated system file {path}: No such file or directory" in line


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("{ not json", ["not valid JSON", "line 1, column 3"]),
        ('{"base": "h200x1", "colour": 1}', ["unknown key 'colour' in the system"]),
        ('{"base": "h200x9"}', ["base 'h200x9' is not a preset"]),
        ('{"base": "h200x1", "count": 0}', ["count must be positive, got 0"]),
        ('{"base": "h200x1", "count": 100000}', ["count must be at most 1024"]),
        ('{"base": "h200x1", "faults": {"gate": 1}}', ["unknown key 'gate' in faults"]),
        ('{"base": "h200x1", "faults": {"corrupt_copy": 1}}', ["faults.corrupt_copy"]),
        ("[1, 2]", ["the system must be an object, got list"]),
    ],
)
def test_malformed_simulate_file(capsys, monkeypatch, tmp_path, content, words):
    """A --simulate file that is not a valid system: exit 2, the file and the key named."""
    must_not_run(monkeypatch)
    path = tmp_path / "sys.json"
    path.write_text(content)
    line = usage_error(capsys, "--simulate", str(path), "-t", "0")
    assert str(path) in line
    for word in words:
        assert word in line


def test_simulate_file_not_utf8(capsys, tmp_path):
    """A --simulate file that is not UTF-8 text is a usage error saying so."""
    path = tmp_path / "sys.json"
    path.write_bytes(b'{"name": "\xff\xfe"}')
    line = usage_error(capsys, "--simulate", str(path), "-t", "0")
    assert "not UTF-8 text" in line


def test_unknown_simulate_preset(capsys):
    """An unknown --simulate preset is a usage error listing the presets."""
    line = usage_error(capsys, "--simulate", "h300x4", "-t", "0")
    assert "unknown simulated system 'h300x4'; presets: h200x1, h200x2, h200x8, pcie4" in line


@pytest.mark.parametrize("argv", [["--bogus"], ["-x"], ["stray"]])
def test_unknown_option(capsys, argv):
    """An unknown option or a stray argument is a usage error naming it."""
    line = usage_error(capsys, *argv)
    assert f"unrecognized arguments: {argv[0]}" in line


@pytest.mark.parametrize(
    "argv",
    [
        ["-b", "1", "-b", "2"],
        ["-i", "1", "--samples", "2"],
        ["--loop-count", "1", "--loopCount", "1"],
        ["-o", "a.json", "-o", "b.json"],
        ["--format", "json", "--format", "text"],
        ["--simulate", "h200x1", "--simulate", "h200x2"],
        ["--gate-timeout", "1", "--gate-timeout", "2"],
        ["--world-timeout", "1", "--world-timeout", "2"],
        ["--expect", "a.json", "--expect", "builtin"],
        ["--devices", "0", "--devices", "1"],
        ["--pair", "0,1", "--pair", "0,1"],
        ["--soak", "1s", "--soak", "2s"],
        ["--soak-drop", "5%", "--soak-drop", "6%"],
        ["--wait-idle", "1", "--wait-idle", "2"],
        ["--host-numa", "0", "--host-numa", "local"],
        ["--outlier-pct", "90", "--outlier-pct", "80"],
        ["--cv-threshold", "10%", "--cv-threshold", "5%"],
        ["check", "r.json", "--expect", "a.json", "--expect", "builtin"],
        ["check", "r.json", "--outlier-pct", "90", "--outlier-pct", "off"],
    ],
)
def test_repeated_scalar_option(capsys, argv):
    """A single-valued option given twice, under any of its names, is a usage error."""
    line = usage_error(capsys, *argv)
    assert "given more than once" in line


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["-b", "abc"], "invalid buffer size 'abc'"),
        (["--simulate", "/nonexistent/sys.json"], "cannot read simulated system file"),
        (["-b", "1e400", "-t", "0"], "larger than"),
        (["-t", "0", "-p", "host"], "cannot be used together"),
    ],
)
def test_no_traceback_in_a_real_process(argv, words):
    """The same errors from a real `python -m gpubw`: one line on stderr, exit 2."""
    proc = subprocess.run(
        [sys.executable, "-m", "gpubw", *argv],
        capture_output=True,
        encoding="utf-8",
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpubw: error: ") and words in lines[0]


# == 2. Misbehaving plugins ================================================================
def plugin_run(capsys: Any, *keys: str) -> tuple[int, dict[str, tuple[str, str]]]:
    code, doc, _ = json_run(capsys, "--simulate", "h200x1", *FAST, "-t", *keys, "fixture_good")
    got = statuses(doc)
    assert got["fixture_good"] == ("Passed", "")  # the others still ran and were written
    for t in doc["testcases"]:
        if t["key"].startswith("fixture_") and t["key"] != "fixture_good":
            assert t["plugin"] == BROKEN_DIST and t["matrices"] == []
    return code, got


def test_plugin_that_fails_to_import(capsys, plugins):
    """A plugin that fails to import: Error for its testcase, exit 1, the others still pass."""
    code, got = plugin_run(capsys, "fixture_import_raises")
    assert code == 1
    status, message = got["fixture_import_raises"]
    assert status == "Error"
    assert message.startswith(f"plugin {BROKEN_DIST!r} could not be loaded: ")


def test_plugin_that_raises_in_filter(capsys, plugins):
    """A plugin whose filter() raises: Error naming plugin, testcase and exception; exit 1."""
    code, got = plugin_run(capsys, "fixture_filter_raises")
    assert code == 1
    assert got["fixture_filter_raises"] == (
        "Error",
        f"{BROKEN_DIST} fixture_filter_raises: filter() failed: "
        "ValueError: fixture: filter exploded",
    )


def test_plugin_that_raises_in_run(capsys, plugins):
    """A plugin whose run() raises: Error naming plugin, testcase and exception; exit 1."""
    code, got = plugin_run(capsys, "fixture_run_raises")
    assert code == 1
    assert got["fixture_run_raises"] == (
        "Error",
        f"{BROKEN_DIST} fixture_run_raises: run() failed: ZeroDivisionError: fixture: run exploded",
    )


def test_plugin_that_returns_no_result(capsys, plugins):
    """A plugin's run() returning no Matrix results (or a list of other things): Error naming it."""
    code, got = plugin_run(capsys, "fixture_garbage", "fixture_garbage_list")
    assert code == 1
    assert got["fixture_garbage"] == (
        "Error",
        f"{BROKEN_DIST} fixture_garbage: run() returned str 'garbage', not Matrix results",
    )
    assert "holding int 42, not Matrix results" in got["fixture_garbage_list"][1]


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("fixture_nan", "values[0][0] is nan, not a finite number (use None for N/A)"),
        ("fixture_string_cell", "values[0][0] is 'fast' (str), not a number or None"),
        ("fixture_bad_unit", "unit: 'furlongs/fortnight' is not one of ['bytes/s', 's']"),
        ("fixture_huge_int", "values[0][0] is an integer too large for a float (401 digits)"),
    ],
)
def test_plugin_result_that_breaks_the_schema(capsys, plugins, key, words):
    """A Matrix with a NaN or string cell or an unknown unit: Error for that testcase only."""
    # The report of the other testcases still validates and is written.
    code, got = plugin_run(capsys, key, "0")
    assert code == 1
    status, message = got[key]
    assert status == "Error"
    assert message.startswith(
        f"{BROKEN_DIST} {key}: run() returned matrix 'fixture_bad_matrix' that breaks the "
        "report schema: "
    )
    assert words in message
    assert got["host_to_device_memcpy_ce"][0] == "Passed"


def test_plugin_errors_in_text_output(capsys, plugins):
    """The text writer shows the same Errors, and the passing testcase's matrix."""
    code, out, _ = run_cli(
        capsys, "--simulate", "h200x1", *FAST, "-t", "fixture_string_cell", "fixture_good"
    )
    assert code == 1
    assert "ERROR: gpubw-fixture-broken fixture_string_cell: run() returned matrix" in out
    assert "fixture fixture_good (GB/s)" in out


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("fixture_run_exits", "run() failed: SystemExit: 3"),
        ("fixture_filter_exits", "filter() failed: SystemExit: fixture: filter wants out"),
        ("fixture_keyboard_interrupt", "run() failed: KeyboardInterrupt"),
        ("fixture_base_exception", "run() failed: FixtureBaseError: fixture: not an Exception"),
    ],
)
def test_plugin_that_raises_system_exit_or_keyboard_interrupt(capsys, plugins, key, message):
    """SystemExit, KeyboardInterrupt (no signal) or a bare BaseException: that testcase's Error."""
    # The run goes on, the report is written, exit 1 (before 2026-11-30 it ended the run).
    code, got = plugin_run(capsys, key, "0")
    assert code == 1
    assert got[key] == ("Error", f"{BROKEN_DIST} {key}: {message}")
    assert got["host_to_device_memcpy_ce"][0] == "Passed"


def test_writer_that_raises_system_exit(capsys, plugins, tmp_path):
    """A writer calling sys.exit(): a writer error, exit 1; the old -o file is untouched."""
    target = tmp_path / "report.txt"
    target.write_text("previous\n")
    code, out, err = run_cli(capsys, "--simulate", "h200x1", *FAST, "-t", "fixture_good",
                             "--format", "fixture_exiting_writer", "-o", str(target))  # fmt: skip
    assert code == 1 and out == ""
    assert err.strip().splitlines()[-1] == (
        "gpubw: error: writer 'fixture_exiting_writer' failed: SystemExit: 0"
    )
    assert target.read_text() == "previous\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_matrix_validation_is_inside_the_testcase_guard(capsys, plugins, monkeypatch):
    """Whatever matrix validation raises is that testcase's Error (it once lost the report)."""

    check = runner.matrix_problem

    def overflow(m: Any, **how: Any) -> str | None:
        if m.key == "fixture_prints":
            raise OverflowError("int too large to convert to float")
        return check(m, **how)

    monkeypatch.setattr(runner, "matrix_problem", overflow)
    code, got = plugin_run(capsys, "fixture_prints")
    assert code == 1
    assert got["fixture_prints"][0] == "Error"
    assert "OverflowError: int too large to convert to float" in got["fixture_prints"][1]


def test_plugin_that_prints_cannot_corrupt_json_on_stdout(tmp_path):
    """print(), os.write(1, ...) and a child's output inside a plugin: -j on stdout stays JSON."""
    # What the plugin printed is kept, in order of the three ways, as the testcase's output.
    paths = copy_fixtures(tmp_path / "site", GOOD, BROKEN)
    argv = ["--simulate", PRESET, *FAST, "-j", "-t", "fixture_prints", "fixture_good"]
    proc = subprocess.run(
        [sys.executable, "-m", "gpubw", *argv],
        env=subprocess_env(paths),
        capture_output=True,
        encoding="utf-8",
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # nothing but the report on stdout
    validate(doc)
    printed = {t["key"]: t.get("output") for t in doc["testcases"]}
    assert printed["fixture_good"] is None  # printed nothing: no output field
    lines = printed["fixture_prints"].splitlines()
    assert sorted(lines) == [
        "fixture: hello from a child",
        "fixture: hello from fd 1",
        "fixture: hello from print",
    ]
    assert "fixture: hello" not in proc.stderr


# == 3. Faults during a run ================================================================
def sim_run(
    keys: list[str], faults: Faults, preset: str = PRESET, **kw: Any
) -> tuple[Any, SimulatedBackend]:
    backend = SimulatedBackend(load_system(preset), faults)
    selection = Registry.discover().select(keys)
    options = attrs.evolve(FAST_OPTIONS, buffer_sizes=[MIB])
    report = run_with(lambda o: System(backend, o), selection, options, **kw)
    assert backend.live_allocations() == [] and backend.live_streams() == 0
    assert backend.live_events() == 0
    return report, backend


def test_allocation_failure_mid_testcase_frees_and_goes_on():
    """cuMemAlloc failing mid-testcase: Error with CUresult, its buffers freed, later ones run."""
    # Live allocations go back to what the System owned before it; later testcases pass
    # once the fault is gone.
    key = "device_to_device_bidirectional_memcpy_read_ce"  # needs 2 new buffers after h2d
    backend = SimulatedBackend(load_system(PRESET))
    seen: dict[str, Any] = {}

    def progress(event: runner.Progress) -> None:
        if event.done == 1 and event.phase == "start":  # the second testcase starts
            seen["before"] = set(backend.live_allocations())
            made = backend._device_allocs_made
            backend.faults = Faults(alloc_fail_after=made + 1)  # one more succeeds, then fail
        if event.done == 2 and event.phase == "end":
            seen["after"] = set(backend.live_allocations())
            backend.faults = Faults()

    report = run_with(
        lambda o: System(backend, o),
        Registry.discover().select(["host_to_device_memcpy_ce", key, key]),
        attrs.evolve(FAST_OPTIONS, buffer_sizes=[MIB]),
        progress=progress,
    )
    first, failed, later = report.testcases
    assert first.status is Status.PASSED
    assert failed.status is Status.ERROR
    assert failed.message == "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (injected fault)"
    assert seen["after"] <= seen["before"]  # nothing of the failed testcase is kept
    assert later.status is Status.PASSED and later.matrices
    assert backend.live_allocations() == []
    assert report.exit_code == 1


def test_pinned_host_allocation_failure():
    """cuMemHostAlloc failing: each testcase needing pinned memory is an Error naming the call."""
    report, _ = sim_run(
        ["host_to_device_memcpy_ce", "device_local_copy"], Faults(host_alloc_fail_after=2)
    )
    for t in report.testcases:
        assert (t.status, t.message) == (
            Status.ERROR,
            "cuMemHostAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (injected fault)",
        )


def test_device_allocation_failure_on_one_device_only():
    """Every allocation on device 1 fails: testcases touching device 1 are Errors."""
    report, _ = sim_run(
        ["device_local_copy", "host_to_device_memcpy_ce"], Faults(alloc_fail_on_device=1)
    )
    assert all(t.status is Status.ERROR for t in report.testcases)
    assert "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY" in report.testcases[0].message


def test_verification_mismatch(capsys, tmp_path):
    """A corrupted copy: Error naming the device, the copy and the first bad offset; exit 1."""
    # The corruption is injected through a --simulate file's "faults" key.
    path = system_file(tmp_path, {"base": PRESET, "faults": {"corrupt_copy": True}})
    code, doc, _ = json_run(capsys, "--simulate", path, *FAST, "-t", "0", "device_local_copy")
    assert code == 1
    got = statuses(doc)
    assert got["host_to_device_memcpy_ce"] == (
        "Error",
        "verification failed on Device 0 after the copy Host -> Device 0 issued by device 0: "
        "first bad 32-bit word at byte offset 524288",
    )
    assert got["device_local_copy"][0] == "Error"
    assert "first bad 32-bit word at byte offset" in got["device_local_copy"][1]


def test_verification_skipped_with_s(capsys, tmp_path):
    """The same corruption with -s: not checked, so the testcase Passes."""
    path = system_file(tmp_path, {"base": PRESET, "faults": {"corrupt_copy": True}})
    code, doc, _ = json_run(capsys, "--simulate", path, *FAST, "-s", "-t", "0")
    assert code == 0 and doc["testcases"][0]["status"] == "Passed"


def test_peer_access_refused_both_ways_on_two_devices_waives():
    """Two devices refusing peer access both ways: the testcase is Waived with a reason, exit 0."""
    report, _ = sim_run(["device_to_device_memcpy_read_ce"], Faults(refuse_peer={(0, 1), (1, 0)}))
    (t,) = report.testcases
    assert t.status is Status.WAIVED
    assert t.message == "needs 2 devices with peer access; none of the 2 devices can access another"
    assert report.exit_code == 0


def test_peer_access_refused_for_one_pair_gives_na_cells():
    """On h200x8, one pair refusing peer access makes only its cells N/A; the testcase Passes."""
    report, _ = sim_run(
        ["device_to_device_memcpy_read_ce"], Faults(refuse_peer={(0, 1), (1, 0)}), preset="h200x8"
    )
    (t,) = report.testcases
    assert t.status is Status.PASSED
    values = t.matrices[0].values
    assert values[0][1] is None and values[1][0] is None
    assert values[0][2] is not None and values[2][0] is not None


def test_peer_access_refused_one_way_is_an_error():
    """Peer access probed yes but failing to enable: Error with call and CUresult; next one runs."""
    # can_access_peer says yes one way, but enabling both ways fails.
    report, _ = sim_run(
        ["device_to_device_memcpy_read_ce", "device_local_copy"], Faults(refuse_peer={(0, 1)})
    )
    d2d, local = report.testcases
    assert (d2d.status, d2d.message) == (
        Status.ERROR,
        "cuCtxEnablePeerAccess failed: CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
    )
    assert local.status is Status.PASSED


def test_cuda_error_in_a_kernel():
    """A kernel failing with a CUDA error: Error naming the sync call, CUresult and kernel."""
    report, _ = sim_run(
        ["host_to_device_memcpy_sm", "host_to_device_memcpy_ce"],
        Faults(kernel_error="gpubw_copy", kernel_error_result="CUDA_ERROR_ILLEGAL_ADDRESS"),
    )
    sm, ce = report.testcases
    assert (sm.status, sm.message) == (
        Status.ERROR,
        "cuStreamSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS (gpubw_copy failed "
        "(injected fault))",
    )
    assert ce.status is Status.PASSED


def test_spin_gate_that_never_opens(capsys, tmp_path):
    """A gate that is never released: bounded wait, Error naming the gate timeout, no hang."""
    path = system_file(tmp_path, {"base": PRESET, "faults": {"gate_never_opens": True}})
    t0 = time.monotonic()
    code, doc, _ = json_run(
        capsys, "--simulate", path, *FAST, "--gate-timeout", "0.05", "-t", "0", "38"
    )
    assert time.monotonic() - t0 < 30
    assert code == 1
    for status, message in statuses(doc).values():
        assert status == "Error"
        assert message.startswith("the spin gate timed out after 0.05 s before gpubw released it")


def test_stream_that_never_finishes():
    """A stream that never finishes: Error saying which device's stream timed out, no hang."""
    report, _ = sim_run(["host_to_device_memcpy_ce"], Faults(sync_hang=True))
    (t,) = report.testcases
    assert t.status is Status.ERROR
    assert t.message.startswith("a stream on device 0 did not finish within")


# == 4. Interrupts =========================================================================
def start_slow_run(tmp_path: Path, target: Path) -> tuple[subprocess.Popen[str], Path]:
    paths = copy_fixtures(tmp_path / "site", GOOD)
    marker = tmp_path / "started"
    env = subprocess_env(paths, GPUBW_FIXTURE_MARKER=str(marker), GPUBW_FIXTURE_SLOW_S="60")
    argv = ["--simulate", PRESET, *FAST, "-q", "-j", "-o", str(target),
            "-t", "fixture_fixed", "0", "fixture_slow", "fixture_fixed"]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpubw", *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        encoding="utf-8",
    )
    deadline = time.monotonic() + 60
    while not marker.exists():
        if proc.poll() is not None:
            raise AssertionError(proc.communicate())
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("the slow testcase never started")
        time.sleep(0.02)
    return proc, marker


@pytest.mark.parametrize(
    ("signum", "code", "name"),
    [(signal.SIGINT, 130, "SIGINT"), (signal.SIGTERM, 143, "SIGTERM")],
)
def test_interrupt_writes_what_finished(tmp_path, signum, code, name):
    """SIGINT/SIGTERM mid-run with -j -o FILE: exit 130/143, FILE a valid, interrupted report."""
    # FILE holds the finished testcases and the interrupted one; no temporary file is left.
    target = tmp_path / "report.json"
    proc, _ = start_slow_run(tmp_path, target)
    try:
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    assert out == "" and "Traceback" not in err
    doc = load_report(target)  # valid JSON, valid against the schema
    assert doc["interrupted"] is True and doc["exit_code"] == code
    assert doc["options"]["signal"] == name
    assert [(t["key"], t["status"]) for t in doc["testcases"]] == [
        ("fixture_fixed", "Passed"),
        ("host_to_device_memcpy_ce", "Passed"),
        ("fixture_slow", "Interrupted"),
    ]
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("previous", [True, False])
def test_kill_9_never_leaves_a_half_written_file(tmp_path, previous):
    """kill -9 mid-run: FILE is the previous file, intact, or does not exist."""
    target = tmp_path / "report.json"
    if previous:
        target.write_text('{"previous": true}\n')
    proc, _ = start_slow_run(tmp_path, target)
    proc.kill()
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    if previous:
        assert target.read_text() == '{"previous": true}\n'
    else:
        assert not target.exists()


def leftovers(folder: Path) -> list[str]:
    """Temporary files an atomic write would leave behind."""
    return sorted(
        p.name for p in folder.iterdir() if p.name.endswith(".tmp") or p.name.startswith(".gpubw-")
    )


def start_run(
    tmp_path: Path, argv: list[str], names: tuple[str, ...] = (GOOD,), **env: str
) -> subprocess.Popen[str]:
    """``python -m gpubw ARGV`` in a subprocess that sees the fixture distributions."""
    paths = copy_fixtures(tmp_path / "site", *names)
    return subprocess.Popen(
        [sys.executable, "-m", "gpubw", *argv],
        env=subprocess_env(paths, **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        encoding="utf-8",
    )


def wait_for(proc: subprocess.Popen[str], marker: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not marker.exists():
        if proc.poll() is not None:
            raise AssertionError(proc.communicate())
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"{marker.name} never appeared")
        time.sleep(0.01)


def finish(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[str, str]:
    """stdout and stderr of a run that must end within ``timeout`` seconds."""
    try:
        return proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.parametrize(
    "burst",
    [
        (signal.SIGINT, signal.SIGINT),
        (signal.SIGTERM, signal.SIGTERM),
        (signal.SIGINT, signal.SIGTERM, signal.SIGINT, signal.SIGTERM, signal.SIGINT),
    ],
    ids=["2xSIGINT", "2xSIGTERM", "mixed-5"],
)
def test_signal_burst_keeps_the_report(tmp_path, burst):
    """Signals 10-20 ms apart: the first interrupts, the rest are absorbed; the report stays."""
    # Before 2026-11-30 a second signal during clean-up or writing lost the report.
    target = tmp_path / "report.json"
    proc, _ = start_slow_run(tmp_path, target)
    for signum in burst:
        proc.send_signal(signum)
        time.sleep(0.015)
    out, err = finish(proc)
    code = 128 + burst[0]
    assert proc.returncode == code, err
    assert out == "" and err == ""
    doc = load_report(target)
    assert doc["interrupted"] is True and doc["exit_code"] == code
    assert doc["options"]["signal"] == signal.Signals(burst[0]).name
    assert [(t["key"], t["status"]) for t in doc["testcases"]] == [
        ("fixture_fixed", "Passed"),
        ("host_to_device_memcpy_ce", "Passed"),
        ("fixture_slow", "Interrupted"),
    ]
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_while_the_report_is_written_keeps_the_complete_report(tmp_path, signum):
    """Signals while the complete report is written: it is written whole, and the exit code
    is the report's (0 here), not 130/143: the run was not stopped."""
    # Before 2026-11-30 the write was abandoned: no report, the old file kept. Until
    # 2026-12-01 the exit code was 128 + n, which a JSON report's exit_code contradicted.
    target = tmp_path / "report.txt"
    target.write_text("previous\n")
    marker = tmp_path / "writing"
    argv = ["--simulate", PRESET, *FAST, "-q", "-t", "fixture_fixed", "fixture_good",
            "--format", "fixture_slow_writer", "-o", str(target)]  # fmt: skip
    proc = start_run(tmp_path, argv, GPUBW_FIXTURE_WRITER_MARKER=str(marker))
    wait_for(proc, marker)
    proc.send_signal(signum)
    time.sleep(0.015)
    proc.send_signal(signum)
    out, err = finish(proc)
    assert proc.returncode == 0, err
    assert out == "" and err == ""
    assert target.read_text() == "fixture_fixed Passed\nfixture_good Passed\ncomplete\n"
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("to_stdout", [False, True], ids=["-o FILE", "stdout"])
def test_plugin_that_swallows_every_signal_is_left_behind(tmp_path, to_stdout):
    """A plugin that swallows every interrupt: 2 s after a second signal the report is
    written without it (it Interrupted) and gpubw exits 130, not waiting for it."""
    # Before 2026-11-30 only SIGKILL could stop such a run (and lost the report).
    target = tmp_path / "report.json"
    marker = tmp_path / "started"
    output = [] if to_stdout else ["-o", str(target)]
    argv = ["--simulate", PRESET, *FAST, "-q", "-j", *output,
            "-t", "fixture_fixed", "fixture_swallows_everything", "fixture_fixed"]  # fmt: skip
    proc = start_run(
        tmp_path,
        argv,
        (GOOD, BROKEN),
        GPUBW_FIXTURE_MARKER=str(marker),
        GPUBW_FIXTURE_SLOW_S="40",
    )
    wait_for(proc, marker)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = finish(proc, timeout=20)
    assert proc.returncode == 130, err
    assert time.monotonic() - t0 < 15
    assert "Traceback" not in err
    assert err.strip().splitlines() == [
        "gpubw: the running testcase did not stop within 2 s of a second signal; the report "
        "was written without waiting for it"
    ]
    doc = json.loads(out) if to_stdout else load_report(target)
    validate(doc)
    assert out == "" or to_stdout
    assert doc["interrupted"] is True and doc["exit_code"] == 130
    (fixed, stuck) = doc["testcases"]
    assert (fixed["key"], fixed["status"]) == ("fixture_fixed", "Passed")
    assert (stuck["key"], stuck["status"]) == ("fixture_swallows_everything", "Interrupted")
    assert stuck["message"].startswith("interrupted by SIGINT; it did not stop within 2 s")
    assert any("without waiting for fixture_swallows_everything" in w for w in doc["warnings"])
    assert leftovers(tmp_path) == []


@pytest.fixture(scope="module")
def python_start_s() -> float:
    """How long a bare Python takes to start here (a signal before gpubw's first line is
    Python's own business: the start-up tests signal well after that)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - t0


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("delay", [0.0, 0.15, 0.4])
def test_signal_during_start_up_exits_quietly(tmp_path, python_start_s, signum, delay):
    """A signal while gpubw imports or starts: exit 130/143, nothing on stderr, no traceback;
    a report, if one was written, is valid and interrupted; no temporary file."""
    # Before 2026-11-30: a KeyboardInterrupt traceback (exit 1), or killed by SIGTERM.
    target = tmp_path / "report.json"
    argv = ["--simulate", PRESET, *FAST, "-q", "-j", "-o", str(target), "-t", "fixture_slow"]
    proc = start_run(tmp_path, argv, GPUBW_FIXTURE_SLOW_S="30")
    # well after the interpreter itself is up (before that a signal is Python's business)
    time.sleep(max(0.3, 5 * python_start_s) + delay)
    proc.send_signal(signum)
    out, err = finish(proc)
    assert proc.returncode == 128 + signum, err
    assert out == "" and err == ""
    if target.exists():
        doc = load_report(target)
        assert doc["interrupted"] is True and doc["exit_code"] == 128 + signum
    assert leftovers(tmp_path) == []


# == 5. No leaks ===========================================================================
def builtin_selection() -> list[Any]:
    return [e for e in Registry.discover().entries if e.builtin]


@pytest.mark.parametrize(
    "faults",
    [
        Faults(),
        Faults(corrupt_copy=True, corrupt_after=5, kernel_error="gpubw_copy_split_warp"),
        Faults(alloc_fail_after=9),
        Faults(host_alloc_fail_after=5),
    ],
    ids=["clean", "corrupt+kernel-error", "alloc-fail", "host-alloc-fail"],
)
def test_full_suite_leaves_nothing_allocated(faults):
    """The default suite, clean or with injected faults, leaves no allocation, stream or event."""
    # On h200x2 at 1 MiB, one sample, one copy.
    selection = builtin_selection()
    report, backend = sim_run([e.key for e in selection], faults)  # sim_run asserts no leaks
    assert len(report.testcases) == len(selection)
    assert backend.closed
    assert not [w for w in report.warnings if "freeing" in w]
    if faults == Faults():
        assert report.exit_code == 0
    else:
        assert any(t.status is Status.ERROR for t in report.testcases)


class AllocatesThenRaises(gpubw.Testcase):
    """Allocates device and pinned memory, never frees it, then fails."""

    key = "allocates_then_raises"

    def run(self, size: int, loops: int) -> list[Any]:
        DeviceBuffer.allocate(self.system, 0, size)
        HostBuffer.allocate(self.system, 0, size)
        raise RuntimeError("injected: failed after allocating")


def _pinned_kib() -> int:
    """VmLck + VmPin of this process (kB), where /proc/self/status has them."""
    total = 0
    try:
        for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
            if line.startswith(("VmLck:", "VmPin:")):
                total += int(line.split()[1])
    except OSError:
        pass
    return total


def _have_gpu() -> str | None:
    try:
        from gpubw.backend.cuda import CudaBackend

        CudaBackend().close()
    except Exception as exc:
        return f"no NVIDIA GPU/driver ({type(exc).__name__}: {exc})"
    return None


@pytest.mark.gpu
def test_real_gpu_runs_leave_device_and_pinned_memory_as_they_were():
    """On real GPUs, runs leave device memory in use and pinned memory at their baseline."""
    # Both the default suite (64 MiB, 1 sample, 2 copies) and a testcase that allocates
    # then raises, measured once the System is closed.
    why = _have_gpu()
    if why:
        pytest.skip(why)
    from gpubw.backend.cuda import CudaBackend

    options = RunOptions(samples=1, loops=2)
    probe = CudaBackend()  # holds the primary contexts, so memory_info stays comparable
    try:
        n = len(probe.devices())

        def used() -> list[int]:
            return [total - free for free, total in map(probe.memory_info, range(n))]

        def run_once(selection: list[Any]) -> tuple[Any, CudaBackend]:
            made: list[CudaBackend] = []

            def factory(run_options: RunOptions) -> System:
                made.append(CudaBackend())
                return System(made[0], run_options)

            report = run_with(factory, selection, attrs.evolve(options, buffer_sizes=[64 * MIB]))
            backend = made[0]
            assert backend._device_memory == {} and backend._host_memory == {}
            assert backend._streams == set() and backend._events == set()
            assert not [w for w in report.warnings if "freeing" in w], report.warnings
            return report, backend

        with System(CudaBackend(), options) as warm:  # contexts and modules, once
            warm.load_kernels()
        base_used, base_pinned = used(), _pinned_kib()

        report, _ = run_once(builtin_selection())
        assert all(t.status in (Status.PASSED, Status.WAIVED) for t in report.testcases), [
            (t.key, t.message) for t in report.testcases if not t.ok
        ]
        slack = 16 * MIB
        assert all(abs(a - b) <= slack for a, b in zip(used(), base_used, strict=True)), (
            used(),
            base_used,
        )
        assert _pinned_kib() <= base_pinned + slack // 1024

        bad = Entry(0, AllocatesThenRaises.key, "tests", cls=AllocatesThenRaises)
        local = Registry.discover().select(["device_local_copy"])
        report, _ = run_once([bad, *local])
        assert report.testcases[0].status is Status.ERROR
        assert "injected: failed after allocating" in report.testcases[0].message
        assert report.testcases[1].status is Status.PASSED
        assert all(abs(a - b) <= slack for a, b in zip(used(), base_used, strict=True))
        assert _pinned_kib() <= base_pinned + slack // 1024
    finally:
        probe.close()


# == 6. Fuzzing ============================================================================
OPTIONS = ["-b", "-l", "-t", "-p", "-v", "-s", "-d", "-i", "-m", "-j", "--loop-count",
           "-o", "--format", "--gate-timeout", "--bufferSize", "--testSamples", "--useMean",
           "--json", "--list", "--perf-formatter", "--simulate", "--", "-",
           "--version"]  # fmt: skip
VALUES = ["0", "1", "-1", "2", "34", "35", "99", "1KiB", "1B", "4096B", "1:4:x2", "1,2",
          "abc", "", " ", "nan", "1e400", "0.5", "x", "json", "text", "csv", "h200x1",
          "host", "device_local_copy", "fixture", "out.json", "/proc/x", "1e-3", "-5GiB",
          "\u00e9", "--b", "-bb", "-t0", "-i0", "--loop=1", "0.01"]  # fmt: skip
TOKENS = st.one_of(
    st.sampled_from(OPTIONS),
    st.sampled_from(VALUES),
    st.text(alphabet=string.printable, max_size=8),
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(TOKENS, max_size=8))
def test_fuzz_cli_arguments(capsys, tmp_path, monkeypatch, tokens):
    """Random argument lists never give a traceback: the exit is always 0, 1 or 2."""
    # On a simulated h200x1, with a cheap testcase.
    monkeypatch.chdir(tmp_path)
    argv = ["--simulate", "h200x1", "-i", "1", "--loop-count", "1", "-t", "device_local_copy",
            *tokens]  # fmt: skip
    code = cli.main(argv)
    _, err = capsys.readouterr()
    assert code in (0, 1, 2), (argv, code, err)
    assert "Traceback" not in err
    if code == 2:
        assert err.startswith("gpubw: error: ") or "usage" not in err


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
SYSTEM_KEYS = ["name", "base", "count", "device", "devices", "host_link", "host_links", "peers",
               "local_copy", "host_memory_bandwidth", "latency", "overheads", "jitter", "seed",
               "reserved_bytes", "host_memory_bytes", "real_bytes_limit", "driver_version",
               "cuda_driver", "faults"]  # fmt: skip
SYSTEM_DOCS = st.one_of(
    JSON,
    st.dictionaries(st.sampled_from(SYSTEM_KEYS), JSON, max_size=5),
    st.dictionaries(st.sampled_from(SYSTEM_KEYS), JSON, max_size=4).map(
        lambda d: {**d, "base": "h200x2"}
    ),
    st.dictionaries(
        st.sampled_from([f.name for f in __import__("attrs").fields(Faults)]), JSON, max_size=3
    ).map(lambda f: {"base": "h200x2", "faults": f}),
)


@settings(max_examples=300, deadline=None)
@given(SYSTEM_DOCS)
def test_fuzz_simulated_system_loader(doc):
    """Random JSON as a system description gives a SimSystem or a one-line UsageError only."""
    # No TypeError, KeyError, ... and no hang.
    try:
        system = system_from_dict(doc)
    except UsageError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert 1 <= len(system.devices) <= 1024


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.binary(max_size=64) | JSON.map(lambda d: json.dumps(d).encode()))
def test_fuzz_simulated_system_file(tmp_path, content):
    """Random bytes as a --simulate file: a system or a UsageError naming the file."""
    path = tmp_path / "fuzz.json"
    path.write_bytes(content)
    try:
        load_system(path)
    except UsageError as exc:
        assert str(path) in str(exc)


def test_nan_and_inf_in_a_system_file_are_refused():
    """JSON's NaN/Infinity extensions (Python's json accepts them) are not valid figures."""
    for bad in (math.nan, -1.0):
        with pytest.raises(UsageError, match="jitter"):
            system_from_dict({"base": "h200x1", "jitter": bad})
