"""Caches, input files and plugins cannot take the run over (issue 24 item 2).

docs/failures.md, "Caches, input files and plugins that try to take the run over": a cache
file is data, never authority; an input file is read only when it is a regular file; a
plugin's import and run are plugin code whose failures, output and changes to the process
stay its own. The plugins are the fixture distribution ``gpubw-fixture-hostile``
(tests/fixtures); most tests run a real ``python -m gpubw`` with a timeout, so that what once
hung fails instead.
"""

from __future__ import annotations

import io
import json
import os
import resource
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from _plugin_fixtures import GOOD, HOSTILE, HOSTILE_DIST, copy_fixtures, installed, subprocess_env
from gpubw.cli import command as cli
from gpubw.cli import listing
from gpubw.kernels import cache as kcache
from gpubw.model import infile
from gpubw.model.report_check import validate
from gpubw.runner import capture, plugincache, procstate
from gpubw.runner.registry import Entry, Registry

#: a quick simulated run, less its buffer size
QUICK = ["--simulate", "h200x1", "-i", "1", "--loop-count", "1", "-q"]
FAST = [*QUICK, "-b", "1"]
TIMEOUT = 120


# -- helpers ------------------------------------------------------------------------------
def _env(tmp_path: Path, *paths: Path, **extra: str) -> dict[str, str]:
    (tmp_path / "cache").mkdir(exist_ok=True)  # now: the current folder's time then stays
    env = subprocess_env(list(paths), GPUBW_CACHE_DIR=str(tmp_path / "cache"), **extra)
    env.pop(plugincache.NO_CACHE_ENV, None)
    return env


def _limit_memory() -> None:
    """A child that reads /dev/zero (as gpubw once did) fails fast instead of eating RAM."""
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    os.umask(0o022)


def _gpubw(tmp_path: Path, env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    """``python -m gpubw ARGV`` in ``tmp_path``, bounded in time and memory."""
    return subprocess.run(
        [sys.executable, "-m", "gpubw", *argv],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        encoding="utf-8",
        timeout=TIMEOUT,
        preexec_fn=_limit_memory,
    )


#: run in the folder of a ``python -m gpubw`` (so that sys.path, the caches' key, is its)
_AS_GPUBW_M = "import os, sys; sys.path[0] = os.getcwd()\n"


def _python(tmp_path: Path, env: dict[str, str], code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", _AS_GPUBW_M + code],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        encoding="utf-8",
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _cache_path(tmp_path: Path, env: dict[str, str], kind: str) -> Path:
    code = f"from gpubw.runner import plugincache; print(plugincache.cache_path({kind!r}))"
    return Path(_python(tmp_path, env, code).strip())


#: writes an entry-point cache that passes every check but the metadata's, made from the
#: scan by EDIT (python statements on ``groups``)
_FORGE = """
from gpubw.runner import plugincache, registry
stamp = plugincache.path_stamp(folder_mtimes=False)
groups = registry._scan(plugincache.ENTRY_POINT_GROUPS)
tcs, writers = groups["gpubw.testcases"], groups["gpubw.writers"]
EDIT
data = {"header": plugincache.header(), "paths": stamp, "groups": groups}
plugincache.write_file(plugincache.cache_path("entry-points"), data)
"""


def _report(text: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(text)
    validate(doc)
    return doc


def _statuses(doc: dict[str, Any]) -> dict[str, str]:
    return {t["key"]: t["status"] for t in doc["testcases"]}


# == caches ================================================================================
_FORGERIES = {
    "zen": ('tcs.append(("zen", "this:X", "gpubw"))', ["-t", "zen", "-j"]),
    "unittest": (
        'groups["gpubw.testcases"] = [(n, "unittest.__main__:main" if n == "device_local_copy"'
        " else v, d) for n, v, d in tcs]",
        ["-t", "device_local_copy", "-j"],
    ),
    "json-is-csv": (
        'groups["gpubw.writers"] = [(n, "gpubw.writers.csv:CsvWriter" if n == "json" else v, d)'
        " for n, v, d in writers]",
        ["-t", "device_local_copy", "-j"],
    ),
}


@pytest.mark.parametrize("forgery", sorted(_FORGERIES))
def test_a_forged_entry_point_cache_loads_nothing_undeclared(tmp_path, forgery):
    """An entry-point cache (valid key and stamp) naming this:X, a built-in mapped to
    unittest.__main__, or json mapped to the CSV writer: nothing undeclared is imported; -j
    prints the JSON report (before: the Zen of Python in it; unittest's run and exit 0 with
    no report; CSV)."""
    env = _env(tmp_path)
    edit, argv = _FORGERIES[forgery]
    _python(tmp_path, env, _FORGE.replace("EDIT", edit))
    proc = _gpubw(tmp_path, env, *FAST, *argv)
    doc = _report(proc.stdout)
    assert "Zen of Python" not in proc.stdout + proc.stderr
    expected = {"zen": "Not Found"} if forgery == "zen" else {"device_local_copy": "Passed"}
    assert _statuses(doc) == expected
    assert proc.returncode == (1 if forgery == "zen" else 0), proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_forged_list_cache_prints_no_escape_sequence(tmp_path):
    """A list cache whose text holds ANSI escapes and a carriage return: -l prints them as
    \\u001b / \\u000d, never raw (the terminal is not recoloured or overwritten)."""
    env = _env(tmp_path)
    assert _gpubw(tmp_path, env, "-l").returncode == 0
    forge = (
        "from gpubw.runner import plugincache as p\n"
        "path = p.cache_path(); c = p.load_file(path)\n"
        "c['text'] = c['text'].replace('Index', '\\x1b[31mIndex\\r')\n"
        "p.write_file(path, c)\n"
    )
    _python(tmp_path, env, forge)
    proc = _gpubw(tmp_path, env, "-l")
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\r" not in proc.stdout
    assert "\\u001b[31mIndex\\u000d" in proc.stdout


def test_escapes_in_a_list_are_escaped_and_json_stays_valid():
    """printable: control characters (not newlines or tabs) become \\uXXXX escapes, which a
    JSON string may hold; printable text, accents included, is left as it is."""
    assert listing.json_escaped("a\tb\né") == "a\tb\né"
    assert listing.json_escaped("\x1b[2J\x00") == "\\u001b[2J\\u0000"
    assert json.loads(listing.json_escaped('"\x1b"')) == "\x1b"


def _make(kind: str, path: Path) -> None:
    """Put something that is not a trustworthy cache file at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero-link":
        path.symlink_to("/dev/zero")
    elif kind == "world-writable":
        path.write_bytes(b"GPUBWL1\n")
        path.chmod(0o666)
    elif kind == "huge":
        with open(path, "wb") as f:
            f.truncate(plugincache.MAX_CACHE_BYTES + 1)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link", "world-writable", "huge"])
def test_untrusted_cache_files_are_ignored_and_made_again(tmp_path, kind):
    """Both caches of the plugin loader a FIFO, a link to /dev/zero, writable by others or
    larger than their bound: -l and a run finish as usual (before: a hang that ignored
    SIGINT and SIGTERM, or a MemoryError traceback), one warning per file on stderr, and
    each is a regular file of gpubw's again after."""
    env = _env(tmp_path)
    paths = [_cache_path(tmp_path, env, k) for k in ("testcase-list", "entry-points")]
    for path in paths:
        _make(kind, path)
    listed = _gpubw(tmp_path, env, "-l")
    assert listed.returncode == 0 and "device_local_copy" in listed.stdout, listed.stderr
    warnings = [line for line in listed.stderr.splitlines() if "ignoring the cache file" in line]
    assert len(warnings) == 2, listed.stderr
    assert all(line.startswith("gpubw: warning: ") for line in warnings)
    for path in paths:
        st = path.lstat()
        assert stat.S_ISREG(st.st_mode) and not st.st_mode & 0o022, kind
    ran = _gpubw(tmp_path, env, *FAST, "-t", "device_local_copy", "-j")
    assert ran.returncode == 0 and _statuses(_report(ran.stdout)) == {"device_local_copy": "Passed"}
    assert ran.stderr == ""  # made again: trusted now


def test_a_cache_file_of_another_user_is_ignored(tmp_path, monkeypatch, capsys):
    """A cache file this user does not own is not read (one warning, once per file)."""
    path = tmp_path / "cache" / "entry.bin"
    path.parent.mkdir()
    path.write_bytes(b"GPUBWL1\n")
    assert infile.read_cache_file(str(path), 100) == b"GPUBWL1\n"
    monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 1)
    assert infile.read_cache_file(str(path), 100) is None
    assert infile.read_cache_file(str(path), 100) is None
    err = capsys.readouterr().err
    assert err.count("ignoring the cache file") == 1 and "owned by user" in err


@pytest.mark.parametrize(
    "files",
    [[(10**400, (0, 0))], [("x", (10**400,))], [("x", "ab")], "x", None],
)
def test_a_malformed_list_cache_is_a_miss(tmp_path, monkeypatch, files):
    """A list cache whose fields have the wrong types (an int of 10**400 for a path, a short
    tuple, a string): the list is made again (before: OverflowError / TypeError tracebacks)."""
    monkeypatch.delenv(plugincache.NO_CACHE_ENV, raising=False)
    monkeypatch.setenv("GPUBW_CACHE_DIR", str(tmp_path / "cache"))
    data = {
        "header": plugincache.header(),
        "paths": plugincache.path_stamp(),
        "files": files,
        "text": "forged\n",
        "json": "[]\n",
    }
    plugincache.write_file(plugincache.cache_path(), data)
    assert "device_local_copy" in listing.listing(False)


def _in_a_thread(call: Any, timeout: float = 20) -> list[Any]:
    """``call()``'s result on a daemon thread, which must finish within ``timeout``."""
    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.append(call()), daemon=True)
    worker.start()
    worker.join(timeout)
    assert not worker.is_alive(), "it hung"
    return out


@pytest.mark.parametrize("kind", ["fifo", "world-writable", "huge"])
def test_kernel_and_pattern_cache_entries_that_cannot_be_trusted(
    tmp_path, kind, capsys, monkeypatch
):
    """A kernel cache entry (a cubin or a verification pattern) that is a FIFO, writable by
    others or too large: not read (no hang), one warning, the pattern computed again."""
    from gpubw.kernels import patterns

    store = kcache.KernelCache(tmp_path / "kernels")
    path = store.path("k")
    if kind == "huge":
        path.parent.mkdir(parents=True)
        with open(path, "wb") as f:
            f.truncate(kcache.MAX_ENTRY_BYTES + 1)
    else:
        _make(kind, path)
    assert _in_a_thread(lambda: store.get("k")) == [None]
    assert "ignoring the cache file" in capsys.readouterr().err
    key = f"pattern-xorshift32-{7:08x}-{patterns.PATTERN_WORDS}w"
    monkeypatch.setenv("GPUBW_CACHE_DIR", str(tmp_path / "kernels"))
    _make(kind if kind != "huge" else "fifo", kcache.KernelCache().path(key))
    (data,) = _in_a_thread(lambda: patterns._pattern_bytes.__wrapped__(7))
    assert data == patterns._pattern(7)


def test_a_stored_kernel_entry_is_private_to_its_user(tmp_path):
    """Entries are written 0644 less the umask, whatever mode a file there had."""
    store = kcache.KernelCache(tmp_path)
    store.path("k").write_bytes(b"old")
    store.path("k").chmod(0o666)
    old = os.umask(0o002)
    try:
        store.put("k", b"payload")
    finally:
        os.umask(old)
    assert stat.S_IMODE(store.path("k").stat().st_mode) == 0o644
    assert store.get("k") == b"payload"


# == input files ===========================================================================
_INPUTS = {
    "--simulate": lambda f, tmp: [*FAST[2:], "--simulate", f, "-t", "0"],
    "--expect": lambda f, tmp: [*FAST, "-t", "0", "--expect", f],
    "check": lambda f, tmp: ["check", f],
    "expect-from": lambda f, tmp: ["expect-from", f],
    "compare": lambda f, tmp: ["compare", f, f],
    "plot": lambda f, tmp: ["plot", f, "-o", str(tmp / "x.png")],
}


@pytest.mark.parametrize("how", sorted(_INPUTS))
def test_an_input_file_that_is_a_fifo_is_a_usage_error(tmp_path, how):
    """A FIFO given as --simulate, --expect or to check / expect-from / compare / plot: one
    usage error naming it, exit 2, at once (before: a hang that ignored SIGINT/SIGTERM)."""
    if how == "plot":
        pytest.importorskip("matplotlib")
    fifo = tmp_path / "in.json"
    os.mkfifo(fifo)
    proc = _gpubw(tmp_path, _env(tmp_path), *_INPUTS[how](str(fifo), tmp_path))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(fifo) in lines[0] and "a FIFO" in lines[0], proc.stderr
    assert "not a regular file" in lines[0]


def test_a_device_as_a_system_file_is_a_usage_error(tmp_path):
    """--simulate /dev/zero: a usage error (before: read until a MemoryError)."""
    proc = _gpubw(tmp_path, _env(tmp_path), *FAST[2:], "-t", "0", "--simulate", "/dev/zero")
    assert proc.returncode == 2, proc.stderr
    assert "/dev/zero: it is a character device, not a regular file" in proc.stderr


def test_input_files_larger_than_the_bound_are_refused(tmp_path):
    path = tmp_path / "big.json"
    path.write_text("{}")
    with pytest.raises(infile.UsageError, match="larger than 1 bytes"):
        infile.read_input(path, "report", limit=1)
    assert infile.read_input(path, "report") == "{}"


@pytest.mark.parametrize("flag", ["--simulate", "--expect"])
def test_o_may_not_overwrite_the_runs_own_input(tmp_path, capsys, flag):
    """--simulate F -o F, --expect E -o E (or -o a link to it): a usage error before the run;
    the file is left as it was."""
    path = tmp_path / "input.json"
    if flag == "--simulate":
        path.write_text(json.dumps({"preset": "h200x1"}))
    else:
        path.write_text(json.dumps({"format": "gpubw-expect-v1", "rules": []}))
    before = path.read_text()
    link = tmp_path / "link.json"
    link.symlink_to(path)
    for target in (path, link):
        run = FAST[2:] if flag == "--simulate" else FAST
        assert cli.main([*run, "-t", "0", flag, str(path), "-o", str(target)]) == 2
        out, err = capsys.readouterr()
        assert out == "" and f"is the file {flag} reads" in err, err
    assert path.read_text() == before


# == plugins at import ======================================================================
@pytest.fixture
def hostile(tmp_path):
    return copy_fixtures(tmp_path / "site", GOOD, HOSTILE)


_AT_IMPORT = {
    "fixture_import_exits": "SystemExit: 0",
    "fixture_import_interrupts": "KeyboardInterrupt",
    "fixture_import_asserts": "AssertionError: fixture: assertion at import",
}


def test_plugins_that_exit_or_interrupt_at_import_are_listed_as_load_failures(tmp_path, hostile):
    """sys.exit(0), its own KeyboardInterrupt or a failed assert in plugin modules: -l lists
    each as not loaded, exit 0 (before: -l printed nothing, exit 0; or exit 130; or a
    traceback)."""
    listed = _gpubw(tmp_path, _env(tmp_path, *hostile), "-l")
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr == ""
    for key, why in _AT_IMPORT.items():
        assert f"\t{key} ({HOSTILE_DIST}): could not load " in listed.stdout
        assert why in listed.stdout


@pytest.mark.parametrize("key", sorted(_AT_IMPORT))
def test_a_plugin_that_exits_or_interrupts_at_import_is_an_error_of_its_own(tmp_path, hostile, key):
    """The same plugin selected for a run: its testcase is an Error naming what its import
    raised, the run goes on and writes the report, exit 1 (before: no report, exit 0 or 130,
    or a traceback)."""
    ran = _gpubw(tmp_path, _env(tmp_path, *hostile), *FAST, "-j", "-t", key, "fixture_good")
    assert ran.returncode == 1, ran.stderr
    doc = _report(ran.stdout)
    assert _statuses(doc) == {key: "Error", "fixture_good": "Passed"}
    assert _AT_IMPORT[key] in doc["testcases"][0]["message"]


def test_what_a_plugin_prints_at_import_is_captured(tmp_path, hostile):
    """print() and os.write(1) in a plugin module: -j on stdout is only the report, -l and
    -l -j only the list; the print is the output of the testcase's first result."""
    env = _env(tmp_path, *hostile)
    ran = _gpubw(tmp_path, env, *QUICK, "-b", "1,2", "-j", "-t", "fixture_import_prints")
    assert ran.returncode == 0, ran.stderr
    results = _report(ran.stdout)["testcases"]
    assert results[0]["output"] == "fixture: printed at import\nfixture: fd 1 at import\n"
    assert "output" not in results[1]
    listed = _gpubw(tmp_path, env, "-l", "-j")
    assert any(e["key"] == "fixture_import_prints" for e in json.loads(listed.stdout)["testcases"])
    text = _gpubw(tmp_path, env, "-l").stdout
    for printed in ("fixture: printed at import", "fixture: fd 1 at import"):
        assert printed not in listed.stdout + text


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("fixture_doc_not_str", "docstring is int 5, not a string"),
        ("fixture_description_int", "description() returned int 42, not a string"),
        ("fixture_fixed_size_str", "fixed_size must be True or False, got 'yes'"),
    ],
)
def test_a_description_or_fixed_size_of_the_wrong_type_is_a_load_failure(tmp_path, key, why):
    """A docstring that is not a string, a description() that returns an int, a fixed_size
    that is a string: a load failure naming what is wrong, and -l renders it (before: a
    traceback in -l; a fixed_size of "yes" was taken as True)."""
    with installed(tmp_path, HOSTILE):
        (entry,) = Registry.discover().select([key])
        assert isinstance(entry, Entry) and entry.failure is not None
        assert why in entry.failure.message
        assert f"{key} ({HOSTILE_DIST}): " in listing.render(Registry([entry]), False)


# == plugins at run time ====================================================================
def test_a_plugin_that_changes_the_folder_cannot_move_a_relative_o(tmp_path, hostile):
    """chdir in a plugin: a relative -o lands where it was given (before: in the plugin's
    folder), and the next testcase runs in gpubw's folder again."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = _env(tmp_path, *hostile, GPUBW_FIXTURE_CHDIR=str(elsewhere))
    ran = _gpubw(
        tmp_path, env, *FAST, "-j", "-o", "out.json", "-t", "fixture_chdir", "fixture_good"
    )
    assert ran.returncode == 0, ran.stderr
    assert _statuses(_report((tmp_path / "out.json").read_text()))["fixture_chdir"] == "Passed"
    assert not list(elsewhere.iterdir())


def test_a_plugin_that_sets_the_umask_cannot_change_the_reports_mode(tmp_path, hostile):
    """umask(0o777) in a plugin: a new -o file still gets 0666 less gpubw's umask (022: 0644;
    before: mode 000)."""
    ran = _gpubw(
        tmp_path, _env(tmp_path, *hostile), *FAST, "-j", "-o", "out.json", "-t", "fixture_umask"
    )
    assert ran.returncode == 0, ran.stderr
    assert stat.S_IMODE((tmp_path / "out.json").stat().st_mode) == 0o644


def test_a_forked_child_never_runs_on_into_gpubw(tmp_path, hostile):
    """A plugin forks and its child returns into gpubw: the child ends there (status 0), only
    the parent runs the next testcase and writes the report, with its own result (before:
    the child ran the rest of the run and wrote the report too)."""
    log = tmp_path / "log"
    env = _env(tmp_path, *hostile, GPUBW_FIXTURE_LOG=str(log))
    argv = [*FAST, "-j", "-o", "out.json", "-t", "fixture_fork", "fixture_pid"]
    ran = _gpubw(tmp_path, env, *argv)
    assert ran.returncode == 0, ran.stderr
    doc = _report((tmp_path / "out.json").read_text())
    assert _statuses(doc) == {"fixture_fork": "Passed", "fixture_pid": "Passed"}
    assert doc["testcases"][0]["matrices"][0]["values"] == [[2.0]]  # the parent's result
    events = log.read_text().split()
    assert events.count("pid") == 1 and events[events.index("child-status") + 1] == "0"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".gpubw-")]


def test_a_plugins_late_thread_cannot_print_into_the_report(tmp_path, hostile):
    """A daemon thread that prints (print and fd 1) for ever, started by a testcase: -j on
    standard output is the report alone, while later testcases run and as the run ends."""
    env = _env(tmp_path, *hostile, GPUBW_FIXTURE_SLOW_S="0.3")
    argv = [*FAST, "-j", "-t", "fixture_late_thread", "fixture_slow", "fixture_good"]
    ran = _gpubw(tmp_path, env, *argv)
    assert ran.returncode == 0, ran.stderr
    doc = _report(ran.stdout)
    assert set(_statuses(doc).values()) == {"Passed"}
    assert "late thread" in doc["testcases"][0]["output"]  # while it ran: its output


def _marked_run(tmp_path: Path, env: dict[str, str], *argv: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpubw", *argv],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        encoding="utf-8",
    )
    marker = Path(env["GPUBW_FIXTURE_MARKER"])
    deadline = time.monotonic() + TIMEOUT
    while not marker.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    return proc


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_plugins_own_signal_handlers_do_not_outlive_it(tmp_path, hostile, signum):
    """A testcase that set SIGINT to SIG_IGN and SIGTERM to a no-op: the next testcase is still
    interrupted (exit 128 + n, an interrupted report; before: the run could not be stopped)."""
    marker = str(tmp_path / "marker")
    env = _env(tmp_path, *hostile, GPUBW_FIXTURE_MARKER=marker, GPUBW_FIXTURE_SLOW_S="20")
    out = tmp_path / "out.json"
    argv = [*FAST, "-j", "-o", str(out), "-t", "fixture_signal_handlers", "fixture_slow"]
    proc = _marked_run(tmp_path, env, *argv)
    proc.send_signal(signum)
    try:
        _, err = proc.communicate(timeout=TIMEOUT)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, err
    doc = _report(out.read_text())
    assert doc["interrupted"] is True
    assert _statuses(doc) == {"fixture_signal_handlers": "Passed", "fixture_slow": "Interrupted"}


def test_a_plugins_forgotten_alarm_cannot_kill_the_run(tmp_path, hostile):
    """signal.alarm(1) left behind by a testcase, the next one taking 2 s: the run ends as
    usual with its report (before: killed by SIGALRM, no report)."""
    env = _env(tmp_path, *hostile, GPUBW_FIXTURE_SLOW_S="2")
    ran = _gpubw(tmp_path, env, *FAST, "-j", "-t", "fixture_alarm", "fixture_slow")
    assert ran.returncode == 0, ran.stderr
    assert set(_statuses(_report(ran.stdout)).values()) == {"Passed"}


# == the pieces ===========================================================================
def test_kept_puts_the_process_state_back(tmp_path, capfd):
    """procstate.kept: folder, umask, fd 2 (closed or replaced), sys.stderr, SIGINT's handler,
    the signal mask and an alarm are as they were after the block."""
    here, mask = os.getcwd(), signal.pthread_sigmask(signal.SIG_BLOCK, [])
    handler = signal.getsignal(signal.SIGINT)
    umask = os.umask(0o022)
    try:
        with procstate.kept():
            os.chdir(tmp_path)
            os.umask(0o777)
            os.close(2)
            sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
            signal.alarm(5)
        assert os.getcwd() == here and os.umask(0o022) == 0o022
        assert signal.getsignal(signal.SIGINT) is handler
        assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == mask
        assert signal.alarm(0) == 0
        os.write(2, b"fd 2 is back\n")
        print("sys.stderr is back", file=sys.stderr, flush=True)
    finally:
        os.umask(umask)
    assert capfd.readouterr().err == "fd 2 is back\nsys.stderr is back\n"


def test_the_held_stdout_takes_only_the_report(capfd):
    """hold_stdout: print and fd 1 lead nowhere, report_stdout reaches the real standard
    output, release puts everything back."""
    capture.hold_stdout()
    try:
        print("late print")
        os.write(1, b"late fd 1\n")
        capture.report_stdout().write("the report\n")
        capture.report_stdout().flush()
    finally:
        capture.release_stdout()
    print("after")
    assert capfd.readouterr().out == "the report\nafter\n"


#: a process that holds standard output as the gpubw command does, while 8 daemon threads
#: print long lines into the held sink, and ends
_LATE_PRINTERS = """
import threading, time
from gpubw.runner.capture import hold_stdout
hold_stdout(keep=True)
def spam():
    while True:
        print("x" * 65536)
for _ in range(8):
    threading.Thread(target=spam, daemon=True).start()
time.sleep(0.05)
"""


def test_threads_printing_into_the_held_stdout_cannot_abort_the_exit() -> None:
    """The held sys.stdout has no buffer lock that a late thread could hold as the
    interpreter ends (CPython then aborts: "could not acquire lock for
    <_io.BufferedWriter name='/dev/null'> at interpreter shutdown"); five such exits all
    end with 0. With a buffered sink about half of them aborted."""
    capture.hold_stdout()
    try:
        assert not isinstance(sys.stdout.buffer, io.BufferedIOBase)
        print("still a text stream")
        sys.stdout.buffer.write(b"and its bytes\n")
    finally:
        capture.release_stdout()
    for _ in range(5):
        ran = subprocess.run(
            [sys.executable, "-c", _LATE_PRINTERS],
            capture_output=True,
            encoding="utf-8",
            timeout=120,
        )
        assert (ran.returncode, ran.stderr) == (0, "")


def test_a_plugin_lowering_the_recursion_limit_keeps_the_report(tmp_path):
    """A testcase whose run() lowers the recursion limit to 50: its result cannot be checked
    (that testcase is Error, naming the RecursionError: its own doing), and the limit is put
    back after it, so the report is written whole, exit 1 (issue 33 item 12; before: writing
    the report hit a RecursionError too and the report was lost)."""
    dist = tmp_path / "low"
    (dist / "gpubw_fixture_low-0.1.dist-info").mkdir(parents=True)
    (dist / "gpubw_fixture_low-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: gpubw-fixture-low\nVersion: 0.1\n"
    )
    (dist / "gpubw_fixture_low-0.1.dist-info" / "entry_points.txt").write_text(
        "[gpubw.testcases]\nfixture_low_recursion = gpubw_fixture_low:Low\n"
    )
    (dist / "gpubw_fixture_low.py").write_text(
        "import sys\n"
        "from gpubw import Matrix, Testcase\n"
        "class Low(Testcase):\n"
        '    """Lowers the recursion limit."""\n'
        "    def run(self, size, loops):\n"
        "        sys.setrecursionlimit(50)\n"
        '        return [Matrix(key="fixture_low_recursion", description="t", unit="GB/s", '
        'row_labels=["0"], column_labels=["0"], values=[[1.0]])]\n'
    )
    out = tmp_path / "r.json"
    argv = ["--simulate", "h200x1", "-t", "fixture_low_recursion", "-b", "1MiB", "-i", "1"]
    ran = subprocess.run(
        [sys.executable, "-m", "gpubw", *argv, "-j", "-o", str(out)],
        capture_output=True,
        encoding="utf-8",
        env=subprocess_env([dist]),
        timeout=120,
    )
    assert ran.returncode == 1 and "writer" not in ran.stderr, ran.stderr
    doc = json.loads(out.read_text())
    validate(doc)
    (t,) = doc["testcases"]
    assert t["status"] == "Error" and "RecursionError" in t["message"]
