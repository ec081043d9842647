"""Every STREAM testcase end to end on gpubw's simulated presets (no GPU needed).

Arrays of 1 MiB are held as real bytes by the simulated system, so the kernels' simulations
compute real results and the verification kernels check them; 64 MiB arrays are symbolic
(traffic and timing only).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from gpubw import Matrix, RunOptions, System, VerificationError

from gpubw_stream.initiators import TriadKernel
from gpubw_stream.testcases import (
    TESTCASES,
    StreamCopy,
    StreamRead,
    StreamStridedRead,
    StreamTestcase,
    StreamTriad,
)

presets = pytest.importorskip("gpubw.backend.sim.presets")

MIB = 1 << 20
GB = 1e9
#: arrays per testcase (its working set in arrays) and arrays read + written per pass
ARRAYS = {
    "stream_copy": (2, 2),
    "stream_scale": (2, 2),
    "stream_add": (3, 3),
    "stream_triad": (3, 3),
    "stream_read": (1, 1),
    "stream_write": (1, 1),
}


def make_system(preset: str, samples: int = 3) -> System:
    backend = presets.from_preset(preset)
    return System(backend, RunOptions(samples=samples, loops=4))


@pytest.fixture
def h200() -> Iterator[System]:
    with make_system("h200x1") as system:
        yield system


#: each testcase class's entry-point name (the registry gives it to the instance as its key)
KEYS = dict(
    zip(
        TESTCASES,
        (
            "stream_copy",
            "stream_scale",
            "stream_add",
            "stream_triad",
            "stream_read",
            "stream_write",
            "stream_strided_read",
        ),
    )
)


def keyed(cls: type[StreamTestcase], **attrs: Any) -> Callable[[System], StreamTestcase]:
    """Make ``cls`` (with ``attrs`` overridden) on a System as the runner does: the kernel
    modules it declares loaded, the key its entry point gives it."""

    def make(system: System) -> StreamTestcase:
        made = type(cls.__name__, (cls,), attrs) if attrs else cls
        system.load_kernel_modules(made.kernel_modules)
        return made(system, KEYS[cls])

    return make


def notes(m: Matrix) -> dict[str, Any]:
    return dict(m.notes)


@pytest.fixture(autouse=True)
def _defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUBW_STREAM_DTYPE", raising=False)
    monkeypatch.delenv("GPUBW_STREAM_STRIDE", raising=False)


@pytest.mark.parametrize("preset", ["h200x1", "h200x2"])
@pytest.mark.parametrize("size", [1 * MIB, 64 * MIB])
def test_every_testcase_runs_verified_with_read_plus_write_bytes(preset: str, size: int) -> None:
    """Every STREAM testcase runs verified, counts read + write bytes and frees its buffers."""
    with make_system(preset) as system:
        for cls in TESTCASES:
            key = KEYS[cls]
            matrices = keyed(cls)(system).run(size, 4)
            assert matrices, key
            for m in matrices:
                assert m.unit == "bytes/s"
                assert m.row_labels == ("0",)
                assert m.column_labels == tuple(str(d.ordinal) for d in system.devices)
                assert all(v is not None and v > 0 for v in m.values[0])
                assert all(len(s or ()) == 3 for s in m.samples[0])
                assert m.bytes_counted.startswith(("read + write", "useful bytes", "moved bytes"))
                assert "GPU(column)" in m.description
                n = notes(m)
                for v, pct, d in zip(m.values[0], n["percent_of_nominal"], system.devices):
                    assert v is not None
                    assert pct == pytest.approx(100 * v / d.nominal_memory_bandwidth)
                assert n["dtype"] == "fp32"
            if key in ARRAYS:
                working, traffic = ARRAYS[key]
                (m,) = matrices
                assert m.bytes_per_copy == traffic * size
                assert notes(m)["working_set_bytes"] == working * size
                assert "read + write" in m.bytes_counted
            assert system.live_buffers == 0


def test_plateau_is_a_plausible_share_of_nominal(h200: System) -> None:
    """Simulated triad on 256 MiB arrays is beyond the L2 and reaches 60-100 % of nominal."""
    (m,) = keyed(StreamTriad)(h200).run(256 * MIB, 4)
    (pct,) = notes(m)["percent_of_nominal"]
    assert 60 < pct < 100  # the model's local memory is below the 4815 GB/s roof
    (l2,) = notes(m)["l2_fits"]
    assert l2 is False


def test_l2_knee_follows_the_working_set(h200: System) -> None:
    """l2_fits follows each testcase's working set: a size can fit for read but not for triad."""
    l2 = h200.devices[0].l2_bytes
    # triad touches three arrays: fits while 3 x size <= L2
    fits = 3 * (l2 // 3 // (16 * MIB) * 16 * MIB)
    assert fits <= l2
    below = fits // 3
    above = (l2 // 3) + 16 * MIB
    triad = keyed(StreamTriad)(h200)
    assert notes(triad.run(below, 4)[0])["l2_fits"] == (True,)
    assert notes(triad.run(above, 4)[0])["l2_fits"] == (False,)
    # the same size fits for the one-array read but not for triad
    read = keyed(StreamRead)(h200)
    assert notes(read.run(above, 4)[0])["l2_fits"] == (True,)


@pytest.mark.parametrize("cls", [StreamCopy, StreamTriad, StreamRead, StreamStridedRead])
def test_counted_bytes_and_figures_do_not_depend_on_the_element_type(
    cls: type[StreamTestcase],
) -> None:
    """fp16, fp32 and fp64 runs count the same bytes and give figures within 3 %."""
    results = {}
    for t in ("fp16", "fp32", "fp64"):
        typed = keyed(cls, dtype=t)
        with make_system("h200x1") as system:
            results[t] = typed(system).run(64 * MIB, 4)
    for t, matrices in results.items():
        for m, ref in zip(matrices, results["fp32"]):
            assert notes(m)["dtype"] == t
            assert m.bytes_per_copy == ref.bytes_per_copy
            assert m.values[0][0] == pytest.approx(ref.values[0][0], rel=0.03)


def test_environment_picks_the_element_type(monkeypatch: pytest.MonkeyPatch, h200: System) -> None:
    """GPUBW_STREAM_DTYPE picks the element type, shown in the notes and the description."""
    monkeypatch.setenv("GPUBW_STREAM_DTYPE", "fp16")
    (m,) = keyed(StreamTriad)(h200).run(MIB, 4)
    assert notes(m)["dtype"] == "fp16"
    assert "fp16" in m.description


def test_strided_read_reports_useful_and_moved_bytes(
    monkeypatch: pytest.MonkeyPatch, h200: System
) -> None:
    """Strided read reports useful and moved bytes for strides 2 and 16; moved is near copy's."""
    tc = keyed(StreamStridedRead)(h200)
    useful, moved = tc.run(64 * MIB, 4)
    assert (useful.key, moved.key) == ("stream_strided_read", "stream_strided_read_moved")
    # k = 2, fp32: half of x read and as much written; every sector of x is moved
    assert useful.bytes_per_copy == 64 * MIB
    assert moved.bytes_per_copy == 64 * MIB + 32 * MIB
    assert moved.values[0][0] == pytest.approx(1.5 * useful.values[0][0])
    assert notes(useful)["stride"] == 2
    assert "32-byte sectors" in moved.description
    # the moved figure is near the copy plateau; the useful one is lower
    (copy,) = keyed(StreamCopy)(h200).run(64 * MIB, 4)
    assert moved.values[0][0] == pytest.approx(copy.values[0][0], rel=0.1)
    assert useful.values[0][0] < 0.8 * copy.values[0][0]

    monkeypatch.setenv("GPUBW_STREAM_STRIDE", "16")  # 64-byte stride: half the sectors
    useful16, moved16 = tc.run(64 * MIB, 4)
    assert notes(useful16)["stride"] == 16
    assert useful16.bytes_per_copy == 2 * 64 * MIB // 16
    assert moved16.bytes_per_copy == 64 * MIB // 2 + 64 * MIB // 16


def test_strided_read_stride_from_a_subclass(h200: System) -> None:
    """A subclass's stride attribute sets the strided read's stride."""
    every4 = keyed(StreamStridedRead, stride=4)
    useful, _ = every4(h200).run(MIB, 4)  # held bytes: y really checked
    assert notes(useful)["stride"] == 4
    assert useful.bytes_per_copy == 2 * MIB // 4


def test_verification_catches_a_wrong_result(monkeypatch: pytest.MonkeyPatch, h200: System) -> None:
    """A kernel result other than the expected value fails verification naming the device."""
    # the simulated triad computes b + 3c = 3.5; expecting 4.0 must fail on the first sample
    monkeypatch.setattr(TriadKernel, "expected", 4.0)
    with pytest.raises(VerificationError, match="Device 0"):
        keyed(StreamTriad)(h200).run(MIB, 4)


def test_verification_of_the_read_checks_the_partial_sums(
    monkeypatch: pytest.MonkeyPatch, h200: System
) -> None:
    """The read kernel's verification catches partial sums that differ from the expected ones."""
    from gpubw_stream import initiators

    monkeypatch.setattr(initiators, "A0", 1.0)
    monkeypatch.setattr(initiators.ReadKernel, "initial", (2.0,))  # sums now twice the count
    with pytest.raises(VerificationError):
        keyed(StreamRead)(h200).run(MIB, 4)


def test_eight_devices_and_pcie(tmp_path: Any) -> None:
    """On h200x8 and pcie4, STREAM gives one figure and one L2 flag per device."""
    for preset in ("h200x8", "pcie4"):
        with make_system(preset, samples=1) as system:
            (m,) = keyed(StreamCopy)(system).run(16 * MIB, 2)
            assert len(m.values[0]) == system.device_count
            assert len(notes(m)["l2_fits"]) == system.device_count


def test_too_small_arrays_are_a_usage_error(h200: System) -> None:
    """Arrays of a few bytes are refused with a UsageError."""
    from gpubw import UsageError

    with pytest.raises(UsageError):
        keyed(StreamCopy)(h200).run(8, 4)


def test_cli_prefix_sweep_to_json(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """gpubw -p stream over a -b sweep writes a JSON report with every STREAM testcase Passed."""
    cli = pytest.importorskip("gpubw.cli.command")
    out = tmp_path / "stream.json"
    code = cli.main(
        [
            "--simulate",
            "h200x1",
            "-p",
            "stream",
            "-b",
            "1MiB:2MiB:x2",
            "-i",
            "1",
            "-j",
            "-o",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err
    report = json.loads(out.read_text())
    results = report["testcases"]
    keys = {t["key"] for t in results}
    assert keys == set(ARRAYS) | {"stream_strided_read"}
    for t in results:
        assert t["status"] == "Passed", t
        assert t["plugin"] == "gpubw-stream"
        for m in t["matrices"]:
            assert "percent_of_nominal" in m["notes"]
            assert "l2_fits" in m["notes"]
    assert {t["size_bytes"] for t in results} == {MIB, 2 * MIB}
