"""The fleet's history (``gpubw fleet --db FILE``): every report's cells kept in one SQLite
file (the standard library's :mod:`sqlite3`), keyed by node, GPU UUID and time.

**Tables** (schema version :data:`SCHEMA_VERSION`, kept in ``PRAGMA user_version``; the
file is marked as gpubw's by ``PRAGMA application_id``):

* ``reports``: one row per report, identified by the SHA-256 of its bytes (``digest``,
  unique: adding the same report twice is a no-op), with its node, start time (seconds
  since the epoch, UTC), source path and the options that must match to compare
  (:class:`~gpubw.fleet.cells.Comparable`).
* ``gpus``: one row per GPU as the reports name it: node, ordinal, UUID, PCI bus id and
  model (a GPU whose NVLink links changed stays one GPU: the link type is the slot's).
* ``slots``: where a figure sits, the same on every node of a suite
  (:class:`~gpubw.fleet.reading.Slot`: testcase, matrix, kind, unit, row, column, link,
  buffer size).
* ``cells``: one row per figure: report, GPU (the row's), slot, the pair's other GPU
  (NULL for a figure of one GPU) and the value in the slot's unit, indexed by report.

The small tables are read whole when the file opens, so an ingest writes each report's
cells with one ``executemany`` and a batch of reports in one transaction, into a 64 MiB
page cache. Measured on the 2-core machine (1,000 reports of 8 GPUs, 1.8 million cells,
the reading aside): 4.0 s, 3.3 s with the larger cache; WAL instead of the default
rollback journal 4.1 s, so the journal stays the default; an index of the cells by GPU
(the order a GPU's trend is read in) made it 6.9 s and saved only 1.7 s of a trend's
reading, so there is none: :meth:`History.series` sorts instead.

**Opening** (:func:`open_history`): by path only, under the rules of gpubw's cache files
(:func:`gpubw.model.infile.cache_file_problem`): a regular file (never followed through a
symbolic link: ``O_NOFOLLOW``), owned by this user, writable by nobody else; the same for
the journal files SQLite keeps beside it (a hot journal is rolled into the database when
it opens). A file written by a newer gpubw (a larger ``user_version``), another program's
SQLite file or a file that is no SQLite database is refused in one line
(:class:`UsageError`). Values read back are checked (type and finiteness), never trusted.
"""

from __future__ import annotations

import datetime
import errno
import math
import os
import sqlite3
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeVar

import attrs

from gpubw.fleet.cells import LINK_MULTINODE, Comparable, ReportKey
from gpubw.fleet.reading import Device, NodeTable, Slot
from gpubw.model.errors import GpubwError, UsageError
from gpubw.model.infile import cache_file_problem

#: the schema this gpubw writes and reads; a file with a larger one is refused
SCHEMA_VERSION = 1
#: ``PRAGMA application_id`` of a gpubw history file ("gpub" in ASCII)
APPLICATION_ID = 0x67707562
#: no size bound: a history file grows with the fleet (cache_file_problem's limit)
_NO_LIMIT = 1 << 62
#: the journal files SQLite may keep beside the database
JOURNAL_SUFFIXES = ("-journal", "-wal", "-shm")
#: SQLite's page cache while gpubw works on the file, in KiB (as the pragma's negative value)
CACHE_KIB = -65536
#: how long a writer waits for another process's lock on the file, in seconds
LOCK_WAIT_S = 60.0

_SCHEMA = """
CREATE TABLE reports (
    id INTEGER PRIMARY KEY,
    digest TEXT NOT NULL UNIQUE,
    node TEXT NOT NULL,
    time REAL NOT NULL,
    source TEXT NOT NULL,
    node_from TEXT NOT NULL,
    sizes TEXT NOT NULL,
    loops INTEGER,
    samples INTEGER,
    statistic TEXT NOT NULL,
    simulated INTEGER NOT NULL,
    tool TEXT NOT NULL,
    flavour TEXT NOT NULL,
    version TEXT NOT NULL
);
CREATE INDEX reports_by_time ON reports (time);
CREATE TABLE gpus (
    id INTEGER PRIMARY KEY,
    node TEXT NOT NULL,
    ordinal INTEGER NOT NULL,
    uuid TEXT NOT NULL,
    pci_bus_id TEXT NOT NULL,
    model TEXT NOT NULL
);
CREATE TABLE slots (
    id INTEGER PRIMARY KEY,
    testcase TEXT NOT NULL,
    matrix TEXT NOT NULL,
    kind TEXT NOT NULL,
    unit TEXT NOT NULL,
    row INTEGER NOT NULL,
    col INTEGER,
    link TEXT NOT NULL,
    size INTEGER
);
CREATE TABLE cells (
    report INTEGER NOT NULL REFERENCES reports (id),
    gpu INTEGER NOT NULL REFERENCES gpus (id),
    slot INTEGER NOT NULL REFERENCES slots (id),
    peer INTEGER REFERENCES gpus (id),
    value REAL NOT NULL
);
CREATE INDEX cells_by_report ON cells (report);

"""

_T = TypeVar("_T")
#: a GPU's identity in the ``gpus`` table (node, ordinal, UUID, PCI bus id, model)
GpuKey = tuple[str, int, str, str, str]


class HistoryError(GpubwError):
    """The history file could not be read or written while in use (exit 1)."""


@attrs.frozen
class StoredGpu:
    """One GPU of the history: its node, ordinal and :class:`Device`."""

    node: str
    ordinal: int
    device: Device


def _uri(path: str) -> str:
    """A ``file:`` URI naming exactly ``path`` (no part of the name read as a URI option)."""
    return "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=rw"


def _refuse(path: str, why: str) -> UsageError:
    return UsageError(
        f"history database {path}: {why}; gpubw keeps its history only in a regular file "
        "of this user's that no one else may write",
        param="db",
    )


def _check_file(path: str, create: bool) -> os.stat_result:
    """The status of the database file at ``path`` after checking it as a cache file (made
    empty, mode 0600, when ``create`` and absent); UsageError when it may not be used."""
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags | (os.O_CREAT if create else 0), 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP or os.path.islink(path):
            raise _refuse(path, "it is a symbolic link") from None
        if exc.errno == errno.ENOENT and not create:
            raise UsageError(
                f"history database {path}: no such file (give report files or folders "
                "to add to it)",
                param="db",
            ) from None
        raise _refuse(path, exc.strerror or str(exc)) from None
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    problem = cache_file_problem(st, _NO_LIMIT)
    if problem is not None:
        raise _refuse(path, problem)
    for suffix in JOURNAL_SUFFIXES:
        _check_journal(path, path + suffix)
    return st


def _check_journal(path: str, journal: str) -> None:
    """UsageError when a journal file SQLite would read beside the database is not one of
    this user's regular files that no one else may write."""
    try:
        st = os.lstat(journal)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise _refuse(path, f"its journal {journal}: {exc.strerror or exc}") from None
    if os.path.islink(journal):
        raise _refuse(path, f"its journal {journal} is a symbolic link")
    problem = cache_file_problem(st, _NO_LIMIT)
    if problem is not None:
        raise _refuse(path, f"its journal {journal}: {problem}")


def open_history(path: str, *, create: bool) -> History:
    """The history in the SQLite file ``path`` (made, with its tables, when ``create`` and
    absent). UsageError (one line, ``param="db"``) for a file gpubw may not use, another
    program's SQLite file, a file that is no database, or one of a newer schema."""
    st = _check_file(path, create)
    try:
        conn = sqlite3.connect(_uri(path), uri=True, timeout=LOCK_WAIT_S, isolation_level=None)
    except sqlite3.Error as exc:
        raise _refuse(path, str(exc)) from None
    try:
        now = os.stat(path, follow_symlinks=False)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            raise _refuse(path, "it was replaced while it was opened")
        _check_schema(conn, path)
        conn.execute(f"PRAGMA cache_size = {CACHE_KIB}")
        return History(conn, path)
    except sqlite3.OperationalError:  # locked past the wait, unreadable: not the file's kind
        conn.close()
        raise
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise UsageError(
            f"history database {path}: not an SQLite database gpubw can read ({exc})",
            param="db",
        ) from None
    except BaseException:
        conn.close()
        raise


def _check_schema(conn: sqlite3.Connection, path: str) -> None:
    """Makes the tables of an empty file; UsageError for a newer schema or another
    program's database."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    app = int(conn.execute("PRAGMA application_id").fetchone()[0])
    if version == 0 and app == 0:
        if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
            raise UsageError(
                f"history database {path}: an SQLite database of another program (it has "
                "tables and no gpubw schema); give a new file or one gpubw made",
                param="db",
            )
        conn.executescript(
            f"BEGIN; {_SCHEMA} PRAGMA application_id = {APPLICATION_ID}; "
            f"PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
        )
        return
    if app != APPLICATION_ID:
        raise UsageError(
            f"history database {path}: an SQLite database of another program "
            f"(application id {app:#x}, gpubw's is {APPLICATION_ID:#x})",
            param="db",
        )
    if version > SCHEMA_VERSION:
        raise UsageError(
            f"history database {path} was written by a newer gpubw (schema version "
            f"{version}; this gpubw reads up to {SCHEMA_VERSION}): use that gpubw, or "
            "another --db file",
            param="db",
        )
    if version < 1:
        raise UsageError(
            f"history database {path}: schema version {version} is not one gpubw wrote", param="db"
        )


def _finite(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise HistoryError(f"{what} is {value!r}, not a finite number")
    return float(value)


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise HistoryError(f"{what} is {value!r}, not text")
    return value


def _int_or_none(value: Any, what: str) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise HistoryError(f"{what} is {value!r}, not a whole number")
    return value


class History:
    """An open history file: add reports (:meth:`add`), read them back (:meth:`reports`,
    :meth:`tables`) and the figures of each GPU over time (:meth:`series`). Close it (or
    use it as a context manager)."""

    def __init__(self, conn: sqlite3.Connection, path: str) -> None:
        self.conn = conn
        self.path = path
        self._gpus: dict[GpuKey, int] = {}
        self._slots: dict[Slot, int] = {}
        self.gpus: dict[int, StoredGpu] = {}
        self.slots: dict[int, Slot] = {}
        self.added = self.known = 0
        self._load()

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.conn.close()

    def _load(self) -> None:
        """The small tables, whole."""
        for gid, *row in self.conn.execute(
            "SELECT id, node, ordinal, uuid, pci_bus_id, model FROM gpus"
        ):
            node, ordinal = _text(row[0], "node"), _int_or_none(row[1], "ordinal") or 0
            dev = Device(_text(row[4], "model"), _text(row[2], "uuid"), _text(row[3], "PCI"))
            self.gpus[gid] = StoredGpu(node, ordinal, dev)
            self._gpus[(node, ordinal, dev.uuid, dev.pci_bus_id, dev.model)] = gid
        for row in self.conn.execute(
            "SELECT id, testcase, matrix, kind, unit, row, col, link, size FROM slots"
        ):
            name = [_text(v, "a slot's name") for v in row[1:5]]
            slot = Slot(
                testcase=name[0],
                matrix=name[1],
                kind=name[2],
                unit=name[3],
                row=_int_or_none(row[5], "a slot's row") or 0,
                column=_int_or_none(row[6], "a slot's column"),
                link=_text(row[7], "a slot's link"),
                size=_int_or_none(row[8], "a slot's size"),
            )
            self.slots[row[0]] = slot
            self._slots[slot] = row[0]

    def __contains__(self, digest: object) -> bool:
        row = self.conn.execute("SELECT 1 FROM reports WHERE digest = ?", (digest,))
        return row.fetchone() is not None

    def keep(self, reports: Iterable[_T]) -> Iterator[_T]:
        """``reports`` passed through, each (key, tables) added on the way (a report the
        file holds, by its digest, is skipped; anything else, such as a file that was no
        report, passes untouched) in one transaction: committed once the last has passed,
        rolled back if the reading stops early. :attr:`added` and :attr:`known` count
        them."""
        self.added = self.known = 0
        done = False
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            for item in reports:
                if isinstance(item, tuple):
                    key, tables = item
                    if self._add(key, tables):
                        self.added += 1
                    else:
                        self.known += 1
                yield item
            self.conn.execute("COMMIT")
            done = True
        finally:
            if not done:
                self._rollback()

    def _rollback(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")
        for table in (self._gpus, self._slots, self.gpus, self.slots):
            table.clear()
        self._load()

    def add_many(self, reports: Iterable[tuple[ReportKey, list[NodeTable]]]) -> tuple[int, int]:
        """Adds ``reports`` in one transaction; (added, already there)."""
        for _ in self.keep(reports):
            pass
        return self.added, self.known

    def add(self, key: ReportKey, tables: list[NodeTable]) -> bool:
        """Adds one report in its own transaction; False when it was there already."""
        return self.add_many([(key, tables)])[0] == 1

    def _add(self, key: ReportKey, tables: list[NodeTable]) -> bool:
        if key.digest in self:
            return False
        o = key.options
        cur = self.conn.execute(
            "INSERT INTO reports (digest, node, time, source, node_from, sizes, loops, "
            "samples, statistic, simulated, tool, flavour, version) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                key.digest, key.node, key.time.timestamp(), key.source, key.node_from,
                ",".join(str(s) for s in o.sizes), o.loops, o.samples, o.statistic,
                int(o.simulated), o.tool, o.flavour, o.version,
            ),
        )  # fmt: skip
        report = cur.lastrowid
        for table in tables:
            self.conn.executemany(
                "INSERT INTO cells (report, gpu, slot, peer, value) VALUES (?, ?, ?, ?, ?)",
                self._rows(report, table),
            )
        return True

    def _rows(self, report: int | None, table: NodeTable) -> Iterator[tuple[Any, ...]]:
        """The ``cells`` rows of one node's table."""
        gpu_ids: dict[tuple[str, int], int] = {}

        def gpu(node: str, ordinal: int) -> int:
            found = gpu_ids.get((node, ordinal))
            if found is None:
                found = gpu_ids[(node, ordinal)] = self._gpu(
                    node, ordinal, table.device(ordinal, node)
                )
            return found

        peers = table.peers or (None,) * len(table.layout)
        for slot, value, peer_node in zip(table.layout, table.values, peers, strict=True):
            sid = self._slots.get(slot)
            if sid is None:
                sid = self._slot(slot)
            peer = None if slot.column is None else gpu(peer_node or table.node, slot.column)
            yield (report, gpu(table.node, slot.row), sid, peer, value)

    def _gpu(self, node: str, ordinal: int, dev: Device) -> int:
        key = (node, ordinal, dev.uuid, dev.pci_bus_id, dev.model)
        found = self._gpus.get(key)
        if found is None:
            cur = self.conn.execute(
                "INSERT INTO gpus (node, ordinal, uuid, pci_bus_id, model) VALUES (?, ?, ?, ?, ?)",
                key,
            )
            found = self._gpus[key] = int(cur.lastrowid or 0)
            self.gpus[found] = StoredGpu(node, ordinal, Device(dev.model, dev.uuid, dev.pci_bus_id))
        return found

    def _slot(self, slot: Slot) -> int:
        cur = self.conn.execute(
            "INSERT INTO slots (testcase, matrix, kind, unit, row, col, link, size) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            tuple(slot),
        )
        sid = self._slots[slot] = int(cur.lastrowid or 0)
        self.slots[sid] = slot
        return sid

    # -- reading back ----------------------------------------------------------------------

    def reports(self, since: float | None = None) -> list[tuple[int, ReportKey]]:
        """The reports started at or after ``since`` (seconds since the epoch; None: all),
        oldest first, with their row ids."""
        rows = self.conn.execute(
            "SELECT id, digest, node, time, source, node_from, sizes, loops, samples, "
            "statistic, simulated, tool, flavour, version FROM reports "
            "WHERE time >= ? ORDER BY time, id",
            (-math.inf if since is None else since,),
        )
        return [(int(row[0]), _report_key(row)) for row in rows]

    def latest(self, since: float | None = None) -> Iterator[tuple[ReportKey, list[NodeTable]]]:
        """The newest report of each node started at or after ``since``, as
        :func:`gpubw.fleet.reading.read_tables` reads a file: its key and tables."""
        newest: dict[str, tuple[int, ReportKey]] = {}
        for rid, key in self.reports(since):
            newest[key.node] = (rid, key)
        for rid, key in sorted(newest.values(), key=lambda r: r[1].node):
            yield key, self.tables(rid)

    def tables(self, report: int) -> list[NodeTable]:
        """The per-node tables of the report with row id ``report``, as they were added."""
        rows: dict[str, list[tuple[Slot, float, str | None]]] = {}
        devices: dict[str, dict[int, Device]] = {}
        peer_devices: dict[tuple[str, int], Device] = {}
        for gid, sid, pid, value in self.conn.execute(
            "SELECT gpu, slot, peer, value FROM cells WHERE report = ? ORDER BY rowid", (report,)
        ):
            gpu, slot = self._stored(gid), self._slot_of(sid)
            devices.setdefault(gpu.node, {})[gpu.ordinal] = gpu.device
            peer_node = None
            if slot.link == LINK_MULTINODE and pid is not None:
                peer = self._stored(pid)
                peer_node = peer.node
                peer_devices[(peer.node, peer.ordinal)] = peer.device
            rows.setdefault(gpu.node, []).append((slot, _finite(value, "a cell"), peer_node))
        return [_table(node, cells, devices[node], peer_devices) for node, cells in rows.items()]

    def _stored(self, gid: Any) -> StoredGpu:
        found = self.gpus.get(gid)
        if found is None:
            raise HistoryError(f"a cell names GPU {gid!r}, not in it")
        return found

    def _slot_of(self, sid: Any) -> Slot:
        found = self.slots.get(sid)
        if found is None:
            raise HistoryError(f"a cell names slot {sid!r}, not in it")
        return found

    def series(self, since: float | None = None) -> Iterator[Series]:
        """Each figure of each GPU over the reports started at or after ``since``: its
        (time, value) points, oldest first, one :class:`Series` per GPU, slot and peer."""
        rows = self.conn.execute(
            "SELECT c.gpu, c.slot, c.peer, r.time, c.value FROM cells c "
            "JOIN reports r ON r.id = c.report WHERE r.time >= ? "
            "ORDER BY c.gpu, c.slot, c.peer, r.time",
            (-math.inf if since is None else since,),
        )
        current: tuple[Any, Any, Any] | None = None
        points: list[tuple[float, float]] = []
        for gid, sid, pid, when, value in rows:
            if (gid, sid, pid) != current:
                if current is not None:
                    yield self._series(current, points)
                current, points = (gid, sid, pid), []
            points.append((_finite(when, "a report's time"), _finite(value, "a cell")))
        if current is not None:
            yield self._series(current, points)

    def _series(self, key: tuple[Any, Any, Any], points: list[tuple[float, float]]) -> Series:
        gid, sid, pid = key
        peer = None if pid is None else self._stored(pid)
        return Series(self._stored(gid), self._slot_of(sid), peer, tuple(points))


@attrs.frozen
class Series:
    """One figure of one GPU over time: the GPU, the slot, the pair's other GPU (None for a
    figure of one GPU) and the (time, value) points, oldest first."""

    gpu: StoredGpu
    slot: Slot
    peer: StoredGpu | None
    points: tuple[tuple[float, float], ...]


def _table(
    node: str,
    cells: list[tuple[Slot, float, str | None]],
    devices: Mapping[int, Device],
    peer_devices: Mapping[tuple[str, int], Device],
) -> NodeTable:
    multinode = any(peer is not None for _, _, peer in cells)
    return NodeTable(
        node=node,
        devices=dict(devices),
        layout=tuple(s for s, _, _ in cells),
        values=tuple(v for _, v, _ in cells),
        peers=tuple(p for _, _, p in cells) if multinode else (),
        peer_devices=dict(peer_devices),
    )


def _report_key(row: tuple[Any, ...]) -> ReportKey:
    """A ``reports`` row (from its digest on) as a ReportKey, its values checked."""
    sizes = _text(row[6], "a report's sizes")
    try:
        size_list = tuple(int(s) for s in sizes.split(",") if s)
    except ValueError:
        raise HistoryError(f"sizes {sizes!r} are not numbers") from None
    options = Comparable(
        sizes=size_list,
        loops=_int_or_none(row[7], "loops"),
        samples=_int_or_none(row[8], "samples"),
        statistic=_text(row[9], "statistic"),
        simulated=bool(row[10]),
        tool=_text(row[11], "tool"),
        flavour=_text(row[12], "flavour"),
        version=_text(row[13], "version"),
    )
    when = datetime.datetime.fromtimestamp(
        _finite(row[3], "a report's time"), datetime.timezone.utc
    )
    return ReportKey(
        node=_text(row[2], "node"),
        time=when,
        digest=_text(row[1], "digest"),
        source=_text(row[4], "source"),
        options=options,
        node_from=_text(row[5], "node_from"),
    )
