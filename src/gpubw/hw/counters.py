"""Health counters of a GPU and its links, and the ones that rose during a run.

A device's :attr:`gpubw.hw.nvml.DeviceFacts.counters` maps a counter's name to its count:

==============================  =============================================================
``pcie_replay``                 PCIe replays (NVML ``nvmlDeviceGetPcieReplayCounter``): a
                                link that retransmits is a link that errs
``aer_correctable``,            PCIe Advanced Error Reporting totals from sysfs
``aer_nonfatal``, ``aer_fatal``  (``/sys/bus/pci/devices/<bdf>/aer_dev_*``, ``TOTAL_ERR_*``),
                                where the kernel has them
``nvlink_crc_flit``,            NVLink data-link errors summed over the links (NVML
``nvlink_crc_data``,            ``nvmlDeviceGetNvLinkErrorCounter``; per link in
``nvlink_replay``,              ``nvlink.errors``)
``nvlink_recovery``
``remapped_rows_correctable``,  HBM rows remapped (``nvmlDeviceGetRemappedRows``), and whether
``remapped_rows_uncorrectable``, a remapping waits for a reset or has failed (0 or 1)
``remap_pending``,
``remap_failed``
``retired_pages_sbe``,          pages retired for single- and double-bit ECC errors (before
``retired_pages_dbe``,          Ampere; ``nvmlDeviceGetRetiredPages``) and a retirement
``retired_pages_pending``       waiting for a reset (0 or 1)
==============================  =============================================================

A counter that is higher at the end of a run than at its start (:func:`rises`) is named as a
suspect in the verdict of every failed cell that involves that GPU: a link that replayed or
recovered while the copies ran explains a slow figure better than any figure does.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

#: every counter, in the order they are shown, with its words
COUNTERS: tuple[tuple[str, str], ...] = (
    ("pcie_replay", "PCIe replays"),
    ("aer_correctable", "PCIe AER correctable errors"),
    ("aer_nonfatal", "PCIe AER non-fatal errors"),
    ("aer_fatal", "PCIe AER fatal errors"),
    ("nvlink_crc_flit", "NVLink CRC flit errors"),
    ("nvlink_crc_data", "NVLink CRC data errors"),
    ("nvlink_replay", "NVLink replays"),
    ("nvlink_recovery", "NVLink recoveries"),
    ("remapped_rows_correctable", "rows remapped (correctable errors)"),
    ("remapped_rows_uncorrectable", "rows remapped (uncorrectable errors)"),
    ("remap_pending", "row remapping pending a reset"),
    ("remap_failed", "row remapping failed"),
    ("retired_pages_sbe", "pages retired (single-bit errors)"),
    ("retired_pages_dbe", "pages retired (double-bit errors)"),
    ("retired_pages_pending", "page retirement pending a reset"),
)
WORDS = dict(COUNTERS)
#: the per-link NVLink counters, in the order of ``NvLinkState.errors`` rows
NVLINK_KINDS = ("crc_flit", "crc_data", "replay", "recovery")
#: sysfs AER files and the total line of each
AER_FILES = (
    ("aer_correctable", "aer_dev_correctable", "TOTAL_ERR_COR"),
    ("aer_nonfatal", "aer_dev_nonfatal", "TOTAL_ERR_NONFATAL"),
    ("aer_fatal", "aer_dev_fatal", "TOTAL_ERR_FATAL"),
)
SYSFS_PCI = Path("/sys/bus/pci/devices")


def read_aer(pci_bus_id: str, root: Path = SYSFS_PCI) -> dict[str, int]:
    """The AER totals of a PCI device from sysfs (the counters the kernel has; none where
    AER is not reported)."""
    out: dict[str, int] = {}
    for name, filename, total in AER_FILES:
        try:
            text = (root / pci_bus_id / filename).read_text(encoding="ascii", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == total and parts[1].isdigit():
                out[name] = int(parts[1])
    return out


def rises(start: Mapping[str, int], end: Mapping[str, int]) -> list[tuple[str, int, int]]:
    """(counter, at the start, at the end) for every counter higher at the end, in the
    order of :data:`COUNTERS` (unknown names after, sorted)."""
    order = {name: i for i, (name, _) in enumerate(COUNTERS)}
    names = sorted(set(start) & set(end), key=lambda n: (order.get(n, len(order)), n))
    return [(n, int(start[n]), int(end[n])) for n in names if int(end[n]) > int(start[n])]


def risen_links(
    start: tuple[tuple[int | None, ...], ...], end: tuple[tuple[int | None, ...], ...]
) -> list[int]:
    """The NVLink links (indexes) whose error counts rose between two readings."""
    out = []
    for link, (a, b) in enumerate(zip(start, end)):
        if any(x is not None and y is not None and y > x for x, y in zip(a, b)):
            out.append(link)
    return out


def rise_words(name: str, before: int, after: int) -> str:
    """``PCIe replays rose from 0 to 12 during the run``."""
    return f"{WORDS.get(name, name)} rose from {before} to {after} during the run"


def counter_line(counters: Mapping[str, int]) -> str:
    """The non-zero counters in words (``PCIe replays 12; NVLink replays 3``), or ``all 0``."""
    shown = [f"{WORDS.get(n, n)} {counters[n]}" for n, _ in COUNTERS if counters.get(n)]
    shown += [f"{n} {v}" for n, v in sorted(counters.items()) if n not in WORDS and v]
    return "; ".join(shown) if shown else f"all {len(counters)} at 0"
