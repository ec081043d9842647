"""Reading a simulated system from its JSON description (docs/simulate.md): the checks of
every key and value (with their limits) and the :class:`SimSystem` they make.

:mod:`gpubw.backend.presets` reads system files through :func:`build_system` (its
``system_from_dict`` passes the presets a file may name as its ``base``); this module never
imports the presets.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from gpubw.backend.base import DeviceInfo
from gpubw.backend.sim.faults import Faults
from gpubw.backend.sim.model import (
    MAX_DEVICE_MEMORY,
    MAX_DEVICES,
    MAX_HOST_MEMORY,
    MAX_JITTER,
    MAX_LATENCY,
    MAX_OVERHEAD,
    MAX_RATE,
    MAX_REAL_BYTES,
    MIN_FACTOR,
    MIN_LATENCY,
    MIN_RATE,
    HostLink,
    Latency,
    Overheads,
    Rate,
    SimSystem,
    Throttle,
    iter_pairs,
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
    is known): infinite as a float, never accepted (:func:`_num` names the key and the
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


# -- JSON -> SimSystem ----------------------------------------------------------------------
_TOP_KEYS = {
    "name",
    "base",
    "count",
    "device",
    "devices",
    "host_link",
    "host_links",
    "peers",
    "local_copy",
    "host_memory_bandwidth",
    "latency",
    "overheads",
    "jitter",
    "seed",
    "reserved_bytes",
    "host_memory_bytes",
    "real_bytes_limit",
    "driver_version",
    "cuda_driver",
    "faults",
    "nvml",
    "other_processes",
    "huge_pages",
    "hosts",
    "nvlink_domains",
    "handle_kinds",
    "multicast_rate",
    "rank_faults",
    "nvml_end",
    "pageable_factor",
    "remote_numa_factor",
    "throttle",
}
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


def _keys(where: str, obj: Any, allowed: set[str] | tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise UsageError(f"{where} must be an object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - set(allowed))
    if unknown:
        raise UsageError(
            f"unknown key {unknown[0]!r} in {where}; allowed: {', '.join(sorted(allowed))}"
        )
    return obj


def _num(
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
    """What :func:`_num` accepts, for a message: ``in [1, 64]``, ``a positive number``."""
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


def _rate_num(where: str, value: Any) -> float:
    return float(_num(where, value, low=MIN_RATE, high=MAX_RATE))


def _factor_num(where: str, value: Any) -> float:
    return float(_num(where, value, low=MIN_FACTOR, high=1.0))


def _rate(where: str, obj: Any, base: Rate | None) -> Rate:
    d = _keys(where, obj, ("ce", "sm"))
    if base is None and not {"ce", "sm"} <= set(d):
        raise UsageError(f"{where} needs both 'ce' and 'sm' (bytes/s)")
    ce = _rate_num(f"{where}.ce", d["ce"]) if "ce" in d else base.ce  # type: ignore[union-attr]
    sm = _rate_num(f"{where}.sm", d["sm"]) if "sm" in d else base.sm  # type: ignore[union-attr]
    return Rate(ce, sm)


def _host_link(where: str, obj: Any, base: HostLink | None) -> HostLink:
    d = _keys(where, obj, ("h2d", "d2h", "bidirectional_factor"))
    if base is None and not {"h2d", "d2h"} <= set(d):
        raise UsageError(f"{where} needs 'h2d' and 'd2h'")
    h2d = _rate(f"{where}.h2d", d["h2d"], base.h2d if base else None) if "h2d" in d else None
    d2h = _rate(f"{where}.d2h", d["d2h"], base.d2h if base else None) if "d2h" in d else None
    factor = d.get("bidirectional_factor", base.bidirectional_factor if base else 0.9)
    factor = _factor_num(f"{where}.bidirectional_factor", factor)
    return HostLink(
        h2d=h2d or base.h2d,  # type: ignore[union-attr]
        d2h=d2h or base.d2h,  # type: ignore[union-attr]
        bidirectional_factor=factor,
    )


def _device(where: str, obj: Any, base: DeviceInfo | None, system: str, i: int) -> DeviceInfo:
    d = _keys(where, obj, DEVICE_FIELDS)
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
                _num(field, value, integer=True, positive=False, high=MAX_NUMA_NODE)
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
            _num(field, value, integer=True, high=DEVICE_INT_LIMITS[key])
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
    _num(field, value, integer=True, positive=False, high=0xFFFF)
    return int(value)


#: a PCI bus id: domain (4 to 8 hex digits), bus, device (2 each) and function (0-7)
_PCI_BUS_ID = re.compile(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")


def _quote(text: str) -> str:
    """A string of the file for a message: quoted, escaped, cut at 80 characters."""
    return repr(text[:80] + ("..." if len(text) > 80 else ""))


def _unique_devices(devices: tuple[DeviceInfo, ...]) -> None:
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


def _pair(where: str, value: Any, n: int) -> tuple[int, int]:
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


def _peers(
    where: str, obj: Any, n: int, base: Mapping[tuple[int, int], Rate]
) -> tuple[dict[tuple[int, int], Rate], float | None]:
    d = _keys(where, obj, ("pairs", "ce", "sm", "symmetric", "bidirectional_factor"))
    default: Rate | None = next(iter(base.values()), None)
    if "ce" in d or "sm" in d:
        default = _rate(where, {k: d[k] for k in ("ce", "sm") if k in d}, default)
    symmetric = d.get("symmetric", True)
    if not isinstance(symmetric, bool):
        raise UsageError(f"{where}.symmetric must be true or false")
    pairs = d.get("pairs", "all" if base else "none")
    out: dict[tuple[int, int], Rate] = {}
    if pairs == "all" or pairs == "none":
        chosen = list(iter_pairs(n)) if pairs == "all" else []
        entries: list[tuple[tuple[int, int], Rate | None]] = [(p, None) for p in chosen]
    elif isinstance(pairs, list):
        entries = []
        for k, item in enumerate(pairs):
            at = f"{where}.pairs[{k}]"
            if isinstance(item, dict):
                e = _keys(at, item, ("pair", "ce", "sm"))
                if "pair" not in e:
                    raise UsageError(f"{at} needs 'pair'")
                rate = (
                    _rate(at, {x: e[x] for x in ("ce", "sm") if x in e}, default)
                    if ("ce" in e or "sm" in e)
                    else None
                )
                entries.append((_pair(f"{at}.pair", e["pair"], n), rate))
            else:
                entries.append((_pair(at, item, n), None))
    else:
        raise UsageError(f'{where}.pairs must be "all", "none" or a list of [a, b] pairs')
    for (a, b), rate in entries:
        r = rate or default
        if r is None:
            raise UsageError(f"{where} needs 'ce' and 'sm' bandwidths (bytes/s) for its pairs")
        out[(a, b)] = r
        if symmetric:
            out.setdefault((b, a), r)
    factor = d.get("bidirectional_factor")
    if factor is not None:
        factor = _factor_num(f"{where}.bidirectional_factor", factor)
    return out, factor


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


def _faults(where: str, obj: Any, n: int, plugin_kernels: PluginKernels = None) -> Faults:
    """The ``"faults"`` object: any field of :class:`Faults` (docs/simulate.md)."""
    fields = {f.name for f in attrs.fields(Faults)}
    d = _keys(where, obj, fields)
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
            value = [_pair(f"{at}[{k}]", v, n) for k, v in enumerate(value)]
        elif key == "alloc_fail_on_device":
            if value is not None:
                _num(at, value, integer=True, positive=False)
                if not 0 <= value < n:
                    raise UsageError(f"{at} must be a device of 0..{n - 1}, got {value}")
        elif value is not None or key == "corrupt_after":
            _num(at, value, integer=True, positive=False)
            if value < 0:
                raise UsageError(f"{at} must not be negative, got {value}")
        kw[key] = value
    return Faults(**kw)


def _nvml_keys(d: Mapping[str, Any], kw: dict[str, Any], n: int) -> None:
    """The NVML-like keys of a system file (gpubw.backend.sim.facts): ``nvml``,
    ``other_processes``, ``huge_pages``."""
    from gpubw.backend.sim.facts import check_spec

    if "nvml" in d or "other_processes" in d or "nvml_end" in d:
        try:
            check_spec(d.get("nvml", {}), d.get("other_processes", {}), n)
            check_spec(d.get("nvml_end", {}), {}, n, "nvml_end")
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    for key in ("nvml", "nvml_end"):
        if key in d:
            kw[key] = d[key]
    if "other_processes" in d:
        kw["other_processes"] = {
            k: v if isinstance(v, dict) else tuple(v) for k, v in d["other_processes"].items()
        }
    _node_model_keys(d, kw)
    if "huge_pages" in d:
        hp = _keys("huge_pages", d["huge_pages"], ("page_bytes", "free"))
        free = _num("huge_pages.free", hp.get("free", 0), integer=True, positive=False)
        if free < 0:
            raise UsageError(f"huge_pages.free must be >= 0 (a number of pages), got {free}")
        page = _num("huge_pages.page_bytes", hp.get("page_bytes", 2 << 20), integer=True)
        kw["huge_pages"] = (page, free)


def _node_model_keys(d: Mapping[str, Any], kw: dict[str, Any]) -> None:
    """``pageable_factor``, ``remote_numa_factor`` and ``throttle`` (docs/simulate.md)."""
    for key in ("pageable_factor", "remote_numa_factor"):
        if key in d:
            kw[key] = _factor_num(key, d[key])
    if "throttle" in d:
        t = _keys("throttle", d["throttle"], ("after_s", "factor", "reason", "devices",
                                              "temperature_c"))  # fmt: skip
        if "after_s" not in t:
            raise UsageError("throttle needs after_s (virtual seconds into the run)")
        fields: dict[str, Any] = {
            "after_s": _num("throttle.after_s", t["after_s"], positive=False, low=0, high=1e9)
        }
        if "factor" in t:
            fields["factor"] = _factor_num("throttle.factor", t["factor"])
        if "temperature_c" in t:
            fields["temperature_c"] = _num("throttle.temperature_c", t["temperature_c"],
                                           integer=True, positive=False, high=200)  # fmt: skip
        if "devices" in t:
            devs = t["devices"]
            if devs is not None and not (isinstance(devs, list) and all(
                isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in devs
            )):  # fmt: skip
                raise UsageError("throttle.devices must be a list of device indexes or null")
            fields["devices"] = devs
        if "reason" in t:
            fields["reason"] = t["reason"]
        try:
            kw["throttle"] = Throttle(**fields)
        except (TypeError, ValueError) as exc:
            raise UsageError(str(exc)) from None


def _counts(d: Mapping[str, Any], kw: dict[str, Any], n: int, key: str, per: str) -> None:
    """``hosts`` or ``nvlink_domains``: device counts per ``per`` adding up to ``n`` (null:
    one holding every device); a base preset's that no longer fits the device count is
    dropped."""
    if key in d:
        counts = d[key]
        if counts is not None and (
            not isinstance(counts, list)
            or not counts
            or not all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in counts)
        ):
            raise UsageError(
                f"{key} must be a list of device counts per {per} (each >= 1) or null, got "
                f"{json.dumps(counts)}"
            )
        if counts is not None and sum(counts) != n:
            raise UsageError(f"{key} must add up to the {n} devices, got {counts} = {sum(counts)}")
        kw[key] = None if counts is None else tuple(counts)
    elif kw.get(key) is not None and sum(kw[key]) != n:
        kw[key] = None


def _ranks_keys(d: dict[str, Any], kw: dict[str, Any], n: int) -> None:
    """``hosts``, ``nvlink_domains``, ``handle_kinds`` and ``multicast_rate`` of a system file
    (multinode)."""
    _counts(d, kw, n, "hosts", "host")
    _counts(d, kw, n, "nvlink_domains", "NVLink domain")
    if "handle_kinds" in d:
        kinds = d["handle_kinds"]
        allowed = ("fabric", "posix-fd", "ipc")
        if not isinstance(kinds, list) or not all(k in allowed for k in kinds):
            raise UsageError(
                f"handle_kinds must be a list of {', '.join(allowed)}, got {json.dumps(kinds)}"
            )
        kw["handle_kinds"] = frozenset(kinds)
    if "multicast_rate" in d:
        v = d["multicast_rate"]
        kw["multicast_rate"] = None if v is None else _num("multicast_rate", v)
    if "rank_faults" in d:
        per_rank = d["rank_faults"]
        if not isinstance(per_rank, dict):
            raise UsageError('rank_faults must be an object: {"<rank>": {<faults>}, ...}')
        out: dict[int, Faults] = {}
        for key, value in per_rank.items():
            if not (isinstance(key, str) and key.isdecimal() and len(key) <= 9):
                raise UsageError(f"rank_faults keys must be rank numbers, got {key!r}")
            out[int(key)] = _faults(f"rank_faults.{key}", value, n)
        kw["rank_faults"] = out


#: Upper bounds of the top-level whole numbers of a system file.
_TOP_INT_LIMITS: dict[str, int] = {
    "seed": MAX_INT,
    "reserved_bytes": MAX_DEVICE_MEMORY,
    "host_memory_bytes": MAX_HOST_MEMORY,
    "real_bytes_limit": MAX_REAL_BYTES,
    "cuda_driver": (1 << 31) - 1,
}


def build_system(
    doc: Any,
    presets: Mapping[str, Callable[[], SimSystem]],
    *,
    default_name: str = "custom",
    plugin_kernels: PluginKernels = None,
) -> SimSystem:
    """Build a :class:`SimSystem` from the JSON document format of docs/simulate.md.
    ``presets`` are the systems its ``base`` may name (by name: a function making each);
    ``plugin_kernels`` gives the names of plugin kernels a fault may name as well
    (:func:`known_kernels`)."""
    d = _keys("the system", doc, _TOP_KEYS)
    base = _base(d, presets)
    name = d.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise UsageError("name must be a non-empty string")
    devices = _devices(d, base, name)
    _unique_devices(devices)
    n = len(devices)
    links = _host_links(d, base, n)
    base_peers = dict(base.peers) if base else {}
    peer_factor: float | None = None
    if "peers" in d:
        peers, peer_factor = _peers("peers", d["peers"], n, base_peers)
    else:
        peers = {p: r for p, r in base_peers.items() if p[0] < n and p[1] < n}
    kw = _model_fields(d, base, n, plugin_kernels)
    if not isinstance(d.get("peers", {}).get("pairs"), list):  # "all" or the base's pairs
        peers = _within_domains(peers, kw.get("nvlink_domains"), n)
    if peer_factor is not None:
        kw["peer_bidirectional_factor"] = peer_factor
    if "nvml" in kw:  # a downtrained PCIe link also slows that device's host link
        from gpubw.backend.sim.facts import scale_host_links

        links = scale_host_links(links, kw["nvml"])
    try:
        return SimSystem(name=name, devices=devices, host_links=links, peers=peers, **kw)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None


def _within_domains(
    peers: dict[tuple[int, int], Rate], domains: tuple[int, ...] | None, n: int
) -> dict[tuple[int, int], Rate]:
    """``peers`` without the pairs that cross NVLink domains (NVLink reaches only within a
    domain); a pair listed by hand that crosses them is the model's error instead."""
    if domains is None:
        return peers
    of = [d for d, size in enumerate(domains) for _ in range(size)]
    return {(a, b): r for (a, b), r in peers.items() if a < n and b < n and of[a] == of[b]}


def _base(d: Mapping[str, Any], presets: Mapping[str, Callable[[], SimSystem]]) -> SimSystem | None:
    """The preset the file starts from (``base``), if any."""
    if "base" not in d:
        return None
    if not isinstance(d["base"], str) or d["base"] not in presets:
        raise UsageError(f"base {d['base']!r} is not a preset; presets: {', '.join(presets)}")
    return presets[d["base"]]()


def _devices(d: Mapping[str, Any], base: SimSystem | None, name: str) -> tuple[DeviceInfo, ...]:
    """The devices: ``devices`` one by one, or ``count`` copies of ``device`` (or the
    base's)."""
    if "devices" in d and "count" in d:
        raise UsageError("give either 'count' (with 'device') or 'devices', not both")
    template = base.devices[0] if base else None
    if "device" in d:
        template = _device("device", d["device"], template, name, 0)
    if "devices" in d:
        if not isinstance(d["devices"], list) or not d["devices"]:
            raise UsageError("devices must be a non-empty list of device objects")
        if len(d["devices"]) > MAX_DEVICES:
            raise UsageError(f"devices must list at most {MAX_DEVICES} devices")
        return tuple(
            _device(
                f"devices[{i}]",
                item,
                (base.devices[i] if base and i < len(base.devices) else template),
                name,
                i,
            )
            for i, item in enumerate(d["devices"])
        )
    count = d.get("count", len(base.devices) if base else 1)
    if isinstance(count, int) and not isinstance(count, bool) and count > MAX_DEVICES:
        raise UsageError(f"count must be at most {MAX_DEVICES}, got {count}")
    count = _num("count", count, integer=True)
    if template is None:
        raise UsageError("describe the devices: 'device' (with 'count') or 'devices'")
    return tuple(
        attrs.evolve(
            template, ordinal=i, uuid=simulated_uuid(name, i), pci_bus_id=generated_pci_bus_id(i)
        )
        if (base is None or i >= len(base.devices) or "device" in d)
        else base.devices[i]
        for i in range(count)
    )


def _host_links(d: Mapping[str, Any], base: SimSystem | None, n: int) -> tuple[HostLink, ...]:
    """Each device's host link: ``host_links``, one ``host_link`` for all, or the base's."""
    base_link = base.host_links[0] if base else None
    if "host_link" in d and "host_links" in d:
        raise UsageError("give either 'host_link' (all devices) or 'host_links', not both")
    if "host_links" in d:
        if not isinstance(d["host_links"], list) or len(d["host_links"]) != n:
            raise UsageError(f"host_links must be a list of {n} host link objects")
        return tuple(
            _host_link(f"host_links[{i}]", item, base_link)
            for i, item in enumerate(d["host_links"])
        )
    if "host_link" in d:
        return (_host_link("host_link", d["host_link"], base_link),) * n
    if base_link is not None:
        return (base_link,) * n
    raise UsageError("host_link is required (bytes/s per direction, ce and sm)")


def _model_fields(
    d: dict[str, Any], base: SimSystem | None, n: int, plugin_kernels: PluginKernels
) -> dict[str, Any]:
    """The model's other fields: the base's, with what the file says instead."""
    kw: dict[str, Any] = {}
    if base is not None:
        skip = ("name", "devices", "host_links", "peers")
        kw = {f.name: getattr(base, f.name) for f in attrs.fields(SimSystem) if f.name not in skip}
    if "local_copy" in d:
        kw["local_copy"] = _rate("local_copy", d["local_copy"], kw.get("local_copy"))
    elif base is None:
        raise UsageError("local_copy is required (bytes/s of a copy inside one device)")
    if "host_memory_bandwidth" in d:
        v = d["host_memory_bandwidth"]
        kw["host_memory_bandwidth"] = None if v is None else _rate_num("host_memory_bandwidth", v)
    if "latency" in d:
        kw["latency"] = _latency(d["latency"], kw.get("latency", Latency()))
    if "overheads" in d:
        kw["overheads"] = _overheads(d["overheads"], kw.get("overheads", Overheads()))
    if "jitter" in d:
        kw["jitter"] = _num("jitter", d["jitter"], positive=False, low=0.0, high=MAX_JITTER)
    for key, high in _TOP_INT_LIMITS.items():
        if key in d:
            positive = key not in ("reserved_bytes", "seed", "real_bytes_limit")
            kw[key] = _num(key, d[key], integer=True, positive=positive, low=0, high=high)
    if "faults" in d:
        kw["faults"] = _faults("faults", d["faults"], n, plugin_kernels)
    _nvml_keys(d, kw, n)
    if "driver_version" in d:
        if not isinstance(d["driver_version"], str):
            raise UsageError("driver_version must be a string")
        kw["driver_version"] = d["driver_version"]
    _ranks_keys(d, kw, n)
    return kw


def _latency(value: Any, current: Latency) -> Latency:
    lat = _keys("latency", value, ("host", "peer", "local"))
    return Latency(
        **{
            k: _num(f"latency.{k}", lat[k], low=MIN_LATENCY, high=MAX_LATENCY)
            if k in lat
            else getattr(current, k)
            for k in ("host", "peer", "local")
        }
    )


def _overheads(value: Any, current: Overheads) -> Overheads:
    keys = ("kernel_launch", "memcpy", "host_call", "gate_poll")
    ov = _keys("overheads", value, keys)
    return Overheads(
        **{
            k: _num(f"overheads.{k}", ov[k], positive=False, low=0.0, high=MAX_OVERHEAD)
            if k in ov
            else getattr(current, k)
            for k in keys
        }
    )
