"""Fleets for the fleet tests: copies of one simulated report as many nodes, each with its
own host name, GPU UUIDs, time and noise, and optionally one injected fault."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpubw.model.results import AXIS_GPU, AXIS_HOST, Axes, axes_from_header

#: (testcase key, the matrix's axes, latency?, row label, column label) -> the cell's factor
Fault = Callable[[str, Axes, bool, str, str], float]


def healthy(testcase: str, axes: Axes, latency: bool, row: str, column: str) -> float:
    """No fault."""
    return 1.0


def slow_host_link(gpu: int, factor: float = 0.8) -> Fault:
    """GPU ``gpu``'s host link at ``factor``."""

    def fault(testcase: str, axes: Axes, latency: bool, row: str, column: str) -> float:
        if axes.rows == AXIS_HOST and axes.columns == AXIS_GPU and int(column) == gpu:
            return factor
        return 1.0

    return fault


def slow_pair(a: int, b: int, factor: float = 0.8) -> Fault:
    """The peer link between GPUs ``a`` and ``b`` at ``factor`` (bandwidth figures)."""

    def fault(testcase: str, axes: Axes, latency: bool, row: str, column: str) -> float:
        pair = axes.rows == AXIS_GPU and axes.columns == AXIS_GPU
        return factor if pair and not latency and {row, column} == {str(a), str(b)} else 1.0

    return fault


def slow_node(factor: float = 0.8) -> Fault:
    """Every bandwidth figure of the node at ``factor``."""

    def fault(testcase: str, axes: Axes, latency: bool, row: str, column: str) -> float:
        return 1.0 if latency else factor

    return fault


def node_copy(
    doc: dict[str, Any], node: str, seed: int, noise: float = 0.01, fault: Fault = healthy
) -> dict[str, Any]:
    """``doc`` as node ``node``'s report: its host name, UUIDs and start time, every figure
    scaled by 1 + ``noise`` * a normal draw and by ``fault``."""
    rng = random.Random(seed)
    out = copy.deepcopy(doc)
    out["host"] = node
    out["started"] = (
        f"2026-12-06T{seed // 3600 % 24:02d}:{seed // 60 % 60:02d}:{seed % 60:02d}+00:00"
    )
    for d in out["devices"]:
        d["uuid"] = f"GPU-{seed:08x}-0000-0000-0000-{d['ordinal']:012x}"
    for t in out["testcases"]:
        for m in t["matrices"]:
            latency = m["unit"] == "s"
            axes = axes_from_header(m["description"], len(m["row_labels"]))
            for r, row in enumerate(m["values"]):
                for c, v in enumerate(row):
                    if v is None:
                        continue
                    f = fault(t["key"], axes, latency, m["row_labels"][r], m["column_labels"][c])
                    jitter = 1.0 + noise * rng.gauss(0.0, 1.0)
                    row[c] = v * jitter / f if latency else v * jitter * f
    return out


def write_fleet(
    doc: dict[str, Any],
    folder: Path,
    n: int,
    faults: dict[str, Fault] | None = None,
    noise: float = 0.01,
) -> list[Path]:
    """``n`` nodes ``n000``... of ``doc`` in ``folder``; ``faults`` by node name."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        node = f"n{i:03d}"
        fault = (faults or {}).get(node, healthy)
        p = folder / f"{node}.json"
        p.write_text(json.dumps(node_copy(doc, node, i + 1, noise, fault)), encoding="utf-8")
        paths.append(p)
    return paths


#: the testcases of the fleet tests' simulated runs: host links, pairs, all-to-one, local
#: copies and pair latency; small and quick
SUITE = (
    "-t",
    "host_to_device_memcpy_ce",
    "device_to_host_memcpy_ce",
    "device_to_device_memcpy_read_ce",
    "all_to_one_write_ce",
    "device_local_copy",
    "device_to_device_latency_sm",
    "-b",
    "1M",
    "-i",
    "3",
    "--loop-count",
    "2",
    "-q",
)


def simulated(path: Path, system: str = "h200x8", host: str | None = None) -> dict[str, Any]:
    """A simulated run of :data:`SUITE` saved at ``path`` as ``host``'s report (the
    simulation's own host name otherwise); its document."""
    from gpubw.cli import command

    assert command.main(["--simulate", system, *SUITE, "-j", "-o", str(path)]) == 0
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    if host is not None:
        doc["host"] = host
        path.write_text(json.dumps(doc), encoding="utf-8")
    return doc


def system_file(folder: Path, name: str, **keys: Any) -> Path:
    """An h200x8 system file with ``keys`` (docs/simulate.md)."""
    path = folder / f"{name}.json"
    path.write_text(json.dumps({"name": name, "base": "h200x8", **keys}), encoding="utf-8")
    return path


def pair_override(a: int, b: int, ce: float, sm: float, gpus: int = 8) -> dict[str, Any]:
    """``peers`` of a system file: every pair, the pair ``a``-``b`` at ``ce`` and ``sm``."""
    pairs: list[Any] = []
    for x in range(gpus):
        for y in range(x + 1, gpus):
            pairs.append({"pair": [x, y], "ce": ce, "sm": sm} if (x, y) == (a, b) else [x, y])
    return {"pairs": pairs}


def small_suite(path: Path) -> dict[str, Any]:
    """One simulated h200x2 report of the default suite (4 MiB buffers, 2 samples) written
    to ``path``, as a dict."""
    from gpubw.cli import command

    argv = ["--simulate", "h200x2", "-b", "4MiB", "-i", "2", "-q", "-j", "-o", str(path)]
    assert command.main(argv) == 0
    return dict(json.loads(path.read_text(encoding="utf-8")))
