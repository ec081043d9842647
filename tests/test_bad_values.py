"""Bad values in system files, ``-o`` names and the Python API, and names with control
characters (docs/failures.md, "Bad values in system files, names and the API").

Runs use the simulated h200x1/h200x2 presets with 1 MiB buffers, one sample and one copy."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import gpubw
from _cli import run_cli, usage_error
from gpubw.backend.sim.presets import load_system, system_from_dict
from gpubw.cli import listing
from gpubw.model.console import printable
from gpubw.model.errors import UsageError
from gpubw.model.options import RunOptions
from gpubw.model.outfile import OutputTarget
from gpubw.model.report_check import validate
from gpubw.runner import capture
from gpubw.runner import core as runner
from gpubw.runner.capture import OutputCapture

FAST = ["-t", "0", "-b", "1", "-i", "1", "--loop-count", "1", "-q"]


def must_not_run(monkeypatch: Any) -> None:
    def boom(*a: Any, **k: Any) -> None:
        raise AssertionError("a testcase ran")

    monkeypatch.setattr(runner, "_run_one", boom)


def system_file(tmp_path: Path, text: str, name: str = "system.json") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


# == system files =================================================================================
@pytest.mark.parametrize(
    "pci", ["0000:zz:00.0", "0000:1b:00", "0000:1b:00.8", "1b:00.0", "x:y:z.0"]
)
def test_a_malformed_pci_bus_id_is_refused(capsys, monkeypatch, tmp_path, pci):
    """A pci_bus_id that is not domain:bus:device.function in hex: exit 2 naming the key, in
    a run and in ``gpubw info`` (was: a ValueError traceback from int(..., 16))."""
    must_not_run(monkeypatch)
    path = system_file(tmp_path, json.dumps({"base": "h200x1", "devices": [{"pci_bus_id": pci}]}))
    for argv in (["--simulate", path, *FAST], ["info", "--simulate", path]):
        line = usage_error(capsys, *argv)
        assert "devices[0].pci_bus_id must be domain:bus:device.function" in line
        assert repr(pci) in line


def test_pci_bus_ids_of_both_widths_are_accepted() -> None:
    doc = {"base": "h200x2", "devices": [{"pci_bus_id": "00000000:1B:00.0"}, {}]}
    system = system_from_dict(doc)
    assert system.devices[0].pci_bus_id == "00000000:1B:00.0"


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ({"uuid": ["GPU-1", "GPU-1"]}, "devices 0 and 1 have the same uuid 'GPU-1'"),
        ({"uuid": ["GPU-a", "gpu-A"]}, "devices 0 and 1 have the same uuid 'gpu-A'"),
        (
            {"pci_bus_id": ["0000:1b:00.0", "00000000:1B:00.0"]},
            "devices 0 and 1 have the same pci_bus_id '00000000:1B:00.0'",
        ),
    ],
)
def test_two_devices_with_one_id_are_refused(capsys, monkeypatch, tmp_path, doc, words):
    """Two devices with the same UUID or PCI bus id (was: accepted silently)."""
    must_not_run(monkeypatch)
    ((key, values),) = doc.items()
    devices = [{key: v} for v in values]
    path = system_file(tmp_path, json.dumps({"base": "h200x2", "devices": devices}))
    line = usage_error(capsys, "--simulate", path, *FAST)
    assert words in line and "each device needs its own" in line


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"base": "h200x1", "count": 2, "count": 1}', "key 'count' is given twice in one object"),
        (
            '{"base": "h200x1", "local_copy": {"ce": 1e12, "sm": 1e12, "ce": 2e12}}',
            "key 'ce' is given twice in one object (keys 'ce', 'sm')",
        ),
    ],
)
def test_a_key_given_twice_is_refused(capsys, monkeypatch, tmp_path, text, words):
    """JSON keeps the last of two equal keys silently; a system file may not give one twice."""
    must_not_run(monkeypatch)
    line = usage_error(capsys, "--simulate", system_file(tmp_path, text), *FAST)
    assert words in line


@pytest.mark.parametrize(
    ("where", "text", "words"),
    [
        ("seed", '"seed": {n}', "seed must be in [0, 9223372036854775807], got a number of"),
        ("sm_count", '"device": {{"sm_count": {n}}}', "device.sm_count must be in [1, 65536]"),
        ("jitter", '"jitter": -{n}', "jitter must be in [0, 0.5], got a number of 5000 digits"),
    ],
)
def test_a_5000_digit_number_names_its_key(capsys, monkeypatch, tmp_path, where, text, words):
    """A whole number longer than Python converts (4300 digits): the key and its digits are
    named (was: Python's own message, "Exceeds the limit (4300 digits) for integer string
    conversion", with no key)."""
    must_not_run(monkeypatch)
    body = text.format(n="9" * 5000)
    line = usage_error(capsys, "--simulate", system_file(tmp_path, f'{{"base": "h200x1", {body}}}'))
    assert words in line and "5000 digits" in line
    assert "sys.set_int_max_str_digits" not in line


def test_the_report_names_the_system_by_its_name(capsys, tmp_path):
    """The report's system_name is the file's ``name`` (docs/simulate.md), else the file's
    name without .json; what --simulate said stays in options.simulate (was: the path)."""
    named = system_file(tmp_path, '{"base": "h200x1", "name": "lab-node-7"}', "a.json")
    plain = system_file(tmp_path, '{"base": "h200x1"}', "b.json")
    for path, name in ((named, "lab-node-7"), (plain, "b")):
        code, out, _ = run_cli(capsys, "--simulate", path, *FAST, "-j")
        doc = json.loads(out)
        assert code == 0 and doc["system_name"] == name
        assert doc["options"]["simulate"] == path
        assert doc["notice"] == f"SIMULATED SYSTEM {name}: these figures are modelled, not measured"
    assert gpubw.run([0], simulate=named, sizes=1 << 20, samples=1).system_name == "lab-node-7"


# == control characters and surrogates =============================================================
INJECTED = "H200\r\nDevice 9: fake\x1b[2J"


def test_a_crlf_in_a_device_name_cannot_forge_a_line(capsys, tmp_path):
    """A CR LF in a device name: the text report (stdout and -o), ``gpubw info`` and its
    text show ``\\r\\n`` escaped, so no ``Device 9`` line appears; JSON keeps the name."""
    path = system_file(tmp_path, json.dumps({"base": "h200x1", "devices": [{"name": INJECTED}]}))
    target = tmp_path / "r.txt"
    code, out, _ = run_cli(capsys, "--simulate", path, *FAST)
    assert code == 0
    assert run_cli(capsys, "--simulate", path, *FAST, "-o", str(target))[0] == 0
    code, info, _ = run_cli(capsys, "info", "--simulate", path)
    assert code == 0
    for text in (out, target.read_text(), info):
        lines = text.splitlines()
        assert not [line for line in lines if line.startswith("Device 9")]
        assert "Device 0: H200\\r\\nDevice 9: fake\\x1b[2J (" in text
        assert "\x1b" not in text and "\r" not in text
    code, out, _ = run_cli(capsys, "--simulate", path, *FAST, "-j")
    assert json.loads(out)["devices"][0]["name"] == INJECTED


def test_a_lone_surrogate_in_a_name_keeps_every_report(capsys, tmp_path):
    """A name with a lone surrogate (``"\\ud800"`` in the JSON file): text on stdout and in
    -o, CSV in -o, all written (was: ``writer 'text' failed: UnicodeEncodeError``)."""
    path = system_file(tmp_path, '{"base": "h200x1", "devices": [{"name": "H\\ud800X"}]}')
    code, out, _ = run_cli(capsys, "--simulate", path, *FAST)
    assert code == 0 and "Device 0: H\\ud800X (" in out
    for fmt in ("text", "csv", "json"):
        target = tmp_path / f"r.{fmt}"
        code, _, err = run_cli(
            capsys, "--simulate", path, *FAST, "--format", fmt, "-o", str(target)
        )
        assert (code, err) == (0, "")
        assert "H\\ud800X" in target.read_text(encoding="utf-8")


def test_control_characters_in_a_testcase_key_and_errors_are_escaped(capsys, tmp_path):
    """``-t`` with an ESC sequence: the Not Found line of the text report, the progress line
    and an error line show it escaped; the JSON report keeps it."""
    key = "\x1b]0;owned\x07"
    code, out, err = run_cli(capsys, "--simulate", "h200x1", "-t", key, "-b", "1")
    assert code == 1
    assert "ERROR: Testcase \\x1b]0;owned\\x07 not found\n" in out
    assert "\x1b" not in out + err and "\\x1b]0;owned\\x07 Not Found" in err
    code, out, _ = run_cli(capsys, "--simulate", "h200x1", "-t", key, "-b", "1", "-j", "-q")
    assert json.loads(out)["testcases"][0]["key"] == key
    line = usage_error(capsys, "--simulate", str(tmp_path / "x\x1by.json"), *FAST)
    assert "x\\x1by.json" in line and "\x1b" not in line


def test_list_text_escapes_what_plugins_wrote(capsys, monkeypatch):
    """``-l`` text (from the cache or a discovery) escapes a plugin's key or docstring."""
    monkeypatch.setattr(listing, "listing", lambda as_json: "1, evil\x1b[2J:\n\tdoc\r\n")
    assert listing.main("text", None) == 0
    assert capsys.readouterr().out == "1, evil\\x1b[2J:\n\tdoc\\r\n"


def test_printable_keeps_tabs_and_printable_text():
    assert printable("a\tb ü ✓") == "a\tb ü ✓"
    assert printable("a\rb\nc\x00\u200e\ud800") == "a\\rb\\nc\\x00\\u200e\\ud800"


# == -o names ======================================================================================
@pytest.mark.parametrize("name", ["n" * 256, "é" * 128])
def test_an_o_name_too_long_is_refused_before_the_run(capsys, monkeypatch, tmp_path, name):
    """A name longer than the file system takes (255 bytes; "é" is 2 bytes in UTF-8): exit 2
    before anything runs, nothing left in the folder (was: the whole suite ran, then "File
    name too long" lost the results)."""
    must_not_run(monkeypatch)
    line = usage_error(capsys, "--simulate", "h200x1", *FAST, "-o", str(tmp_path / name))
    assert "the file name is too long (256 bytes)" in line
    assert os.listdir(tmp_path) == []


def test_an_o_name_of_255_bytes_is_written(capsys, tmp_path):
    target = tmp_path / ("n" * 250 + ".json")
    code, _, _ = run_cli(capsys, "--simulate", "h200x1", *FAST, "-j", "-o", str(target))
    assert code == 0
    validate(json.loads(target.read_text()))
    assert os.listdir(tmp_path) == [target.name]


def test_a_very_deep_working_folder_is_not_a_missing_folder(tmp_path):
    """From a working folder deeper than PATH_MAX, ``-o x.json`` names the real problem (a
    path too long) instead of "the folder ... does not exist"."""
    code = (
        "import os, sys\n"
        "for _ in range(24):\n"
        "    os.mkdir('d' * 200)\n"
        "    os.chdir('d' * 200)\n"
        "from gpubw.model.outfile import OutputTarget\n"
        "from gpubw.model.errors import UsageError\n"
        "try:\n"
        "    OutputTarget('x.json').check()\n"
        "except UsageError as exc:\n"
        "    print(exc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        encoding="utf-8",
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "does not exist" not in proc.stdout
    assert "File name too long" in proc.stdout and "characters)" in proc.stdout


def test_the_name_check_is_for_new_names_only(tmp_path: Path) -> None:
    """An existing file needs no probe; a short new name is not probed either."""
    existing = tmp_path / ("e" * 200)
    existing.write_text("old")
    OutputTarget(str(existing)).check()
    OutputTarget(str(tmp_path / "short.json")).check()
    assert sorted(os.listdir(tmp_path)) == [existing.name]


# == the Python API ================================================================================
@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"testcases": "device_local_copy"}, "testcases must be a list of testcase keys"),
        ({"testcases": b"x"}, "testcases must be a list of testcase keys"),
        ({"testcases": 0}, "testcases must be a list of testcase keys or indexes"),
        ({"testcases": [0, 1.5]}, "testcases items must be str or int, got float 1.5"),
        ({"testcases": [True]}, "testcases items must be str or int, got bool True"),
        ({"prefixes": "device_local"}, "prefixes must be a list of testcase key prefixes"),
        ({"prefixes": [0]}, "prefixes items must be str, got int 0"),
        ({"testcases": []}, "testcases=[] selects nothing; pass None"),
        ({"prefixes": ()}, "prefixes=[] selects nothing; pass None"),
        ({"sizes": b"1MiB"}, "sizes must be a buffer size (an int of bytes or a text"),
        ({"sizes": 1.5}, "sizes must be a buffer size (an int of bytes or a text"),
        ({"simulate": 123}, "simulate must be None (the real GPUs), a preset name or a system"),
        ({"progress": 123}, "progress must be a function"),
        ({"options": {"samples": 1}}, "options must be a RunOptions or None, got dict"),
        ({"handle_signals": "yes"}, "handle_signals must be True or False"),
        ({"verify": "no"}, "invalid run option: verify must be True or False, got 'no'"),
        ({"affinity": 0}, "invalid run option: affinity must be True or False, got 0"),
        ({"verbose": None, "host_huge_pages": "on"}, "host_huge_pages must be True or False"),
    ],
)
def test_bad_api_arguments_are_usage_errors(monkeypatch, kwargs, words):
    """Each was a run of the wrong thing (a str iterated by character: 17 Not Found; bytes
    as 4 byte-sized runs; ``[]`` as every testcase), a TypeError, or ``verify="no"`` taken
    as true; now a UsageError naming the argument, before anything runs."""
    must_not_run(monkeypatch)
    kwargs = {"simulate": "h200x1", "sizes": "1MiB", **kwargs}
    if "prefixes" not in kwargs and "testcases" not in kwargs:
        kwargs["testcases"] = [0]
    with pytest.raises(UsageError) as info:
        gpubw.run(**kwargs)
    assert words in str(info.value)


def test_run_selects_every_testcase_with_none() -> None:
    """``testcases`` and ``prefixes`` default to None ("not given")."""
    parameters = inspect.signature(gpubw.run).parameters
    assert parameters["testcases"].default is None and parameters["prefixes"].default is None


@pytest.mark.parametrize("field", ["verify", "affinity", "verbose", "host_huge_pages"])
def test_run_options_flags_are_bools(field):
    with pytest.raises(ValueError, match=f"{field} must be True or False, got 'no'"):
        RunOptions(**{field: "no"})


# == output capture on several threads ===========================================================
def _fd1() -> tuple[int, int]:
    st = os.fstat(1)
    return st.st_dev, st.st_ino


def test_captures_that_end_out_of_order_restore_stdout_exactly(capfd):
    """Two captures (two threads' testcases) that start A, B and end A, B: fd 1 and
    sys.stdout are the originals afterwards (was: fd 1 left on A's deleted temporary file,
    sys.stdout on A's buffer)."""
    before, stdout = _fd1(), sys.stdout
    a, b = OutputCapture(), OutputCapture()
    a.__enter__()
    b.__enter__()
    print("from a plugin")
    a.__exit__(None, None, None)
    os.write(1, b"still captured\n")  # b is still running: fd 1 stays redirected
    b.__exit__(None, None, None)
    assert (_fd1(), sys.stdout) == (before, stdout)
    assert capture.real_stdout_fd() == 1
    assert a.text == "from a plugin\n" and b.text == "still captured\n"
    print("after")
    assert capfd.readouterr().out == "after\n"


def test_concurrent_api_runs_leave_stdout_as_it_was(capfd, monkeypatch):
    """Three gpubw.run() calls on three threads, their testcases' captures all active at
    once (a barrier inside the testcase): afterwards fd 1 and sys.stdout are the
    originals, and every report passed."""
    barrier = threading.Barrier(3, timeout=120)
    real = runner._run_one

    def meeting(*args: Any, **kwargs: Any) -> Any:
        barrier.wait()
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "_run_one", meeting)
    before, stdout = _fd1(), sys.stdout
    reports: list[Any] = []

    def one() -> None:
        reports.append(gpubw.run([0], simulate="h200x1", sizes="1MiB", samples=1, loops=1))

    threads = [threading.Thread(target=one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert [r.exit_code for r in reports] == [0, 0, 0]
    assert (_fd1(), sys.stdout) == (before, stdout)
    print("after")
    assert capfd.readouterr().out == "after\n"


def test_load_system_reads_a_file_it_wrote(tmp_path):
    """Round trip of the stricter reader: a plain valid file still loads."""
    path = system_file(tmp_path, '{"base": "h200x2", "name": "x", "seed": 7}')
    assert load_system(path).name == "x"
