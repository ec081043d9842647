"""Every flag parser of the ``gpubw`` command and its sub-commands: the functions that turn
a flag's text into a value, or refuse it (``argparse.ArgumentTypeError``, which the parser
words as a usage error; :class:`UsageError` where the value's own module words it).

Gathered here from the modules of the options that use them (the main parser, the
acceptance and node-check options, ``plot``, ``compare``) along the seam between reading a
flag's text and what the value is for. Where the Python API needs the same conversion (a
``-b`` size text), the value's logic stays in its lower module (:func:`gpubw.model.sizes.
parse_sizes`, :func:`gpubw.memory.selection.parse_list`) and this module holds the
flag-text wrapper.

Every number a user types is bounded above as well as below (docs/failures.md): a value past
the bound is refused with a message naming it and the allowed range, before anything runs.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

from gpubw.model.errors import UsageError
from gpubw.model.options import (
    DEFAULT_BUFFER_SIZE,
    MAX_GATE_TIMEOUT_S,
    MAX_LOOPS,
    MAX_SAMPLES,
    MAX_SEED,
    MAX_SOAK_S,
)
from gpubw.model.sizes import parse_size, parse_sizes

#: what --outlier-pct and --cv-threshold take to switch their rule off
OFF = "off"

#: the largest ``--dpi`` of ``gpubw plot`` (a 7-inch-wide panel at 2400 dpi is already
#: 16800 pixels; more only exhausts memory)
MAX_DPI = 2400


def bounded_int(high: int, low: int = 1) -> Callable[[str], int]:
    """argparse type: a whole number in [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{text!r} must be at least {low}")
        if value > high:
            raise argparse.ArgumentTypeError(f"{text!r} must be at most {high}")
        return value

    parse.__name__ = "whole number"
    return parse


#: -i/--samples
samples_int = bounded_int(MAX_SAMPLES)
#: --loop-count
loops_int = bounded_int(MAX_LOOPS)
#: plot --dpi
dpi_int = bounded_int(MAX_DPI)
#: --seed (of --sample-pairs): 0 or more
seed_int = bounded_int(MAX_SEED, low=0)


def seconds(high: float, low: float = 0.0) -> Callable[[str], float]:
    """argparse type: a positive, finite number of seconds, at least ``low`` (when given)
    and at most ``high``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not value > 0 or not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} must be a positive, finite number")
        if value < low:
            raise argparse.ArgumentTypeError(f"{text!r} must be at least {low:g} seconds")
        if value > high:
            raise argparse.ArgumentTypeError(f"{text!r} must be at most {high:g} seconds")
        return value

    parse.__name__ = "number of seconds"
    return parse


#: --gate-timeout
gate_timeout_seconds = seconds(MAX_GATE_TIMEOUT_S)


def finite_float(text: str) -> float:
    """argparse type: a finite number (no nan, no inf)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number")
    return value


# -- acceptance ------------------------------------------------------------------------------
def outlier_pct(text: str) -> float | None:
    """``--outlier-pct``: a percentage in (0, 100] (a trailing % allowed), or ``off``."""
    if text.strip().lower() == OFF:
        return None
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a percentage; give a number in (0, 100], e.g. 90, or off"
        ) from None
    if not 0 < value <= 100:
        raise argparse.ArgumentTypeError(f"{text!r} must be in (0, 100] percent, or off")
    return value


def fraction(text: str, *, allow_zero: bool = False, off: bool = True) -> float | None:
    """``10%`` or ``0.1`` -> 0.1; ``off`` -> None (where allowed)."""
    t = text.strip().lower()
    if off and t == OFF:
        return None
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a fraction; give e.g. 5% or 0.05" + (", or off" if off else "")
        ) from None
    low_ok = value >= 0 if allow_zero else value > 0
    if not (low_ok and value < 1):
        lo = "[0" if allow_zero else "(0"
        raise argparse.ArgumentTypeError(f"{text!r} must be in {lo}, 1), i.e. below 100%")
    return value


def cv_threshold(text: str) -> float | None:
    return fraction(text)


def tolerance(text: str) -> float:
    value = fraction(text, allow_zero=True, off=False)
    assert value is not None
    return value


# -- gpubw fleet -----------------------------------------------------------------------------
def robust_z(text: str) -> float:
    """``gpubw fleet --z``: a negative, finite number (a robust z: -4)."""
    value = finite_float(text)
    if not value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a negative number, e.g. -4")
    return value


def fleet_threshold(text: str) -> float:
    """``gpubw fleet --threshold``: ``10%`` or ``0.1`` -> 0.1, in (0, 1)."""
    value = fraction(text, off=False)
    assert value is not None
    return value


#: gpubw fleet --min-nodes: a median of fewer than 3 nodes says nothing about any of them
min_nodes_int = bounded_int(1_000_000, low=3)


# -- node checks -----------------------------------------------------------------------------
#: the longest --wait-idle
MAX_WAIT_IDLE_S = 86_400.0
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_DURATION = re.compile(r"([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*(s|m|min|h)?", re.IGNORECASE)


def duration(text: str, *, most: float = MAX_SOAK_S) -> float:
    """``10m``, ``300s``, ``1.5h`` or ``90`` (seconds) -> seconds, more than 0 and at most
    ``most``."""
    m = _DURATION.fullmatch(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration; give seconds or a number with s, m or h (e.g. 10m)"
        )
    value = float(m[1]) * _UNITS[(m[2] or "").lower()]
    if not (math.isfinite(value) and 0 < value <= most):
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0 and at most {most:g} s")
    return value


def wait_idle(text: str) -> float:
    return duration(text, most=MAX_WAIT_IDLE_S)


# -- gpubw fleet --db ------------------------------------------------------------------------
#: the longest ``gpubw fleet --since`` window: ten years
MAX_SINCE_S = 3650 * 86_400.0
_SINCE_UNITS = {"h": 3600.0, "d": 86_400.0, "w": 7 * 86_400.0}
_SINCE = re.compile(r"([0-9]+)\s*([hdw])", re.IGNORECASE)


def since(text: str) -> float:
    """``12h``, ``30d``, ``2w`` (a whole number of hours, days or weeks) -> seconds, more
    than 0 and at most ten years."""
    m = _SINCE.fullmatch(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time span; give a whole number of hours, days or weeks "
            "(e.g. 12h, 30d, 2w)"
        )
    value = int(m[1]) * _SINCE_UNITS[m[2].lower()]
    if not 0 < value <= MAX_SINCE_S:
        raise argparse.ArgumentTypeError(
            f"{text!r} must be more than 0 and at most 3650d (ten years)"
        )
    return value


def devices(text: str) -> tuple[str, ...]:
    """``--devices``, ``--pair``: GPU indexes, UUIDs or PCI bus ids, comma separated."""
    # imported here: gpubw.memory.selection brings the backend and NVML (~40 ms), which
    # ``gpubw compare`` and ``gpubw plot`` (they share these parsers) never need
    from gpubw.memory.selection import parse_list

    try:
        return parse_list(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def host_numa(text: str) -> str:
    t = text.strip().lower()
    if t in ("local", "remote") or (t.isdecimal() and len(t) <= 6):
        return t if not t.isdecimal() else str(int(t))
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a NUMA node; give a node number (see /sys/devices/system/node/), "
        "local or remote"
    )


def soak_drop(text: str) -> float:
    """``5%`` or ``0.05`` -> 0.05: a fraction in (0, 1)."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a fraction; give e.g. 5% or 0.05"
        ) from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be in (0, 1), i.e. between 0% and 100%")
    return value


# -- the flags whose values' logic lives below the CLI (the API takes them too) ---------------
def buffer_sizes(text: str | None) -> list[int]:
    """``-b/--buffer-size``: the sizes in bytes (:func:`gpubw.model.sizes.parse_sizes`; a
    UsageError names the flag); not given (None): the 512 MiB default."""
    return [DEFAULT_BUFFER_SIZE] if text is None else parse_sizes(text)


def buffer_size(text: str, flag: str) -> int:
    """One buffer size, written as for ``-b`` (``compare --size``): bytes; a UsageError
    names ``flag``."""
    try:
        return parse_size(text)
    except UsageError as exc:
        raise UsageError(f"{flag}: {exc}", param="size") from None


def sample_pairs(text: str) -> int | float:
    """``--sample-pairs``, a sample size as a user types it: a count (``64``), a fraction
    (``0.25``) or a percentage (``25%``). Raises :class:`UsageError`
    (``param="sample_pairs"``, which the CLI maps to its flag) naming the value and what is
    allowed."""
    value = text.strip()
    allowed = "a number of pairs (e.g. 64), a fraction in (0, 1] (e.g. 0.25) or a percentage"
    try:
        if value.endswith("%"):
            share = float(value[:-1]) / 100.0
        elif value.isdigit():
            count = int(value)
            if count < 1:
                raise ValueError
            return count
        else:
            share = float(value)
    except ValueError:
        raise UsageError(
            f"invalid pair sample {text!r}: expected {allowed}", param="sample_pairs"
        ) from None
    if not (0.0 < share <= 1.0):
        raise UsageError(
            f"invalid pair sample {text!r}: expected {allowed} (0% < share <= 100%)",
            param="sample_pairs",
        )
    return share
