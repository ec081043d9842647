"""nvbandwidth v0.10's new testcases: the TMA copies and latency, the local read and write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import gpubw
from gpubw.backend.base import ptr, u32, u64
from gpubw.backend.sim.backend import SimulatedBackend
from gpubw.backend.sim.presets import load_system
from gpubw.kernels import source
from gpubw.model.errors import KernelCompileError, SimulationError
from gpubw.model.results import Status
from gpubw.testcases import latency as latency_tc
from gpubw.testcases import local, peer

TMA_KEYS = (
    "device_to_device_memcpy_read_tma",
    "device_to_device_memcpy_write_tma",
    "device_to_device_bidirectional_memcpy_read_tma",
    "device_to_device_bidirectional_memcpy_write_tma",
    "device_to_device_latency_tma",
    "device_local_copy_tma",
)
FAST: dict[str, Any] = {"samples": 2, "loops": 2}


def by_key(report: Any) -> dict[str, Any]:
    return {m.key: m for t in report.testcases for m in t.matrices}


@pytest.mark.parametrize("preset", ["h200x2", "h200x8"])
def test_tma_testcases_pass_at_the_sm_rates(preset: str) -> None:
    """Every TMA testcase passes on a simulated H200 system, each cell at the SM copy's rate
    (the model has no separate TMA rates), its title the class's TITLE."""
    keys = [*TMA_KEYS, "device_to_device_memcpy_read_sm", "device_local_copy_sm"]
    report = gpubw.run(keys, simulate=preset, sizes="4MiB", **FAST)
    assert [t.status for t in report.testcases] == [Status.PASSED] * len(keys)
    m = by_key(report)
    tma, sm = m["device_to_device_memcpy_read_tma"], m["device_to_device_memcpy_read_sm"]
    assert tma.description == peer.DeviceToDeviceReadTMA.TITLE
    assert tma.initiator == "TMA"
    for row_t, row_s in zip(tma.values, sm.values):
        for a, b in zip(row_t, row_s):
            assert (a is None) == (b is None)
            assert a is None or b is None or abs(a / b - 1) < 0.05
    assert m["device_local_copy_tma"].description == local.DeviceLocalCopyTMA.TITLE
    lat = m["device_to_device_latency_tma"]
    assert lat.description == latency_tc.DeviceToDeviceLatencyTMA.TITLE
    assert lat.initiator == "TMA pointer chase"
    assert m["device_to_device_bidirectional_memcpy_write_tma_total"].values[0][1] > 0


def test_tma_testcases_are_waived_without_tma(tmp_path: Path) -> None:
    """Below compute capability 9.0 (pcie4's L40S; a file's lowered H200) every TMA testcase
    is Waived, naming the devices and their capability; the SM ones still run."""
    report = gpubw.run([*TMA_KEYS, "device_local_read_sm"], simulate="pcie4", sizes="1MiB", **FAST)
    statuses = [t.status for t in report.testcases]
    assert statuses == [Status.WAIVED] * len(TMA_KEYS) + [Status.PASSED]
    reason = "needs TMA (compute capability 9.0 or newer); device(s) 0 (8.9), 1 (8.9)"
    assert all(t.message.startswith(reason) for t in report.testcases[:-1])
    path = tmp_path / "cc80.json"
    path.write_text(json.dumps({"base": "h200x2", "device": {"compute_capability": [8, 0]}}))
    report = gpubw.run(["device_local_copy_tma"], simulate=str(path), sizes="1MiB", **FAST)
    (t,) = report.testcases
    assert t.status is Status.WAIVED and "0 (8.0), 1 (8.0) have none" in t.message


def test_a_tma_kernel_on_a_device_without_tma_is_refused() -> None:
    """The simulated backend refuses a TMA kernel where the real one would trap."""
    backend = SimulatedBackend(load_system("pcie4"))
    backend.load_kernels(0)
    buf = backend.alloc_device(0, 4096)
    stream = backend.create_stream(0)
    for kernel in ("gpubw_copy_tma", "gpubw_pointer_chase_tma"):
        with pytest.raises(SimulationError, match=f"{kernel} needs TMA .* device 0 has 8.9"):
            args = (ptr(buf), ptr(buf), u64(1), u32(1))
            if kernel == "gpubw_pointer_chase_tma":
                args = (ptr(buf), u64(1), u32(0), ptr(buf))
            backend.launch(kernel, 1, 32, args, stream)


def test_local_read_and_write_count_the_bytes_once() -> None:
    """The read-only and write-only kernels move each byte once through the memory, at the
    model's one-way rates (H200: 4612 and 4706 GB/s), above twice the copy's figure (a copy
    counts each byte once but reads and writes it, and the bus turns round between them)."""
    from gpubw.backend.sim.presets import load_system

    model = load_system("h200x2")
    keys = ["device_local_copy_sm", "device_local_read_sm", "device_local_write_sm"]
    report = gpubw.run(keys, simulate="h200x2", sizes="512MiB", **FAST)
    assert [t.status for t in report.testcases] == [Status.PASSED] * 3
    m = by_key(report)
    copy = m["device_local_copy_sm"].values[0]
    for key, cls, word, rate in (
        ("device_local_read_sm", local.DeviceLocalReadSM, "read", model.local_read),
        ("device_local_write_sm", local.DeviceLocalWriteSM, "written", model.local_write),
    ):
        one = m[key]
        assert one.description == cls.TITLE
        assert one.bytes_counted.startswith(f"bytes {word} (")
        assert f"{key}_read_write" not in m
        for a, b in zip(one.values[0], copy):
            assert a is not None and b is not None and a > 2 * b
            assert rate is not None and abs(a / rate - 1) < 0.05
        assert dict(one.notes)["percent_of_nominal"][0] > 0


@pytest.mark.parametrize("size", ["1MiB", "64MiB"])
def test_a_corrupted_write_fails_verification(tmp_path: Path, size: str) -> None:
    """gpubw_write's check finds a corrupted word, with real bytes and symbolic ones."""
    path = tmp_path / "corrupt.json"
    path.write_text(json.dumps({"base": "h200x2", "faults": {"corrupt_copy": True}}))
    report = gpubw.run(["device_local_write_sm"], simulate=str(path), sizes=size, **FAST)
    (t,) = report.testcases
    assert t.status is Status.ERROR and "verification failed" in t.message, t.message


def _nvrtc_ptx(arch: str) -> str:
    """gpubw.cu compiled to PTX with NVRTC for ``arch`` (``compute_90``)."""
    from cuda.bindings import nvrtc

    from gpubw.backend.nvrtc import compile_options

    _, prog = nvrtc.nvrtcCreateProgram(source().encode(), b"gpubw.cu", 0, [], [])
    opts = [f"--gpu-architecture={arch}".encode(), b"-std=c++17"]
    opts += [f"-D{k}={v}".encode() for k, v in compile_options()]
    (result,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    assert int(result) == 0, f"NVRTC could not compile gpubw.cu for {arch}"
    _, size = nvrtc.nvrtcGetPTXSize(prog)
    buf = b" " * size
    nvrtc.nvrtcGetPTX(prog, buf)
    nvrtc.nvrtcDestroyProgram(prog)
    return buf.decode()


def test_the_tma_kernels_compile_to_bulk_copies_on_sm90_only() -> None:
    """NVRTC builds the TMA kernels with cp.async.bulk and mbarriers for sm_90, and as a trap
    for sm_80 (the module must load on every device)."""
    from gpubw.backend.nvrtc import nvrtc_version

    try:
        nvrtc_version()
    except KernelCompileError as exc:
        pytest.skip(f"NVRTC is not available here: {exc}")
    hopper, ampere = _nvrtc_ptx("compute_90"), _nvrtc_ptx("compute_80")
    for op in (
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes",
        "cp.async.bulk.global.shared::cta.bulk_group",
        "mbarrier.try_wait.parity",
    ):
        assert op in hopper and op not in ampere
    assert "trap" in ampere


@pytest.mark.gpu
def test_tma_and_local_one_way_testcases_on_a_real_gpu() -> None:
    """On this machine's GPU: the local TMA copy (where it has TMA), read and write pass with
    positive figures; the TMA one is Waived below compute capability 9.0."""
    from gpubw.model.errors import NoDriverError

    keys = ["device_local_copy_tma", "device_local_read_sm", "device_local_write_sm"]
    try:
        report = gpubw.run(keys, sizes="256MiB", samples=3, loops=4)
    except NoDriverError:
        pytest.skip("no NVIDIA GPU/driver")
    statuses = {t.key: t for t in report.testcases}
    old = any(tuple(d["compute_capability"]) < (9, 0) for d in report.devices)
    tma = statuses["device_local_copy_tma"]
    assert tma.status is (Status.WAIVED if old else Status.PASSED), tma.message
    for key in keys[1:] if old else keys:
        t = statuses[key]
        assert t.status is Status.PASSED, t.message
        assert all(v is not None and v > 0 for v in t.matrices[0].values[0])


@pytest.mark.parametrize(("size", "flat"), [("1MiB", False), ("64MiB", True)])
def test_local_read_and_write_go_flat_beyond_l2(
    monkeypatch: pytest.MonkeyPatch, size: str, flat: bool
) -> None:
    """Beyond the device's L2 the one-way testcases launch gpubw_read_flat and
    gpubw_write_flat (one element per thread, loops x pieces blocks); within it the resident
    kernels (issue 36 item 4)."""
    seen: set[str] = set()
    real = SimulatedBackend.launch

    def spy(self: SimulatedBackend, kernel: str, *args: Any, **kwargs: Any) -> None:
        seen.add(kernel)
        real(self, kernel, *args, **kwargs)

    monkeypatch.setattr(SimulatedBackend, "launch", spy)
    keys = ["device_local_read_sm", "device_local_write_sm"]
    report = gpubw.run(keys, simulate="h200x1", sizes=size, **FAST)
    assert [t.status for t in report.testcases] == [Status.PASSED] * 2
    flat_names = {"gpubw_read_flat", "gpubw_write_flat"}
    assert (seen & flat_names == flat_names) is flat
    assert bool(seen & {"gpubw_read", "gpubw_write"}) is not flat
