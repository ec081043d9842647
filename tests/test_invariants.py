"""Invariants for any input (issue 13 item 8): random command lines, system files, plugin
results and signal timings, each checked for a documented exit code, a schema-valid report
(or the previous ``-o`` content intact), no temporary file, no traceback and no special file
replaced. Bounded in time: few examples, 1 MiB buffers, ``-i 1``; only the signal checks
start subprocesses (they hold since robust-runner's signal guard: before it, a SIGINT during
start-up printed a KeyboardInterrupt traceback)."""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import gpubw
from _run import run
from gpubw import BANDWIDTH, LATENCY, Matrix, RunOptions
from gpubw.api import system_opener
from gpubw.cli.command import main
from gpubw.model.report_io import dumps, load_report
from gpubw.runner.registry import Entry
from gpubw.runner.spec import select

#: the exit codes gpubw documents (cli module docstring, gpubw -h; 3: below expectation)
EXIT_CODES = {0, 1, 2, 3, 130, 143}
PREVIOUS = '{"previous": true}\n'
_SETTINGS: dict[str, Any] = {
    "deadline": None,
    "database": None,
    "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
}

_KEYS = ["host_to_device_memcpy_ce", "device_local_copy", "device_to_device_latency_sm", "nope"]
_VALUES: dict[str, list[str]] = {
    "-t": [*_KEYS, "0", "34", "-1", "99999", str(10**30)],
    "-p": ["host_to_device_memcpy", "device_local", "zzz", ""],
    "-b": ["1", "1MiB", "64K", "0", "-5", "abc", "1MiB:2MiB:x2", "1e400", str(10**30), "inf"],
    "-i": ["1", "0", "-1", "abc", str(10**20), "1e3", "100001"],
    "--loop-count": ["1", "2", "0", str(10**20), "x"],
    "--gate-timeout": ["0.5", "10", "0", "-1", "nan", "inf", "1e300", "abc", "86401"],
    "--format": ["text", "json", "csv", "bogus"],
    "--simulate": ["h200x1", "h200x2", "pcie4", "nosuch", "SYSFILE"],
}
_FLAGS = ["-j", "-m", "-s", "-d", "-v", "-l", "--bogus", "-h"]


@st.composite
def command_lines(draw: Any) -> list[str]:
    """A random mix of gpubw's options, valid and invalid values, and junk."""
    argv: list[str] = []
    for option in draw(st.lists(st.sampled_from(sorted(_VALUES)), max_size=4)):
        argv += [option, draw(st.sampled_from(_VALUES[option]))]
    argv += draw(st.lists(st.sampled_from(_FLAGS), max_size=2))
    if "-t" not in argv and "-p" not in argv:
        argv += ["-t", "0"]  # one testcase keeps every example short
    for option, value in (("--simulate", "h200x1"), ("-b", "1MiB"), ("-i", "1")):
        if option not in argv:
            argv += [option, value]
    return argv


_NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from(["Infinity", "NaN", "1e999", "x", None, [], {}]),
)
_BW = st.fixed_dictionaries({"ce": _NUMBERS, "sm": _NUMBERS})
system_docs = st.fixed_dictionaries(
    {"base": st.sampled_from(["h200x1", "h200x2", "pcie4", "nosuch"])},
    optional={
        "count": st.one_of(st.integers(-2, 2000), _NUMBERS),
        "host_link": st.fixed_dictionaries({"h2d": _BW, "d2h": _BW}),
        "peers": st.fixed_dictionaries({"pairs": st.just("all"), "ce": _NUMBERS, "sm": _NUMBERS}),
        "local_copy": _BW,
        "latency": st.fixed_dictionaries({"host": _NUMBERS, "peer": _NUMBERS}),
        "overheads": st.fixed_dictionaries({"kernel_launch": _NUMBERS, "memcpy": _NUMBERS}),
        "host_memory_bandwidth": _NUMBERS,
        "jitter": _NUMBERS,
        "reserved_bytes": _NUMBERS,
        "device": st.fixed_dictionaries({}, optional={"sm_count": _NUMBERS}),
        "faults": st.fixed_dictionaries(
            {},
            optional={
                "kernel_error": st.sampled_from(["gpubw_copy", "no_such_kernel", "x"]),
                "corrupt_copy": st.booleans(),
            },
        ),
    },
)


def _system_file(folder: Path, doc: Any) -> str:
    path = folder / "system.json"
    text = json.dumps(doc, allow_nan=True).replace('"Infinity"', "Infinity")
    path.write_text(text.replace('"NaN"', "NaN"))
    return str(path)


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.lstat().st_mode, p.lstat().st_ino) for p in folder.iterdir()}


def _special_files(folder: Path) -> None:
    """A FIFO and, where the test may make one, a character device like /dev/null, made in
    ``folder`` (never a real /dev node: if the bug came back, the test would destroy it)."""
    os.mkfifo(folder / "fifo")
    with contextlib.suppress(OSError):
        os.mknod(folder / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))


def _check_folder(folder: Path, before: dict[str, tuple[int, int]]) -> None:
    """No temporary file left; no special (non-regular) file replaced."""
    assert [p.name for p in folder.iterdir() if p.name.endswith(".tmp")] == []
    after = _snapshot(folder)
    for name, (mode, ino) in before.items():
        if not stat.S_ISREG(mode):
            assert after.get(name) == (mode, ino), f"{name} was replaced"


def _check_report(path: Path, code: int, *, written: bool = False) -> None:
    """Either a complete schema-valid report with this exit code, or the previous content
    (``written``: the run ended with a report's code, so it must have written it)."""
    if path.read_text(encoding="utf-8") == PREVIOUS:
        assert not written, f"exit {code} but the report was never written"
        return
    doc = load_report(path)
    assert doc["exit_code"] == code


@settings(max_examples=50, **_SETTINGS)
@given(argv=command_lines(), doc=system_docs, output=st.sampled_from(["file", "null"]))
def test_any_command_line_keeps_the_invariants(
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    doc: dict[str, Any],
    output: str,
) -> None:
    """Random options and system files (in process): a documented exit code, never an
    exception, no traceback, a valid or untouched -o, no .tmp, no special file replaced."""
    folder = tmp_path_factory.mktemp("inv")
    _special_files(folder)
    argv = [_system_file(folder, doc) if a == "SYSFILE" else a for a in argv]
    target = folder / "report.json"
    target.write_text(PREVIOUS)
    null = folder / "null"
    chosen = null if output == "null" and null.exists() else target
    argv += ["-o", str(chosen)]
    before = _snapshot(folder)
    try:
        code = main(argv)
    except BaseException as exc:  # any escape is a broken invariant
        pytest.fail(f"gpubw {argv} raised {type(exc).__name__}: {exc}")
    _, err = capsys.readouterr()
    assert code in EXIT_CODES, (code, argv, err)
    assert "Traceback" not in err, err
    _check_folder(folder, before)
    as_json = "-j" in argv or any(
        a == "--format" and b == "json" for a, b in itertools.pairwise(argv)
    )
    if chosen == target and as_json and not {"-l", "-h"} & set(argv):
        _check_report(target, code, written=code in (0, 3))


@settings(max_examples=60, **_SETTINGS)
@given(doc=system_docs)
def test_any_system_file_loads_or_is_one_usage_error(
    tmp_path_factory: pytest.TempPathFactory, doc: dict[str, Any]
) -> None:
    """A random system file builds a model whose every figure is finite, or is refused with
    one UsageError line; never another exception."""
    from gpubw.backend.sim.model import MAX_DEVICES
    from gpubw.model.errors import UsageError

    path = _system_file(tmp_path_factory.mktemp("sys"), doc)
    try:
        opener = system_opener(path)
    except UsageError as exc:
        assert "\n" not in str(exc)
        return
    with opener(RunOptions()) as system:
        model = system.backend.model
        assert 1 <= len(model.devices) <= MAX_DEVICES
        pairs = [x for link in model.host_links for x in (link.h2d, link.d2h)]
        pairs += [model.local_copy, *model.peers.values()]
        rates = [x for r in pairs for x in (r.ce, r.sm)]
        assert all(math.isfinite(x) and x > 0 for x in rates)
        assert all(math.isfinite(x) for x in (model.latency.host, model.jitter))


# -- random plugin results -----------------------------------------------------------------
_CELLS = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.sampled_from(["fast", True, [], {}]),
)


@st.composite
def plugin_results(draw: Any) -> Any:
    """What a plugin's run() might return: matrices with random cells, shapes and units,
    or something that is not a result at all."""
    rows = draw(st.integers(0, 3))
    cols = draw(st.integers(0, 3))
    values = [[draw(_CELLS) for _ in range(cols)] for _ in range(rows)]
    unit = draw(st.sampled_from([BANDWIDTH, LATENCY, "furlongs"]))
    kind = draw(st.sampled_from(["matrix", "list", "garbage", "none"]))
    if kind == "garbage":
        return draw(st.sampled_from(["garbage", 42, object(), [1, 2]]))
    if kind == "none":
        return None

    def build() -> Any:
        return Matrix(
            "m", "random", unit, [str(i) for i in range(rows)], [str(i) for i in range(cols)],
            values,
        )  # fmt: skip

    return ("list", build) if kind == "list" else ("one", build)


def _good_cell(v: Any) -> bool:
    """A cell the report takes: None, or a finite number >= 0 that is not a bool."""
    if v is None:
        return True
    if isinstance(v, bool) or not isinstance(v, int | float):
        return False
    try:
        return math.isfinite(float(v)) and v >= 0
    except OverflowError:
        return False


def _expected_status(result: Any) -> str:
    """Passed only for a list of one Matrix that builds, in a known unit, every cell good."""
    if not isinstance(result, tuple) or result[0] != "list":
        return "Error"
    try:
        m = result[1]()
    except Exception:
        return "Error"
    good = all(_good_cell(v) for row in m.values for v in row)
    return "Passed" if m.unit in (BANDWIDTH, LATENCY) and good else "Error"


@settings(max_examples=40, **_SETTINGS)
@given(result=plugin_results())
def test_any_plugin_result_keeps_the_report_valid(result: Any) -> None:
    """Whatever a plugin's run() returns, the report is schema-valid and the exit code is a
    documented one; the testcase is Passed exactly when it returned a list of a good Matrix,
    else Error; the other testcase still Passes."""

    class Random(gpubw.Testcase):
        """Returns a random result."""

        def run(self, size: int, loops: int) -> Any:
            if isinstance(result, tuple):
                built = result[1]()  # a Matrix that fails to build raises here: an Error
                return [built] if result[0] == "list" else built
            return result

    cls = type("Random", (Random,), {"key": "random"})
    selection = [Entry(0, "random", "tests", cls=cls), *select(["0"])[0]]
    options = RunOptions(samples=1, loops=1, buffer_sizes=[1 << 20])
    report = run(system_opener("h200x1"), selection, options)
    doc = json.loads(dumps(report))  # dumps validates against the schema
    assert doc["exit_code"] in EXIT_CODES
    statuses = [t["status"] for t in doc["testcases"]]
    assert statuses == [_expected_status(result), "Passed"], doc["testcases"]


# -- signals at random moments (subprocesses) ------------------------------------------------
def _start(argv: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpubw", *argv],
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        encoding="utf-8",
    )


def _signalled_run(folder: Path, offsets: list[float], sigs: list[int]) -> tuple[int, str, str]:
    target = folder / "report.json"
    target.write_text(PREVIOUS)
    proc = _start(
        ["--simulate", "h200x2", "-b", "1MiB:4MiB:x2", "-i", "1", "-j", "-o", str(target)]
    )
    start = time.monotonic()
    try:
        for offset, sig in zip(sorted(offsets), sigs):
            delay = offset - (time.monotonic() - start)
            if delay > 0:
                time.sleep(delay)
            if proc.poll() is None:
                proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, out, err


def _install_line() -> int:
    """The line of ``_startup.install()`` in ``gpubw/cli/__init__.py``, the entry package
    (``gpubw/__main__.py`` and the ``gpubw`` script import it first)."""
    lines = Path(gpubw.__file__).with_name("cli").joinpath("__init__.py").read_text()
    numbered = enumerate(lines.splitlines(), 1)
    return next(i for i, line in numbered if line.startswith("_startup.install()"))


def _early_frame(line: str) -> bool:
    """Whether a traceback line is gpubw code that runs before the quiet handler is in:
    the package's own light module level (``__init__``, ``__main__``'s import line,
    ``version``, ``cli/_startup``), the entry package up to its ``_startup.install()`` line,
    or install() itself (a KeyboardInterrupt there was raised before SIGINT's handler was
    set: once it is, SIGINT never raises)."""
    found = re.search(r'gpubw[/\\]([\w/\\]+)\.py", line (\d+), in (\S+)$', line)
    if found is None:
        return False
    module = found[1].replace("\\", "/")
    number, function = int(found[2]), found[3]
    if module in ("__init__", "__main__", "version", "cli/_startup") and function == "<module>":
        return True
    if module == "cli/_startup" and function in ("install", "_set", "is_command"):
        return True
    return module == "cli/__init__" and function == "<module>" and number <= _install_line()


def _before_gpubw(err: str) -> bool:
    """Whether ``err`` is Python's own KeyboardInterrupt traceback from before gpubw's quiet
    handler was installed (the interpreter still starting, runpy or the ``gpubw`` script
    still importing, the first lines of the entry module): no gpubw frame but those
    (:func:`_early_frame`), so no handler of gpubw's could have run yet. The entry modules
    install it before any import that is not already loaded by the interpreter."""
    frames = [line.strip() for line in err.splitlines() if line.lstrip().startswith('File "')]
    ours = [line for line in frames if f"{os.sep}gpubw{os.sep}" in line]
    if not err.rstrip().endswith("KeyboardInterrupt") or not frames:
        return False
    if err.startswith(_SITE_FAILED) and not ours:
        # the interpreter itself, still importing site (its own KeyError of an import cache
        # miss being handled when the signal came): it exits 1 with this banner
        return True
    return "During handling" not in err and all(_early_frame(line) for line in ours)


#: how CPython reports an exception while it imports ``site`` at start-up
_SITE_FAILED = "Fatal Python error: init_import_site: Failed to import the site module"

#: that report as the stress run of 2026-12-02 caught it (a SIGINT 16 ms after the start)
_SITE_INTERRUPTED = (
    _SITE_FAILED
    + """
Python runtime state: initialized
Traceback (most recent call last):
  File "<frozen importlib._bootstrap_external>", line 1437, in _path_importer_cache
KeyError: '/tmp/s31/run1/src'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "<frozen importlib._bootstrap>", line 1176, in _find_and_load
  File "<frozen site>", line 548, in execsitecustomize
  File "<frozen importlib._bootstrap_external>", line 1417, in _path_hooks
KeyboardInterrupt
"""
)


def test_a_signal_while_python_imports_site_is_before_gpubw() -> None:
    """The interpreter's own start-up failure (no gpubw frame) is before gpubw; the same
    chain with a gpubw frame in it, or not ending in KeyboardInterrupt, is not."""
    assert _before_gpubw(_SITE_INTERRUPTED)
    frame = f'  File "{os.sep}x{os.sep}gpubw{os.sep}runner{os.sep}core.py", line 9, in run\n'
    ours = _SITE_INTERRUPTED.replace("KeyboardInterrupt\n", frame + "KeyboardInterrupt\n")
    assert not _before_gpubw(ours)
    assert not _before_gpubw(_SITE_INTERRUPTED.replace("KeyboardInterrupt", "ValueError"))


def _check_signalled(folder: Path, code: int, out: str, err: str) -> None:
    if code < 0:  # killed by the signal before Python ran any of gpubw: a shell sees 128 + n
        code = 128 - code
    assert code in EXIT_CODES, (code, err)
    if _before_gpubw(err):  # the first ~20 ms: Python's default handler, nothing written yet
        assert (folder / "report.json").read_text() == PREVIOUS
        err = ""
    assert "Traceback" not in err, err
    assert out == ""
    assert [p.name for p in folder.iterdir() if p.name.endswith(".tmp")] == []
    _check_report(folder / "report.json", code)


_SIGNALS = st.sampled_from([signal.SIGINT, signal.SIGTERM])


@settings(max_examples=6, **_SETTINGS)
@given(offset=st.floats(min_value=0.0, max_value=2.0), sig=_SIGNALS)
@example(offset=0.0, sig=signal.SIGINT)
@example(offset=0.016, sig=signal.SIGINT)
@example(offset=0.02, sig=signal.SIGTERM)
def test_one_signal_at_any_moment_leaves_a_valid_report(
    tmp_path_factory: pytest.TempPathFactory, offset: float, sig: int
) -> None:
    """One SIGINT or SIGTERM at a random moment (start-up included): a documented code, a valid
    report or the old file, no .tmp, no traceback, nothing on stdout."""
    folder = tmp_path_factory.mktemp("sig")
    code, out, err = _signalled_run(folder, [offset], [sig])
    _check_signalled(folder, code, out, err)


@settings(max_examples=4, **_SETTINGS)
@given(
    first=st.floats(min_value=0.0, max_value=2.0),
    gaps=st.lists(st.floats(min_value=0.0, max_value=0.03), min_size=1, max_size=3),
    sigs=st.lists(_SIGNALS, min_size=4, max_size=4),
)
def test_signal_bursts_leave_a_valid_report(
    tmp_path_factory: pytest.TempPathFactory, first: float, gaps: list[float], sigs: list[int]
) -> None:
    """Bursts of signals 0-30 ms apart at a random moment: the same invariants (a second
    SIGINT 10-20 ms after the first once lost the report or printed a traceback)."""
    folder = tmp_path_factory.mktemp("burst")
    offsets = [first]
    for gap in gaps:
        offsets.append(offsets[-1] + gap)
    code, out, err = _signalled_run(folder, offsets, sigs)
    _check_signalled(folder, code, out, err)
