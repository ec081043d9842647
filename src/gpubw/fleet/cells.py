"""The fleet's record: one comparable figure of one node's report (:class:`Cell`), the
report it came from (:class:`ReportKey`), and :func:`read_cells`, which makes them of one
report file.

A cell is one matrix cell of a Passed testcase, in the unit people read (GB/s for
bandwidth, where higher is better; ns for latency, where lower is better), with what makes
it comparable across nodes (testcase, matrix, row and column device, link type, buffer
size, GPU model) and what names its hardware (node, GPU UUID, PCI bus id, of both ends for
a pair). The reading itself, into a compact per-node table that the fleet statistics use,
is :mod:`gpubw.fleet.reading` (which also defines :class:`ReportKey`, :class:`Comparable`
and the link types, re-exported here); a Cell is that table's row made whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import attrs

from gpubw.fleet.reading import (
    LINK_HOST,
    LINK_LOCAL,
    LINK_MULTINODE,
    LINK_NONE,
    LINK_NVLINK,
    LINK_PCIE_PEER,
    LINK_PEER,
    LINK_PEERS,
    LINKS,
    Comparable,
    NodeTable,
    ReportKey,
    read_tables,
)
from gpubw.model.results import KIND_BANDWIDTH


@attrs.frozen
class Cell:
    """One comparable figure of one report.

    ``row`` is the GPU of the cell (for a pair, the row end); ``column`` the pair's other
    GPU, or None where the matrix holds one figure per GPU (host links, local copies, a GPU
    with all its peers). ``value`` is in ``unit``: GB/s for ``kind`` "bandwidth" (higher is
    better), ns for "latency" (lower is better). ``size`` is the buffer size in bytes (None
    for a fixed-size testcase). For a pair, ``peer_*`` name the column's GPU (``peer_node``
    differs from ``node`` only across the hosts of an MPI run).
    """

    node: str
    testcase: str
    matrix: str
    kind: str
    unit: str
    row: int
    column: int | None
    link: str
    gpu_model: str
    uuid: str
    pci_bus_id: str
    peer_uuid: str | None
    peer_pci_bus_id: str | None
    size: int | None
    value: float
    report: ReportKey
    peer_node: str | None = None

    @property
    def higher_is_better(self) -> bool:
        """True for bandwidth, False for latency."""
        return self.kind == KIND_BANDWIDTH


def read_cells(path: str | Path) -> tuple[ReportKey, list[Cell]]:
    """The cells of one report file: gpubw's JSON (one node, or an MPI run's several hosts:
    each cell keyed by its device's host) or nvbandwidth's JSON (v0.8, v0.10: the node is
    the file's name, see :class:`ReportKey`). One report is in memory at a time.
    UsageError (one line naming the file) if the file is neither."""
    key, tables = read_tables(path)
    return key, [cell for table in tables for cell in table_cells(table, key)]


def table_cells(table: NodeTable, key: ReportKey) -> Iterator[Cell]:
    """A node's table of one report as Cell records."""
    for i, (slot, value) in enumerate(zip(table.layout, table.values, strict=True)):
        peer_node = table.peers[i] if table.peers else None
        dev = table.device(slot.row)
        peer = None if slot.column is None else table.device(slot.column, peer_node)
        yield Cell(
            node=table.node,
            testcase=slot.testcase,
            matrix=slot.matrix,
            kind=slot.kind,
            unit=slot.unit,
            row=slot.row,
            column=slot.column,
            link=slot.link,
            gpu_model=dev.model,
            uuid=dev.uuid,
            pci_bus_id=dev.pci_bus_id,
            peer_uuid=None if peer is None else peer.uuid,
            peer_pci_bus_id=None if peer is None else peer.pci_bus_id,
            size=slot.size,
            value=value,
            report=key,
            peer_node=peer_node if slot.column is not None else None,
        )


__all__ = [
    "LINKS",
    "LINK_HOST",
    "LINK_LOCAL",
    "LINK_MULTINODE",
    "LINK_NONE",
    "LINK_NVLINK",
    "LINK_PCIE_PEER",
    "LINK_PEER",
    "LINK_PEERS",
    "Cell",
    "Comparable",
    "ReportKey",
    "read_cells",
    "table_cells",
]
