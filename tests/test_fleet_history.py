"""gpubw fleet --db and --since: the history file (fleet/history.py), its opening under the
cache files' rules, the GPUs' trends (fleet/trends.py) and the command around them."""

from __future__ import annotations

import datetime
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from _cli import run_cli, usage_error
from _fleet import node_copy, slow_host_link, small_suite
from gpubw.cli.argtypes import since
from gpubw.fleet.history import SCHEMA_VERSION, open_history
from gpubw.fleet.reading import read_tables
from gpubw.fleet.trends import MIN_EARLIER
from gpubw.model import schemas

NOW = datetime.datetime.now(datetime.timezone.utc)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One simulated h200x2 report of the default suite (small buffers), as a dict."""
    return small_suite(tmp_path_factory.mktemp("base") / "r.json")


def write(
    folder: Path, doc: dict[str, Any], node: str, seed: int, hours_ago: float, **kw: Any
) -> Path:
    """``doc`` as node ``node``'s report started ``hours_ago`` hours before now."""
    out = node_copy(doc, node, seed, **kw)
    out["started"] = (NOW - datetime.timedelta(hours=hours_ago)).isoformat()
    uuids = {d["ordinal"]: f"GPU-{node}-{d['ordinal']}" for d in out["devices"]}
    for d in out["devices"]:
        d["uuid"] = uuids[d["ordinal"]]  # a node keeps its GPUs from report to report
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{node}-{seed}.json"
    path.write_text(json.dumps(out))
    return path


def fleet(
    folder: Path, doc: dict[str, Any], hours_ago: float, seed: int, nodes: int = 6, first: int = 0
) -> list[Path]:
    """Nodes ``n<first>``... of a fleet, healthy, started ``hours_ago`` hours before now."""
    return [write(folder, doc, f"n{i}", seed + i, hours_ago) for i in range(first, nodes)]


def counts(db: Path) -> tuple[int, int]:
    conn = sqlite3.connect(db)
    try:
        return tuple(
            conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("reports", "cells")
        )  # type: ignore[return-value]
    finally:
        conn.close()


# -- the file ---------------------------------------------------------------------------------


def test_a_report_added_twice_is_kept_once(tmp_path: Path, base: dict[str, Any]) -> None:
    """Adding the same report again (by its bytes' digest) adds nothing; a new one adds."""
    paths = fleet(tmp_path / "r", base, 1.0, 10, nodes=3)
    db = tmp_path / "h.db"
    with open_history(str(db), create=True) as h:
        assert h.add_many(read_tables(p) for p in paths) == (3, 0)
    first = counts(db)
    assert first[0] == 3 and first[1] > 0
    with open_history(str(db), create=False) as h:
        assert h.add_many(read_tables(p) for p in paths) == (0, 3)
        assert h.add(*read_tables(write(tmp_path / "r", base, "n9", 99, 0.5)))
    assert counts(db) == (4, first[1] + first[1] // 3)


def test_tables_read_back_are_the_tables_added(tmp_path: Path, base: dict[str, Any]) -> None:
    """A report read back from the file is the report read from its file: key, node,
    devices, slots and values (the GPU identity, not NVLink facts: those are in the slots)."""
    path = write(tmp_path, base, "n0", 3, 2.0)
    key, tables = read_tables(path)
    db = str(tmp_path / "h.db")
    with open_history(db, create=True) as h:
        h.add(key, tables)
    with open_history(db, create=False) as h:
        ((back_key, back),) = list(h.latest())
    assert back_key == key
    (table,), (again,) = tables, back
    assert (again.node, again.layout, again.values) == (table.node, table.layout, table.values)
    for ordinal, dev in table.devices.items():
        assert (again.devices[ordinal].uuid, again.devices[ordinal].pci_bus_id) == (
            dev.uuid,
            dev.pci_bus_id,
        )


def test_an_mpi_reports_hosts_and_pairs_across_them_read_back(
    tmp_path: Path, base: dict[str, Any]
) -> None:
    """An MPI run's report (hosts a and b, pairs across them): each host's table comes
    back with its figures, and the multinode pairs with the other end's host."""
    from test_fleet_reading import _mpi

    single = {**base, "testcases": [t for t in base["testcases"] if "multinode" not in t["key"]]}
    path = tmp_path / "mpi.json"
    path.write_text(json.dumps(_mpi(single)))
    key, tables = read_tables(path)
    db = str(tmp_path / "h.db")
    with open_history(db, create=True) as h:
        h.add(key, tables)
        ((_, back),) = list(h.latest())
    assert len(tables) == 2 and any(t.peers for t in tables)
    for table, again in zip(sorted(tables, key=lambda t: t.node), back, strict=True):
        assert (again.node, again.layout, again.values) == (table.node, table.layout, table.values)
        assert again.peers == table.peers


def test_an_ingest_that_fails_keeps_nothing(
    tmp_path: Path, base: dict[str, Any], capsys: Any
) -> None:
    """A named file that is no report stops the command (exit 2) and the history keeps none
    of the reports read before it: one transaction."""
    paths = fleet(tmp_path / "r", base, 1.0, 20, nodes=3)
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    db = tmp_path / "h.db"
    line = usage_error(capsys, "fleet", *map(str, paths), str(bad), "--db", str(db))
    assert "bad.json" in line
    assert counts(db) == (0, 0)


# -- opening: the cache files' rules, the schema ---------------------------------------------


def test_the_file_is_made_private_and_schema_marked(tmp_path: Path) -> None:
    """A new history file is mode 0600 and says its schema version and that it is gpubw's."""
    db = tmp_path / "h.db"
    open_history(str(db), create=True).close()
    assert os.stat(db).st_mode & 0o777 == 0o600
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()


def _newer(db: Path) -> None:
    open_history(str(db), create=True).close()
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()


def _foreign(db: Path) -> None:
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()


def _link(db: Path) -> None:
    target = db.with_name("target.db")
    open_history(str(target), create=True).close()
    db.symlink_to(target)


def _shared(db: Path) -> None:
    open_history(str(db), create=True).close()
    db.chmod(0o666)


def _journal_link(db: Path) -> None:
    open_history(str(db), create=True).close()
    (tmp := db.with_name("elsewhere")).write_bytes(b"")
    Path(str(db) + "-journal").symlink_to(tmp)


REFUSED = {
    "newer schema": (
        _newer,
        "written by a newer gpubw (schema version 2; this gpubw reads up to 1)",
    ),
    "another program's database": (_foreign, "an SQLite database of another program"),
    "no database": (
        lambda db: db.write_bytes(b"not sqlite at all" * 100),
        "not an SQLite database",
    ),
    "symbolic link": (_link, "it is a symbolic link"),
    "writable by others": (_shared, "others may write to it (mode 0666)"),
    "FIFO": (lambda db: os.mkfifo(db), "it is a FIFO (named pipe), not a regular file"),
    "folder": (lambda db: db.mkdir(), "Is a directory"),
    "journal link": (_journal_link, "-journal is a symbolic link"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_file_gpubw_may_not_use_is_refused_in_one_line(
    tmp_path: Path, capsys: Any, case: str
) -> None:
    """Each is exit 2 with one line naming the file and why, with or without PATH."""
    make, words = REFUSED[case]
    db = tmp_path / "h.db"
    make(db)
    line = usage_error(capsys, "fleet", "--db", str(db), "--since", "30d")
    assert f"history database {db}" in line and words in line, line


def test_another_users_file_is_refused(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A history file owned by another user is refused (as that user's cache file would be)."""
    db = tmp_path / "h.db"
    open_history(str(db), create=True).close()
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(db).st_uid + 1)
    line = usage_error(capsys, "fleet", "--db", str(db))
    assert "not by this user" in line, line


def test_a_missing_file_without_reports_is_refused_and_not_made(
    tmp_path: Path, capsys: Any
) -> None:
    """``gpubw fleet --db F`` with no PATH reads F: absent, it is an error and stays absent
    (also when a PATH given is none); present but without a report of the window, also one
    line."""
    db = tmp_path / "h.db"
    assert "no such file" in usage_error(capsys, "fleet", "--db", str(db))
    assert not db.exists()
    line = usage_error(capsys, "fleet", str(tmp_path / "nope"), "--db", str(db))
    assert "no such file or folder" in line and not db.exists()
    open_history(str(db), create=True).close()
    assert "holds no report" in usage_error(capsys, "fleet", "--db", str(db), "--since", "2w")


@pytest.mark.parametrize("text", ["3x", "30", "0d", "1.5d", "-2w", "522w", "d"])
def test_a_bad_since_is_one_line(tmp_path: Path, capsys: Any, text: str) -> None:
    """--since takes a whole number of hours, days or weeks, up to ten years."""
    line = usage_error(capsys, "fleet", "--db", str(tmp_path / "h.db"), f"--since={text}")
    assert repr(text) in line and "--since" in line, line


def test_since_reads_hours_days_and_weeks() -> None:
    assert [since(t) for t in ("12h", "30d", "2w", "1D")] == [
        43200.0,
        2592000.0,
        1209600.0,
        86400.0,
    ]


def test_since_needs_db_and_something_is_needed(tmp_path: Path, capsys: Any) -> None:
    assert "--since needs --db" in usage_error(capsys, "fleet", str(tmp_path), "--since", "1w")
    assert "or --db FILE" in usage_error(capsys, "fleet")


# -- trends ---------------------------------------------------------------------------------------


def _history(tmp_path: Path, base: dict[str, Any], past: float) -> Path:
    """Three past fleets (``past`` hours ago and after) in which n0's GPU 0 host link was
    20 % faster than the others', added to a history; then today's fleet, where it is as
    fast as the rest: within the fleet, but fallen against its own past."""
    db = tmp_path / "h.db"
    for k in range(3):
        folder = tmp_path / f"past{k}"
        fleet(folder, base, past - k, 100 * k + 1, first=1)
        write(folder, base, "n0", 100 * k, past - k, fault=slow_host_link(0, 1.2))
        assert run_cli_quiet("fleet", str(folder), "--db", str(db)) in (0, 3)
    fleet(tmp_path / "today", base, 0.5, 500)
    return db


def run_cli_quiet(*argv: str) -> int:
    """``gpubw ARGV -o /dev/null``: the exit code."""
    from gpubw.cli import command

    return command.main([*argv, "-o", os.devnull])


def test_a_gpu_that_fell_against_its_past_is_flagged_within_the_fleet(
    tmp_path: Path, base: dict[str, Any], capsys: Any
) -> None:
    """Today n0's GPU 0 host link is the fleet's (no fleet finding), but 1/1.2 of its own
    median over the window: exit 3, and the JSON names that GPU and figure; the other GPUs
    have a trend near 1 and did not fall."""
    db = _history(tmp_path, base, past=72.0)
    capsys.readouterr()
    code, out, err = run_cli(
        capsys,
        "fleet",
        str(tmp_path / "today"),
        "--db",
        str(db),
        "--since",
        "30d",
        "--format",
        "json",
    )
    assert code == 3, err
    doc = json.loads(out)
    assert schemas.errors(schemas.FLEET, doc, closed=True) == []
    assert doc["findings"] == []
    fell = [g for g in doc["history"]["gpus"] if g["fell"]]
    assert [(g["gpu"]["node"], g["gpu"]["index"]) for g in fell] == [("n0", 0)]
    worst = fell[0]["worst"]
    assert worst["link"] == "host" and worst["earlier"] == 3
    assert worst["ratio"] == pytest.approx(1 / 1.2, rel=0.05)
    others = [g for g in doc["history"]["gpus"] if not g["fell"]]
    assert others and all(g["trend"] == pytest.approx(1.0, abs=0.05) for g in others)


def test_the_window_leaves_older_reports_out(
    tmp_path: Path, base: dict[str, Any], capsys: Any
) -> None:
    """The same history judged with --since 12h: the fast past (72 h ago) is outside, no GPU
    has a trend yet, nothing fell: exit 0; the text says so."""
    db = _history(tmp_path, base, past=72.0)
    capsys.readouterr()
    code, out, _ = run_cli(
        capsys, "fleet", str(tmp_path / "today"), "--db", str(db), "--since", "12h"
    )
    assert code == 0, out
    assert "history: 12 GPU(s), 0 fell" in out and "no trend yet" in out


def test_the_history_alone_is_judged_as_its_newest_reports(
    tmp_path: Path, base: dict[str, Any], capsys: Any
) -> None:
    """``gpubw fleet --db F`` without PATH judges each node's newest report in the file:
    the same nodes and findings as those reports' files."""
    db = _history(tmp_path, base, past=72.0)
    run_cli(capsys, "fleet", str(tmp_path / "today"), "--db", str(db), "-o", os.devnull)
    code_db, out_db, _ = run_cli(capsys, "fleet", "--db", str(db), "--format", "json")
    code_files, out_files, _ = run_cli(capsys, "fleet", str(tmp_path / "today"), "--format", "json")
    by_db, by_files = json.loads(out_db), json.loads(out_files)
    assert code_db == code_files
    assert by_db["nodes"] == by_files["nodes"] == 6
    assert by_db["findings"] == by_files["findings"]
    assert "history" not in by_db  # no --since: no trends


def test_min_earlier_is_what_the_trend_needs(tmp_path: Path, base: dict[str, Any]) -> None:
    """A figure with MIN_EARLIER earlier points has a trend; with one fewer, none."""
    from gpubw.fleet.trends import change

    db = str(tmp_path / "h.db")
    with open_history(db, create=True) as h:
        h.add_many(
            read_tables(write(tmp_path, base, "n0", k, 10.0 - k)) for k in range(MIN_EARLIER + 1)
        )
        series = list(h.series())
    assert series and all(len(s.points) == MIN_EARLIER + 1 for s in series)
    assert all(change(s) is not None for s in series)
    shorter = [type(s)(s.gpu, s.slot, s.peer, s.points[1:]) for s in series]
    assert all(change(s) is None for s in shorter)


def test_a_tampered_or_locked_file_is_one_line_and_exit_1(
    tmp_path: Path, base: dict[str, Any], capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cell that is text instead of a number (the file's values are checked as they are
    read), and a file another process holds locked past the wait: exit 1, one line naming
    the file, no traceback."""
    fleet(tmp_path / "r", base, 1.0, 40)
    db = tmp_path / "h.db"
    assert run_cli_quiet("fleet", str(tmp_path / "r"), "--db", str(db)) == 0
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    monkeypatch.setattr("gpubw.fleet.history.LOCK_WAIT_S", 0.1)
    code, out, err = run_cli(capsys, "fleet", str(tmp_path / "r"), "--db", str(db))
    assert (code, out) == (
        1,
        "",
    ) and err == f"gpubw: error: history database {db}: database is locked\n"
    conn.execute("UPDATE cells SET value = 'abc' WHERE rowid = 1")
    conn.execute("COMMIT")
    conn.close()
    code, out, err = run_cli(capsys, "fleet", "--db", str(db))
    assert (code, out) == (1, "")
    assert err == f"gpubw: error: history database {db}: a cell is 'abc', not a finite number\n"
