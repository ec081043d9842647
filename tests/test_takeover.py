"""Caches and input files cannot take the run over (issue 24 item 2).

docs/failures.md, "Caches, input files and plugins that try to take the run over": a cache
file is data, never authority; an input file is read only when it is a regular file. Most
tests run a real ``python -m gpubw`` with a timeout, so that what once hung fails instead.
"""

from __future__ import annotations

import json
import os
import resource
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from _plugin_fixtures import subprocess_env
from gpubw.cli import listing
from gpubw.kernels import cache as kcache
from gpubw.model import infile
from gpubw.model.report_io import validate
from gpubw.runner import plugincache

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
        text=True,
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
        text=True,
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
    assert listing.printable("a\tb\né") == "a\tb\né"
    assert listing.printable("\x1b[2J\x00") == "\\u001b[2J\\u0000"
    assert json.loads(listing.printable('"\x1b"')) == "\x1b"


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
