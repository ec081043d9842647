"""Tests of the gpubw command line: options, usage errors, exit codes, -l, -o, signals."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _cli import run_cli
from _plugin_fixtures import BROKEN, GOOD, copy_fixtures, installed, subprocess_env
from gpubw.cli import command as cli
from gpubw.cli.args import build_parser
from gpubw.model import schemas
from gpubw.runner.registry import BUILTIN_ORDER
from gpubw.runner.writer_registry import Writers
from gpubw.writers import Writer

PRESET = "h200x2"


@pytest.fixture
def plugins(tmp_path):
    with installed(tmp_path / "site", GOOD, BROKEN) as paths:
        yield paths


def only_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("gpubw: error: ")
    assert "Traceback" not in err
    return lines[0]


# -- usage errors -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["-b", "0"], ["'0'", "zero"]),
        (["-b", "abc"], ["'abc'", "not a number"]),
        (["-b", "-5"], ["'-5'", "negative"]),
        (["-b", "1GiB:1MiB"], ["empty"]),
        (["-b", "1", "-b", "2"], ["-b", "more than once"]),
        (["-i", "0"], ["-i", "'0'", "at least 1"]),
        (["-i", "two"], ["-i", "'two'", "whole number"]),
        (["--loop-count", "0"], ["--loop-count", "at least 1"]),
        (["--loopCount", "-3"], ["'-3'", "at least 1"]),
        (["--gate-timeout", "-1"], ["--gate-timeout", "positive"]),
        (["--gate-timeout", "soon"], ["'soon'", "number of seconds"]),
        (["-t", "0", "-p", "host"], ["-t/--testcase", "-p/--testcase-prefixes", "together"]),
        (["--format", "nope"], ["'nope'", "allowed:", "json", "text"]),
        (["-j", "--format", "text"], ["-j/--json", "--format text"]),
        (["--simulate", "no-such-system"], ["--simulate", "'no-such-system'"]),
        (["--bogus"], ["unrecognized arguments: --bogus"]),
        (["stray"], ["unrecognized arguments: stray"]),
        (["--test", "0"], ["ambiguous option: --test"]),
        (["-b"], ["-b", "expected one argument"]),
    ],
)
def test_usage_errors_exit_2_with_one_line(capsys, argv, words):
    """Every bad option value is one 'gpubw: error:' line naming the problem, exit 2."""
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    line = only_error_line(err)
    for word in words:
        assert word in line, line
    assert out == ""


def test_unreadable_simulate_file_is_a_usage_error(capsys, tmp_path):
    """A --simulate file that is not a valid system is a usage error, before anything runs."""
    bad = tmp_path / "system.json"
    bad.write_text("{ not json")
    code, _, err = run_cli(capsys, "--simulate", str(bad), "-t", "0")
    assert code == 2
    assert str(bad) in only_error_line(err)


@pytest.mark.parametrize("where", ["missing_dir", "is_dir", "proc"])
def test_unwritable_output_is_a_usage_error_before_running(capsys, tmp_path, monkeypatch, where):
    """-o to a path that cannot be written fails with exit 2 before the run starts."""
    target = {
        "missing_dir": tmp_path / "no" / "such" / "report.json",
        "is_dir": tmp_path,
        "proc": Path("/proc/gpubw-report.json"),
    }[where]

    def must_not_run(*a, **k):
        raise AssertionError("the run started")

    monkeypatch.setattr("gpubw.runner.core.run", must_not_run)
    code, _, err = run_cli(capsys, "-o", str(target), "-t", "0")
    assert code == 2
    assert "-o/--output" in only_error_line(err)


def test_no_temp_files_left_after_a_usage_error(capsys, tmp_path):
    """A usage error found after -o was checked leaves no temporary file behind."""
    code, _, _ = run_cli(capsys, "-o", str(tmp_path / "r.json"), "--simulate", "no-such-system")
    assert code == 2
    assert list(tmp_path.iterdir()) == []


# -- exit 1 without running ---------------------------------------------------------------
def test_prefix_matching_nothing_exits_1(capsys):
    """-p that matches no testcase is an error (exit 1), as in nvbandwidth."""
    code, out, err = run_cli(capsys, "-p", "no_such_prefix")
    assert code == 1
    assert "'no_such_prefix'" in only_error_line(err)
    assert out == ""


def test_no_driver_suggests_simulation(capsys, monkeypatch):
    """Without an NVIDIA driver gpubw says so plainly and suggests --simulate, exit 1."""
    import gpubw.backend.cuda as cuda_backend
    from gpubw.model.errors import NoDriverError

    def no_driver(self, *a, **k):
        raise NoDriverError("no NVIDIA driver was found (libcuda could not be loaded)")

    monkeypatch.setattr(cuda_backend.CudaBackend, "__init__", no_driver)
    code, out, err = run_cli(capsys, "-t", "0")
    assert code == 1
    assert err.startswith("gpubw: error: no NVIDIA driver was found")
    assert f"--simulate {PRESET}" in err
    assert PRESET in err.splitlines()[-1]  # the list of presets
    assert "Traceback" not in err and out == ""


# -- help and list ------------------------------------------------------------------------
def test_help_and_version(capsys):
    """-h prints every nvbandwidth option and the exit codes; --version the version."""
    code, out, _ = run_cli(capsys, "-h")
    assert code == 0
    for opt in ["--buffer-size", "--list", "--testcase", "--testcase-prefixes", "--verbose",
                "--skip-verification", "--disable-affinity", "--samples", "--use-mean", "--json",
                "--loop-count", "--output", "--format", "--simulate", "--gate-timeout",
                "exit codes", "130"]:  # fmt: skip
        assert opt in out, opt
    code, out, _ = run_cli(capsys, "--version")
    assert code == 0 and out.startswith("gpubw 0.")


def test_list_has_nvbandwidths_layout(capsys):
    """-l prints 'Index, Name:', a rule, then '<i>, <key>:' and the description."""
    code, out, err = run_cli(capsys, "-l")
    assert code == 0 and err == ""
    lines = out.splitlines()
    i = lines.index("Index, Name:")
    assert lines[i + 1 : i + 3] == ["\tDescription", "=" * 23]
    assert lines[i + 3] == f"0, {BUILTIN_ORDER[0]}:"
    assert lines[i + 4].startswith("\t") and len(lines[i + 4]) > 5
    assert "34, device_to_device_memcpy_read_tma:" in lines
    assert "38, device_local_copy:" in lines
    assert "39, device_local_copy_sm:" in lines
    assert "44, multinode_device_to_device_memcpy_read_ce:" in lines
    assert "57, host_to_device_pageable_memcpy_ce:" in lines


def test_list_json(capsys):
    """-l -j prints a versioned JSON document (gpubw/schemas/list-v1.schema.json) whose
    testcases have index, key, description, plugin and load failure."""
    code, out, _ = run_cli(capsys, "-l", "-j")
    assert code == 0
    doc = json.loads(out)
    assert doc["schema_version"] == "1" and doc["tool"] == "gpubw"
    assert schemas.errors(schemas.LIST, doc, closed=True) == []
    items = doc["testcases"]
    assert [x["key"] for x in items[: len(BUILTIN_ORDER)]] == list(BUILTIN_ORDER)
    assert items[38] == {
        "index": 38,
        "key": "device_local_copy",
        "description": items[38]["description"],
        "plugin": "gpubw",
        "fixed_size": False,
        "load_failure": None,
    }
    assert any(x["fixed_size"] for x in items)  # the latency testcases


def test_list_reports_broken_plugins(capsys, plugins):
    """-l lists third-party testcases and every plugin that could not be loaded; exit 0."""
    code, out, _ = run_cli(capsys, "-l")
    assert code == 0
    assert "fixture_good:" in out and "(from gpubw-fixture-good)" in out
    failures = out.split("Plugins that could not be loaded:", 1)[1]
    for key in ["fixture_missing_module", "fixture_import_raises", "fixture_not_testcase",
                "host_to_device_memcpy_ce", "fixture_shared"]:  # fmt: skip
        assert key in failures, key
    code, out, _ = run_cli(capsys, "-l", "-j")
    items = {(x["key"], x["plugin"]): x for x in json.loads(out)["testcases"]}
    assert items[("fixture_import_raises", "gpubw-fixture-broken")]["load_failure"]
    assert items[("host_to_device_memcpy_ce", "gpubw-fixture-broken")]["index"] is None


#: What gpubw -l must not import (issue 11, start-up time): CUDA, and the modules only a run,
#: a writer or a report reader needs (numpy alone took ~40 % of the start-up through
#: gpubw/__init__ -> writers -> report_io before the package's names became lazy).
NOT_FOR_LIST = (
    "cuda",
    "numpy",
    "rich",
    "jsonschema",
    "gpubw.api",
    "gpubw.runner.core",
    "gpubw.writers",
    "gpubw.model.report_io",
    "gpubw.backend.sim",
    "gpubw.backend.cuda",
)


def test_list_never_imports_cuda(tmp_path):
    """gpubw -l, in a fresh process with a broken plugin installed (so the list is never
    cached), imports no cuda module, nor numpy or the modules only a run needs. Its time is
    measured on the device (benchmarks/README.md), not here, where a busy machine decides
    it; what a cache hit imports is pinned by test_listing's import-set tests."""
    at_start = subprocess.run(
        [sys.executable, "-c", "import sys; print(sorted(m for m in sys.modules if m == 'cuda'))"],
        capture_output=True,
        encoding="utf-8",
    )
    if at_start.stdout.strip() != "[]":
        pytest.skip(
            "this interpreter imports the cuda package at start-up, before gpubw runs "
            "(cuda-bindings 12.x installs _cuda_bindings_redirector.pth)"
        )
    paths = copy_fixtures(tmp_path, GOOD, BROKEN)
    code = (
        "import sys; from gpubw.cli.command import main; rc = main(['-l']);"
        f"no = {NOT_FOR_LIST!r};"
        "bad = [m for m in sys.modules if any(m == n or m.startswith(n + '.') for n in no)];"
        "print('CUDA', bad, file=sys.stderr); sys.exit(rc or (1 if bad else 0))"
    )
    env = subprocess_env(paths)
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, encoding="utf-8"
    )
    assert proc.returncode == 0, proc.stderr
    assert "CUDA []" in proc.stderr
    assert "fixture_good" in proc.stdout


# -- upper bounds (issue 13 item 4) --------------------------------------------------------
@pytest.mark.parametrize(
    ("option", "value", "bound"),
    [
        ("-i", str(10**20), "at most 100000"),
        ("--samples", "100001", "at most 100000"),
        ("--loop-count", str(10**20), "at most 1000000"),
        ("--loopCount", "1000001", "at most 1000000"),
        ("--gate-timeout", "1e300", "at most 86400 seconds"),
        ("--gate-timeout", "1.8e10", "at most 86400 seconds"),
        ("--gate-timeout", "86400.5", "at most 86400 seconds"),
    ],
)
def test_numbers_have_upper_bounds(capsys, option, value, bound):
    """-i, --loop-count and --gate-timeout past their bound: one usage line, exit 2."""
    # Before: -i 10**20 ran forever, --gate-timeout 1e300 failed every testcase with an
    # OverflowError worded like a plugin bug.
    code, out, err = run_cli(capsys, "--simulate", PRESET, "-b", "1", "-t", "0", option, value)
    line = only_error_line(err)
    assert code == 2 and out == ""
    assert f"{value!r} must be {bound}" in line and option in line


@pytest.mark.parametrize(
    ("option", "value", "dest"),
    [("-i", "100000", "samples"), ("--loop-count", "1000000", "loops"),
     ("--gate-timeout", "86400", "gate_timeout")],
)  # fmt: skip
def test_upper_bounds_are_inclusive(option, value, dest):
    """The bound itself is accepted."""
    ns = build_parser().parse_args([option, value])
    assert getattr(ns, dest) == float(value)


def test_run_options_and_the_api_have_the_same_bounds():
    """RunOptions refuses what the flags refuse; gpubw.run turns it into a UsageError."""
    import gpubw
    from gpubw.model.errors import UsageError
    from gpubw.model.options import RunOptions

    for field, value in [
        ("samples", 10**20),
        ("loops", 10**7),
        ("gate_timeout_s", 1e300),
        ("gate_timeout_s", float("inf")),
        ("gate_timeout_s", float("nan")),
        ("gate_timeout_s", 0.0),
        ("sync_timeout_s", 1e300),
    ]:
        with pytest.raises(ValueError, match=field):
            RunOptions(**{field: value})
    with pytest.raises(UsageError, match="samples must be at most 100000"):
        gpubw.run(["0"], sizes=1 << 20, samples=10**20, simulate="h200x1")
    with pytest.raises(UsageError, match="gate_timeout_s"):
        gpubw.run(["0"], sizes=1 << 20, gate_timeout_s=1e300, simulate="h200x1")


# -- options that do not apply to -l (issue 13 item 6) --------------------------------------
def test_list_writes_to_o(capsys, tmp_path):
    """-l -o FILE writes the list into FILE (it was ignored: the list went to stdout)."""
    target = tmp_path / "list.txt"
    code, out, err = run_cli(capsys, "-l", "-o", str(target))
    assert (code, out, err) == (0, "", "")
    assert "38, device_local_copy:" in target.read_text()
    code, out, _ = run_cli(capsys, "-l", "-j", "-o", str(target))
    assert code == 0 and out == ""
    assert json.loads(target.read_text())["testcases"][38]["key"] == "device_local_copy"


def test_list_honours_format(capsys):
    """-l --format json is -l -j; --format text the default; any other format is refused."""
    code, out, _ = run_cli(capsys, "-l", "--format", "json")
    assert code == 0 and json.loads(out)["testcases"][0]["index"] == 0
    code, out, _ = run_cli(capsys, "-l", "--format", "text")
    assert code == 0 and "Index, Name:" in out
    code, out, err = run_cli(capsys, "-l", "--format", "csv")
    assert code == 2 and out == ""
    assert "-l/--list writes text or json, not --format 'csv'" in only_error_line(err)


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["-b", "abc"], "-b/--buffer-size"),
        (["-b", "64"], "-b/--buffer-size"),
        (["--simulate", "missing.json"], "--simulate"),
        (["--simulate", "h200x2"], "--simulate"),
        (["-t", "0"], "-t/--testcase"),
        (["-p", "host"], "-p/--testcase-prefixes"),
        (["-i", "5"], "-i/--samples"),
        (["--loop-count", "4"], "--loop-count"),
        (["--gate-timeout", "1"], "--gate-timeout"),
        (["-m"], "-m/--use-mean"),
        (["-s"], "-s/--skip-verification"),
        (["-d"], "-d/--disable-affinity"),
        (["-v"], "-v/--verbose"),
        (["--expect", "builtin"], "--expect"),
        (["--outlier-pct", "80"], "--outlier-pct"),
        (["--cv-threshold", "off"], "--cv-threshold"),
        (["--host-huge-pages"], "--host-huge-pages"),
    ],
)
def test_list_refuses_options_that_do_not_apply(capsys, tmp_path, argv, flag):
    """-l with a run-only option: a usage error naming it, exit 2, no -o file (it was
    silently ignored, exit 0)."""
    target = tmp_path / "list.txt"
    code, out, err = run_cli(capsys, "-l", *argv, "-o", str(target))
    assert code == 2 and out == ""
    line = only_error_line(err)
    assert f"{flag} does not apply to it" in line
    assert not target.exists()


# -- plot routing -------------------------------------------------------------------------
def test_plot_is_routed_to_gpubw_plot(capsys, monkeypatch):
    """'gpubw plot ARGS' hands ARGS to gpubw.cli.plot.main and returns its code."""
    import gpubw.cli.plot

    seen = []
    monkeypatch.setattr(gpubw.cli.plot, "main", lambda argv: seen.append(argv) or 0)
    code, _, _ = run_cli(capsys, "plot", "r.json", "-o", "r.png")
    assert code == 0 and seen == [["r.json", "-o", "r.png"]]


def test_plot_without_matplotlib_says_how_to_install(capsys, monkeypatch, tmp_path):
    """Without matplotlib, 'gpubw plot' is a usage error naming gpubw[plot]."""
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, _, err = run_cli(capsys, "plot", str(tmp_path / "r.json"), "-o", str(tmp_path / "r.png"))
    assert code == 2
    assert "gpubw[plot]" in only_error_line(err)


# -- runs on a simulated system -------------------------------------------------------------
def test_simulated_json_run(capsys, plugins):
    """A simulated run with a size list gives one JSON entry per size, marked simulated."""
    code, out, err = run_cli(
        capsys, "--simulate", PRESET, "-t", "fixture_good", "-b", "64,128", "-j"
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["simulated"] is True and doc["system_name"] == PRESET
    assert [(t["key"], t["status"], t["size_bytes"]) for t in doc["testcases"]] == [
        ("fixture_good", "Passed", 64 << 20),
        ("fixture_good", "Passed", 128 << 20),
    ]
    assert doc["exit_code"] == 0
    assert any("512 MiB" in w for w in doc["warnings"])


def test_simulated_builtin_text_run(capsys):
    """A built-in testcase runs on a simulated system and prints nvbandwidth's text."""
    code, out, err = run_cli(capsys, "--simulate", PRESET, "-t", "0", "-b", "64")
    assert code == 0, err
    assert "Running host_to_device_memcpy_ce." in out
    assert "SUM host_to_device_memcpy_ce" in out
    assert "SIMULATED" in out


def test_errors_and_not_found_exit_1_and_keep_other_results(capsys, plugins):
    """A testcase Error or a Not Found item exits 1; the other results are still reported."""
    code, out, _ = run_cli(
        capsys, "--simulate", PRESET, "-j", "-b", "1",
        "-t", "fixture_good", "fixture_run_raises", "bogus", "99", "fixture_waived",
    )  # fmt: skip
    assert code == 1
    got = [(t["key"], t["status"]) for t in json.loads(out)["testcases"]]
    assert got == [
        ("fixture_good", "Passed"),
        ("fixture_run_raises", "Error"),
        ("bogus", "Not Found"),
        ("99", "Not Found"),
        ("fixture_waived", "Waived"),
    ]


def test_waived_only_exits_0(capsys, plugins):
    """Waived testcases are not failures."""
    code, _, _ = run_cli(capsys, "--simulate", PRESET, "-t", "fixture_waived", "-j")
    assert code == 0


def test_third_party_writer(capsys, plugins):
    """--format accepts any installed writer."""
    code, out, _ = run_cli(capsys, "--simulate", PRESET, "-t", "fixture_fixed", "--format",
                         "fixture_lines")  # fmt: skip
    assert code == 0
    assert out == "fixture_fixed Passed None\n"


def test_output_file_written_atomically(capsys, plugins, tmp_path):
    """-o writes the whole report to FILE and nothing to stdout."""
    target = tmp_path / "out" / "report.txt"
    target.parent.mkdir()
    code, out, _ = run_cli(capsys, "--simulate", PRESET, "-t", "fixture_fixed", "--format",
                         "fixture_lines", "-o", str(target))  # fmt: skip
    assert code == 0 and out == ""
    assert target.read_text() == "fixture_fixed Passed None\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["report.txt"]


def test_a_streaming_writer_gets_the_same_calls_into_a_file(capsys, plugins, tmp_path):
    """A third-party writer that writes only through begin/testcase/end (no write()) makes
    the same file with -o as on stdout: every testcase's row, not only end()'s last line."""
    argv = ("--simulate", PRESET, "-t", "fixture_fixed", "fixture_waived", "-q",
            "--format", "fixture_markdown")  # fmt: skip
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0
    assert "| fixture_fixed | Passed | None |" in out and out.endswith("\n2 testcases\n")
    target = tmp_path / "report.md"
    code, nothing, _ = run_cli(capsys, *argv, "-o", str(target))
    assert code == 0 and nothing == ""
    assert target.read_text() == out


def test_failed_writer_leaves_the_old_file(capsys, plugins, tmp_path):
    """A writer that fails midway leaves FILE as it was and no temporary file; exit 1."""
    target = tmp_path / "report.txt"
    target.write_text("old report\n")
    code, _, err = run_cli(capsys, "--simulate", PRESET, "-t", "fixture_fixed", "--format",
                         "fixture_failing", "-o", str(target), "-q")  # fmt: skip
    assert code == 1
    assert "writer 'fixture_failing' failed" in only_error_line(err)
    assert target.read_text() == "old report\n"
    assert [p.name for p in tmp_path.iterdir() if p.name != "site"] == ["report.txt"]


class FlagsSeen(Writer):
    """Writes the flags it was constructed with."""

    def write(self, report, stream):
        stream.write(f"verbose={self.verbose} perf={self.perf_formatter}\n")


class NoArgsWriter:
    """A plugin writer that neither subclasses Writer nor takes arguments."""

    def __init__(self):
        self.made = True

    def write(self, report, stream):
        stream.write(f"verbose={getattr(self, 'verbose', None)} made={self.made}\n")


@pytest.mark.parametrize(
    ("cls", "expected"),
    [(FlagsSeen, "verbose=True perf=True\n"), (NoArgsWriter, "verbose=True made=True\n")],
)
def test_writer_flags_are_constructor_arguments(capsys, monkeypatch, cls, expected):
    """-v and --perf-formatter reach the writer at construction, whatever its __init__."""
    monkeypatch.setattr(Writers, "get", lambda self, name: cls)
    code, out, _ = run_cli(capsys, "--simulate", PRESET, "-t", "0", "-b", "1", "-v",
                           "--perf-formatter", "--format", "seen")  # fmt: skip
    assert code == 0 and out == expected


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_stops_a_run_with_valid_json(tmp_path, signum, code):
    """SIGINT/SIGTERM during a run: exit 130/143, JSON still valid, finished results kept."""
    paths = copy_fixtures(tmp_path, GOOD)
    marker = tmp_path / "started"
    env = subprocess_env(paths, GPUBW_FIXTURE_MARKER=str(marker), GPUBW_FIXTURE_SLOW_S="60")
    argv = ["--simulate", PRESET, "-j", "-b", "1", "-t", "fixture_fixed", "fixture_slow",
            "fixture_fixed"]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpubw", *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        encoding="utf-8",
    )
    try:
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the slow testcase never started"
            time.sleep(0.02)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    doc = json.loads(out)
    assert doc["interrupted"] is True and doc["exit_code"] == code
    assert doc["options"]["signal"] == signal.Signals(signum).name
    assert doc["options"]["signal_exit"] == code
    assert [(t["key"], t["status"]) for t in doc["testcases"]] == [
        ("fixture_fixed", "Passed"),
        ("fixture_slow", "Interrupted"),
    ]
    assert "Traceback" not in err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_once_the_report_is_final_keeps_its_exit_code(tmp_path, monkeypatch, signum):
    """A signal that arrives right after the complete JSON report was written is absorbed:
    main() returns the report's exit_code (0), not 128 + n, so the two never differ."""
    from gpubw.cli.live import LiveOutput

    write = LiveOutput.finish

    def write_then_signal(*args, **kwargs):
        write(*args, **kwargs)
        os.kill(os.getpid(), signum)

    monkeypatch.setattr(LiveOutput, "finish", write_then_signal)
    target = tmp_path / "r.json"
    code = cli.main(["--simulate", PRESET, "-t", "0", "-b", "1MiB", "-i", "1", "-q", "-j",
                     "-o", str(target)])  # fmt: skip
    doc = json.loads(target.read_text())
    assert code == doc["exit_code"] == 0 and doc["interrupted"] is False


def test_os_environment_untouched(plugins):
    """Running the CLI in-process leaves the signal handlers as they were."""
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    cli.main(["--simulate", PRESET, "-t", "fixture_fixed", "-j"])
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    assert os.environ.get("GPUBW_FIXTURE_MARKER") is None


# -- results as they happen ---------------------------------------------------------------------
class _Tty(io.StringIO):
    """A captured stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def _whole_text(tmp_path, *argv: str) -> str:
    """The report of the same run written whole, through -o."""
    target = tmp_path / "whole.txt"
    assert cli.main(["--simulate", PRESET, *argv, "-q", "-o", str(target)]) in (0, 1)
    return target.read_text()


def test_text_is_printed_as_each_testcase_finishes(capsys, monkeypatch, tmp_path):
    """Text reaches stdout testcase by testcase (the header first, the NOTE last), and all of
    it equals the report that -o writes whole (stdout then stays quiet)."""
    from gpubw.runner import core as runner

    seen: list[str] = []
    real = runner._step

    def step(*args, **kwargs):
        seen.append(capsys.readouterr().out)  # what was printed before this testcase ran
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "_step", step)
    assert cli.main(["--simulate", PRESET, "-t", "0", "1", "-q"]) == 0
    rest = capsys.readouterr().out
    assert "Device 1: NVIDIA H200" in seen[0] and "Running" not in seen[0]
    assert "Running host_to_device_memcpy_ce." in seen[1] and "NOTE:" not in seen[1]
    assert "Running device_to_host_memcpy_ce." in rest and "NOTE:" in rest
    monkeypatch.setattr(runner, "_step", real)
    whole = _whole_text(tmp_path, "-t", "0", "1")
    assert capsys.readouterr().out == ""
    assert "".join(seen) + rest == whole


def test_progress_lines_on_stderr_when_not_a_terminal(capsys, plugins):
    """Without a terminal, stderr gets one plain line per finished testcase (also with -j;
    stdout stays one JSON document); a failed testcase's line says why."""
    code, out, err = run_cli(
        capsys, "--simulate", PRESET, "-j", "-b", "1", "-t", "fixture_good", "fixture_run_raises"
    )
    assert code == 1
    assert len(json.loads(out)["testcases"]) == 2
    lines = err.splitlines()
    assert re.fullmatch(r"\[1/2\] fixture_good \(1 MiB\) Passed \d+\.\d s", lines[0]), lines
    assert re.match(r"\[2/2\] fixture_run_raises \(1 MiB\) Error \d+\.\d s: \S", lines[1]), lines
    assert len(lines) == 2


def test_quiet_turns_progress_off(capsys, monkeypatch):
    """--quiet: nothing on stderr, neither plain lines nor (on a terminal) the progress bar."""
    code, out, err = run_cli(capsys, "--simulate", PRESET, "-t", "0", "--quiet")
    assert code == 0 and err == "" and "SUM host_to_device_memcpy_ce" in out
    tty = _Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    assert cli.main(["--simulate", PRESET, "-t", "0", "-q"]) == 0
    assert tty.getvalue() == ""


def test_progress_bar_on_a_terminal_leaves_stdout_intact(capsys, monkeypatch, tmp_path):
    """On a terminal stderr shows a rich progress line (no plain lines); the text on stdout,
    a terminal too, is exactly the report (the bar is taken off while it is written)."""
    err, out = _Tty(), _Tty()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(sys, "stdout", out)
    assert cli.main(["--simulate", PRESET, "-t", "0", "1", "4"]) == 0
    monkeypatch.undo()
    assert err.getvalue() and "[1/3]" not in err.getvalue()
    assert "\x1b" not in out.getvalue()
    assert out.getvalue() == _whole_text(tmp_path, "-t", "0", "1", "4")


def test_streaming_writer_bug_is_a_plugin_error(capsys, monkeypatch):
    """A streaming writer that fails mid-run is a one-line PluginError, exit 1."""
    from gpubw.writers.text import TextWriter

    def broken(self, result, stream):
        raise RuntimeError("testcase output broke")

    monkeypatch.setattr(TextWriter, "testcase", broken)
    code, _, err = run_cli(capsys, "--simulate", PRESET, "-t", "0", "-q")
    assert code == 1
    assert "writer 'text' failed: RuntimeError: testcase output broke" in only_error_line(err)


def test_a_signal_during_a_simulated_rack_run_is_in_its_report(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """SIGINT as a simulated rack's ranks start stops them as it stops one process (issue
    23): the report is written, interrupted, exit 130, nothing run after the signal."""
    from gpubw.runner import core

    run_rack = core.run_rack

    def signalled(*args: object) -> object:
        os.kill(os.getpid(), signal.SIGINT)
        return run_rack(*args)

    monkeypatch.setattr(core, "run_rack", signalled)
    out = tmp_path / "rack.json"
    argv = ["--simulate", "gb200nvl72", "-t", "0", "-b", "1MiB", "-i", "1", "-j", "-o", str(out)]
    assert cli.main(argv) == 130
    doc = json.loads(out.read_text())
    assert doc["interrupted"] is True and doc["exit_code"] == 130
    assert [t["status"] for t in doc["testcases"]] in ([], ["Interrupted"])
