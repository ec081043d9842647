"""What lies below the fleet, said as an operator acts on it: a whole node, a GPU, a GPU
pair (an NVLink or PCIe peer link), a GPU's host link, its memory, its port to all its
peers; each a :class:`Finding` with the low figures under it.

A node's low figures are read from the largest to the smallest thing they can mean:

- **node**: at least half of its judged figures are low, or at least half of its GPUs are;
- **gpu**: low figures of at least two kinds (host link, own memory, pairs with more than
  half of its peers), or every kind it has: all the GPU's low figures are one finding;
- **links of a GPU**: only its pairs, with more than half of its peers (its NVLink port);
- **host link** and **memory** of a GPU: its host-link figures, its local-copy figures;
- **pair**: the low figures of one GPU pair (both directions), with the all-to-one and
  one-to-all figures of either end (one slow pair drags its ends' shared ports);
- **peers**: the all-to-one and one-to-all figures of a GPU that no pair explains.

A finding stands when a figure under it is more than the threshold under the fleet
median, or when two or more are low by their robust z (:func:`corroborated`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs
import numpy as np

from gpubw.fleet.reading import LINK_HOST, LINK_LOCAL, LINK_NONE, LINK_PEERS, Device, Slot
from gpubw.fleet.stats import Fleet

SCOPE_NODE, SCOPE_GPU, SCOPE_GPU_LINKS = "node", "gpu", "gpu-links"
SCOPE_HOST_LINK, SCOPE_MEMORY, SCOPE_PAIR, SCOPE_PEERS = "host-link", "memory", "pair", "peers"
SCOPES = (
    SCOPE_NODE,
    SCOPE_GPU,
    SCOPE_GPU_LINKS,
    SCOPE_HOST_LINK,
    SCOPE_MEMORY,
    SCOPE_PAIR,
    SCOPE_PEERS,
)


@attrs.frozen
class Figure:
    """One low figure: where it sits, its value, the fleet's median, ratio and robust z."""

    slot: Slot
    value: float
    median: float
    ratio: float
    z: float


@attrs.frozen
class Finding:
    """One slow thing of one node: ``scope`` (node, gpu, gpu-links, host-link, memory,
    pair, peers), the GPU (and the pair's other GPU) with UUID and PCI bus id, the low
    figures (worst first) and how many figures of that scope were judged."""

    scope: str
    node: str
    source: str
    fleet: str
    gpu: int | None
    device: Device | None
    peer: int | None
    peer_device: Device | None
    figures: tuple[Figure, ...]
    judged: int

    @property
    def worst(self) -> Figure:
        return self.figures[0]

    def describe(self) -> str:
        """What is slow, in words: ``GPU 3 of node n17: host link``."""
        gpu = f"GPU {self.gpu}"
        words = {
            SCOPE_NODE: f"node {self.node}: every GPU",
            SCOPE_GPU: f"{gpu} of node {self.node}: every kind of figure",
            SCOPE_GPU_LINKS: f"{gpu} of node {self.node}: its links to most peers",
            SCOPE_HOST_LINK: f"{gpu} of node {self.node}: host link",
            SCOPE_MEMORY: f"{gpu} of node {self.node}: own memory (local copies)",
            SCOPE_PAIR: f"GPU pair {self.gpu} <-> {self.peer} of node {self.node}",
            SCOPE_PEERS: f"{gpu} of node {self.node}: with all its peers at once",
        }
        return words[self.scope]


def _kind(slot: Slot) -> str:
    if slot.link == LINK_HOST:
        return SCOPE_HOST_LINK
    if slot.link in (LINK_LOCAL, LINK_NONE):
        return SCOPE_MEMORY
    if slot.link == LINK_PEERS:
        return SCOPE_PEERS
    return SCOPE_PAIR


class _Node:
    """One node's row of a fleet, read into findings."""

    def __init__(self, fleet: Fleet, i: int) -> None:
        self.fleet, self.i = fleet, i
        self.entry = fleet.entries[i]
        self.judged = [int(j) for j in np.flatnonzero(fleet.judged & ~np.isnan(fleet.values[i]))]
        self.low = [int(j) for j in np.flatnonzero(fleet.low[i])]

    def figure(self, j: int) -> Figure:
        f = self.fleet
        return Figure(
            f.slots[j],
            float(f.values[self.i, j]),
            float(f.median[j]),
            float(f.ratio[self.i, j]),
            float(f.z[self.i, j]),
        )

    def finding(
        self,
        scope: str,
        cols: Iterable[int],
        judged: int,
        gpu: int | None = None,
        peer: int | None = None,
    ) -> Finding:
        figures = sorted((self.figure(j) for j in cols), key=lambda x: (x.ratio, x.z))
        table = self.entry.table
        return Finding(
            scope=scope,
            node=self.entry.node,
            source=self.entry.key.source,
            fleet=self.fleet.sku,
            gpu=gpu,
            device=None if gpu is None else table.device(gpu),
            peer=peer,
            peer_device=None if peer is None else table.device(peer),
            figures=tuple(figures),
            judged=judged,
        )

    def gpus(self) -> set[int]:
        return {self.fleet.slots[j].row for j in self.judged}

    def findings(self) -> list[Finding]:
        if not self.low:
            return []
        slots = self.fleet.slots
        low_gpus = {slots[j].row for j in self.low} | {
            slots[j].column for j in self.low if slots[j].column is not None
        }
        whole = len(self.low) * 2 >= len(self.judged)
        gpu_findings, rest = self._gpus()
        if whole or (len(gpu_findings) * 2 >= len(self.gpus()) and len(low_gpus) > 1):
            return [self.finding(SCOPE_NODE, self.low, len(self.judged))]
        return gpu_findings + self._parts(rest)

    def _peers_of(self, gpu: int, cols: Iterable[int]) -> set[int]:
        out = set()
        for j in cols:
            s = self.fleet.slots[j]
            if s.column is not None and gpu in (s.row, s.column):
                out.add(s.column if s.row == gpu else s.row)
        return out

    def _gpus(self) -> tuple[list[Finding], list[int]]:
        """Whole-GPU findings, and the low figures they leave."""
        slots, out, left = self.fleet.slots, [], list(self.low)
        for gpu in sorted(self.gpus()):
            mine = [j for j in left if gpu in (slots[j].row, slots[j].column)]
            if not mine:
                continue
            judged = [j for j in self.judged if gpu in (slots[j].row, slots[j].column)]
            peers, low_peers = self._peers_of(gpu, judged), self._peers_of(gpu, mine)
            kinds = {_kind(slots[j]) for j in mine if _kind(slots[j]) != SCOPE_PEERS}
            most = len(low_peers) * 2 > len(peers) and len(peers) > 1
            kinds.discard(SCOPE_PAIR)
            if most:
                kinds.add(SCOPE_PAIR)
            has = {_kind(slots[j]) for j in judged} - {SCOPE_PEERS}
            if len(kinds) >= 2 or (kinds and kinds == has and len(has) > 1):
                out.append(self.finding(SCOPE_GPU, mine, len(judged), gpu))
            elif most:
                links = [j for j in mine if _kind(slots[j]) in (SCOPE_PAIR, SCOPE_PEERS)]
                out.append(self.finding(SCOPE_GPU_LINKS, links, len(judged), gpu))
                mine = links
            else:
                continue
            taken = set(mine)
            left = [j for j in left if j not in taken]
        return out, left

    def _parts(self, cols: Sequence[int]) -> list[Finding]:
        slots = self.fleet.slots
        by: dict[tuple[str, int, int | None], list[int]] = {}
        for j in cols:
            s = slots[j]
            kind = _kind(s)
            pair = None if s.column is None else (min(s.row, s.column), max(s.row, s.column))
            key: tuple[str, int, int | None] = (kind, *pair) if pair else (kind, s.row, None)
            by.setdefault(key, []).append(j)
        pairs = [k for k in by if k[0] == SCOPE_PAIR]
        for key in [k for k in by if k[0] == SCOPE_PEERS]:
            owner = next((p for p in pairs if key[1] in (p[1], p[2])), None)
            if owner is not None:
                by[owner].extend(by.pop(key))
        out = []
        for (kind, gpu, peer), members in by.items():
            judged = sum(1 for j in self.judged if self._covers(slots[j], kind, gpu, peer))
            out.append(self.finding(kind, members, judged, gpu, peer))
        return out

    @staticmethod
    def _covers(s: Slot, kind: str, gpu: int, peer: int | None) -> bool:
        if _kind(s) != kind:
            return False
        if peer is None:
            return s.row == gpu
        return {s.row, s.column} == {gpu, peer}


def corroborated(finding: Finding, threshold: float) -> bool:
    """Whether a finding stands: a figure more than ``threshold`` under the median, or at
    least two figures low by their robust z. A lone figure low by z alone is what chance
    gives among a fleet's million figures (z below -4: 3 in 100,000 of normal noise)."""
    return finding.worst.ratio < 1.0 - threshold or len(finding.figures) >= 2


def find(fleet: Fleet, threshold: float) -> list[Finding]:
    """Every finding of a fleet's nodes that stands (:func:`corroborated`), worst first
    (the lowest ratio, then z)."""
    out: list[Finding] = []
    for i in np.flatnonzero(fleet.low.any(axis=1)):
        found = _Node(fleet, int(i)).findings()
        out.extend(f for f in found if corroborated(f, threshold))
    out.sort(key=lambda f: (f.worst.ratio, f.worst.z, f.node))
    return out
