"""Hand-built reports shared by the writer, schema and plot tests (no backend involved)."""

from __future__ import annotations

from gpubw import RunOptions
from gpubw.backend.base import DeviceInfo
from gpubw.model.report_io import device_record as device_dict
from gpubw.model.results import BANDWIDTH, LATENCY, Matrix, Report, Status, TestcaseResult

MIB = 1 << 20
GB = 1e9


def h200(ordinal: int, bus: int) -> DeviceInfo:
    return DeviceInfo(
        ordinal=ordinal,
        name="NVIDIA H200",
        uuid=f"GPU-0000000{ordinal}-0000-0000-0000-000000000000",
        pci_bus_id=f"0000:{bus:02x}:00.0",
        compute_capability=(9, 0),
        sm_count=132,
        l2_bytes=60 * MIB,
        memory_bytes=141 * 1024 * MIB,
        memory_bus_width_bits=6016,
        memory_clock_khz=3201000,
        clock_khz=1980000,
        async_engines=3,
        numa_node=0,
        local_cpus=tuple(range(4)),
    )


DEVICES = [device_dict(h200(0, 0x1B)), device_dict(h200(1, 0x43))]
HEAD_CE = "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)"
D2D_READ = "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)"


def one_by_n(key: str = "host_to_device_memcpy_ce", samples: bool = False) -> Matrix:
    s = (((54.80 * GB, 54.8731 * GB, 54.90 * GB), (55.0 * GB, 55.0212 * GB, 55.1 * GB)),)
    return Matrix(
        key=key,
        description=HEAD_CE,
        unit=BANDWIDTH,
        row_labels=["0"],
        column_labels=["0", "1"],
        values=[[54.8731 * GB, 55.0212 * GB]],
        samples=s if samples else (),
        bytes_counted="once per copy (size x loops)",
        statistic="median",
        initiator="CE",
        bandwidth_kind="first",
        bytes_per_copy=512 * MIB,
    )


def n_by_n(key: str = "device_to_device_memcpy_read_ce", head: str = D2D_READ) -> Matrix:
    return Matrix(
        key=key,
        description=head,
        unit=BANDWIDTH,
        row_labels=["0", "1"],
        column_labels=["0", "1"],
        values=[[None, 389.44 * GB], [388.91 * GB, None]],
        bytes_counted="once per copy (size x loops)",
        initiator="CE",
    )


def bidirectional() -> list[Matrix]:
    key = "device_to_device_bidirectional_memcpy_read_ce"
    out = []
    for word, scale in (("Read1", 1.0), ("Read2", 1.001), ("Total", 2.001)):
        out.append(
            Matrix(
                key=f"{key}_{word.lower()}",
                description=f"memcpy CE GPU(row) <-> GPU(column) {word} bandwidth (GB/s)",
                unit=BANDWIDTH,
                row_labels=["0", "1"],
                column_labels=["0", "1"],
                values=[[None, 389.4 * scale * GB], [389.2 * scale * GB, None]],
                bytes_counted="once per copy, per direction",
                initiator="CE",
                bandwidth_kind="vector",
            )
        )
    return out


def latency() -> Matrix:
    return Matrix(
        key="device_to_device_latency_sm",
        description="Device to Device Latency SM GPU(row) <-> GPU(column) (ns)",
        unit=LATENCY,
        row_labels=["0", "1"],
        column_labels=["0", "1"],
        values=[[None, 830.12e-9], [829.5e-9, None]],
        statistic="mean of 1000000 accesses",
        initiator="pointer chase",
        bandwidth_kind="latency",
    )


def sweep_results() -> list[TestcaseResult]:
    out = []
    for size, bw, fits in (
        (16 * MIB, 3900.0, True),
        (256 * MIB, 2150.0, False),
        (1024 * MIB, 2094.0, False),
    ):
        m = Matrix(
            key="device_local_copy",
            description="memcpy local GPU(column) bandwidth (GB/s)",
            unit=BANDWIDTH,
            row_labels=["0"],
            column_labels=["0", "1"],
            values=[[bw * GB, (bw - 3) * GB]],
            bytes_counted="once per copy (read + write is twice this)",
            initiator="CE",
            notes=(("l2_fits", (fits, fits)), ("percent_of_nominal", bw / 4815.0 * 100)),
        )
        out.append(
            TestcaseResult(
                key="device_local_copy",
                status=Status.PASSED,
                index=34,
                size=size,
                matrices=[m],
                duration_s=0.5,
                plugin="gpubw",
                description="Copy engine copy inside each device.",
            )
        )
    return out


def report(
    testcases: list[TestcaseResult] | None = None,
    simulated: bool = False,
    verbose: bool = False,
    warnings: tuple[str, ...] = (),
) -> Report:
    return Report(
        tool="gpubw",
        tool_version="0.1.0",
        backend="simulated" if simulated else "cuda",
        simulated=simulated,
        system_name="dgx-h200-2" if simulated else "",
        host="gpu-node-17",
        versions={"cuda_driver": 12080, "driver": "570.124.06"},
        devices=DEVICES,
        run_options=RunOptions(verbose=verbose),
        testcases=testcases if testcases is not None else [],
        warnings=warnings,
        started="2026-11-29T10:00:00+00:00",
        finished="2026-11-29T10:00:05+00:00",
        duration_s=5.0,
    )


def passed(key: str, matrices: list[Matrix], index: int | None = None) -> TestcaseResult:
    return TestcaseResult(
        key=key,
        status=Status.PASSED,
        index=index,
        size=512 * MIB,
        matrices=matrices,
        duration_s=1.25,
        plugin="gpubw",
        description=f"{key} description",
    )


def full_report(simulated: bool = False, verbose: bool = False) -> Report:
    """Every shape the writers must handle, in one report."""
    return report(
        [
            passed("host_to_device_memcpy_ce", [one_by_n(samples=verbose)], 0),
            passed("device_to_device_memcpy_read_ce", [n_by_n()], 4),
            passed("device_to_device_bidirectional_memcpy_read_ce", bidirectional(), 6),
            passed("device_to_device_latency_sm", [latency()], 33),
            TestcaseResult(
                key="device_to_device_memcpy_write_ce",
                status=Status.WAIVED,
                index=5,
                message="needs 2 devices with peer access; none can access another",
            ),
            TestcaseResult(
                key="all_to_host_memcpy_ce",
                status=Status.ERROR,
                index=8,
                message="cuMemAllocHost failed: CUDA_ERROR_OUT_OF_MEMORY",
            ),
            TestcaseResult(
                key="bogus", status=Status.NOT_FOUND, message="Testcase bogus not found!"
            ),
        ],
        simulated=simulated,
        verbose=verbose,
    )
