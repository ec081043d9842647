"""Built-in simulated systems, and loading a system from a JSON file (docs/simulate.md).

:func:`load_system` gives the model (:class:`gpubw.backend.sim.model.SimSystem`),
:func:`from_preset` a :class:`gpubw.backend.sim.backend.SimulatedBackend` on it. This module
builds on the simulator, never the other way round; a JSON system file is read by
:mod:`gpubw.backend.sim.system_file` (its values checked by
:mod:`gpubw.backend.sim.system_checks`).

Presets (figures from docs/simulate.md; the H200 ones follow the measured reference system):

* ``h200x1`` - one NVIDIA H200 (SXM, 141 GB), PCIe Gen5 host link.
* ``h200x2`` - two H200 joined by NV18 (18 NVLink4 links), both ways peer-accessible.

  Both are fitted to their source measurements in ``benchmarks/results`` (the real 1 and
  2 x H200 machines, 2026-11-29 to 2026-12-02): gpubw's default suite (``h200x2-2026-*``;
  ``h200x1-2026-*``, ``h200x1-single-gpu-machine-*``, ``full-h200x1-*``) and nvbandwidth
  v0.8's ``-j`` output (``nvbandwidth-v0.8-h200x2-*``, ``nvbandwidth-v0.8-h200x1-*``);
  ``benchmarks/sim_fidelity.py`` prints every cell against their medians (each within 5 %).
  The presets below that reuse the H200's efficiencies take its factors too.
* ``h200x8`` - eight H200 on NVSwitch: every ordered pair peer-accessible, two NUMA nodes.
* ``pcie4`` - four L40S-like PCIe Gen4 cards; peer access only 0<->1 and 2<->3.
* ``gb200nvl72`` - a GB200 NVL72 rack: 72 GPUs on 18 hosts of 4, every GPU reaching every
  other through NVLink 5 switches, Grace NVLink-C2C host links, fabric handles (IMEX). A
  single process sees host 0's four GPUs; simulated ranks see their own host's.
* ``gb200nvl72x8`` - eight GB200 NVL72 racks (576 GPUs on 144 hosts of 4): NVLink, fabric
  handles and multicast reach only within a rack (one NVLink domain per rack); racks reach
  each other over InfiniBand, which gpubw does not measure, so no peer access between racks.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpubw.backend.base import DeviceInfo
from gpubw.backend.sim import twin
from gpubw.backend.sim.backend import SimulatedBackend
from gpubw.backend.sim.faults import Faults
from gpubw.backend.sim.model import (
    HostLink,
    Latency,
    Rate,
    SimSystem,
    iter_pairs,
)
from gpubw.backend.sim.system_checks import (
    PCI_BUSES,
    DuplicateKeyError,
    PluginKernels,
    parse_json,
    simulated_uuid,
)
from gpubw.backend.sim.system_file import SYSTEM_KEYS, build_system
from gpubw.model.errors import UsageError
from gpubw.model.infile import read_input

MIB = 1 << 20


def h200_device(
    system: str,
    ordinal: int,
    *,
    numa_node: int | None = 0,
    local_cpus: tuple[int, ...] = tuple(range(32)),
    multicast: bool = False,
) -> DeviceInfo:
    """An NVIDIA H200 (SXM, 141 GB HBM3e) with the reference system's attributes."""
    return DeviceInfo(
        ordinal=ordinal,
        name="NVIDIA H200",
        uuid=simulated_uuid(system, ordinal),
        pci_bus_id=f"0000:{PCI_BUSES[ordinal % len(PCI_BUSES)]:02x}:00.0",
        compute_capability=(9, 0),
        sm_count=132,
        l2_bytes=60 * MIB,
        memory_bytes=143_771 * MIB,  # what the driver reports for a 141 GB H200
        memory_bus_width_bits=6016,
        memory_clock_khz=3_201_000,
        clock_khz=1_980_000,
        async_engines=3,
        numa_node=numa_node,
        local_cpus=local_cpus,
        multicast_supported=multicast,
        pci_device_id=0x2335,  # H200 SXM 141GB
    )


#: H200 host link (PCIe Gen5 x16) as measured on the reference systems (SOURCES). Busy both
#: ways, device to host runs at 0.925 (device_to_host_bidirectional_memcpy_ce, 51.2 of 55.3
#: GB/s), host to device at 0.88 (its read requests queue behind the writes: 48.7 of 55.5),
#: and both at 0.82 while an SM kernel loads across it (the split-warp kernel's 42.4 GB/s).
H200_HOST_LINK = HostLink(
    h2d=Rate(ce=55.5e9, sm=51.4e9),
    d2h=Rate(ce=55.3e9, sm=52.6e9),
    bidirectional_factor=0.925,
    h2d_bidirectional_factor=0.88,
    sm_load_factor=0.82,
)
#: One NV18 NVLink4 connection (or an NVSwitch port), per direction.
H200_NVLINK = Rate(ce=394.5e9, sm=373.0e9)
#: NVLink busy both ways: 0.985 (the CE and SM write testcases), 0.908 while SM kernels load
#: across it (device_to_device_bidirectional_memcpy_read_sm: 338.8 of 373 GB/s).
H200_NVLINK_BOTH_WAYS, H200_NVLINK_SM_LOAD = 0.985, 0.908
#: The reference system's host memory, shared by both GPUs: 275 GB/s of reads or 125 of
#: writes (a mix takes its share of each), a write weighted 1.67 times a read where it is the
#: bottleneck. Both GPUs copying both ways with the copy engines leave 29.4 GB/s per GPU
#: to host to device beside 49.1 of device to host (host_to_all_ and
#: all_to_host_bidirectional_memcpy_ce: 29.3 and 49.0), while the split-warp kernels of two
#: GPUs (42.4 GB/s each way each, all_to_host_bidirectional_memcpy_sm) still fit.
H200_HOST_READ, H200_HOST_WRITE, H200_HOST_WRITE_WEIGHT = 275e9, 125e9, 1.67
#: device_local_copy: bytes counted once.
H200_LOCAL = Rate(ce=2094e9, sm=2124e9)
#: A kernel only reading / only writing its H200's memory, bytes/s (the stream plugin's
#: stream_read and stream_write on the reference systems): faster than the 2 x 2124 GB/s
#: a copy's mixed traffic gets (model.local_seconds)
H200_LOCAL_READ, H200_LOCAL_WRITE = 4612e9, 4706e9
H200_LATENCY = Latency(host=1.2e-6, peer=0.83e-6, local=0.6e-6)


def h200x1() -> SimSystem:
    """One H200."""
    return SimSystem(
        name="h200x1",
        devices=(h200_device("h200x1", 0),),
        host_links=(H200_HOST_LINK,),
        local_copy=H200_LOCAL,
        local_read=H200_LOCAL_READ,
        local_write=H200_LOCAL_WRITE,
        latency=H200_LATENCY,
        host_memory_bandwidth=H200_HOST_READ,
        host_memory_write_bandwidth=H200_HOST_WRITE,
        host_memory_write_weight=H200_HOST_WRITE_WEIGHT,
    )


def h200x2() -> SimSystem:
    """Two H200 joined by NV18, like the reference system."""
    return SimSystem(
        name="h200x2",
        devices=tuple(h200_device("h200x2", i) for i in range(2)),
        host_links=(H200_HOST_LINK,) * 2,
        peers={pair: H200_NVLINK for pair in iter_pairs(2)},
        peer_bidirectional_factor=H200_NVLINK_BOTH_WAYS,
        peer_sm_load_factor=H200_NVLINK_SM_LOAD,
        local_copy=H200_LOCAL,
        local_read=H200_LOCAL_READ,
        local_write=H200_LOCAL_WRITE,
        latency=H200_LATENCY,
        host_memory_bandwidth=H200_HOST_READ,
        host_memory_write_bandwidth=H200_HOST_WRITE,
        host_memory_write_weight=H200_HOST_WRITE_WEIGHT,
    )


def h200x8() -> SimSystem:
    """Eight H200 on NVSwitch (every pair peer-accessible; a device's NVLink bandwidth is
    shared by all its peers), two CPU sockets."""
    return SimSystem(
        name="h200x8",
        devices=tuple(
            h200_device(
                "h200x8",
                i,
                numa_node=i // 4,
                local_cpus=tuple(range(56 * (i // 4), 56 * (i // 4 + 1))),
                multicast=True,
            )
            for i in range(8)
        ),
        host_links=(H200_HOST_LINK,) * 8,
        peers={pair: H200_NVLINK for pair in iter_pairs(8)},
        peer_bidirectional_factor=H200_NVLINK_BOTH_WAYS,
        peer_sm_load_factor=H200_NVLINK_SM_LOAD,
        local_copy=H200_LOCAL,
        local_read=H200_LOCAL_READ,
        local_write=H200_LOCAL_WRITE,
        latency=H200_LATENCY,
        # two CPU sockets, each with the reference system's host memory
        host_memory_bandwidth=2 * H200_HOST_READ,
        host_memory_write_bandwidth=2 * H200_HOST_WRITE,
        host_memory_write_weight=H200_HOST_WRITE_WEIGHT,
    )


def pcie4() -> SimSystem:
    """Four L40S-like PCIe Gen4 cards; peer access only between 0<->1 and 2<->3."""
    devices = tuple(
        DeviceInfo(
            ordinal=i,
            name="NVIDIA L40S",
            uuid=simulated_uuid("pcie4", i),
            pci_bus_id=f"0000:{(0x17, 0x31, 0xB1, 0xCA)[i]:02x}:00.0",
            compute_capability=(8, 9),
            sm_count=142,
            l2_bytes=96 * MIB,
            memory_bytes=46_068 * MIB,  # a 48 GB card
            memory_bus_width_bits=384,
            memory_clock_khz=9_001_000,
            clock_khz=2_520_000,
            async_engines=2,
            numa_node=i // 2,
            local_cpus=tuple(range(32 * (i // 2), 32 * (i // 2 + 1))),
            multicast_supported=False,
            pci_device_id=0x26B9,  # L40S
        )
        for i in range(4)
    )
    link = HostLink(h2d=Rate(ce=26.2e9, sm=24.6e9), d2h=Rate(ce=26.4e9, sm=25.1e9))
    pcie_peer = Rate(ce=25.0e9, sm=23.5e9)
    return SimSystem(
        name="pcie4",
        devices=devices,
        host_links=(link,) * 4,
        peers={pair: pcie_peer for pair in ((0, 1), (1, 0), (2, 3), (3, 2))},
        peer_bidirectional_factor=0.85,
        local_copy=Rate(ce=365e9, sm=372e9),
        host_memory_bandwidth=120e9,
        latency=Latency(host=1.3e-6, peer=1.6e-6, local=0.55e-6),
    )


#: GB200 NVL72 figures (docs/simulate.md says where each comes from). Peak link figures are
#: NVIDIA's public ones; the achieved rates apply the H200 reference system's measured
#: efficiency (NVLink 4: 394.5/450 CE, 373/450 SM; PCIe 5: ~0.87 CE, ~0.81 SM) to them.
GB200_NVLINK = Rate(ce=900e9 * 394.5 / 450, sm=900e9 * 373.0 / 450)
GB200_HOST_LINK = HostLink(
    h2d=Rate(ce=450e9 * 55.5 / 64, sm=450e9 * 51.4 / 64),
    d2h=Rate(ce=450e9 * 55.3 / 64, sm=450e9 * 52.6 / 64),
    bidirectional_factor=H200_HOST_LINK.bidirectional_factor,
    h2d_bidirectional_factor=H200_HOST_LINK.h2d_bidirectional_factor,
    sm_load_factor=H200_HOST_LINK.sm_load_factor,
)
#: 8 TB/s HBM3e, bytes counted once, at the share of its nominal figure that the H200's
#: device_local_copy reaches of its own (2094 GB/s of 6016 / 8 x 3.201 GHz x 2 = 4.81 TB/s)
_H200_NOMINAL = 6016 / 8 * 3_201_000e3 * 2
_GB200_SHARE = 8e12 / _H200_NOMINAL
GB200_LOCAL = Rate(ce=H200_LOCAL.ce * _GB200_SHARE, sm=H200_LOCAL.sm * _GB200_SHARE)
GB200_HOSTS = 18
GB200_PER_HOST = 4
#: PCI domains of a GB200 compute tray's four GPUs
_GB200_DOMAINS = (0x0008, 0x0009, 0x0018, 0x0019)


def gb200_device(system: str, ordinal: int) -> DeviceInfo:
    """A Blackwell GPU of a GB200 superchip (186 GB HBM3e, 148 SMs), ``ordinal`` counted
    over the whole rack; two GPUs per Grace CPU (NUMA node)."""
    local = ordinal % GB200_PER_HOST
    socket = local // 2
    return DeviceInfo(
        ordinal=ordinal,
        name="NVIDIA GB200",
        uuid=simulated_uuid(system, ordinal),
        pci_bus_id=f"{_GB200_DOMAINS[local]:04x}:{ordinal // GB200_PER_HOST + 1:02x}:00.0",
        compute_capability=(10, 0),
        sm_count=148,
        l2_bytes=126 * MIB,
        memory_bytes=186_000 * 1000 * 1000 // MIB * MIB,
        memory_bus_width_bits=8192,
        memory_clock_khz=3_906_000,  # 8192 / 8 x 3.906 GHz x 2 = 8.0 TB/s
        clock_khz=1_965_000,
        async_engines=4,
        numa_node=socket,
        local_cpus=tuple(range(72 * socket, 72 * (socket + 1))),
        multicast_supported=True,
        pci_device_id=0x2941,  # GB200
    )


def gb200nvl72() -> SimSystem:
    """A GB200 NVL72 rack: 18 hosts of 4 GPUs, one NVLink domain, IMEX present."""
    return gb200_racks("gb200nvl72", 1)


#: racks of the gb200nvl72x8 preset
GB200_RACKS = 8


def gb200nvl72x8() -> SimSystem:
    """Eight GB200 NVL72 racks (576 GPUs): NVLink within each rack only, one NVLink domain
    per rack, racks joined by InfiniBand (no peer access between them)."""
    return gb200_racks("gb200nvl72x8", GB200_RACKS)


def gb200_racks(name: str, racks: int) -> SimSystem:
    """``racks`` GB200 NVL72 racks of 18 hosts of 4 GPUs, each rack one NVLink domain (every
    GPU of a rack reaching every other of it through NVLink 5 switches), IMEX present."""
    per_rack = GB200_HOSTS * GB200_PER_HOST
    n = per_rack * racks
    return SimSystem(
        name=name,
        devices=tuple(gb200_device(name, i) for i in range(n)),
        host_links=(GB200_HOST_LINK,) * n,
        peers={
            (r * per_rack + a, r * per_rack + b): GB200_NVLINK
            for r in range(racks)
            for a, b in iter_pairs(per_rack)
        },
        peer_bidirectional_factor=H200_NVLINK_BOTH_WAYS,
        peer_sm_load_factor=H200_NVLINK_SM_LOAD,
        local_copy=GB200_LOCAL,
        local_read=H200_LOCAL_READ * _GB200_SHARE,
        local_write=H200_LOCAL_WRITE * _GB200_SHARE,
        host_memory_bandwidth=None,
        latency=Latency(host=0.9e-6, peer=0.95e-6, local=0.6e-6),
        hosts=(GB200_PER_HOST,) * (GB200_HOSTS * racks),
        handle_kinds=frozenset({"fabric", "posix-fd", "ipc"}),
        nvlink_domains=None if racks == 1 else (per_rack,) * racks,
    )


#: The built-in systems, by name.
PRESETS: dict[str, Callable[[], SimSystem]] = {
    "h200x1": h200x1,
    "h200x2": h200x2,
    "h200x8": h200x8,
    "pcie4": pcie4,
    "gb200nvl72": gb200nvl72,
    "gb200nvl72x8": gb200nvl72x8,
}


def names() -> list[str]:
    """The preset names."""
    return list(PRESETS)


def from_preset(
    name_or_path: str | os.PathLike[str], faults: Faults | None = None
) -> SimulatedBackend:
    """A simulated backend on a preset or a JSON system file (see :func:`load_system`), with
    ``faults`` injected (None: the system's own ``faults``, if any)."""
    return SimulatedBackend(load_system(name_or_path), faults)


def load_system(
    name_or_path: str | os.PathLike[str], plugin_kernels: PluginKernels = None
) -> SimSystem:
    """A preset by name, or a system described by a JSON file (docs/simulate.md).

    Raises :class:`UsageError` for an unknown name, a missing or unreadable file, bad JSON or
    a description that does not make a valid system; the message names the file and what is
    wrong."""
    text = os.fspath(name_or_path)
    if text in PRESETS:
        return PRESETS[text]()
    path = Path(text)
    looks_like_file = path.suffix.lower() == ".json" or os.sep in text or path.exists()
    if not looks_like_file:
        raise UsageError(
            f"unknown simulated system {text!r}; presets: {', '.join(PRESETS)} "
            "(or the path of a JSON system file)"
        )
    try:
        raw = read_input(path, "simulated system file")
    except OSError as exc:
        raise UsageError(
            f"cannot read simulated system file {text}: {exc.strerror or exc}"
        ) from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{text}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        doc = parse_json(raw)
    except DuplicateKeyError as exc:
        raise UsageError(f"{text}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{text}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        raise UsageError(f"{text}: not valid JSON: nested too deeply") from None
    kind = twin.classify(doc, SYSTEM_KEYS)  # by content, not by name
    if kind == "report":
        return twin.first_guess(doc, text, h200_device)  # fitted by the runner
    if kind is None:
        raise UsageError(
            f"{text}: neither a simulated system file (keys such as base, devices, host_link, "
            "peers) nor a report (gpubw's JSON report or nvbandwidth's JSON)"
        )
    try:
        return system_from_dict(doc, default_name=path.stem, plugin_kernels=plugin_kernels)
    except UsageError as exc:
        raise UsageError(f"{text}: {exc}") from None


def system_from_dict(
    doc: Any, default_name: str = "custom", plugin_kernels: PluginKernels = None
) -> SimSystem:
    """Build a :class:`SimSystem` from the JSON document format of docs/simulate.md (its
    ``base`` may name one of :data:`PRESETS`). ``plugin_kernels`` gives the names of plugin
    kernels a fault may name as well
    (:func:`~gpubw.backend.sim.system_checks.known_kernels`)."""
    return build_system(doc, PRESETS, default_name=default_name, plugin_kernels=plugin_kernels)
