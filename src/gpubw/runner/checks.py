"""The checks of a run against its open System, before anything runs: buffer sizes that
cannot fit, a ``--sample-pairs`` count that cannot cover the devices, and nvbandwidth's note
on a small buffer.

Cut out of :mod:`gpubw.runner.core` along the seam between running the steps and deciding,
up front, whether they can run. A check refuses with a :class:`UsageError` (every rank of the
world alike) or returns a note; notes are the report's warnings (data), never printed here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from gpubw.kernels import PATTERN_WORDS
from gpubw.memory.system import System
from gpubw.model.errors import GpubwError, UsageError
from gpubw.model.options import DEFAULT_BUFFER_SIZE, RunOptions
from gpubw.model.sizes import format_size
from gpubw.runner.node_checks import agree_selection, check_requests
from gpubw.runner.registry import Entry, Selected

#: nvbandwidth's warning for a buffer smaller than the default; its "(64MB)" is stale
#: (the default is 512 MiB), so gpubw names the right figure.
SMALL_BUFFER_NOTE = (
    "NOTE: You have chosen a buffer size that is smaller than the default buffer size. "
    "It is suggested to use the default buffer size (512 MiB) to achieve maximal peak "
    "bandwidth."
)

#: Device memory gpubw itself keeps on each device during a run: two 2 MiB verification
#: patterns and the verification result words (a 2 MiB allocation page).
SCRATCH_BYTES = 2 * PATTERN_WORDS * 4 + (2 << 20)

#: how the note of a raised ``--sample-pairs`` fraction starts (:func:`is_sample_pairs_note`)
_SAMPLE_NOTE_LEAD = "--sample-pairs "


def small_buffer_warnings(selection: Sequence[Selected], sizes: Sequence[int]) -> list[str]:
    """nvbandwidth's NOTE when a buffer is smaller than the 512 MiB default (only if some
    selected testcase uses the size at all)."""
    sized = any(isinstance(s, Entry) and not s.fixed_size for s in selection)
    if sized and any(size < DEFAULT_BUFFER_SIZE for size in sizes):
        return [SMALL_BUFFER_NOTE]
    return []


def check_sizes(system: System, selection: Sequence[Selected], sizes: Sequence[int]) -> None:
    """Refuse, before anything runs, a buffer size that cannot fit: larger than what the
    device with the least memory (of those this process drives: under MPI the host's first
    rank checks every device) can allocate (its free memory as the driver reports it, so the
    context's reserve and other processes' memory count), or than the host's physical
    memory (pinned buffers). Only sizes that some selected testcase uses count. Raises
    :class:`UsageError`."""
    sized = any(isinstance(s, Entry) and s.cls is not None and not s.fixed_size for s in selection)
    if not sized or not sizes:
        return
    largest = max(sizes)
    if system.devices:
        room: list[tuple[int, Any]] = []
        for d in system.devices:
            if d.ordinal not in system.driven_devices:
                continue  # not this rank's: the host's first rank checks it
            try:
                free = min(system.backend.memory_info(d.ordinal)[0], d.memory_bytes)
            except GpubwError:  # no figure: the total is still an upper bound
                free = d.memory_bytes
            room.append((free, d))
        free, small = min(room, key=lambda r: r[0])
        allowed = max(0, free - SCRATCH_BYTES)
        if largest > allowed:
            kept = small.memory_bytes - free
            raise UsageError(
                f"buffer size {format_size(largest)} ({largest} bytes) is larger than the "
                f"memory of device {small.ordinal} ({small.name}, {format_size(small.memory_bytes)}"
                f") can hold: {format_size(free)} free ({format_size(kept)} kept by the CUDA "
                f"context and other allocations), less {format_size(SCRATCH_BYTES)} of gpubw's "
                f"own; it must be at most {allowed} bytes",
                param="sizes",
            )
    host = system.backend.host_memory_bytes()
    if host is not None and largest > host:
        raise UsageError(
            f"buffer size {format_size(largest)} ({largest} bytes) is larger than the host's "
            f"memory ({format_size(host)}); it must be at most {host} bytes",
            param="sizes",
        )


def sample_pairs_note(options: RunOptions, n: int) -> str | None:
    """Refuse (UsageError, before anything runs) a ``--sample-pairs`` count that cannot cover
    the ``n`` devices of the run's largest N x N testcase (rows: every GPU of the world
    across ranks, of the node in one process) as sources and destinations; the note, for
    the report's warnings, when a fraction is raised to ``n`` cells (else None). Every rank
    decides alike."""
    k = options.sample_pairs
    if k is None or n < 2:
        return None
    if isinstance(k, int) and not isinstance(k, bool):
        if k < n:
            raise UsageError(
                f"{k} pair(s) cannot cover the N = {n} devices of this run's N x N "
                f"testcases as sources and destinations: ask for at least {n}",
                param="sample_pairs",
            )
        return None
    if isinstance(k, float) and math.ceil(k * n * (n - 1)) < n:
        return (
            f"{_SAMPLE_NOTE_LEAD}{k:g} is {math.ceil(k * n * (n - 1))} of {n * (n - 1)} "
            f"cells, raised to {n} (every device once as source and destination)"
        )
    return None


def is_sample_pairs_note(warning: str) -> bool:
    """Whether a report's warning is :func:`sample_pairs_note`'s (the command also says it on
    standard error, as it always has)."""
    return warning.startswith(_SAMPLE_NOTE_LEAD) and ", raised to " in warning


def check_sizes_everywhere(
    system: System, selection: Sequence[Selected], sizes: Sequence[int]
) -> None:
    """:func:`check_sizes` on every rank of the System's world, agreed: if any rank refuses
    (hosts whose GPUs or memory differ), every rank raises a UsageError at once (its own, or
    ``rank <r>: <that rank's refusal>``) instead of the others going on into collectives that
    the refusing rank never joins."""
    world = system.world
    if world.size == 1:
        check_sizes(system, selection, sizes)
        check_requests(system)
        return
    refused: UsageError | None = None
    unmatched: tuple[str, ...] = ()
    try:
        check_sizes(system, selection, sizes)
        unmatched = check_requests(system)
    except UsageError as exc:
        refused = exc
    agreement = world.agree(refused)
    if refused is not None:
        raise refused
    if not agreement.ok:
        raise UsageError(f"rank {agreement.failed_rank}: {agreement.message}", param="sizes")
    agree_selection(system, unmatched)
