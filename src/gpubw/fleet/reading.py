"""Read one report file into compact per-node tables of comparable figures.

A fleet of 1,000 nodes of 8 GPUs is about 1.8 million figures: they are kept as one
:class:`NodeTable` per node of a report (the node's devices, a layout of :class:`Slot`
tuples shared by every node of the same suite, and the values in the same order), not
as 1.8 million objects. :meth:`NodeTable.cells` makes :class:`~gpubw.fleet.cells.Cell`
records of a table when a caller wants them.

gpubw's JSON is checked for what the fleet reads (each member it uses, with its type; a
value must be a finite number) rather than validated whole against the report schema:
validation costs about 40 ms a report, four times the reading, and the fleet reads only
the matrices, devices, options and hosts. nvbandwidth's JSON goes through
:mod:`gpubw.model.nvbandwidth_json`, which checks it. Either way a bad file is one
UsageError naming it.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import attrs

from gpubw.model.errors import UsageError
from gpubw.model.infile import read_input
from gpubw.model.report_io import display_scale, display_unit
from gpubw.model.results import (
    AXIS_GPU,
    AXIS_HOST,
    AXIS_NONE,
    AXIS_PEERS,
    AXIS_RANK,
    KIND_BANDWIDTH,
    KIND_LATENCY,
    LATENCY,
    Axes,
    axes_from_header,
)
from gpubw.model.sizes import format_size

#: file names that say nothing of the node (nvbandwidth's JSON): the folder names it then
GENERIC_NAMES = frozenset({"nvbandwidth", "report", "output", "out", "result", "results", "bw"})


#: link types of a cell (``Cell.link``): a GPU's host link; an NVLink peer pair; a peer pair
#: over PCIe; a peer pair whose link the report does not say (nvbandwidth's JSON has no
#: NVLink facts); every peer of a GPU at once (all-to-one, one-to-all); a GPU's own memory;
#: a pair of GPUs of a multi-node NVLink domain (MPI runs); a figure with no link (a plugin's)
LINK_HOST = "host"
LINK_NVLINK = "nvlink"
LINK_PCIE_PEER = "pcie-peer"
LINK_PEER = "peer"
LINK_PEERS = "peers"
LINK_LOCAL = "local"
LINK_MULTINODE = "multinode"
LINK_NONE = "none"
LINKS = (
    LINK_HOST,
    LINK_NVLINK,
    LINK_PCIE_PEER,
    LINK_PEER,
    LINK_PEERS,
    LINK_LOCAL,
    LINK_MULTINODE,
    LINK_NONE,
)


@attrs.frozen
class Comparable:
    """What two reports must share for their cells to be compared: the buffer sizes
    (bytes, ``-b``), loops and samples per figure, the statistic, simulated or real, and
    the tool (``gpubw`` or ``nvbandwidth``), its flavour (gpubw's own command or its
    nvbandwidth drop-in) and version."""

    sizes: tuple[int, ...]
    loops: int | None
    samples: int | None
    statistic: str
    simulated: bool
    tool: str
    flavour: str
    version: str

    def describe(self) -> str:
        """One line for people: what differs is visible at a glance."""
        sizes = ",".join(format_size(s) for s in self.sizes) or "unknown"
        kind = "simulated" if self.simulated else "real"
        return (
            f"{self.tool} {self.version} ({self.flavour}), {kind}, sizes {sizes}, "
            f"loops {self.loops}, samples {self.samples}, {self.statistic}"
        )


@attrs.frozen
class ReportKey:
    """The identity of one report file: the node it names (for an MPI run, rank 0's host;
    each cell says its own node), when it started (UTC; nvbandwidth's JSON has no time: the
    file's modification time), the SHA-256 of its bytes (the same report read twice is the
    same key), the path it was read from, and the options that must match to compare."""

    node: str
    time: datetime.datetime
    digest: str
    source: str
    options: Comparable
    #: where ``node`` came from: "report" (the report's host) or "file" (nvbandwidth's
    #: JSON names no host: the file's name, or its folder's when the name is generic)
    node_from: str = "report"


class Slot(NamedTuple):
    """Where a figure sits, the same on every node of a suite: the fleet groups by it."""

    testcase: str
    matrix: str
    kind: str
    unit: str
    row: int
    column: int | None
    link: str
    size: int | None


@attrs.frozen
class Device:
    """What names one GPU of a node: its model, UUID and PCI bus id ("" where unknown)."""

    model: str
    uuid: str
    pci_bus_id: str
    #: the ordinals NVML says this GPU reaches over NVLink; None where the report does not say
    nvlink_peers: frozenset[int] | None = None

    def link_to(self, peer: int) -> str:
        """The link type of a pair from this GPU to ``peer``."""
        if self.nvlink_peers is None:
            return LINK_PEER
        return LINK_NVLINK if peer in self.nvlink_peers else LINK_PCIE_PEER


#: a device the report does not describe
UNKNOWN = Device("", "", "")


@attrs.frozen
class NodeTable:
    """One node's figures of one report: ``values[i]`` sits at ``layout[i]``; ``peers[i]``
    is the other end's node of a multi-node pair (None elsewhere, and for every slot when
    the tuple is empty); ``devices`` by ordinal, ``peer_devices`` by (node, ordinal)."""

    node: str
    devices: Mapping[int, Device]
    layout: tuple[Slot, ...]
    values: tuple[float, ...]
    peers: tuple[str | None, ...] = ()
    peer_devices: Mapping[tuple[str, int], Device] = attrs.field(factory=dict)

    @property
    def sku(self) -> str:
        """The node's GPUs as people say it: ``8x NVIDIA H200`` (models in ordinal order)."""
        models = [self.devices[i].model for i in sorted(self.devices)]
        if models and all(m == models[0] for m in models):
            return f"{len(models)}x {models[0]}"
        return " + ".join(models) or "no GPU"

    def device(self, ordinal: int, node: str | None = None) -> Device:
        """The device ``ordinal`` of this node (or of ``node``, for a multi-node pair)."""
        if node is not None and node != self.node:
            return self.peer_devices.get((node, ordinal), UNKNOWN)
        return self.devices.get(ordinal, UNKNOWN)


def _bad(path: Path, what: str) -> UsageError:
    return UsageError(f"{path}: not a report gpubw fleet can read: {what}")


def read_tables(path: str | Path) -> tuple[ReportKey, list[NodeTable]]:
    """The report in ``path`` as its key and one table per node. UsageError naming the
    file if it cannot be read or is neither gpubw's JSON nor nvbandwidth's."""
    p = Path(path)
    try:
        raw = read_input(p, "report")
    except OSError as exc:
        raise UsageError(f"cannot read report {p}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(f"{p} is not UTF-8 text: {exc}") from exc
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{p} is not JSON: {exc}") from exc
    digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()
    if isinstance(doc, Mapping) and "nvbandwidth" in doc:
        return _nvbandwidth(p, doc, digest)
    if not isinstance(doc, Mapping) or doc.get("tool") != "gpubw":
        raise _bad(p, 'neither gpubw\'s JSON ("tool": "gpubw") nor nvbandwidth\'s')
    try:
        return _gpubw(p, doc, digest)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise _bad(p, f"{type(exc).__name__}: {exc}") from exc


# -- gpubw's JSON ------------------------------------------------------------------------


def _utc(text: str) -> datetime.datetime:
    when = datetime.datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.astimezone(datetime.timezone.utc)


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} is {type(value).__name__}, not a string")
    return value


def _gpubw(p: Path, doc: Mapping[str, Any], digest: str) -> tuple[ReportKey, list[NodeTable]]:
    opts = doc["options"]
    sizes = tuple(int(s) for s in opts.get("buffer_sizes") or ())
    comparable = Comparable(
        sizes=sizes,
        loops=int(opts["loops"]) if opts.get("loops") is not None else None,
        samples=int(opts["samples"]) if opts.get("samples") is not None else None,
        statistic=_str(opts.get("statistic", "median"), "options.statistic"),
        simulated=bool(doc["simulated"]),
        tool="gpubw",
        flavour="gpubw",
        version=_str(doc["tool_version"], "tool_version"),
    )
    host = _str(doc["host"], "host") or p.stem
    key = ReportKey(host, _utc(_str(doc["started"], "started")), digest, str(p), comparable)
    devices = {int(d["ordinal"]): _gpubw_device(d) for d in doc["devices"]}
    world = doc.get("world") or None
    ranks = _ranks(world, host, devices)
    hosts: list[tuple[str, Any, Mapping[int, Device]]] = [(host, doc["testcases"], devices)]
    for other in doc.get("hosts") or ():
        name = _str(other["host"], "hosts[].host")
        hosts.append((name, other["testcases"], _process_devices(world, name)))
    # an MPI run's testcases across the ranks are rank 0's alone: every host's leader runs
    # the single-node ones (hosts[]); their matrices' rows and columns are ranks
    single = {t["key"] for other in doc.get("hosts") or () for t in other["testcases"]}
    tables = []
    for name, testcases, devs in hosts:
        builder = _Builder(name, devs, ranks)
        for t in testcases:
            across = bool(ranks) and bool(single) and name == host and t["key"] not in single
            builder.testcase(t, across)
        tables.extend(builder.tables())
    return key, _merged([t for t in tables if t.layout])


def _merged(tables: list[NodeTable]) -> list[NodeTable]:
    """One table per node (an MPI run's host has its own figures and rows of rank 0's)."""
    by: dict[str, list[NodeTable]] = {}
    for t in tables:
        by.setdefault(t.node, []).append(t)
    out = []
    for parts in by.values():
        if len(parts) == 1:
            out.append(parts[0])
            continue
        peers = tuple(p for t in parts for p in (t.peers or (None,) * len(t.layout)))
        out.append(
            attrs.evolve(
                parts[0],
                devices={k: v for t in parts for k, v in t.devices.items()},
                layout=tuple(s for t in parts for s in t.layout),
                values=tuple(v for t in parts for v in t.values),
                peers=peers if any(p is not None for p in peers) else (),
                peer_devices={k: v for t in parts for k, v in t.peer_devices.items()},
            )
        )
    return out


def _gpubw_device(d: Mapping[str, Any]) -> Device:
    pci = d.get("pci_bus_id") or d.get("pci_short") or ""
    nvlink = ((d.get("nvml") or {}).get("nvlink") or {}).get("peers")
    peers = None if nvlink is None else frozenset(int(x) for x in nvlink)
    name = _str(d.get("name", ""), "device name")
    return Device(name, str(d.get("uuid") or ""), str(pci), peers)


def _process_devices(world: Mapping[str, Any] | None, host: str) -> dict[int, Device]:
    """The devices of ``host`` as an MPI run's process records name them (no UUID)."""
    out: dict[int, Device] = {}
    for proc in (world or {}).get("processes") or ():
        if proc.get("host") == host and proc.get("device") is not None:
            out[int(proc["device"])] = Device(
                str(proc.get("name", "")), "", str(proc.get("pci", ""))
            )
    return out


def _ranks(
    world: Mapping[str, Any] | None, host: str, devices: Mapping[int, Device]
) -> dict[int, tuple[str, int, Device]]:
    """An MPI run's ranks: rank -> (host, device ordinal, device)."""
    out: dict[int, tuple[str, int, Device]] = {}
    for proc in (world or {}).get("processes") or ():
        dev_host = str(proc.get("host", ""))
        ordinal = int(proc.get("device", 0))
        known = devices.get(ordinal) if dev_host == host else None
        dev = known or Device(str(proc.get("name", "")), "", str(proc.get("pci", "")))
        out[int(proc["rank"])] = (dev_host, ordinal, dev)
    return out


class _Builder:
    """Collects one host's figures of a report, and the other hosts' multi-node rows."""

    def __init__(self, node: str, devices: Mapping[int, Device], ranks: Mapping[int, Any]):
        self.node = node
        self.devices = devices
        self.ranks = ranks
        self.rows: dict[str, list[tuple[Slot, float, str | None]]] = {node: []}
        self.peer_devices: dict[tuple[str, int], Device] = {}
        self._places: dict[tuple[str, str, str, str], object] = {}
        #: the node's NVLink facts, which a pair's link type depends on
        self.links = tuple(sorted((o, d.nvlink_peers) for o, d in devices.items()))

    def device(self, ordinal: int) -> Device:
        return self.devices.get(ordinal, UNKNOWN)

    def testcase(self, t: Mapping[str, Any], across: bool = False) -> None:
        """A testcase's figures (``across``: a testcase across an MPI run's ranks)."""
        if t["status"] != "Passed":
            return
        size = t.get("size_bytes")
        for m in t["matrices"]:
            key = _str(t["key"], "testcase key")
            self.matrix(key, m, None if size is None else int(size), across)

    def matrix(
        self, testcase: str, m: Mapping[str, Any], size: int | None, across: bool = False
    ) -> None:
        unit = _str(m["unit"], "matrix unit")
        kind = m.get("kind") or (KIND_LATENCY if unit == LATENCY else KIND_BANDWIDTH)
        rows, columns = m["row_labels"], m["column_labels"]
        axes = axes_from_header(_str(m["description"], "matrix description"), len(rows))
        if across:  # ranks where the header says GPUs
            axes = attrs.evolve(
                axes,
                rows=AXIS_RANK if axes.rows == AXIS_GPU else axes.rows,
                columns=AXIS_RANK if axes.columns == AXIS_GPU else axes.columns,
            )
        scale, shown, key = display_scale(unit), display_unit(unit), m["key"]
        labels = (tuple(rows), tuple(columns))
        sig = (testcase, key, kind, shown, axes, labels, size, self.links)
        slots = _SLOTS.get(sig)
        if slots is None:
            slots = self.slots(Slot(testcase, key, kind, shown, 0, None, "", size), axes, *labels)
            if len(_SLOTS) > _SLOTS_KEPT:
                _SLOTS.clear()
            _SLOTS[sig] = slots
        for r, row in enumerate(m["values"]):
            places = slots[r]
            for c, value in enumerate(row):
                if value is None:
                    continue
                if value.__class__ is not float and not isinstance(value, (int, float)):
                    raise ValueError(f"matrix {key}: cell {r},{c} is {value!r}")
                if not math.isfinite(value):
                    raise ValueError(f"matrix {key}: cell {r},{c} is {value!r}")
                slot = places[c]
                if slot is not None:
                    self.add(slot, value * scale)

    def slots(
        self, base: Slot, axes: Axes, rows: tuple[str, ...], columns: tuple[str, ...]
    ) -> tuple[tuple[Slot | None, ...], ...]:
        """Each cell's slot (None for a cell that names no GPU), row by row."""
        out = []
        for row in rows:
            places = (self.place(axes.rows, axes.columns, row, column) for column in columns)
            out.append(
                tuple(
                    None if p is None else base._replace(row=p[0], column=p[1], link=p[2])
                    for p in places
                )
            )
        return tuple(out)

    def place(
        self, rows: str, columns: str, row: str, column: str
    ) -> tuple[int, int | None, str] | None:
        """:func:`_place`, with a pair's link type from this node's NVLink facts."""
        known = self._places.get((rows, columns, row, column), _UNSEEN)
        if known is not _UNSEEN:
            return known  # type: ignore[return-value]
        place = _place(rows, columns, row, column)
        if place is not None and place[2] == LINK_PEER and place[1] is not None:
            place = (place[0], place[1], self.device(place[0]).link_to(place[1]))
        self._places[(rows, columns, row, column)] = place
        return place

    def add(self, slot: Slot, value: float) -> None:
        if slot.link != LINK_MULTINODE:
            self.rows[self.node].append((slot, value, None))
            return
        if slot.row not in self.ranks or (
            slot.column is not None and slot.column not in self.ranks
        ):
            return  # a rank the run's process records do not name
        row_host, row_dev, _ = self.ranks[slot.row]
        if slot.column is None:
            self.rows.setdefault(row_host, []).append((slot._replace(row=row_dev), value, None))
            return
        col_host, col_dev, col_info = self.ranks[slot.column]
        self.peer_devices[(col_host, col_dev)] = col_info
        local = slot._replace(row=row_dev, column=col_dev)
        self.rows.setdefault(row_host, []).append((local, value, col_host))

    def tables(self) -> list[NodeTable]:
        out = []
        for node, rows in self.rows.items():
            devices = self.devices if node == self.node else _rank_devices(self.ranks, node)
            multinode = any(peer is not None for _, _, peer in rows)
            out.append(
                NodeTable(
                    node=node,
                    devices=devices,
                    layout=tuple(s for s, _, _ in rows),
                    values=tuple(v for _, v, _ in rows),
                    peers=tuple(p for _, _, p in rows) if multinode else (),
                    peer_devices=dict(self.peer_devices),
                )
            )
        return out


_UNSEEN = object()
#: each matrix's slots, by what they depend on: the same on every node of a suite
_SLOTS: dict[tuple[Any, ...], tuple[tuple[Slot | None, ...], ...]] = {}
_SLOTS_KEPT = 20_000


def _rank_devices(ranks: Mapping[int, Any], node: str) -> dict[int, Device]:
    return {ordinal: dev for host, ordinal, dev in ranks.values() if host == node}


def _place(rows: str, columns: str, row: str, column: str) -> tuple[int, int | None, str] | None:
    """(row GPU, column GPU or None, link type) of one cell, from its matrix's axes; None
    for a cell that names no GPU (or whose label is no ordinal: a bisection's halves)."""
    try:
        return _placed(rows, columns, row, column)
    except ValueError:
        return None


def _placed(rows: str, columns: str, row: str, column: str) -> tuple[int, int | None, str] | None:
    if rows == AXIS_RANK and columns == AXIS_RANK:
        return int(row), int(column), LINK_MULTINODE
    if columns == AXIS_GPU:
        gpu = int(column)
        if rows == AXIS_HOST:
            return gpu, None, LINK_HOST
        if rows == AXIS_PEERS:
            return gpu, None, LINK_PEERS
        if rows == AXIS_NONE:
            return gpu, None, LINK_LOCAL
        if rows == AXIS_GPU:
            return int(row), gpu, LINK_PEER
    if rows == AXIS_GPU and columns == AXIS_HOST:
        return int(row), None, LINK_HOST
    if rows == AXIS_GPU and columns == AXIS_NONE:
        return int(row), None, LINK_NONE
    if columns == AXIS_RANK:
        return int(column), None, LINK_MULTINODE
    return None


# -- nvbandwidth's JSON ----------------------------------------------------------------------


def _node_from_file(p: Path) -> str:
    stem = p.stem
    if stem.lower() in GENERIC_NAMES and p.parent.name:
        return p.parent.name
    return stem


def _nvbandwidth(p: Path, doc: Mapping[str, Any], digest: str) -> tuple[ReportKey, list[NodeTable]]:
    from gpubw.model.nvbandwidth_json import parse

    parsed = parse(doc)
    node = parsed["host"] or _node_from_file(p)
    when = datetime.datetime.fromtimestamp(os.stat(p).st_mtime, datetime.timezone.utc)
    comparable = Comparable(
        sizes=(),
        loops=None,
        samples=None,
        statistic="median",
        simulated=False,
        tool="nvbandwidth",
        flavour="nvbandwidth",
        version=parsed["tool_version"],
    )
    key = ReportKey(node, when, digest, str(p), comparable, "report" if parsed["host"] else "file")
    devices = {int(d["ordinal"]): _gpubw_device(d) for d in parsed["devices"]}
    builder = _Builder(node, devices, {})
    for t in parsed["testcases"]:
        if t["status"] != "Passed":
            continue
        for m in t["matrices"]:
            builder.matrix(t["key"], m, None)
    return key, [t for t in builder.tables() if t.layout]
