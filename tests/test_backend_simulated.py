"""The simulated backend's own semantics: memory, peers, streams, events, gate, kernels,
faults, presets and the JSON system format."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from gpubw.backend.base import i32, ptr, u32, u64
from gpubw.backend.presets import PRESETS, load_system, names
from gpubw.backend.simulated import Faults, SimSystem, SimulatedBackend
from gpubw.errors import CudaError, GateTimeoutError, SimulationError, UsageError
from gpubw.kernels import PATTERN_WORDS
from gpubw.system import SRC_SEED, pattern_bytes

MIB = 1 << 20
GATE_NS = 10_000_000_000


def _gate(be: SimulatedBackend, stream: object, flag: int, timeout_ns: int = GATE_NS) -> None:
    be.launch("gpubw_gate_wait", 1, 1, (ptr(flag), u64(timeout_ns), ptr(flag + 4)), stream)


def _u32(be: SimulatedBackend, pointer: int) -> int:
    return struct.unpack("<i", be.host_read(pointer, 4))[0]


# -- presets -------------------------------------------------------------------------------
def test_presets_listed() -> None:
    """PRESETS and names() list the four built-in systems."""
    assert set(PRESETS) == {"h200x1", "h200x2", "h200x8", "pcie4"}
    assert names() == list(PRESETS)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_builds(name: str) -> None:
    """Every preset builds a consistent system with unique UUIDs and PCI ids."""
    system = load_system(name)
    assert system.name == name
    assert [d.ordinal for d in system.devices] == list(range(len(system.devices)))
    assert len({d.uuid for d in system.devices}) == len(system.devices)
    assert len({d.pci_bus_id for d in system.devices}) == len(system.devices)


def test_h200_device_attributes() -> None:
    """The H200 presets carry the real H200's attributes."""
    d = load_system("h200x2").devices[0]
    assert (d.name, d.sm_count, d.l2_bytes, d.memory_bus_width_bits) == (
        "NVIDIA H200",
        132,
        60 * MIB,
        6016,
    )
    assert (d.memory_clock_khz, d.clock_khz, d.async_engines) == (3_201_000, 1_980_000, 3)
    assert d.compute_capability == (9, 0)
    assert 140e9 < d.memory_bytes < 151e9
    assert d.nominal_memory_bandwidth == pytest.approx(4815e9, rel=1e-3)


def test_peer_matrices() -> None:
    """h200x1 has no peers, h200x2 and h200x8 all pairs, pcie4 only 0<->1 and 2<->3."""
    assert not load_system("h200x1").peers
    assert set(load_system("h200x2").peers) == {(0, 1), (1, 0)}
    assert len(load_system("h200x8").peers) == 56
    assert set(load_system("pcie4").peers) == {(0, 1), (1, 0), (2, 3), (3, 2)}
    be = SimulatedBackend(load_system("pcie4"))
    assert be.can_access_peer(0, 1) and be.can_access_peer(3, 2)
    assert not be.can_access_peer(0, 2) and not be.can_access_peer(1, 1)


def test_unknown_preset_lists_names() -> None:
    """An unknown name is a UsageError listing the presets."""
    with pytest.raises(UsageError, match="h200x1, h200x2, h200x8, pcie4"):
        load_system("h100x3")


def test_json_missing_file(tmp_path: Path) -> None:
    """A missing JSON file is a UsageError naming the file."""
    path = tmp_path / "nope.json"
    with pytest.raises(UsageError, match=r"nope\.json"):
        load_system(str(path))


def test_json_malformed(tmp_path: Path) -> None:
    """Malformed JSON is a UsageError naming the file, line and column."""
    path = tmp_path / "bad.json"
    path.write_text('{"name": "x",\n  "count": }')
    with pytest.raises(UsageError, match=r"bad\.json: not valid JSON.*line 2"):
        load_system(str(path))


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"base": "h200x2", "bogus": 1}, "unknown key 'bogus'"),
        ({"base": "nope"}, "not a preset"),
        ({"base": "h200x2", "count": 0}, "count must be positive"),
        ({"base": "h200x2", "peers": {"pairs": [[0, 0]]}}, "two distinct devices"),
        ({"base": "h200x2", "host_link": {"h2d": {"ce": "fast"}}}, r"host_link\.h2d\.ce"),
        ({"count": 2}, "describe the devices"),
        ({"base": "h200x1", "jitter": 2}, "jitter"),
    ],
)
def test_json_invalid(tmp_path: Path, doc: dict, message: str) -> None:
    """Invalid system descriptions are UsageErrors that name the file and the problem."""
    path = tmp_path / "sys.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(UsageError, match=message) as info:
        load_system(str(path))
    assert "sys.json" in str(info.value)


def test_json_based_on_preset(tmp_path: Path) -> None:
    """A JSON file can start from a preset and override the count, links and peers."""
    path = tmp_path / "four.json"
    path.write_text(
        json.dumps(
            {
                "name": "four-h200",
                "base": "h200x2",
                "count": 4,
                "host_link": {"h2d": {"ce": 50e9}},
                "peers": {"pairs": [[0, 1], {"pair": [2, 3], "ce": 100e9, "sm": 90e9}]},
            }
        )
    )
    system = load_system(str(path))
    assert system.name == "four-h200" and len(system.devices) == 4
    assert system.host_links[3].h2d.ce == 50e9 and system.host_links[3].h2d.sm == 51.4e9
    assert set(system.peers) == {(0, 1), (1, 0), (2, 3), (3, 2)}
    assert system.peers[(3, 2)].ce == 100e9


def test_json_full_description(tmp_path: Path) -> None:
    """The documented example of docs/simulate.md (a full description) loads."""
    doc = {
        "name": "two-l4",
        "count": 2,
        "device": {
            "name": "NVIDIA L4",
            "compute_capability": [8, 9],
            "sm_count": 58,
            "l2_bytes": 50331648,
            "memory_bytes": 24152899584,
            "memory_bus_width_bits": 192,
            "memory_clock_khz": 6251000,
            "clock_khz": 2040000,
            "async_engines": 2,
        },
        "host_link": {"h2d": {"ce": 12.5e9, "sm": 12e9}, "d2h": {"ce": 13e9, "sm": 12.4e9}},
        "peers": {"pairs": "none"},
        "local_copy": {"ce": 120e9, "sm": 125e9},
    }
    path = tmp_path / "l4.json"
    path.write_text(json.dumps(doc))
    system = load_system(str(path))
    assert [d.name for d in system.devices] == ["NVIDIA L4"] * 2
    assert not system.peers


def test_docs_example_loads() -> None:
    """The JSON example in docs/simulate.md is valid."""
    text = (Path(__file__).parents[1] / "docs" / "simulate.md").read_text()
    block = text.split("```json", 1)[1].split("```", 1)[0]
    system = load_system_from_text(block)
    assert len(system.devices) == 4


def load_system_from_text(text: str) -> SimSystem:
    from gpubw.backend.presets import system_from_dict

    return system_from_dict(json.loads(text))


# -- memory --------------------------------------------------------------------------------
def test_alloc_free_and_memory_info(backend: SimulatedBackend) -> None:
    """Allocations are tracked, counted in memory_info, and disjoint per device and host."""
    free0, total = backend.memory_info(0)
    a = backend.alloc_device(0, 64 * MIB)
    b = backend.alloc_device(1, 64 * MIB)
    h = backend.alloc_host(4 * MIB, 0)
    assert len({a >> 40, b >> 40, h >> 40}) == 3
    assert backend.memory_info(0) == (free0 - 64 * MIB, total)
    assert sorted(x[2] is None for x in backend.live_allocations()) == [False, False, True]
    backend.free_device(a)
    backend.free_device(b)
    backend.free_host(h)
    assert backend.live_allocations() == []
    assert backend.memory_info(0) == (free0, total)


def test_out_of_memory(backend: SimulatedBackend) -> None:
    """Allocating more than is free raises cuMemAlloc CUDA_ERROR_OUT_OF_MEMORY."""
    free, _ = backend.memory_info(0)
    with pytest.raises(CudaError) as info:
        backend.alloc_device(0, free + 1)
    assert (info.value.call, info.value.result) == ("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY")
    assert info.value.out_of_memory
    big = backend.alloc_device(0, free - 4096)
    with pytest.raises(CudaError, match="OUT_OF_MEMORY"):
        backend.alloc_device(0, 1 * MIB)
    backend.free_device(big)


def test_free_unknown_or_twice(backend: SimulatedBackend) -> None:
    """Freeing an unknown or already freed pointer raises cuMemFree CUDA_ERROR_INVALID_VALUE."""
    p = backend.alloc_device(0, 4096)
    backend.free_device(p)
    for bad in (p, 12345):
        with pytest.raises(CudaError) as info:
            backend.free_device(bad)
        assert (info.value.call, info.value.result) == ("cuMemFree", "CUDA_ERROR_INVALID_VALUE")
    h = backend.alloc_host(4096, None)
    with pytest.raises(CudaError, match="cuMemFree"):
        backend.free_device(h)  # a host pointer is not device memory
    backend.free_host(h)


def test_host_read_write(backend: SimulatedBackend) -> None:
    """host_write/host_read round-trip on pinned memory; device memory is refused."""
    h = backend.alloc_host(4096, None)
    backend.host_write(h + 10, b"hello")
    assert backend.host_read(h + 8, 9) == b"\0\0hello\0\0"
    d = backend.alloc_device(0, 4096)
    with pytest.raises(SimulationError):
        backend.host_read(d, 4)


def test_zero_size_allocation_is_a_usage_error(backend: SimulatedBackend) -> None:
    """A zero-byte allocation is refused like the real backend does."""
    with pytest.raises(UsageError):
        backend.alloc_device(0, 0)


# -- copies and kernels --------------------------------------------------------------------
def test_memcpy_copies_bytes(backend: SimulatedBackend) -> None:
    """memcpy_async moves real bytes host -> device -> peer -> host."""
    n = 1 * MIB
    data = np.random.default_rng(1).integers(0, 256, n, dtype=np.uint8).tobytes()
    h_in, h_out = backend.alloc_host(n, 0), backend.alloc_host(n, 0)
    d0, d1 = backend.alloc_device(0, n), backend.alloc_device(1, n)
    backend.host_write(h_in, data)
    s = backend.create_stream(0)
    backend.memcpy_async(d0, h_in, n, s)
    backend.memcpy_async(d1, d0, n, s)
    backend.memcpy_async(h_out, d1, n, s)
    backend.synchronize(s, 1.0)
    assert backend.host_read(h_out, n) == data


def test_memcpy_invalid_pointer(backend: SimulatedBackend) -> None:
    """A copy outside allocated memory raises cuMemcpyAsync CUDA_ERROR_INVALID_VALUE."""
    d = backend.alloc_device(0, 4096)
    s = backend.create_stream(0)
    with pytest.raises(CudaError) as info:
        backend.memcpy_async(d, d + 100, 4096, s)
    assert info.value.result == "CUDA_ERROR_INVALID_VALUE"


def _fill_verify(be: SimulatedBackend, nbytes: int, corrupt_at: int | None) -> int:
    """Fill a buffer of nbytes with the source pattern, optionally flip a word, verify;
    returns the first bad word index (or ~0)."""
    s = be.create_stream(0)
    stage = be.alloc_host(PATTERN_WORDS * 4, None)
    pattern = be.alloc_device(0, PATTERN_WORDS * 4)
    be.host_write(stage, pattern_bytes(SRC_SEED))
    be.memcpy_async(pattern, stage, PATTERN_WORDS * 4, s)
    buf = be.alloc_device(0, nbytes)
    words = nbytes // 4
    be.launch("gpubw_fill", 1, 1024, (ptr(buf), ptr(pattern), u64(words)), s)
    if corrupt_at is not None:
        flip = be.alloc_host(4, None)
        be.host_write(flip, b"\x01\x02\x03\x04")
        be.memcpy_async(buf + corrupt_at, flip, 4, s)
    slot = be.alloc_device(0, 8)
    result = be.alloc_host(8, None)
    be.host_write(result, b"\xff" * 8)
    be.memcpy_async(slot, result, 8, s)
    be.launch("gpubw_verify", 1, 1024, (ptr(buf), ptr(pattern), u64(words), ptr(slot)), s)
    be.memcpy_async(result, slot, 8, s)
    be.synchronize(s, 1.0)
    return int.from_bytes(be.host_read(result, 8), "little")


@pytest.mark.parametrize("nbytes", [4 * MIB, 64 * MIB])
def test_fill_and_verify(backend: SimulatedBackend, nbytes: int) -> None:
    """Fill then verify passes on real (small) and symbolic (large) buffers."""
    assert _fill_verify(backend, nbytes, None) == (1 << 64) - 1


@pytest.mark.parametrize("nbytes", [4 * MIB, 64 * MIB])
def test_verify_finds_first_bad_word(backend: SimulatedBackend, nbytes: int) -> None:
    """verify stores the index of the first wrong 32-bit word, for real and symbolic bytes."""
    assert _fill_verify(backend, nbytes, 3 * MIB + 40) == (3 * MIB + 40) // 4


@pytest.mark.parametrize("nbytes", [1 * MIB, 32 * MIB])
def test_split_warp_and_parity_clear(backend: SimulatedBackend, nbytes: int) -> None:
    """clear_warp_parity + split-warp copy leave both buffers complete (nvbandwidth's scheme)."""
    be = backend
    s = be.create_stream(0)
    src, dst = be.alloc_device(0, nbytes), be.alloc_device(0, nbytes)
    stage = be.alloc_host(PATTERN_WORDS * 4, None)
    pattern = be.alloc_device(0, PATTERN_WORDS * 4)
    be.host_write(stage, pattern_bytes(SRC_SEED))
    be.memcpy_async(pattern, stage, PATTERN_WORDS * 4, s)
    words, elements = nbytes // 4, nbytes // 16
    for buf in (src, dst):
        be.launch("gpubw_fill", 1, 1024, (ptr(buf), ptr(pattern), u64(words)), s)
    be.launch("gpubw_clear_warp_parity", 1, 1024, (ptr(dst), u64(elements), u32(1)), s)
    be.launch("gpubw_clear_warp_parity", 1, 1024, (ptr(src), u64(elements), u32(0)), s)
    slot, result = be.alloc_device(0, 16), be.alloc_host(16, None)

    def check() -> list[int]:
        be.host_write(result, b"\xff" * 16)
        be.memcpy_async(slot, result, 16, s)
        for k, buf in enumerate((dst, src)):
            args = (ptr(buf), ptr(pattern), u64(words), ptr(slot + 8 * k))
            be.launch("gpubw_verify", 1, 1024, args, s)
        be.memcpy_async(result, slot, 16, s)
        be.synchronize(s, 1.0)
        raw = be.host_read(result, 16)
        return [int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little")]

    assert check() == [128, 0]  # dst's first odd group, src's first even group are zero
    be.launch("gpubw_copy_split_warp", 4, 512, (ptr(dst), ptr(src), u64(elements), u32(2)), s)
    assert check() == [(1 << 64) - 1] * 2


def test_copy_kernel_needs_peer_access(backend: SimulatedBackend) -> None:
    """A kernel touching a peer's memory without peer access fails with ILLEGAL_ADDRESS."""
    be = backend
    d0, d1 = be.alloc_device(0, 1 * MIB), be.alloc_device(1, 1 * MIB)
    s = be.create_stream(0)
    be.launch("gpubw_copy", 4, 512, (ptr(d0), ptr(d1), u64(MIB // 16), u32(1)), s)
    with pytest.raises(CudaError) as info:
        be.synchronize(s, 1.0)
    assert info.value.result == "CUDA_ERROR_ILLEGAL_ADDRESS"
    be.enable_peer_access(0, 1)
    be.launch("gpubw_copy", 4, 512, (ptr(d0), ptr(d1), u64(MIB // 16), u32(1)), s)
    be.synchronize(s, 1.0)


def test_launch_checks(backend: SimulatedBackend) -> None:
    """Unknown kernels, wrong arguments and unloaded modules are refused at launch."""
    be = SimulatedBackend(load_system("h200x1"))
    s = be.create_stream(0)
    args = (ptr(0), ptr(0), u64(1))
    with pytest.raises(UsageError, match="not loaded"):
        be.launch("gpubw_fill", 1, 1, args, s)
    be.load_kernels(0)
    with pytest.raises(UsageError, match="unknown kernel"):
        be.launch("no_such_kernel", 1, 1, args, s)
    with pytest.raises(UsageError, match="takes"):
        be.launch("gpubw_fill", 1, 1, (ptr(0), i32(0), u64(1)), s)
    with pytest.raises(UsageError, match="block"):
        be.launch("gpubw_fill", 1, 2048, args, s)


def test_pointer_chase_latency(backend: SimulatedBackend) -> None:
    """pointer_chase follows the ring, stores the final pointer, and takes steps x latency."""
    be = backend
    nodes, stride, steps = 2 * MIB // 8, 16, 1000
    for where, latency in ((None, 1.2e-6), (1, 0.83e-6), (0, 0.6e-6)):
        buf = be.alloc_host(2 * MIB, 0) if where is None else be.alloc_device(where, 2 * MIB)
        ring = (buf + 8 * ((np.arange(nodes) + stride) % nodes)).astype("<u8").tobytes()
        s = be.create_stream(0)
        if where is None:
            be.host_write(buf, ring)
        else:
            stage = be.alloc_host(2 * MIB, None)
            be.host_write(stage, ring)
            be.memcpy_async(buf, stage, 2 * MIB, s)
            if where == 1:
                be.enable_peer_access(0, 1)
        sink = be.alloc_device(0, 8)
        out = be.alloc_host(8, None)
        start, end = be.create_event(0), be.create_event(0)
        be.record_event(start, s)
        be.launch("gpubw_pointer_chase", 132, 1, (ptr(buf), u64(steps), u32(0), ptr(sink)), s)
        be.record_event(end, s)
        be.memcpy_async(out, sink, 8, s)
        be.synchronize(s, 1.0)
        assert int.from_bytes(be.host_read(out, 8), "little") == buf + 8 * (stride * steps % nodes)
        per = be.elapsed_seconds(start, end) / steps
        assert latency < per < latency * 1.01


# -- streams, events, gate -----------------------------------------------------------------
def test_events_and_elapsed(backend: SimulatedBackend) -> None:
    """Events get virtual timestamps; a 64 MiB H2D copy takes about size / 55.5 GB/s."""
    be = backend
    n = 64 * MIB
    h, d = be.alloc_host(n, 0), be.alloc_device(0, n)
    s = be.create_stream(0)
    a, b = be.create_event(0), be.create_event(0)
    be.record_event(a, s)
    be.memcpy_async(d, h, n, s)
    be.record_event(b, s)
    be.synchronize(s, 1.0)
    assert n / be.elapsed_seconds(a, b) == pytest.approx(55.5e9, rel=0.01)


def test_elapsed_not_ready_and_never_recorded(backend: SimulatedBackend) -> None:
    """elapsed_seconds on a pending event is NOT_READY, on an unrecorded one INVALID_HANDLE."""
    be = backend
    flag = be.alloc_host(4096, None)
    s = be.create_stream(0)
    a, b, c = be.create_event(0), be.create_event(0), be.create_event(0)
    _gate(be, s, flag)
    be.record_event(a, s)
    be.record_event(b, s)
    with pytest.raises(CudaError, match="NOT_READY"):
        be.elapsed_seconds(a, b)
    with pytest.raises(CudaError, match="INVALID_HANDLE"):
        be.elapsed_seconds(c, a)
    be.host_write(flag, struct.pack("<i", 1))
    be.synchronize(s, 1.0)
    assert be.elapsed_seconds(a, b) == 0.0


def test_gate_holds_until_released(backend: SimulatedBackend) -> None:
    """Work behind the gate stays pending until the host writes the flag; then it runs."""
    be = backend
    n = 1 * MIB
    flag = be.alloc_host(4096, None)
    h, d = be.alloc_host(n, 0), be.alloc_device(0, n)
    be.host_write(h, b"\x07" * n)
    s = be.create_stream(0)
    start = be.create_event(0)
    _gate(be, s, flag)
    be.record_event(start, s)
    be.memcpy_async(d, h, n, s)
    back = be.alloc_host(n, 0)
    be.memcpy_async(back, d, n, s)
    for _ in range(50):  # the host keeps working; the stream stays held
        be.host_read(flag, 4)
    assert be.host_read(back, 4) == b"\0\0\0\0"
    released = be.now
    be.host_write(flag, struct.pack("<i", 1))
    be.synchronize(s, 1.0)
    assert be.host_read(back, n) == b"\x07" * n
    assert _u32(be, flag + 4) == 0  # no timeout reported
    stamp = be.elapsed_seconds(start, start)
    assert stamp == 0.0 and be.now > released


def test_gate_times_out_and_reports(backend: SimulatedBackend) -> None:
    """A gate that is never released gives up after timeout_ns and writes 1 to *status."""
    be = backend
    flag = be.alloc_host(4096, None)
    s = be.create_stream(0)
    a, b = be.create_event(0), be.create_event(0)
    be.record_event(a, s)
    _gate(be, s, flag, timeout_ns=2_000_000_000)
    be.record_event(b, s)
    with pytest.raises(GateTimeoutError):
        be.synchronize(s, 1.0)  # shorter than the gate's own timeout
    be.synchronize(s, 5.0)
    assert _u32(be, flag + 4) == 1
    assert be.elapsed_seconds(a, b) == pytest.approx(2.0, abs=1e-3)


def test_wait_event_orders_streams(backend: SimulatedBackend) -> None:
    """A stream waiting on another stream's event starts only after that event."""
    be = backend
    n = 64 * MIB
    h, d0 = be.alloc_host(n, 0), be.alloc_device(0, n)
    s0, s1 = be.create_stream(0), be.create_stream(1)
    done, started = be.create_event(0), be.create_event(1)
    origin = be.create_event(0)
    be.record_event(origin, s0)
    be.memcpy_async(d0, h, n, s0)
    be.record_event(done, s0)
    be.wait_event(s1, done)
    be.record_event(started, s1)
    be.synchronize(s1, 1.0)
    assert be.elapsed_seconds(origin, started) >= be.elapsed_seconds(origin, done)


def test_shared_link_splits_bandwidth(backend: SimulatedBackend) -> None:
    """Two copies at once over the same host link direction each get about half of it."""
    be = backend
    n = 64 * MIB
    flag = be.alloc_host(4096, None)
    streams, events = [], []
    for _ in range(2):
        h, d = be.alloc_host(n, 0), be.alloc_device(0, n)
        s = be.create_stream(0)
        a, b = be.create_event(0), be.create_event(0)
        _gate(be, s, flag)
        be.record_event(a, s)
        be.memcpy_async(d, h, n, s)
        be.record_event(b, s)
        streams.append(s)
        events.append((a, b))
    be.host_write(flag, struct.pack("<i", 1))
    for s in streams:
        be.synchronize(s, 1.0)
    for a, b in events:
        assert n / be.elapsed_seconds(a, b) == pytest.approx(55.5e9 / 2, rel=0.02)


def test_deterministic() -> None:
    """The same calls on the same model give identical timings (seeded jitter)."""

    def run() -> float:
        be = SimulatedBackend(load_system("h200x2"))
        h, d = be.alloc_host(MIB, 0), be.alloc_device(0, MIB)
        s = be.create_stream(0)
        a, b = be.create_event(0), be.create_event(0)
        be.record_event(a, s)
        for _ in range(5):
            be.memcpy_async(d, h, MIB, s)
        be.record_event(b, s)
        be.synchronize(s, 1.0)
        return be.elapsed_seconds(a, b)

    assert run() == run()


# -- faults --------------------------------------------------------------------------------
def test_fault_alloc_fail_after() -> None:
    """alloc_fail_after=N lets N device allocations succeed, then OUT_OF_MEMORY."""
    be = SimulatedBackend(load_system("h200x1"), Faults(alloc_fail_after=2))
    be.alloc_device(0, 4096)
    be.alloc_device(0, 4096)
    with pytest.raises(CudaError) as info:
        be.alloc_device(0, 4096)
    assert (info.value.call, info.value.result) == ("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY")


def test_fault_alloc_fail_on_device() -> None:
    """alloc_fail_on_device=d fails every allocation on d only."""
    be = SimulatedBackend(load_system("h200x2"), Faults(alloc_fail_on_device=1))
    be.alloc_device(0, 4096)
    with pytest.raises(CudaError, match="OUT_OF_MEMORY"):
        be.alloc_device(1, 4096)


def test_fault_host_alloc() -> None:
    """host_alloc_fail_after=0 fails pinned allocations with cuMemHostAlloc."""
    be = SimulatedBackend(load_system("h200x1"), Faults(host_alloc_fail_after=0))
    with pytest.raises(CudaError) as info:
        be.alloc_host(4096, 0)
    assert info.value.call == "cuMemHostAlloc"


def test_fault_refuse_peer() -> None:
    """refuse_peer makes can_access_peer False and enabling it PEER_ACCESS_UNSUPPORTED."""
    be = SimulatedBackend(load_system("h200x2"), Faults(refuse_peer={(0, 1)}))
    assert not be.can_access_peer(0, 1) and be.can_access_peer(1, 0)
    with pytest.raises(CudaError) as info:
        be.enable_peer_access(0, 1)
    assert info.value.result == "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"


def test_fault_kernel_error() -> None:
    """kernel_error makes that kernel fail; the next synchronize of its stream raises."""
    be = SimulatedBackend(load_system("h200x1"), Faults(kernel_error="gpubw_copy"))
    be.load_kernels(0)
    d = be.alloc_device(0, MIB)
    s = be.create_stream(0)
    be.launch("gpubw_copy", 1, 512, (ptr(d), ptr(d), u64(16), u32(1)), s)
    with pytest.raises(CudaError) as info:
        be.synchronize(s, 1.0)
    assert (info.value.call, info.value.result) == (
        "cuStreamSynchronize",
        "CUDA_ERROR_LAUNCH_FAILED",
    )
    be.synchronize(s, 1.0)  # reported once


def test_fault_gate_never_opens() -> None:
    """gate_never_opens: the release is ignored; the gate times out and reports status 1."""
    be = SimulatedBackend(load_system("h200x1"), Faults(gate_never_opens=True))
    be.load_kernels(0)
    flag = be.alloc_host(4096, None)
    s = be.create_stream(0)
    _gate(be, s, flag, timeout_ns=1_000_000)
    be.host_write(flag, struct.pack("<i", 1))
    be.synchronize(s, 1.0)
    assert _u32(be, flag + 4) == 1


def test_fault_sync_hang() -> None:
    """sync_hang: a busy stream never finishes; synchronize raises GateTimeoutError."""
    be = SimulatedBackend(load_system("h200x1"), Faults(sync_hang=True))
    h, d = be.alloc_host(MIB, 0), be.alloc_device(0, MIB)
    s = be.create_stream(0)
    be.synchronize(s, 1.0)  # idle: fine
    be.memcpy_async(d, h, MIB, s)
    before = be.now
    with pytest.raises(GateTimeoutError, match="simulated hang"):
        be.synchronize(s, 3.0)
    assert be.now - before >= 3.0


def test_backend_identity() -> None:
    """The backend says it is simulated, in its name, flag and versions."""
    be = SimulatedBackend(load_system("h200x8"))
    assert be.name == "simulated" and be.simulated
    v = be.versions()
    assert v["simulated"] and v["system"] == "h200x8" and "simulated" in v["driver"]
    assert isinstance(v["cuda_driver"], int)
