"""Simulated presets and the JSON system format (gpubw.backend.sim.presets)."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from gpubw.backend.sim.backend import SimulatedBackend
from gpubw.backend.sim.faults import Faults
from gpubw.backend.sim.model import Rate, SimSystem
from gpubw.backend.sim.presets import PRESETS, from_preset, load_system, names
from gpubw.model.errors import UsageError

MIB = 1 << 20


def test_presets_listed() -> None:
    """PRESETS and names() list the six built-in systems."""
    assert set(PRESETS) == {"h200x1", "h200x2", "h200x8", "pcie4", "gb200nvl72", "gb200nvl72x8"}
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
    text = (Path(__file__).parents[1] / "docs" / "simulate.md").read_text(encoding="utf-8")
    block = text.split("```json", 1)[1].split("```", 1)[0]
    system = load_system_from_text(block)
    assert len(system.devices) == 4


def load_system_from_text(text: str) -> SimSystem:
    from gpubw.backend.sim.presets import system_from_dict

    return system_from_dict(json.loads(text))


def test_from_preset_builds_a_backend() -> None:
    """from_preset gives a simulated backend on the preset, with the faults it is given."""
    be = from_preset("h200x2")
    assert isinstance(be, SimulatedBackend) and be.model.name == "h200x2"
    assert be.faults == Faults()
    faults = Faults(alloc_fail_after=0)
    assert from_preset("h200x1", faults).faults is faults


def test_from_preset_keeps_a_system_files_faults(tmp_path: Path) -> None:
    """A system file's "faults" are the backend's unless from_preset is given others."""
    path = tmp_path / "faulty.json"
    path.write_text(json.dumps({"base": "h200x1", "faults": {"gate_never_opens": True}}))
    assert from_preset(str(path)).faults.gate_never_opens
    assert not from_preset(str(path), Faults()).faults.gate_never_opens


# -- every value bounded, Infinity refused (issue 13 item 4) --------------------------------
def _load(tmp_path: Path, text: str) -> SimSystem:
    path = tmp_path / "system.json"
    path.write_text(text)
    return load_system(str(path))


@pytest.mark.parametrize(
    ("fragment", "where"),
    [
        ('"host_link": {"h2d": {"ce": Infinity, "sm": 1e9}, "d2h": {"ce": 1e9, "sm": 1e9}}',
         "host_link.h2d.ce must be a finite number"),
        ('"peers": {"pairs": "all", "ce": Infinity, "sm": 1e9}', "peers.ce must be a finite"),
        ('"local_copy": {"ce": 1e9, "sm": Infinity}', "local_copy.sm must be a finite"),
        ('"latency": {"host": Infinity}', "latency.host must be a finite number"),
        ('"overheads": {"memcpy": Infinity}', "overheads.memcpy must be a finite number"),
        ('"host_memory_bandwidth": Infinity', "host_memory_bandwidth must be a finite"),
        ('"jitter": Infinity', "jitter must be a finite number"),
        ('"latency": {"peer": -Infinity}', "latency.peer must be a finite number"),
        ('"overheads": {"gate_poll": NaN}', "overheads.gate_poll must be a finite number"),
    ],
)  # fmt: skip
def test_infinity_is_refused_everywhere(tmp_path: Path, fragment: str, where: str) -> None:
    """Infinity (and NaN) in any number of a system file is refused, naming the key (link
    bandwidths, latencies and overheads once accepted it)."""
    with pytest.raises(UsageError, match=re.escape(where)):
        _load(tmp_path, '{"base": "h200x2", ' + fragment + "}")


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"local_copy": {"ce": 1e300, "sm": 1e9}}, "local_copy.ce must be in [1e+06, 1e+15]"),
        ({"local_copy": {"ce": 1e-300, "sm": 1e9}}, "local_copy.ce must be in [1e+06, 1e+15]"),
        ({"latency": {"host": 1e300}}, "latency.host must be in [1e-09, 0.001]"),
        ({"overheads": {"memcpy": 1e300}}, "overheads.memcpy must be in [0, 0.001]"),
        ({"host_memory_bandwidth": 1e-300}, "host_memory_bandwidth must be in [1e+06, 1e+15]"),
        ({"host_link": {"bidirectional_factor": 1e-300}}, "bidirectional_factor must be in"),
        ({"jitter": 0.9}, "jitter must be in [0, 0.5]"),
        ({"device": {"sm_count": 10**30}}, "device.sm_count must be in [1, 65536]"),
        ({"device": {"memory_bytes": 10**30}}, "memory_bytes must be in [1, 281474976710656]"),
        ({"device": {"compute_capability": [10**30, 0]}}, "each 0..99"),
        ({"reserved_bytes": 10**30}, "reserved_bytes must be in [0, 281474976710656]"),
        ({"reserved_bytes": 200 << 30}, "less than the smallest device's memory"),
        ({"real_bytes_limit": 10**12}, "real_bytes_limit must be in [0, 268435456]"),
        ({"seed": 10**400}, "seed must be in [0, 9223372036854775807], got 10000000..."),
        ({"faults": {"alloc_fail_after": 10**30}}, "faults.alloc_fail_after must be in [0,"),
    ],
)  # fmt: skip
def test_out_of_range_values_are_refused(tmp_path: Path, doc: dict, message: str) -> None:
    """Values that would stall the simulated clock, outlast every timeout, overflow a kernel
    argument or exhaust memory are refused with the allowed range (they once made every
    testcase fail, or hang)."""
    with pytest.raises(UsageError, match=re.escape(message)):
        _load(tmp_path, json.dumps({"base": "h200x1", **doc}))


def test_the_documented_device_count_works(tmp_path: Path) -> None:
    """A system of MAX_DEVICES devices builds; device and host address ranges never meet
    (with 200 devices, device 111's memory once overlapped pinned host memory)."""
    from gpubw.backend.sim.model import MAX_DEVICES

    system = _load(tmp_path, json.dumps({"base": "h200x1", "count": MAX_DEVICES}))
    assert len({d.pci_bus_id for d in system.devices}) == MAX_DEVICES
    backend = SimulatedBackend(system)
    host = backend.alloc_host(4 << 20, None)
    pointers = [backend.alloc_device(d, 4 << 20) for d in (0, 110, 111, 112, MAX_DEVICES - 1)]
    spans = sorted([(host, host + (4 << 20))] + [(p, p + (4 << 20)) for p in pointers])
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    with pytest.raises(UsageError, match="count must be at most 1024"):
        _load(tmp_path, json.dumps({"base": "h200x1", "count": MAX_DEVICES + 1}))


def test_a_run_on_device_111_works(tmp_path: Path) -> None:
    """device_local_copy on a 200-device system Passes (it failed with 'not inside pinned
    host memory' when device 111's addresses were the host's)."""
    import gpubw

    path = tmp_path / "many.json"
    path.write_text(json.dumps({"base": "h200x1", "count": 200}))
    report = gpubw.run(["device_local_copy"], sizes=1 << 20, samples=1, simulate=str(path))
    assert [t.status.value for t in report.testcases] == ["Passed"], report.testcases[0].message


def test_fault_kernel_names_are_checked(tmp_path: Path) -> None:
    """faults.kernel_error must name a known kernel (gpubw's or an installed plugin's), and
    kernel_error_result a CUresult error name (a typo was accepted and injected nothing)."""
    from gpubw.api import system_opener

    with pytest.raises(UsageError, match="'no_such' is not a known kernel; known: gpubw_"):
        _load(tmp_path, '{"base": "h200x1", "faults": {"kernel_error": "no_such"}}')
    with pytest.raises(UsageError, match="kernel_error_result must be a CUresult error name"):
        _load(tmp_path, '{"base": "h200x1", "faults": {"kernel_error_result": "oops"}}')
    ok = _load(tmp_path, '{"base": "h200x1", "faults": {"kernel_error": "gpubw_copy"}}')
    assert ok.faults is not None and ok.faults.kernel_error == "gpubw_copy"
    # a plugin's kernel (gpubw-stream is installed in the test environment) through the API
    path = tmp_path / "stream.json"
    path.write_text('{"base": "h200x1", "faults": {"kernel_error": "stream_copy"}}')
    system_opener(str(path))
    path.write_text('{"base": "h200x1", "faults": {"kernel_error": "stream_nope"}}')
    with pytest.raises(UsageError, match="not a known kernel"):
        system_opener(str(path))


def test_gb200nvl72_is_a_rack_of_18_hosts() -> None:
    """72 Blackwell GPUs on 18 hosts of 4, every pair on NVLink 5 (900 GB/s each way, at the
    H200's measured efficiency), C2C host links, fabric handles (IMEX) and multicast."""
    system = load_system("gb200nvl72")
    assert len(system.devices) == 72 and system.host_sizes == (4,) * 18
    assert system.host_devices(17) == (68, 69, 70, 71) and system.host_of(70) == 17
    assert len(system.peers) == 72 * 71
    assert system.peers[(0, 71)] == Rate(ce=789e9, sm=746e9)
    assert system.host_links[5].h2d.ce == pytest.approx(390.2e9, rel=1e-3)
    assert system.handle_kinds == {"fabric", "posix-fd", "ipc"}
    d = system.devices[0]
    assert (d.name, d.compute_capability, d.sm_count, d.multicast_supported) == (
        "NVIDIA GB200",
        (10, 0),
        148,
        True,
    )
    assert d.nominal_memory_bandwidth == pytest.approx(8.0e12, rel=1e-3)
    assert [x.numa_node for x in system.devices[:4]] == [0, 0, 1, 1]
    assert len(SimulatedBackend(system).devices()) == 4  # one process: its own host


def test_gb200nvl72x8_is_eight_racks_in_eight_nvlink_domains() -> None:
    """576 GPUs on 144 hosts of 4, one NVLink domain per rack of 72: peers only within a
    rack, at the one rack's rates; PCI bus ids stay unique; a rank view names its domain."""
    system = load_system("gb200nvl72x8")
    assert len(system.devices) == 576 and system.host_sizes == (4,) * 144
    assert system.domain_sizes == (72,) * 8
    assert [system.domain_of(d) for d in (0, 71, 72, 575)] == [0, 0, 1, 7]
    assert len(system.peers) == 8 * 72 * 71
    assert system.peer_rate(72, 143) == load_system("gb200nvl72").peers[(0, 71)]
    assert system.peer_rate(71, 72) is None and system.peer_rate(0, 575) is None
    assert len({d.pci_bus_id for d in system.devices}) == 576
    assert len({d.uuid for d in system.devices}) == 576
    from gpubw.backend.sim.backend import SimEngine

    view = SimEngine(system).rank_view(300, 75)  # host 75: devices 300-303, rack 4
    assert [view.nvlink_domain(i) for i in range(4)] == ["nvl4"] * 4


def test_every_other_preset_is_one_nvlink_domain() -> None:
    """Without nvlink_domains every device is in one domain, named nvl0."""
    for name in ("h200x1", "h200x2", "h200x8", "pcie4", "gb200nvl72"):
        system = load_system(name)
        assert system.nvlink_domains is None and system.domain_sizes == (len(system.devices),)
        assert {system.domain_name(d) for d in range(len(system.devices))} == {"nvl0"}


def test_json_nvlink_domains(tmp_path: Path) -> None:
    """A system file's nvlink_domains (devices per domain) splits the devices; the base's
    peers (or "all") that cross domains are dropped; a bad value is one line naming it."""
    path = tmp_path / "racks.json"
    doc = {"base": "gb200nvl72", "count": 8, "hosts": [2, 2, 2, 2], "nvlink_domains": [4, 4]}
    path.write_text(json.dumps(doc))
    system = load_system(str(path))
    assert system.domain_sizes == (4, 4) and system.domain_of(4) == 1
    assert set(system.peers) == {
        (a, b) for a in range(8) for b in range(8) if a != b and a // 4 == b // 4
    }
    for bad, message in (
        ({**doc, "nvlink_domains": [4, 3]}, r": nvlink_domains must add up to the 8 devices"),
        ({**doc, "nvlink_domains": [8, 0]}, r": nvlink_domains must be a list of device counts"),
        ({**doc, "nvlink_domains": "rack"}, r": nvlink_domains must be a list .* got \"rack\"$"),
        ({**doc, "nvlink_domains": [3, 5]}, r": host 1 \(devices 2-3\) spans several NVLink"),
        (
            {**doc, "peers": {"pairs": [[0, 5]]}},
            r": peer pair \(0, 5\) crosses NVLink domains 0 and 1",
        ),
    ):
        path.write_text(json.dumps(bad))
        with pytest.raises(UsageError, match=message) as info:
            load_system(str(path))
        assert "\n" not in str(info.value)
    path.write_text(json.dumps({**doc, "nvlink_domains": None}))
    assert load_system(str(path)).nvlink_domains is None


def test_other_presets_are_one_host_without_fabric() -> None:
    """The H200 presets are single hosts with POSIX-fd and IPC sharing, no fabric."""
    for name in ("h200x1", "h200x2", "h200x8", "pcie4"):
        system = load_system(name)
        assert system.hosts is None and system.host_sizes == (len(system.devices),)
        assert system.handle_kinds == {"posix-fd", "ipc"}


def test_json_hosts_and_handle_kinds(tmp_path: Path) -> None:
    """A system file may lay devices out on hosts and say which handle kinds work."""
    path = tmp_path / "two.json"
    doc = {"base": "h200x8", "hosts": [4, 4], "handle_kinds": ["fabric"], "multicast_rate": 5e11}
    path.write_text(json.dumps(doc))
    system = load_system(str(path))
    assert system.host_sizes == (4, 4) and system.handle_kinds == {"fabric"}
    assert system.multicast_rate == 5e11
    for bad, message in (
        ({"base": "h200x8", "hosts": [4, 3]}, r"hosts must add up to the 8 devices"),
        ({"base": "h200x8", "hosts": [8, 0]}, r"hosts must be a list of device counts"),
        ({"base": "h200x8", "handle_kinds": ["nvlink"]}, r"handle_kinds must be a list of"),
        ({"base": "h200x8", "multicast_rate": -1}, r"multicast_rate must be positive"),
        ({"base": "gb200nvl72", "count": 8}, None),
    ):
        path.write_text(json.dumps(bad))
        if message is None:  # a base's layout that no longer fits is dropped
            assert load_system(str(path)).hosts is None
            continue
        with pytest.raises(UsageError, match=message):
            load_system(str(path))


def test_json_rank_faults(tmp_path: Path) -> None:
    """A system file may give single simulated ranks their own faults; a rank view picks
    its own, other ranks the system's faults."""
    from gpubw.backend.sim.backend import SimEngine

    path = tmp_path / "faulty.json"
    doc = {
        "base": "h200x2",
        "faults": {"corrupt_copy": True},
        "rank_faults": {"1": {"export_refused": True, "alloc_fail_on_device": 0}},
    }
    path.write_text(json.dumps(doc))
    system = load_system(str(path))
    engine = SimEngine(system)
    assert engine.rank_view(1, 0).faults == Faults(export_refused=True, alloc_fail_on_device=0)
    assert engine.rank_view(0, 0).faults == Faults(corrupt_copy=True)
    for bad, message in (
        ({"base": "h200x2", "rank_faults": [1]}, "rank_faults must be an object"),
        ({"base": "h200x2", "rank_faults": {"x": {}}}, "keys must be rank numbers"),
        ({"base": "h200x2", "rank_faults": {"0": {"bogus": 1}}}, r"rank_faults\.0"),
    ):
        path.write_text(json.dumps(bad))
        with pytest.raises(UsageError, match=message):
            load_system(str(path))


def test_h200_presets_are_within_5_percent_of_their_source_measurements() -> None:
    """benchmarks/sim_fidelity.py --check: every cell of gpubw's default suite on h200x1 and
    h200x2 within 5 % of the median of the real reports they were fitted to (gpubw's and
    nvbandwidth v0.8's, benchmarks/results), tool by tool."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parent.parent / "benchmarks" / "sim_fidelity.py"
    done = subprocess.run(
        [sys.executable, str(script), "--check", "--worst", "5"],
        capture_output=True,
        encoding="utf-8",
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("0 of ") == 2, done.stdout


def test_json_link_factors_host_memory_and_local_rates(tmp_path: Path) -> None:
    """A system file sets the factors of links busy both ways, host memory's writing
    bandwidth and weight and the one-way rates inside a device; the base's stay otherwise."""
    path = tmp_path / "sys.json"
    doc = {
        "base": "h200x2",
        "host_link": {"h2d_bidirectional_factor": 0.8, "sm_load_factor": 0.7},
        "peers": {"sm_load_factor": 0.9},
        "host_memory_write_bandwidth": 100e9,
        "host_memory_write_weight": 3,
        "local_read": 4e12,
    }
    path.write_text(json.dumps(doc))
    system = load_system(str(path))
    link = system.host_links[1]
    assert (link.bidirectional_factor, link.h2d_bidirectional_factor) == (0.925, 0.8)
    assert link.sm_load_factor == 0.7 and system.peer_sm_load_factor == 0.9
    assert system.peer_bidirectional_factor == 0.985
    assert system.host_memory_write_bandwidth == 100e9
    assert system.host_memory_write_weight == 3 and system.host_memory_bandwidth == 275e9
    assert system.local_read == 4e12 and system.local_write == 4706e9
    for bad, message in (
        ({"host_memory_write_weight": 0.5}, r"host_memory_write_weight must be in \[1, 1000\]"),
        ({"host_link": {"sm_load_factor": 2}}, r"host_link.sm_load_factor must be in"),
        ({"peers": {"sm_load_factor": 0}}, "peers.sm_load_factor must be positive"),
        ({"local_write": -1}, "local_write must be"),
    ):
        path.write_text(json.dumps({"base": "h200x2", **bad}))
        with pytest.raises(UsageError, match=message):
            load_system(str(path))
