"""Pageable host memory testcases (#57, #58): beside the pinned figures, data verified."""

from __future__ import annotations

from _node import FAST, json_run, run_cli, values
from gpubw.testcases import BUILTINS

H2D, D2H = "host_to_device_pageable_memcpy_ce", "device_to_host_pageable_memcpy_ce"


def test_pageable_testcases_come_after_every_existing_one():
    """gpubw's own keys go after nvbandwidth's 44 and 13 multinode ones: 57 and 58."""
    keys = [k for k, _ in BUILTINS]
    assert keys[-2:] == [H2D, D2H] and keys.index(H2D) == 57


def test_pageable_is_reported_beside_pinned(capsys, tmp_path):
    """Each direction measured per GPU; the summary shows pinned, pageable and the share."""
    argv = ("--simulate", "h200x2", "-t", "0", "1", "57", "58", *FAST)
    code, doc, err = json_run(capsys, tmp_path, *argv)
    assert code == 0, err
    for pinned, pageable in (("host_to_device_memcpy_ce", H2D), ("device_to_host_memcpy_ce", D2H)):
        (fast,), (slow,) = values(doc, pinned), values(doc, pageable)
        assert all(0 < s < f for s, f in zip(slow, fast))
    code, out, _ = run_cli(capsys, *argv, "--outlier-pct", "90")
    assert "Host copies, pinned and pageable memory (CE):" in out
    assert "host -> GPU GPU 1: pinned" in out and "% of pinned)" in out


def test_data_that_did_not_arrive_fails_verification(capsys, tmp_path, monkeypatch):
    """A source that never holds the pattern (as a copy that moved nothing): the check of
    the destination fails the testcase, naming the pageable copy."""
    from gpubw.kernels.patterns import DST_SEED
    from gpubw.measure import pageable

    def unfilled(system, stream, host, device, twin, to_device):
        n = host.nbytes // 4 * 4
        for buf in (twin, device):
            buf.fill(DST_SEED, n, stream=stream, exec_device=device.device)
        system.backend.memcpy_async(host.ptr, twin.ptr, host.nbytes, stream)
        system.backend.synchronize(stream, 10.0)

    monkeypatch.setattr(pageable, "_fill", unfilled)
    for key in ("57", "58"):
        code, doc, _ = json_run(capsys, tmp_path, "--simulate", "h200x2", "-t", key, *FAST)
        (t,) = doc["testcases"]
        assert code != 0 and t["status"] != "Passed"
        assert "Host (pageable)" in t["message"], t["message"]
