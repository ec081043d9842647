"""The node-check options' values: durations, fractions, NUMA nodes, GPU lists."""

from __future__ import annotations

import argparse

import pytest

from gpubw.cli import argtypes as opts


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90.0), ("300s", 300.0), ("10m", 600.0), ("1.5h", 5400.0)]
)
def test_durations_take_seconds_minutes_and_hours(text, seconds):
    """A number is seconds; s, m (min) and h are units."""
    assert opts.duration(text) == seconds


@pytest.mark.parametrize("text", ["", "m", "-5m", "0", "nan", "inf", "8d", "169h"])
def test_bad_durations_name_the_value(text):
    """Not a duration, not positive or above a week: the value is in the message."""
    with pytest.raises(argparse.ArgumentTypeError, match=repr(text).replace("+", r"\+")):
        opts.duration(text)


def test_fractions_numa_nodes_and_gpu_lists():
    """5% and 0.05 are one fraction; node numbers lose leading zeros; lists split on commas."""
    assert opts.soak_drop("5%") == opts.soak_drop("0.05") == 0.05
    assert opts.host_numa("01") == "1" and opts.host_numa("Remote") == "remote"
    assert opts.devices("0, GPU-ab12 ,0000:1b:00.0") == ("0", "GPU-ab12", "0000:1b:00.0")
    for bad, fn in (("x", opts.soak_drop), ("-1", opts.host_numa), ("0,", opts.devices)):
        with pytest.raises(argparse.ArgumentTypeError):
            fn(bad)
