"""Which GPUs a run measures (``--devices LIST``, ``--pair A,B``): the tokens a user gives
resolved against the devices of this process.

A token is a device index (``3``: decimal digits), a PCI bus id (anything with a ``:``:
``0000:1b:00.0``, NVML's ``00000000:1B:00.0``, or ``1b:00.0`` in domain 0; a missing function
is ``.0``) or a UUID (``GPU-8932f937-...``), of which a unique prefix is enough, as
``CUDA_VISIBLE_DEVICES`` and ``nvidia-smi -i`` take it (``GPU-8932``; the ``GPU-`` may be left
out when the prefix is not all digits). Matching is case-insensitive. A token that names no
device, or a UUID prefix that names several, is a :class:`UsageError` naming the token and
listing the devices there are.

Under MPI (:func:`resolve` with ``lenient``), a UUID or PCI bus id that names no GPU of this
host may name one of another host: the ranks agree on it (a token no rank knows is the error).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from gpubw.backend.base import DeviceInfo
from gpubw.model.errors import UsageError


@attrs.frozen
class Resolved:
    """The ordinals the tokens named here, and the tokens that named none of this host's
    devices (left to the other ranks' devices under MPI)."""

    ordinals: frozenset[int]
    unmatched: tuple[str, ...] = ()


def device_list(devices: Sequence[DeviceInfo]) -> str:
    """The devices there are, in words, for error messages."""
    if not devices:
        return "there are no GPUs"
    shown = "; ".join(f"{d.ordinal} ({d.name}, {d.uuid}, {d.pci_bus_id})" for d in devices)
    return f"GPUs: {shown}"


def normalise_bus(token: str) -> str:
    """A PCI bus id as gpubw writes it (``0000:1b:00.0``); ``1b:00.0`` is in domain 0 and a
    missing function is 0. ValueError when it is not one."""
    parts = token.strip().lower().split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    if len(parts) != 3:
        raise ValueError(token)
    dom, bus, rest = parts
    dev, _, fn = rest.partition(".")
    return f"{int(dom, 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{int(fn or '0', 16):x}"


def _uuid_key(text: str) -> str:
    t = text.strip().lower()
    return t[4:] if t.startswith("gpu-") else t


def _match(token: str, devices: Sequence[DeviceInfo]) -> list[int]:
    """The ordinals ``token`` names (several for an ambiguous UUID prefix)."""
    if token.isdecimal():
        n = int(token)
        return [d.ordinal for d in devices if d.ordinal == n]
    if ":" in token:
        try:
            bus = normalise_bus(token)
        except ValueError:
            return []
        return [d.ordinal for d in devices if _bus_of(d) == bus]
    key = _uuid_key(token)
    if not key:
        return []
    return [d.ordinal for d in devices if _uuid_key(d.uuid).startswith(key)]


def _bus_of(d: DeviceInfo) -> str:
    try:
        return normalise_bus(d.pci_bus_id)
    except ValueError:
        return d.pci_bus_id.lower()


def resolve(
    tokens: Sequence[str],
    devices: Sequence[DeviceInfo],
    *,
    flag: str = "--devices",
    lenient: bool = False,
) -> Resolved:
    """The ordinals ``tokens`` name among ``devices``; UsageError for a token that names no
    device (with ``lenient``, a UUID or bus id is kept in ``unmatched`` instead), a UUID
    prefix that names several, or a ``--pair`` that is not two different GPUs."""
    given = ",".join(tokens)
    ordinals: set[int] = set()
    unmatched: list[str] = []
    for token in tokens:
        found = _match(token, devices)
        if len(found) > 1:
            raise UsageError(
                f"{flag} {given}: {token!r} is the start of the UUID of GPUs "
                f"{', '.join(map(str, found))}; give more of it. {device_list(devices)}"
            )
        if not found:
            if lenient and not token.isdecimal():
                unmatched.append(token)
                continue
            raise UsageError(
                f"{flag} {given}: no GPU is {token!r} (an index, a UUID or its start, or a PCI "
                f"bus id). {device_list(devices)}"
            )
        ordinals.add(found[0])
    if flag == "--pair" and (len(tokens) != 2 or len(ordinals) + len(unmatched) != 2):
        raise UsageError(
            f"--pair {given}: a pair is two different GPUs, A,B (e.g. --pair 0,1). "
            f"{device_list(devices)}"
        )
    return Resolved(frozenset(ordinals), tuple(unmatched))


def parse_list(text: str) -> tuple[str, ...]:
    """``0,1`` or ``GPU-ab12,0000:1b:00.0`` -> the tokens; ValueError for an empty one."""
    tokens = tuple(t.strip() for t in text.split(","))
    if not text.strip() or "" in tokens:
        raise ValueError(
            f"{text!r} is not a comma list of GPUs (indexes, UUIDs or PCI bus ids), e.g. 0,3"
        )
    return tokens
