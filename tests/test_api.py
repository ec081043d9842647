"""Tests of the Python API: gpubw.run, gpubw.open_system, Report export, gpubw.__all__."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any

import pytest

import gpubw
from _plugin_fixtures import GOOD, installed
from gpubw.cli import command as cli
from gpubw.model.results import Status

PRESET = "h200x2"
MIB = 1 << 20
README = Path(__file__).resolve().parent.parent / "README.md"


def readme_example() -> str:
    """The Python code block of the README's "Use it from Python" section."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Use it from Python", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the section has one Python example"
    return blocks[0]


def test_readme_example_runs(capsys):
    """The README's Python example runs as written (on the simulated preset it names)."""
    code = readme_example()
    assert "gpubw.run(" in code and "gpubw.open_system(" in code and ".records()" in code
    assert f'simulate="{PRESET}"' in code
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [
        f"device_local_copy Passed {512 * MIB}",
        f"host_to_device_memcpy_ce Passed {512 * MIB}",
    ]
    assert out[2].startswith("{'testcase': 'device_local_copy', 'size': 536870912,")
    assert out[3] == "['NVIDIA H200', 'NVIDIA H200']"


def test_run_matches_the_cli(capsys, tmp_path):
    """gpubw.run gives the CLI's report: same entries, statuses, figures and run options."""
    argv = ["--simulate", PRESET, "-t", "device_local_copy", "0", "nope", "-b", "64", "-j"]
    assert cli.main(argv) == 1
    doc = json.loads(capsys.readouterr().out)
    report = gpubw.run(["device_local_copy", 0, "nope"], sizes=["64"], simulate=PRESET)
    api = gpubw.report_to_dict(report)
    assert [(t["key"], t["status"], t["size_bytes"]) for t in api["testcases"]] == [
        (t["key"], t["status"], t["size_bytes"]) for t in doc["testcases"]
    ]
    assert [t["matrices"] for t in api["testcases"]] == [t["matrices"] for t in doc["testcases"]]
    measured = ("buffer_sizes", "samples", "loops", "statistic", "verify", "simulate", "testcase")
    assert {k: api["options"][k] for k in measured} == {k: doc["options"][k] for k in measured}
    assert api["options"]["format"] is None and api["options"]["argv"] == []
    assert report.exit_code == doc["exit_code"] == 1
    assert report.testcases[2].status is Status.NOT_FOUND
    assert json.loads(gpubw.report_to_json(report)) == api  # to_json validates against the schema


def test_the_command_and_the_api_build_one_spec(capsys, monkeypatch):
    """The same options, given as a command line and as gpubw.run's arguments, build the
    same RunSpec (gpubw.runner.spec.build_spec): selection, options, simulation, warnings;
    only what the command line alone records (format, argv) and how it runs (its listeners,
    its signal handling) differ."""
    from gpubw.runner import core

    specs: list[Any] = []
    real = core.run

    def keep(spec: Any, world: Any = None) -> Any:
        specs.append(spec)
        return real(spec, world)

    monkeypatch.setattr(core, "run", keep)
    argv = ["-t", "device_local_copy", "0", "-b", "64MiB", "-i", "3", "--loop-count", "2"]
    argv += ["--simulate", PRESET, "--sample-pairs", "0.5", "--seed", "7", "-m", "-j", "-q"]
    assert cli.main(argv) == 0, capsys.readouterr().err
    gpubw.run(
        ["device_local_copy", 0],
        sizes=["64MiB"],
        simulate=PRESET,
        samples=3,
        loops=2,
        sample_pairs=0.5,
        seed=7,
        statistic="mean",
    )
    command, api = specs
    chosen = [[(e.key, e.index, e.plugin, e.cls) for e in s.selection] for s in specs]
    assert chosen[0] == chosen[1] and len(chosen[0]) == 2
    for field in ("options", "warnings", "stop_on_error", "capture_output", "name"):
        assert getattr(command, field) == getattr(api, field), field
    sims = [(s.simulation.name, s.simulation.model.name, s.simulation.hosts) for s in specs]
    assert sims[0] == sims[1] == (PRESET, PRESET, None)  # (the model is the run's own copy)
    assert command.options.buffer_sizes == (64 * MIB,) and command.options.samples == 3
    assert command.selection[0].key == "device_local_copy"
    for field in ("testcase", "testcase_prefixes", "simulate", "output", "perf_formatter"):
        assert getattr(command.invocation, field) == getattr(api.invocation, field), field
    assert (command.invocation.format, api.invocation.format) == ("json", None)
    assert command.invocation.argv == tuple(argv) and api.invocation.argv == ()
    assert command.handle_signals and not api.handle_signals and not api.listeners


def test_run_prints_nothing_and_keeps_its_notes_in_the_report(capfd):
    """gpubw.run prints nothing, not even a note: a --sample-pairs fraction raised to N cells
    is a warning of the report (the command also says it on standard error)."""
    report = gpubw.run(["device_local_copy"], sizes=[MIB], simulate=PRESET, sample_pairs=0.01)
    assert capfd.readouterr() == ("", "")
    note = "--sample-pairs 0.01 is 1 of 2 cells, raised to 2 (every device once as source and "
    assert [w for w in report.warnings if w.startswith("--sample-pairs")] == [note + "destination)"]
    argv = ["-t", "device_local_copy", "-b", "1", "--simulate", PRESET, "--sample-pairs", "0.01"]
    assert cli.main([*argv, "-j", "-q"]) == 0
    out, err = capfd.readouterr()
    assert err == f"gpubw: {note}destination)\n"
    assert note + "destination)" in json.loads(out)["warnings"]


def test_waived_and_errors_are_entries_not_exceptions(tmp_path):
    """A Waived testcase and a plugin's Error are entries of the report; the others pass."""
    with installed(tmp_path / "site", GOOD):
        report = gpubw.run(
            ["fixture_waived", "fixture_leak", "fixture_good"], sizes=[MIB], simulate=PRESET
        )
    statuses = [(t.key, t.status) for t in report.testcases]
    assert statuses[0] == ("fixture_waived", Status.WAIVED)
    assert statuses[1] == ("fixture_leak", Status.ERROR)
    assert "fixture: failed after allocating" in report.testcases[1].message
    assert statuses[2] == ("fixture_good", Status.PASSED)
    assert report.exit_code == 1


def test_prefixes_and_options():
    """prefixes select as -p does; the keyword options reach the run and the report."""
    report = gpubw.run(
        prefixes=["device_local"], sizes=[MIB, "2MiB"], samples=2, loops=3, simulate=PRESET
    )
    keys = {t.key for t in report.testcases}
    assert keys == {
        "device_local_copy",
        "device_local_copy_sm",
        "device_local_read_sm",
        "device_local_write_sm",
        "device_local_copy_tma",
    }
    assert {t.size for t in report.testcases} == {MIB, 2 * MIB}
    o = report.run_options
    assert (o.samples, o.loops, o.buffer_sizes) == (2, 3, (MIB, 2 * MIB))
    assert report.invocation is not None and report.invocation.testcase_prefixes == (
        "device_local",
    )
    matrix = report.testcases[0].matrices[0]
    assert all(s is None or len(s) == 2 for row in matrix.samples for s in row)


def test_run_leaves_signal_handlers_alone_unless_asked():
    """Without handle_signals the process's handlers are untouched during the run."""
    seen: list[Any] = []
    before = signal.getsignal(signal.SIGINT)

    def progress(event: Any) -> None:
        seen.append(signal.getsignal(signal.SIGINT))

    gpubw.run(["device_local_copy"], sizes=[MIB], simulate=PRESET, progress=progress)
    assert seen and all(h is before for h in seen)
    seen.clear()
    gpubw.run(
        ["device_local_copy"], sizes=[MIB], simulate=PRESET, progress=progress, handle_signals=True
    )
    assert seen and all(h is not before for h in seen)
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"sizes": [0]}, ["0", ">= 1"]),
        ({"sizes": ["-1GiB"]}, ["'-1GiB'", "negative"]),
        ({"sizes": [1.5]}, ["1.5", "int"]),
        ({"sizes": []}, ["sizes is empty"]),
        ({"samples": 0}, ["samples", ">= 1", "0"]),
        ({"statistic": "avg"}, ["statistic", "avg", "median"]),
        ({"simulate": "no-such-system"}, ["'no-such-system'", "h200x2"]),
        ({"testcases": ["0"], "prefixes": ["host"]}, ["testcase prefixes", "together"]),
    ],
)
def test_bad_arguments_raise_usage_error(kwargs, words):
    """Bad arguments raise UsageError naming the value and what is allowed, before running."""
    kwargs.setdefault("simulate", PRESET)
    with pytest.raises(gpubw.UsageError) as info:
        gpubw.run(**kwargs)
    for word in words:
        assert word in str(info.value), str(info.value)


def test_open_system_preset_file_and_context_manager(tmp_path):
    """open_system opens a preset or a system file; leaving the block closes it."""
    with gpubw.open_system(PRESET) as system:
        assert [d.ordinal for d in system.devices] == [0, 1]
        assert system.backend.simulated and not system.closed
    assert system.closed
    path = tmp_path / "one.json"
    path.write_text(json.dumps({"name": "one", "base": "h200x1"}))
    with gpubw.open_system(path, gpubw.RunOptions(loops=2)) as system:
        assert system.device_count == 1 and system.options.loops == 2
    with pytest.raises(gpubw.UsageError, match="no-such-system"):
        gpubw.open_system("no-such-system")


def test_open_system_without_simulate_uses_the_driver(monkeypatch):
    """simulate=None opens the real GPUs: without a driver that is NoDriverError."""
    from gpubw.backend import cuda

    def no_driver() -> Any:
        raise gpubw.NoDriverError("no libcuda here")

    monkeypatch.setattr(cuda, "CudaBackend", no_driver)
    with pytest.raises(gpubw.NoDriverError, match="no libcuda"):
        gpubw.open_system()
    with pytest.raises(gpubw.NoDriverError):
        gpubw.run(["device_local_copy"])


def test_records_to_dict_and_to_json():
    """records() has one row per cell (N/A as None); to_json is what the JSON writer writes."""
    report = gpubw.run(
        ["device_to_device_memcpy_read_ce", "device_local_copy"], sizes=[MIB], simulate=PRESET
    )
    records = report.records()
    cells = sum(
        len(m.row_labels) * len(m.column_labels) for t in report.testcases for m in t.matrices
    )
    assert len(records) == cells == 4 + 2 + 2  # device_local_copy has two matrices
    assert set(records[0]) == {"testcase", "size", "matrix", "row", "column", "value", "unit"}
    diagonal = [r for r in records if r["testcase"].startswith("device_to_device")]
    assert [r["value"] is None for r in diagonal] == [True, False, False, True]
    assert all(r["unit"] == gpubw.BANDWIDTH and r["size"] == MIB for r in records)
    import io

    from gpubw.writers.json import JsonWriter

    buf = io.StringIO()
    JsonWriter().write(report, buf)
    assert gpubw.report_to_json(report) == buf.getvalue()
    assert json.loads(gpubw.report_to_json(report)) == gpubw.report_to_dict(report)


def test_public_names_are_documented_and_exist():
    """Every name in gpubw.__all__ exists and is described in the package docstring."""
    doc = gpubw.__doc__ or ""
    for name in gpubw.__all__:
        assert hasattr(gpubw, name), name
        if name != "__version__":
            assert f"``{name}``" in doc, f"{name} is not documented in gpubw's docstring"
    public = {n for n in vars(gpubw) if not n.startswith("_")} - {"annotations"}
    modules = {n for n in public if type(getattr(gpubw, n)).__name__ == "module"}
    assert public - modules == set(gpubw.__all__) - {"__version__"}
    assert gpubw.format_size(512 * MIB) == "512 MiB"
    assert gpubw.device_labels(3) == ("0", "1", "2")
