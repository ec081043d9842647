"""Percent of nominal, the L2 knee and the strided read's sectors: pure arithmetic."""

from __future__ import annotations

import pytest

from gpubw_stream.metrics import (
    l2_fits,
    percent_of_nominal,
    sectors_touched,
    strided_count,
    strided_traffic,
)

from _stream_devices import H200, T4

GB = 1e9


def test_nominal_bandwidth_is_bus_width_times_clock_times_two() -> None:
    """Nominal bandwidth is bus width x memory clock x 2: 4815 GB/s on an H200, 320 GB/s on a T4."""
    # H200: 6016 / 8 bytes x 3201e6 Hz x 2 = 4814.3 GB/s (the "4815 GB/s" of the spec sheet)
    assert H200.nominal_memory_bandwidth == pytest.approx(4815 * GB, rel=2e-4)
    # T4: 256 / 8 bytes x 5000e6 Hz x 2 = 320 GB/s (the seed's denominator)
    assert T4.nominal_memory_bandwidth == pytest.approx(320 * GB)


def test_percent_of_nominal() -> None:
    """percent_of_nominal gives the seed's T4 and the reference H200 figures; None stays None."""
    # the seed's self-test: 256 MiB fp16 y = x + 1 in 1.8 ms on a T4 is 298 GB/s, 93 %
    moved = 2 * 256 * 2**20
    assert percent_of_nominal(moved / 1.8e-3, T4) == pytest.approx(93.2, abs=0.1)
    # counting only x gives half of it: the mistake the seed warns about
    assert percent_of_nominal(moved / 2 / 1.8e-3, T4) == pytest.approx(46.6, abs=0.1)
    # the reference H200 plateau (1 GiB fp16, read + write): 4166 GB/s is 86.5 %
    assert percent_of_nominal(4166 * GB, H200) == pytest.approx(86.53, abs=0.01)
    assert percent_of_nominal(None, H200) is None


def test_percent_of_nominal_unknown_without_a_memory_clock() -> None:
    """Without a memory clock the percent of nominal is unknown (None)."""
    import attrs

    assert percent_of_nominal(1e12, attrs.evolve(T4, memory_clock_khz=0)) is None


@pytest.mark.parametrize(
    ("device", "working_set", "fits"),
    [
        (T4, 2 * 2**20, True),  # the seed: 1 MiB x and y fit the T4's 4 MiB L2
        (T4, 4 * 2**20, True),
        (T4, 4 * 2**20 + 1, False),
        (T4, 2 * 64 * 2**20, False),
        (H200, 2 * 16 * 2**20, True),
        (H200, 3 * 16 * 2**20, True),  # triad on 16 MiB arrays: 48 MiB < 60 MiB
        (H200, 3 * 32 * 2**20, False),
        (H200, 0, False),
    ],
)
def test_l2_knee(device: object, working_set: int, fits: bool) -> None:
    """A working set fits the L2 when it is positive and at most the L2's size."""
    assert l2_fits(working_set, device) is fits  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("count", "stride", "itemsize", "sectors"),
    [
        (8, 1, 4, 1),  # 8 contiguous fp32 = one sector
        (9, 1, 4, 2),
        (4, 2, 4, 1),  # x[::2] of 8 fp32: one sector
        (1024, 2, 4, 256),  # every sector of 2048 fp32
        (1024, 8, 4, 1024),  # 32-byte stride: one sector per element
        (1024, 16, 4, 1024),  # 64-byte stride: half the sectors of the array
        (1024, 16, 2, 1024),
        (1024, 4, 2, 256),  # fp16, 8-byte stride: every sector
        (0, 2, 4, 0),
        (1, 100, 8, 1),
    ],
)
def test_sectors_touched(count: int, stride: int, itemsize: int, sectors: int) -> None:
    """sectors_touched counts the 32-byte sectors a strided read of count elements touches."""
    assert sectors_touched(count, stride, itemsize) == sectors


def test_strided_traffic_and_count() -> None:
    """A strided read's element count and traffic are right, and the same bytes in fp16 and fp32."""
    # 1 MiB of fp32, k = 2: 131072 elements read and written; all 32768 sectors of x read
    m = strided_count(2**20, 2, 4)
    assert m == 131072
    assert strided_traffic(m, 2, 4) == (2**20, 2**19)
    # the same bytes in fp16 (twice the elements) move the same bytes
    m16 = strided_count(2**20, 2, 2)
    assert m16 == 2 * m
    assert strided_traffic(m16, 2, 2) == (2**20, 2**19)
    assert strided_count(10, 4, 4) == 1  # 2 whole fp32 elements: x[::4] has one
    assert strided_count(0, 2, 4) == 0
