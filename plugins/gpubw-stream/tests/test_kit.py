"""Every STREAM testcase passes gpubw.testing's checks on a simulated h200x2 (samples behind
every figure, read + write counting within the memory's nominal bandwidth, a valid report)."""

from __future__ import annotations

from typing import Any

import pytest
from gpubw.testing import check_testcase

KEYS = ("stream_copy", "stream_scale", "stream_add", "stream_triad", "stream_read",
        "stream_write", "stream_strided_read")  # fmt: skip


@pytest.mark.parametrize("key", KEYS)
def test_each_testcase_passes_the_kit(key: str, gpubw_run_testcase: Any) -> None:
    """Run as gpubw -t KEY --simulate h200x2 would, then checked by the kit."""
    report = gpubw_run_testcase(key, sizes=["64MiB"])
    for result in check_testcase(report, key):
        assert all(m.bytes_counting == "read+write" for m in result.matrices)
