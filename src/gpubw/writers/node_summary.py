"""Text of the node check that the text writer, ``gpubw info`` and ``gpubw check`` add:
each device's health counters, the node's Confidential Computing state, and the pinned and
pageable host copies side by side."""

from __future__ import annotations

from gpubw.hw.counters import counter_line
from gpubw.hw.nvml import CC_BOUNCE_BUFFERS, DeviceFacts
from gpubw.model.results import Report, Status

#: (direction, pinned testcase, pageable testcase)
PINNED_AND_PAGEABLE = (
    ("host -> GPU", "host_to_device_memcpy_ce", "host_to_device_pageable_memcpy_ce"),
    ("GPU -> host", "device_to_host_memcpy_ce", "device_to_host_pageable_memcpy_ce"),
)


def confidential_compute_line(state: bool | None) -> str:
    """The node's Confidential Computing state in words (NodeFacts.confidential_compute)."""
    if state is None:
        return "Confidential Computing: unknown (NVML cannot say)"
    if state:
        return f"Confidential Computing: on. {CC_BOUNCE_BUFFERS}"
    return "Confidential Computing: off"


def health_lines(f: DeviceFacts, indent: str = "  ") -> list[str]:
    """The device's health counters (the non-zero ones named), and the NVLink links with
    errors."""
    if not f.counters:
        return []
    out = [f"{indent}health counters: {counter_line(f.counters)}"]
    rows = f.nvlink.errors if f.nvlink is not None else ()
    bad = [(i, r) for i, r in enumerate(rows) if any(x for x in r if x)]
    for link, row in bad[:4]:
        words = ", ".join(
            f"{k} {v}" for k, v in zip(("CRC flit", "CRC data", "replay", "recovery"), row) if v
        )
        out.append(f"{indent}  NVLink link {link}: {words}")
    return out


def _figures(report: Report, key: str) -> dict[tuple[int | None, str], float]:
    """(size, column) -> GB/s of a one-row host testcase's Passed results."""
    out = {}
    for t in report.testcases:
        if t.key != key or t.status is not Status.PASSED or not t.matrices:
            continue
        m = t.matrices[0]
        for label, v in zip(m.column_labels, m.values[0] if m.values else ()):
            if v is not None:
                out[(t.size, label)] = v / 1e9
    return out


def pinned_and_pageable(report: Report) -> list[str]:
    """The pinned and the pageable figure of each GPU and direction, side by side, when the
    report has both (``host_to_device_memcpy_ce`` and ``host_to_device_pageable_memcpy_ce``,
    ...)."""
    out = []
    for words, pinned_key, pageable_key in PINNED_AND_PAGEABLE:
        pinned, pageable = _figures(report, pinned_key), _figures(report, pageable_key)
        both = [k for k in pinned if k in pageable]
        for size, column in both:
            a, b = pinned[(size, column)], pageable[(size, column)]
            out.append(
                f"  {words} GPU {column}: pinned {a:.2f} GB/s, pageable {b:.2f} GB/s "
                f"({b / a:.0%} of pinned)"
            )
    if out:
        out.insert(0, "Host copies, pinned and pageable memory (CE):")
    return out
