"""A simulated system file's text and values (docs/simulate.md): the JSON text read without
trusting it (a key given twice, a number too long to convert), and the check of each value
against its limits, with the parts a file describes object by object (rates, host links,
devices, device pairs, faults, latencies, overheads).

Cut from the reading of a system file along its seam: this module checks what one key or
one object says; :mod:`gpubw.backend.sim.system_file` reads the file as a whole (its
top-level keys, the base preset) and builds the :class:`~gpubw.backend.sim.model.SimSystem`.
Neither imports the presets.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from gpubw.backend.base import DeviceInfo
from gpubw.backend.sim.faults import Faults
from gpubw.backend.sim.model import (
    MAX_DEVICE_MEMORY,
    MAX_LATENCY,
    MAX_OVERHEAD,
    MAX_RATE,
    MIN_FACTOR,
    MIN_LATENCY,
    MIN_RATE,
    HostLink,
    Latency,
    Overheads,
    Rate,
)
from gpubw.model.errors import UsageError

#: What a JSON device entry may set (everything of DeviceInfo but ``ordinal``).
DEVICE_FIELDS = tuple(f.name for f in attrs.fields(DeviceInfo) if f.name != "ordinal")


def simulated_uuid(system: str, ordinal: int) -> str:
    """The UUID of simulated device ``ordinal`` of ``system`` (the same in every run)."""
    h = hashlib.sha1(f"gpubw-simulated:{system}:{ordinal}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


#: PCI bus numbers of the presets' devices (an H200 host's, as in the reference system).
PCI_BUSES = (0x1B, 0x43, 0x52, 0x61, 0x9D, 0xC3, 0xD1, 0xDF)


def generated_pci_bus_id(i: int) -> str:
    """A generated PCI bus id for device ``i``: the reference system's buses, one PCI domain
    per eight devices (distinct and valid for every device a system may have)."""
    return f"{i // len(PCI_BUSES):04x}:{PCI_BUSES[i % len(PCI_BUSES)]:02x}:00.0"


# -- the JSON text -------------------------------------------------------------------------
class LongNumber(float):
    """A whole number in a system file with more digits than Python converts
    (``sys.get_int_max_str_digits()``, 4300 by default: ``int()`` would raise before any key
    is known): infinite as a float, never accepted (:func:`check_number` names the key and the
    number of digits)."""

    digits: int

    def __new__(cls, text: str) -> LongNumber:
        number = super().__new__(cls, "-inf" if text.startswith("-") else "inf")
        number.digits = len(text.lstrip("-"))
        return number


def _parse_int(text: str) -> int | LongNumber:
    limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()  # Python 3.10.7+
    return LongNumber(text) if limit and len(text.lstrip("-")) > limit else int(text)


class DuplicateKeyError(ValueError):
    """A JSON object of a system file gives one key twice."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            keys = ", ".join(_quote(k) for k in dict(pairs))
            raise DuplicateKeyError(
                f"key {_quote(key)} is given twice in one object (keys {keys}); give each key once"
            )
        out[key] = value
    return out


def parse_json(text: str) -> Any:
    """The JSON document of a system file: an object that gives a key twice raises
    :class:`DuplicateKeyError` (json would keep the last silently); a whole number too long
    to be anything a file may give is a :class:`LongNumber`. Other errors as
    :func:`json.loads` raises them."""
    return json.loads(text, object_pairs_hook=_unique_keys, parse_int=_parse_int)


# -- values and the objects a file describes -----------------------------------------------
#: Largest whole number a system file may give where no tighter bound applies (a C int64).
MAX_INT = (1 << 63) - 1
#: Upper bounds of the integer device fields (DeviceInfo); each at least 1 unless 0 is listed.
DEVICE_INT_LIMITS: dict[str, int] = {
    "sm_count": 65_536,
    "l2_bytes": 1 << 40,
    "memory_bytes": MAX_DEVICE_MEMORY,
    "memory_bus_width_bits": 1 << 20,
    "memory_clock_khz": 1 << 30,
    "clock_khz": 1 << 30,
    "async_engines": 1024,
}


def check_keys(where: str, obj: Any, allowed: set[str] | tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise UsageError(f"{where} must be an object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - set(allowed))
    if unknown:
        raise UsageError(
            f"unknown key {unknown[0]!r} in {where}; allowed: {', '.join(sorted(allowed))}"
        )
    return obj


def check_number(
    where: str,
    value: Any,
    *,
    integer: bool = False,
    positive: bool = True,
    low: float | None = None,
    high: float | None = None,
) -> Any:
    """``value`` if it is a finite number (an integer if ``integer``), positive if
    ``positive``, and within [low, high] where given (integers: at most :data:`MAX_INT`);
    else a UsageError naming ``where``. ``Infinity`` and ``NaN`` are never accepted."""
    if isinstance(value, LongNumber):
        allowed = _range(low, high, positive, integer)
        raise UsageError(f"{where} must be {allowed}, got a number of {value.digits} digits")
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type:
        kind = "an integer" if integer else "a number"
        raise UsageError(f"{where} must be {kind}, got {json.dumps(value)}")
    if not integer and not math.isfinite(value):
        raise UsageError(f"{where} must be a finite number, got {value}")
    if positive and not value > 0:
        raise UsageError(f"{where} must be positive, got {value}")
    if integer and high is None:
        high = MAX_INT
    if (low is not None and value < low) or (high is not None and value > high):
        allowed = _range(low, high, positive, integer)
        raise UsageError(f"{where} must be {allowed}, got {_show(value)}")
    return value


def _range(low: float | None, high: float | None, positive: bool, integer: bool) -> str:
    """What :func:`check_number` accepts, for a message: ``in [1, 64]``, ``a positive number``."""
    if integer and high is None:
        high = MAX_INT
    if low is None and high is None:
        return "a positive number" if positive else "a number"
    lo = _show(low) if low is not None else ("1" if positive else "0")
    return f"in [{lo}, {_show(high) if high is not None else 'inf'}]"


def _show(x: Any) -> str:
    """A number for a message: whole numbers exactly (a long one cut short), others as %g."""
    if isinstance(x, int):
        text = str(x)
        return text if len(text) <= 24 else f"{text[:8]}... ({len(text)} digits)"
    return f"{x:g}"


def rate_number(where: str, value: Any) -> float:
    return float(check_number(where, value, low=MIN_RATE, high=MAX_RATE))


def factor_number(where: str, value: Any) -> float:
    return float(check_number(where, value, low=MIN_FACTOR, high=1.0))


def read_rate(where: str, obj: Any, base: Rate | None) -> Rate:
    d = check_keys(where, obj, ("ce", "sm"))
    if base is None and not {"ce", "sm"} <= set(d):
        raise UsageError(f"{where} needs both 'ce' and 'sm' (bytes/s)")
    ce = rate_number(f"{where}.ce", d["ce"]) if "ce" in d else base.ce  # type: ignore[union-attr]
    sm = rate_number(f"{where}.sm", d["sm"]) if "sm" in d else base.sm  # type: ignore[union-attr]
    return Rate(ce, sm)


#: a host link's factors besides its rates: the key, and its value where neither the file
#: nor the base gives one (None: the factor does not apply)
_LINK_FACTORS: dict[str, float | None] = {
    "bidirectional_factor": 0.9,
    "h2d_bidirectional_factor": None,
    "sm_load_factor": None,
}


def read_host_link(where: str, obj: Any, base: HostLink | None) -> HostLink:
    d = check_keys(where, obj, ("h2d", "d2h", *_LINK_FACTORS))
    if base is None and not {"h2d", "d2h"} <= set(d):
        raise UsageError(f"{where} needs 'h2d' and 'd2h'")
    h2d = read_rate(f"{where}.h2d", d["h2d"], base.h2d if base else None) if "h2d" in d else None
    d2h = read_rate(f"{where}.d2h", d["d2h"], base.d2h if base else None) if "d2h" in d else None
    factors: dict[str, float | None] = {}
    for key, default in _LINK_FACTORS.items():
        value = d.get(key, getattr(base, key) if base else default)
        factors[key] = None if value is None else factor_number(f"{where}.{key}", value)
    return HostLink(
        h2d=h2d or base.h2d,  # type: ignore[union-attr]
        d2h=d2h or base.d2h,  # type: ignore[union-attr]
        **factors,  # type: ignore[arg-type]
    )


def read_device(where: str, obj: Any, base: DeviceInfo | None, system: str, i: int) -> DeviceInfo:
    d = check_keys(where, obj, DEVICE_FIELDS)
    values: dict[str, Any] = attrs.asdict(base, recurse=False) if base else {}
    values["ordinal"] = i
    if base is None or "uuid" not in d:
        values["uuid"] = simulated_uuid(system, i)
    if base is None or "pci_bus_id" not in d:
        values["pci_bus_id"] = generated_pci_bus_id(i)
    if "name" in d and "pci_device_id" not in d:
        values["pci_device_id"] = None  # another product than the base's: its id unknown
    for key, value in d.items():
        field = f"{where}.{key}"
        if key in ("name", "uuid", "pci_bus_id"):
            if not isinstance(value, str) or not value:
                raise UsageError(f"{field} must be a non-empty string")
        elif key == "compute_capability":
            if (
                not isinstance(value, list)
                or len(value) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
                or not all(0 <= v <= 99 for v in value)
            ):
                raise UsageError(
                    f"{field} must be [major, minor] (each 0..99), got {json.dumps(value)}"
                )
            value = tuple(value)
        elif key == "numa_node":
            if value is not None:
                check_number(field, value, integer=True, positive=False, high=MAX_NUMA_NODE)
        elif key == "local_cpus":
            if not isinstance(value, list) or not all(
                isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_CPU for v in value
            ):
                raise UsageError(f"{field} must be a list of CPU numbers 0..{MAX_CPU}")
            value = tuple(value)
        elif key == "multicast_supported":
            if not isinstance(value, bool):
                raise UsageError(f"{field} must be true or false")
        elif key == "pci_device_id":
            value = _pci_device_id(field, value)
        else:
            check_number(field, value, integer=True, high=DEVICE_INT_LIMITS[key])
        values[key] = value
    if "name" not in values:
        raise UsageError(f"{where} needs a 'name' (and the other device fields) without a 'base'")
    missing = [f for f in DEVICE_FIELDS if f not in values and f not in _OPTIONAL_DEVICE]
    if missing:
        raise UsageError(f"{where} lacks {', '.join(missing)} (or give a 'base' preset)")
    if not _PCI_BUS_ID.fullmatch(values["pci_bus_id"]):
        raise UsageError(
            f"{where}.pci_bus_id must be domain:bus:device.function in hexadecimal, like "
            f"0000:1b:00.0, got {_quote(values['pci_bus_id'])}"
        )
    return DeviceInfo(**values)


def _pci_device_id(field: str, value: Any) -> int | None:
    """A PCI device id: a number (0 to 0xffff), a hexadecimal string (``"0x2335"``) or null."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = int(value, 16)
        except ValueError:
            raise UsageError(
                f'{field} must be a PCI device id like "0x2335", got {_quote(value)}'
            ) from None
    check_number(field, value, integer=True, positive=False, high=0xFFFF)
    return int(value)


#: a PCI bus id: domain (4 to 8 hex digits), bus, device (2 each) and function (0-7)
_PCI_BUS_ID = re.compile(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")


def _quote(text: str) -> str:
    """A string of the file for a message: quoted, escaped, cut at 80 characters."""
    return repr(text[:80] + ("..." if len(text) > 80 else ""))


def check_unique_devices(devices: tuple[DeviceInfo, ...]) -> None:
    """Refuse two devices with the same UUID or PCI bus id (case and the domain's width
    aside: ``0000:1b:00.0`` is ``00000000:1B:00.0``), naming both."""
    for field, norm in (("uuid", str.lower), ("pci_bus_id", _pci_key)):
        seen: dict[str, int] = {}
        for d in devices:
            value = getattr(d, field)
            first = seen.setdefault(norm(value), d.ordinal)
            if first != d.ordinal:
                raise UsageError(
                    f"devices {first} and {d.ordinal} have the same {field} {_quote(value)}; "
                    "each device needs its own"
                )


def _pci_key(pci_bus_id: str) -> str:
    domain, rest = pci_bus_id.split(":", 1)
    return f"{int(domain, 16):08x}:{rest.lower()}"


_OPTIONAL_DEVICE = {"numa_node", "local_cpus", "multicast_supported", "pci_device_id"}
MAX_NUMA_NODE = 1 << 16
MAX_CPU = 1 << 20


def read_pair(where: str, value: Any, n: int) -> tuple[int, int]:
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise UsageError(f"{where} must be a pair [a, b] of device numbers")
    a, b = value
    if not (0 <= a < n and 0 <= b < n) or a == b:
        raise UsageError(f"{where} = [{a}, {b}] is not two distinct devices of 0..{n - 1}")
    return a, b


_CURESULT = re.compile(r"CUDA_ERROR_[A-Z0-9_]{1,60}")
#: Where the names of plugin kernels come from (the kernel modules of installed testcases);
#: the layer above the backend passes it, so that a file may name a plugin's kernel.
PluginKernels = Callable[[], Iterable[str]] | None


def known_kernels(plugin_kernels: PluginKernels = None) -> set[str]:
    """Names of every kernel a fault may name: gpubw's own, those of registered kernel
    modules, and ``plugin_kernels()``."""
    from gpubw.kernels import KERNELS
    from gpubw.kernels.modules import kernel_modules

    names = set(KERNELS)
    for module in kernel_modules():
        names.update(module.names)
    if plugin_kernels is not None:
        names.update(plugin_kernels())
    return names


def _kernel_name(where: str, value: Any, plugin_kernels: PluginKernels) -> None:
    """UsageError unless ``value`` names a known kernel (:func:`known_kernels`)."""
    if not isinstance(value, str) or not value:
        raise UsageError(f"{where} must be a kernel name, got {json.dumps(value)}")
    from gpubw.kernels import KERNELS

    if value in KERNELS:
        return
    known = known_kernels(plugin_kernels)
    if value not in known:
        shown = ", ".join(sorted(known)[:12]) + (", ..." if len(known) > 12 else "")
        raise UsageError(f"{where}: {value[:80]!r} is not a known kernel; known: {shown}")


def read_faults(where: str, obj: Any, n: int, plugin_kernels: PluginKernels = None) -> Faults:
    """The ``"faults"`` object: any field of :class:`Faults` (docs/simulate.md)."""
    fields = {f.name for f in attrs.fields(Faults)}
    d = check_keys(where, obj, fields)
    kw: dict[str, Any] = {}
    for key, value in d.items():
        at = f"{where}.{key}"
        if key in ("corrupt_copy", "gate_never_opens", "sync_hang", "export_refused"):
            if not isinstance(value, bool):
                raise UsageError(f"{at} must be true or false, got {json.dumps(value)}")
        elif key == "kernel_error":
            if value is not None:
                _kernel_name(at, value, plugin_kernels)
        elif key == "kernel_error_result":
            if not isinstance(value, str) or not _CURESULT.fullmatch(value):
                raise UsageError(
                    f"{at} must be a CUresult error name such as CUDA_ERROR_LAUNCH_FAILED, "
                    f"got {json.dumps(value)}"
                )
        elif key == "refuse_peer":
            if not isinstance(value, list):
                raise UsageError(f"{at} must be a list of [a, b] device pairs")
            value = [read_pair(f"{at}[{k}]", v, n) for k, v in enumerate(value)]
        elif key == "alloc_fail_on_device":
            if value is not None:
                check_number(at, value, integer=True, positive=False)
                if not 0 <= value < n:
                    raise UsageError(f"{at} must be a device of 0..{n - 1}, got {value}")
        elif value is not None or key == "corrupt_after":
            check_number(at, value, integer=True, positive=False)
            if value < 0:
                raise UsageError(f"{at} must not be negative, got {value}")
        kw[key] = value
    return Faults(**kw)


def read_latency(value: Any, current: Latency) -> Latency:
    lat = check_keys("latency", value, ("host", "peer", "local"))
    return Latency(
        **{
            k: check_number(f"latency.{k}", lat[k], low=MIN_LATENCY, high=MAX_LATENCY)
            if k in lat
            else getattr(current, k)
            for k in ("host", "peer", "local")
        }
    )


def read_overheads(value: Any, current: Overheads) -> Overheads:
    keys = ("kernel_launch", "memcpy", "host_call", "gate_poll")
    ov = check_keys("overheads", value, keys)
    return Overheads(
        **{
            k: check_number(f"overheads.{k}", ov[k], positive=False, low=0.0, high=MAX_OVERHEAD)
            if k in ov
            else getattr(current, k)
            for k in keys
        }
    )
