"""What gpubw knows about one device (:class:`DeviceInfo`), as plain data: read from the driver
or the simulated model by a backend (:mod:`gpubw.backend.base` re-exports it), recorded in
every report.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class DeviceInfo:
    """What gpubw knows about one device; read from the driver (or the simulated model)."""

    ordinal: int
    name: str
    uuid: str  # "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
    pci_bus_id: str  # "0000:1b:00.0" (domain:bus:device.function, lowercase hex)
    compute_capability: tuple[int, int]
    sm_count: int
    l2_bytes: int
    memory_bytes: int
    memory_bus_width_bits: int
    memory_clock_khz: int  # peak memory clock, kHz (double data rate not included)
    clock_khz: int  # SM clock, kHz
    async_engines: int
    numa_node: int | None = None
    local_cpus: tuple[int, ...] = ()
    multicast_supported: bool = False
    #: the PCI device (product) id, e.g. 0x2335 for an H200 SXM, 0x233b for an H200 NVL
    #: (which reports the same name): what the built-in expectations are chosen by
    pci_device_id: int | None = None

    @property
    def nominal_memory_bandwidth(self) -> float:
        """Bytes/s: bus width x memory clock x 2 (double data rate), read + write combined."""
        return self.memory_bus_width_bits / 8 * self.memory_clock_khz * 1e3 * 2

    @property
    def pci_short(self) -> str:
        """nvbandwidth's form: ``dddddddd:bb:dd`` (domain, bus, device; no function)."""
        return pci_short(self.pci_bus_id)


def pci_short(pci_bus_id: str) -> str:
    """nvbandwidth's short form of a PCI bus id: ``0000:1b:00.0`` -> ``00000000:1b:00``
    (domain, bus, device; no function). Raises ValueError for anything else."""
    dom, bus, rest = pci_bus_id.split(":")
    return f"{int(dom, 16):08x}:{int(bus, 16):02x}:{int(rest.split('.')[0], 16):02x}"
