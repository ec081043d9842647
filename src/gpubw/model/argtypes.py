"""argparse value types shared by the command and its sub-commands (plot, compare).

Every number a user types is bounded above as well as below (docs/failures.md): a value past
the bound is refused with a message naming it and the allowed range, before anything runs.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from gpubw.model.options import MAX_GATE_TIMEOUT_S, MAX_LOOPS, MAX_SAMPLES, MAX_SEED

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
