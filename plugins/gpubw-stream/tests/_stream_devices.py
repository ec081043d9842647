"""Helpers of gpubw-stream's tests: hand-made devices and a real-GPU probe. (A module of its
own, not a conftest.py, so it does not collide with gpubw's own tests' conftest when both
suites run in one pytest session.)"""

from __future__ import annotations

import functools

from gpubw import DeviceInfo


def device_info(
    name: str, bus_bits: int, mem_clock_khz: int, l2_mib: int, sm_count: int, ordinal: int = 0
) -> DeviceInfo:
    return DeviceInfo(
        ordinal=ordinal,
        name=name,
        uuid=f"GPU-00000000-0000-0000-0000-00000000000{ordinal}",
        pci_bus_id=f"0000:{ordinal + 1:02x}:00.0",
        compute_capability=(9, 0),
        sm_count=sm_count,
        l2_bytes=l2_mib << 20,
        memory_bytes=16 << 30,
        memory_bus_width_bits=bus_bits,
        memory_clock_khz=mem_clock_khz,
        clock_khz=1_500_000,
        async_engines=2,
    )


#: NVIDIA H200 SXM: 6016-bit HBM3e at 3201 MHz (double data rate), L2 60 MiB, 132 SMs.
H200 = device_info("NVIDIA H200", 6016, 3_201_000, 60, 132)
#: Tesla T4: 256-bit GDDR6 at 10 Gbps (5000 MHz, double data rate), L2 4 MiB, 40 SMs.
T4 = device_info("Tesla T4", 256, 5_000_000, 4, 40)


@functools.lru_cache(maxsize=1)
def gpu_unavailable() -> str:
    """Why the gpu tests cannot run here ("" when a device is usable)."""
    try:
        from cuda.bindings import driver
    except Exception as exc:
        return f"cuda.bindings is not importable: {exc}"
    try:
        (err,) = driver.cuInit(0)
    except Exception as exc:  # no libcuda
        return f"no NVIDIA driver: {exc}"
    if int(err) != 0:
        return f"cuInit failed: {err!r}"
    err, count = driver.cuDeviceGetCount()
    if int(err) != 0 or count < 1:
        return "no CUDA device"
    return ""
