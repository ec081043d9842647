"""Buffer sizes: parse a size list into bytes, and format a size for people.

Formatting lives only here: :func:`format_size` is exact (text reports, messages),
:func:`format_size_short` rounds to 3 significant digits (plot ticks and legends).

Accepted forms (see :func:`parse_sizes`):

* a plain number: MiB, as in nvbandwidth (``-b 512``; decimals allowed: ``-b 0.5``);
* a number with a unit, case-insensitive: ``B``, ``KiB``, ``MiB``, ``GiB``, ``TiB`` (powers of
  1024) and ``KB``, ``MB``, ``GB``, ``TB`` (powers of 1000): ``-b 1GiB``;
* a number with a bare letter ``K``, ``M``, ``G`` or ``T``, which are *binary* multiples as in
  nccl-tests (``-b 64M`` is 64 MiB, ``1G`` is 1 GiB), unlike ``MB``/``GB``, which stay decimal;
* a comma list of any of these: ``-b 64,512,1GiB``;
* a geometric range ``START:STOP[:xFACTOR]`` (FACTOR an integer >= 2, default 2), which
  includes STOP when a step lands on it: ``-b 1MiB:4GiB:x2``.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from gpubw.model.errors import UsageError

UNITS: dict[str, int] = {
    "b": 1,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    # nccl-tests' habit: a bare letter is a binary multiple (64M = 64 MiB)
    "k": 1 << 10,
    "m": 1 << 20,
    "g": 1 << 30,
    "t": 1 << 40,
}
#: What a size may look like, for error messages.
ALLOWED = (
    "a positive number of MiB (512), a number with a unit B, KiB, MiB, GiB, TiB, KB, MB, GB, "
    "TB (1GiB) or K, M, G, T (binary: 64M = 64 MiB), a comma list (64,512,1GiB) or a range "
    "START:STOP:xFACTOR (1MiB:4GiB:x2)"
)
#: Longest list a range may expand to (a typo like 1B:1GiB:x2 stays reasonable anyway).
MAX_SIZES = 1000
#: Largest size accepted at all (1 PiB; the run also checks sizes against the devices' and
#: the host's memory before anything runs).
MAX_BYTES = 1 << 50

_SIZE = re.compile(r"\s*(?P<num>[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(?P<unit>[a-zA-Z]*)\s*")
_FACTOR = re.compile(r"\s*[xX]?\s*(?P<factor>[0-9]+)\s*")


def _bad(value: str, why: str) -> UsageError:
    return UsageError(f"invalid buffer size {value!r}: {why}; expected {ALLOWED}", param="sizes")


def parse_size(text: str, *, whole: str | None = None) -> int:
    """One size (no list, no range) in bytes; a plain number means MiB."""
    shown = text if whole is None else whole
    m = _SIZE.fullmatch(text)
    if not m:
        if text.strip().startswith("-"):
            raise _bad(shown, f"{text.strip()!r} is negative")
        if not text.strip():
            raise _bad(shown, "a size is empty")
        raise _bad(shown, f"{text.strip()!r} is not a number with an optional unit")
    unit = m["unit"].lower() or "mib"
    if unit not in UNITS:
        raise _bad(shown, f"unknown unit {m['unit']!r}")
    try:
        number = Decimal(m["num"])
        exact = number * UNITS[unit]
    except InvalidOperation:  # an exponent beyond what decimal handles at all
        raise _bad(shown, f"{text.strip()!r} is out of range") from None
    except ArithmeticError:  # decimal.Overflow: an exponent beyond any size
        raise _bad(shown, f"{text.strip()!r} is larger than {format_size(MAX_BYTES)}") from None
    if number == 0:
        raise _bad(shown, f"{text.strip()!r} is zero")
    if exact > MAX_BYTES:
        raise _bad(shown, f"{text.strip()!r} is larger than {format_size(MAX_BYTES)}")
    if exact <= 0 or exact != exact.to_integral_value():
        raise _bad(shown, f"{text.strip()!r} is not a whole number of bytes")
    return int(exact)


def _parse_range(item: str, whole: str) -> list[int]:
    parts = item.split(":")
    if len(parts) not in (2, 3):
        raise _bad(whole, f"a range has the form START:STOP:xFACTOR, got {item!r}")
    start = parse_size(parts[0], whole=whole)
    stop = parse_size(parts[1], whole=whole)
    factor = 2
    if len(parts) == 3:
        m = _FACTOR.fullmatch(parts[2])
        if not m:
            raise _bad(whole, f"the range factor {parts[2]!r} is not xN with N an integer >= 2")
        factor = int(m["factor"])
        if factor < 2:
            raise _bad(whole, f"the range factor {parts[2]!r} must be at least x2")
    if start > stop:
        raise _bad(whole, f"the range {item!r} is empty (START is larger than STOP)")
    out = []
    size = start
    while size <= stop:
        out.append(size)
        if len(out) > MAX_SIZES:
            raise _bad(whole, f"the range {item!r} has more than {MAX_SIZES} sizes")
        size *= factor
    return out


def parse_sizes(value: str) -> list[int]:
    """All sizes of a ``-b`` value, in bytes, in the order given (duplicates kept)."""
    if not value.strip():
        raise _bad(value, "it is empty")
    sizes: list[int] = []
    for item in value.split(","):
        if ":" in item:
            sizes.extend(_parse_range(item, value))
        else:
            sizes.append(parse_size(item, whole=value))
    if len(sizes) > MAX_SIZES:
        raise _bad(value, f"more than {MAX_SIZES} sizes")
    return sizes


def format_size(nbytes: int) -> str:
    """The shortest exact binary form: ``512 MiB``, ``1 GiB``, ``3000 B``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def format_size_short(nbytes: float) -> str:
    """The largest binary unit, at most 3 significant digits (not exact: for plot ticks
    and legends): ``512 B``, ``4 KiB``, ``1.5 MiB``, ``2.93 KiB``, ``2 GiB``."""
    n = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if n == int(n) else f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.0f} TiB" if n == int(n) else f"{n:.3g} TiB"
