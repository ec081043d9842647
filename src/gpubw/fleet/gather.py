"""Gather a fleet's reports: expand the paths given, read each file (in worker processes
when there are many), count an identical file once and each node once, with its newest
report; the nodes set apart here (an older report of a node) say why.

Each worker holds one report at a time and sends back its per-node tables; the parent
holds the tables only.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import attrs

from gpubw.fleet.reading import NodeTable, ReportKey, Slot, read_tables
from gpubw.model.errors import UsageError

#: below this many files the reading stays in this process (a pool's start costs ~0.2 s)
POOL_FROM = 48


@attrs.frozen
class NodeEntry:
    """One node's figures, of the newest report that names it."""

    key: ReportKey
    table: NodeTable

    @property
    def node(self) -> str:
        return self.table.node


@attrs.frozen
class Apart:
    """A node (or report) left out of the statistics, and why, in words."""

    node: str
    source: str
    reason: str


@attrs.frozen
class Gathered:
    """What the paths held: the nodes to judge, those set apart, the files read."""

    entries: tuple[NodeEntry, ...]
    apart: tuple[Apart, ...]
    files: int


def report_files(paths: Sequence[str | Path]) -> list[tuple[Path, bool]]:
    """The report files the paths name, each with whether it was named itself (True) or
    found in a folder (``*.json``, recursively, sorted). UsageError naming a path that
    does not exist or a folder that holds no ``.json`` file."""
    out: list[tuple[Path, bool]] = []
    for given in paths:
        p = Path(given)
        if p.is_dir():
            found = sorted(f for f in p.rglob("*.json") if f.is_file())
            if not found:
                raise UsageError(f"{p}: folder holds no report (no *.json file)")
            out.extend((f, False) for f in found)
        elif p.exists():
            out.append((p, True))
        else:
            raise UsageError(f"{p}: no such file or folder")
    return out


@attrs.frozen
class Unreadable:
    """A file found in a folder that is no report, and the one line that says why."""

    path: Path
    reason: str


#: what reading one file gave: its key and tables, or why it is no report
Read = tuple[ReportKey, list[NodeTable]] | Unreadable


def _read(item: tuple[Path, bool]) -> Read:
    """One file's key and tables; a file found in a folder that is no report gives its
    path and the reason (it is set apart), a file named itself raises UsageError."""
    path, named = item
    try:
        return read_tables(path)
    except UsageError as exc:
        if named:
            raise
        return Unreadable(path, str(exc))


#: a worker's layouts as the bytes it sends (every node of a suite shares one layout:
#: pickled once, not 1,800 slots a report)
_SENT: dict[tuple[Slot, ...], bytes] = {}
#: the parent's layouts by those bytes
_RECEIVED: dict[bytes, tuple[Slot, ...]] = {}


def _read_packed(item: tuple[Path, bool]) -> Read | tuple[ReportKey, list[tuple[NodeTable, bytes]]]:
    """:func:`_read` in a worker: each table's layout as its pickled bytes, kept."""
    got = _read(item)
    if isinstance(got, Unreadable):
        return got
    key, tables = got
    packed = []
    for t in tables:
        blob = _SENT.get(t.layout)
        if blob is None:
            blob = _SENT.setdefault(t.layout, pickle.dumps(t.layout, pickle.HIGHEST_PROTOCOL))
        packed.append((attrs.evolve(t, layout=()), blob))
    return key, packed


def _unpack(got: Any) -> Read:
    if isinstance(got, Unreadable):
        return got
    key, packed = got
    tables = []
    for t, blob in packed:
        layout = _RECEIVED.get(blob)
        if layout is None:
            layout = _RECEIVED.setdefault(blob, pickle.loads(blob))
        tables.append(attrs.evolve(t, layout=layout))
    return key, tables


def read_all(items: Sequence[tuple[Path, bool]], workers: int | None = None) -> Iterator[Read]:
    """Each file's :data:`Read`, in the files' order; in ``workers`` processes (default:
    the CPUs this process may use) when there are :data:`POOL_FROM` files or more."""
    n = workers if workers is not None else len(os.sched_getaffinity(0))
    if n <= 1 or len(items) < POOL_FROM:
        yield from (_read(i) for i in items)
        return
    try:
        with ProcessPoolExecutor(max_workers=n) as pool:
            yield from (_unpack(got) for got in pool.map(_read_packed, items, chunksize=8))
    finally:
        _RECEIVED.clear()


def gather(paths: Sequence[str | Path], workers: int | None = None) -> Gathered:
    """Read every report the paths name; keep each node's newest report."""
    items = report_files(paths)
    return collect(read_all(items, workers), len(items))


def collect(reports: Iterable[Read], files: int) -> Gathered:
    """Each node once, with its newest report; a file whose bytes were seen already
    counts once; a file that is no report is set apart."""
    seen: set[str] = set()
    newest: dict[str, NodeEntry] = {}
    apart: list[Apart] = []
    for item in reports:
        if isinstance(item, Unreadable):
            apart.append(Apart(item.path.stem, str(item.path), item.reason))
            continue
        key, tables = item
        if key.digest in seen:
            continue
        seen.add(key.digest)
        if not tables:
            apart.append(Apart(key.node, key.source, "no figure of a Passed testcase"))
        for table in tables:
            entry = NodeEntry(key, table)
            old = newest.get(table.node)
            if old is not None and old.key.time > key.time:
                entry, old = old, entry
            if old is not None:
                when = old.key.time.isoformat(timespec="seconds")
                apart.append(Apart(old.node, old.key.source, f"older report of the node ({when})"))
            newest[table.node] = entry
    return Gathered(tuple(newest.values()), tuple(apart), files)
