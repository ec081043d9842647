"""Invariants for any input, continued (issue 24): the MPI, cache, standard-stream and API
classes. Each is bounded in time (few examples, 1 MiB buffers, one sample) and checks what
every outcome must keep: a documented exit code or exception, a schema-valid report, no
traceback, every rank ending in step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import gpubw
from _ranked import ranked_report
from gpubw.model.errors import GpubwError
from gpubw.model.options import RunOptions
from gpubw.model.report_check import validate
from gpubw.model.report_io import report_to_dict
from gpubw.runner.registry import Registry
from gpubw.testcases import MULTINODE

#: the exit codes gpubw documents, and 141 for a standard output closed by its reader
EXIT_CODES = {0, 1, 2, 3, 130, 143}
EXIT_CLOSED_STDOUT = 141
_SETTINGS: dict[str, Any] = {
    "deadline": None,
    "database": None,
    "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
}
SMALL = RunOptions(samples=1, loops=2, buffer_sizes=(1 << 20,))


def _valid(report: gpubw.Report) -> dict[str, Any]:
    doc = report_to_dict(report)
    validate(json.loads(json.dumps(doc)))
    assert doc["exit_code"] in EXIT_CODES
    return doc


# -- MPI: a failing rank, in-process simulated ranks -------------------------------------------
_MN_KEYS = [
    "multinode_device_to_device_memcpy_read_ce",
    "multinode_device_to_device_memcpy_write_sm",
    "multinode_device_to_device_bidirectional_memcpy_read_ce",
    "multinode_bisect_write_ce",
]
assert set(_MN_KEYS) <= {key for key, _ in MULTINODE}


@settings(max_examples=6, **_SETTINGS)
@given(
    ranks=st.integers(min_value=2, max_value=3),
    keys=st.lists(st.sampled_from(_MN_KEYS), min_size=1, max_size=2, unique=True),
    fault=st.none()
    | st.tuples(st.integers(0, 2), st.integers(0, 1), st.sampled_from(["before", "after"])),
)
@example(ranks=2, keys=[_MN_KEYS[0]], fault=(1, 0, "before"))
@example(ranks=2, keys=_MN_KEYS[:2], fault=(0, 0, "before"))  # once: the 2nd testcase lost
def test_a_failing_rank_never_leaves_the_others_behind(
    ranks: int, keys: list[str], fault: tuple[int, int, str] | None
) -> None:
    """One rank's testcase raising (before or after its collectives) at a random place: the
    run ends well inside the world timeout, rank 0's report is valid, that testcase is an
    Error on it and the others that ran are unaffected; when the ranks fell out of step and
    the run stopped, a warning says how many steps did not run."""
    registry = Registry.discover()
    failing: tuple[int, str, str] | None = None
    if fault is not None and fault[0] < ranks and fault[1] < len(keys):
        failing = (fault[0], keys[fault[1]], fault[2])
    with pytest.MonkeyPatch.context() as patch:
        if failing is not None:
            rank, key, when = failing
            cls = registry.by_key(key).cls
            original = cls.run

            def run(self: Any, size: int, loops: int) -> Any:
                if self.system.world.rank == rank and self.key == key and when == "before":
                    raise RuntimeError(f"injected on rank {rank}")
                result = original(self, size, loops)
                if self.system.world.rank == rank and self.key == key:
                    raise RuntimeError(f"injected on rank {rank}")
                return result

            patch.setattr(cls, "run", run)
        started = time.monotonic()
        report = ranked_report("h200x2", [ranks], SMALL, testcases=keys, timeout_s=30.0)
    assert time.monotonic() - started < 25  # never the world timeout (30 s)
    doc = _valid(report)
    statuses = {t["key"]: t["status"] for t in doc["testcases"]}
    for key in keys:
        if failing is not None and key == failing[1]:
            assert statuses[key] == "Error", doc["testcases"]
        elif key in statuses:
            assert statuses[key] in ("Passed", "Waived"), doc["testcases"]
    ran = len(doc["testcases"])
    if ran < len(keys):  # the ranks broke: what did not run is said, never silently lost
        (said,) = [w for w in doc["warnings"] if "did not run" in w]
        assert f"{len(keys) - ran} selected step(s) of this run did not run" in said


# -- the list cache: any damage to its files ---------------------------------------------------
def _list(env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpubw", "-l"],
        env=env,
        cwd=cwd,
        capture_output=True,
        encoding="utf-8",
        timeout=120,
    )


@pytest.fixture(scope="module")
def listed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], Path, str]:
    """An environment with its own cache folder, and what ``-l`` prints with no cache."""
    folder = tmp_path_factory.mktemp("listcache")
    env = {**os.environ, "GPUBW_CACHE_DIR": str(folder / "cache")}
    env.pop("GPUBW_NO_LIST_CACHE", None)
    fresh = _list({**env, "GPUBW_NO_LIST_CACHE": "1"}, folder)
    assert fresh.returncode == 0, fresh.stderr
    return env, folder, fresh.stdout


@settings(max_examples=8, **_SETTINGS)
@given(
    damage=st.sampled_from(["truncate", "flip", "replace", "append"]),
    where=st.floats(min_value=0.0, max_value=1.0),
    junk=st.binary(min_size=1, max_size=64),
)
def test_any_damage_to_the_cache_files_lists_the_same(
    listed: tuple[dict[str, str], Path, str], damage: str, where: float, junk: bytes
) -> None:
    """Truncated, flipped, replaced or appended-to cache files: ``-l`` prints what it prints
    with no cache at all, exit 0, nothing on stderr (the damage is a miss, never a crash)."""
    env, folder, fresh = listed
    assert _list(env, folder).returncode == 0  # (re)writes the caches
    files = sorted((folder / "cache").glob("*.bin"))
    assert files, "no cache file was written"
    for path in files:
        data = path.read_bytes()
        at = int(where * len(data))
        if damage == "truncate":
            data = data[:at]
        elif damage == "flip":
            data = data[:at] + bytes([data[at % len(data)] ^ 0xFF]) + data[at + 1 :]
        elif damage == "replace":
            data = junk
        else:
            data = data + junk
        path.write_bytes(data)
    proc = _list(env, folder)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout == fresh


# -- standard streams: closed, full, or read by nobody ----------------------------------------
_COMMANDS = [
    ["--simulate", "h200x1", "-t", "0", "-b", "1MiB", "-i", "1"],
    ["--simulate", "h200x1", "-t", "0", "-b", "1MiB", "-i", "1", "-j"],
    ["-l"],
    ["--simulate", "h200x1", "-t", "nope", "-b", "1MiB", "-i", "1"],
    ["--bogus"],
]
_STREAMS = ["pipe", "closed", "full", "null", "reader-gone"]


def _stream(kind: str) -> Any:
    if kind == "closed":
        return subprocess.DEVNULL  # replaced below: descriptor closed in the child
    if kind == "full":
        return open("/dev/full", "w", encoding="utf-8")  # closed by the caller
    if kind == "null":
        return subprocess.DEVNULL
    return subprocess.PIPE


@settings(max_examples=8, **_SETTINGS)
@given(
    argv=st.sampled_from(_COMMANDS),
    out=st.sampled_from(_STREAMS),
    err=st.sampled_from(["pipe", "closed", "full", "null"]),
)
@example(argv=_COMMANDS[0], out="reader-gone", err="pipe")
@example(argv=_COMMANDS[3], out="pipe", err="full")
def test_any_standard_streams_end_with_a_documented_code(
    argv: list[str], out: str, err: str
) -> None:
    """stdout and stderr closed, on /dev/full, on /dev/null or a pipe whose reader is gone:
    a documented exit code (141: stdout's reader went away), no traceback on a readable
    stderr, and never a hang."""
    closed = [fd for fd, kind in ((1, out), (2, err)) if kind == "closed"]

    def close_them() -> None:
        for fd in closed:
            os.close(fd)

    opened = [_stream(out), _stream(err)]
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpubw", *argv],
            stdout=opened[0],
            stderr=opened[1],
            preexec_fn=close_them,
        )
        if out == "reader-gone":
            assert proc.stdout is not None
            proc.stdout.close()
        try:
            _, stderr = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    finally:
        for f in opened:
            if hasattr(f, "close"):
                f.close()
    allowed = EXIT_CODES | ({EXIT_CLOSED_STDOUT} if out == "reader-gone" else set())
    assert proc.returncode in allowed, (proc.returncode, stderr)
    if stderr is not None:
        assert b"Traceback" not in stderr, stderr.decode("utf-8", "replace")


# -- the Python API: any arguments -----------------------------------------------------------
_ABSENT = object()
_API: dict[str, list[Any]] = {
    "testcases": [
        ["host_to_device_memcpy_ce"],
        [0],
        ["nope"],
        [],
        "device_local_copy",
        [10**30],
        [-1],
        [None],
        ["device_local_copy", 0],
    ],
    "sizes": ["1MiB", ["1MiB", "2MiB"], 0, -5, "abc", 1 << 20, [], "1e400", float("nan")],
    "samples": [_ABSENT, 1, 0, -1, "x", 10**20, True],
    "loops": [_ABSENT, 1, 0, "2", 2.5],
    "verify": [_ABSENT, True, "no"],
    "simulate": ["h200x2", "nosuch", 5, "h200x1"],
}


@settings(max_examples=25, **_SETTINGS)
@given(chosen=st.fixed_dictionaries({k: st.sampled_from(v) for k, v in _API.items()}))
@example(chosen=dict(zip(_API, ([0], "1MiB", 1, 1, True, "h200x2"))))
def test_any_api_arguments_give_a_report_or_one_gpubw_error(chosen: dict[str, Any]) -> None:
    """``gpubw.run`` with any mix of arguments: a valid Report with a documented exit code,
    or a GpubwError (a UsageError naming the argument); nothing else escapes, and no thread
    of the run is left behind."""
    kwargs = {k: v for k, v in chosen.items() if v is not _ABSENT}
    threads = set(threading.enumerate())
    try:
        report = gpubw.run(**kwargs)
    except GpubwError as exc:
        assert str(exc).strip()
    else:
        _valid(report)
    left = [t.name for t in set(threading.enumerate()) - threads if t.is_alive()]
    assert left == []
