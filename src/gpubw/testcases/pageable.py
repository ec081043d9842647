"""Host <-> device copies from and to pageable host memory (gpubw's own; not in nvbandwidth).

nvbandwidth copies pinned host memory only. A program that copies its ordinary (``malloc``,
numpy) memory gets what these measure: the driver stages every copy through pinned buffers
of its own, with the host taking part, so the figure depends on the CPU, its memory and the
staging as much as on the link. Column g copies between device g and pageable memory
touched near g's CPUs (or on the ``--host-numa`` node); compare with
``host_to_device_memcpy_ce`` / ``device_to_host_memcpy_ce`` (pinned): the verdict summary
shows the two side by side. Timed without the spin gate (see :mod:`gpubw.measure.pageable`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import attrs

from gpubw.measure.initiators import CE
from gpubw.measure.measurement import CellMeasurement, Kind
from gpubw.measure.pageable import measure_pageable
from gpubw.memory.buffers import DeviceBuffer, PageableHostBuffer
from gpubw.model.results import AXIS_GPU, AXIS_HOST, COLUMN_TO_ROW, ROW_TO_COLUMN, Axes, Matrix
from gpubw.testcases.base import Testcase
from gpubw.testcases.shapes import Plan, bandwidth_matrix, counted_bytes_of

H2D_PAGEABLE = "memcpy CE CPU(row) -> GPU(column) pageable bandwidth (GB/s)"
D2H_PAGEABLE = "memcpy CE CPU(row) <- GPU(column) pageable bandwidth (GB/s)"


def pageable_traffic(plan: Plan, *, to_device: bool) -> list[Matrix]:
    """One row; column g: pageable host memory near g <-> device g, as the direction says
    (the plan's initiator is the copy engine)."""
    testcase, size, loops = plan.testcase, plan.size, plan.loops
    system = testcase.system
    row: list[CellMeasurement | None] = []
    nodes: list[int | None] = []
    for g in range(testcase.device_count):
        if not testcase.selected(g):
            row.append(None)
            nodes.append(None)
            continue
        with contextlib.ExitStack() as stack:
            host = stack.enter_context(PageableHostBuffer.allocate(system, g, size))
            device = stack.enter_context(DeviceBuffer.allocate(system, g, size))
            twin = stack.enter_context(DeviceBuffer.allocate(system, g, size))
            nodes.append(system.pool.numa_node(host))
            row.append(
                measure_pageable(system, host, device, twin, to_device=to_device, loops=loops)
            )
    copy = plan.copy_text(counted_bytes_of(row, 0))
    counted = (
        f"bytes of the copy ({copy}), counted once; pageable host memory, staged by the "
        "driver, timed without the spin gate"
    )
    plan = attrs.evolve(plan, notes=(*plan.notes, ("host_numa_nodes", tuple(nodes))))
    axes = Axes(AXIS_HOST, AXIS_GPU, ROW_TO_COLUMN if to_device else COLUMN_TO_ROW)
    return [bandwidth_matrix(plan, Kind.FIRST, [row], counted, axes=axes)]


class HostToDevicePageableCE(Testcase):
    """Host to device copy by the copy engine from pageable (not pinned) host memory, one
    device at a time: what a program copying its ordinary memory sees (the driver stages
    it). Reports each device's bandwidth; compare host_to_device_memcpy_ce (pinned).
    Not in the default suite (seconds at 512 MiB): name it with -t."""

    in_default_suite = False  # seconds per run at 512 MiB; name it (-t) to run it

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return pageable_traffic(Plan(self, size, loops, CE, H2D_PAGEABLE), to_device=True)


class DeviceToHostPageableCE(Testcase):
    """Device to host copy by the copy engine into pageable (not pinned) host memory, one
    device at a time: what a program copying into its ordinary memory sees (the driver
    stages it). Reports each device's bandwidth; compare device_to_host_memcpy_ce (pinned).
    Not in the default suite (seconds at 512 MiB): name it with -t."""

    in_default_suite = False  # seconds per run at 512 MiB; name it (-t) to run it

    def run(self, size: int, loops: int) -> Sequence[Matrix]:
        return pageable_traffic(Plan(self, size, loops, CE, D2H_PAGEABLE), to_device=False)
