"""The node-check options of a run (issue 21): which GPUs (``--devices``, ``--pair``), where
host buffers live (``--host-numa``), waiting for idle GPUs (``--wait-idle``) and the soak
(``--soak``, ``--soak-drop``). Added to the main parser by :func:`add_node_options`; their
values go into :class:`gpubw.model.options.RunOptions` (:func:`run_option_fields`) and the NVML
watch (:class:`gpubw.acceptance.node.RunWatch`)."""

from __future__ import annotations

import argparse
import math
import re
from typing import Any

from gpubw.memory.selection import parse_list
from gpubw.model.options import MAX_SOAK_S

#: the default of --soak-drop: a cell whose figure fell more than this from the first
#: repetition to the last fails
DEFAULT_SOAK_DROP = 0.05
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


def devices(text: str) -> tuple[str, ...]:
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


def add_node_options(p: argparse.ArgumentParser) -> None:
    """The node-check options (README, "Is this node healthy?")."""
    add = p.add_argument
    add(
        "--devices",
        metavar="LIST",
        type=devices,
        help="measure only these GPUs: indexes, UUIDs (or a unique start, GPU-8932) or PCI bus "
        "ids, comma separated; the other cells are null",
    )
    add(
        "--pair",
        metavar="A,B",
        type=devices,
        help="measure only this pair of GPUs, both directions (as --devices A,B)",
    )
    add(
        "--host-numa",
        dest="host_numa",
        metavar="N|local|remote",
        type=host_numa,
        help="put host buffers on NUMA node N, on each GPU's own node (local) or on another "
        "node (remote); the report records each host buffer's node",
    )
    add(
        "--wait-idle",
        dest="wait_idle",
        metavar="SECONDS",
        type=wait_idle,
        help="before each testcase wait, at most SECONDS, until no other program computes on "
        "the selected GPUs; then go on and warn",
    )
    add(
        "--soak",
        metavar="DURATION",
        type=duration,
        help="repeat the selection until DURATION (e.g. 10m) has passed, recording clocks, "
        "temperature, power and throttle reasons between repetitions",
    )
    add(
        "--soak-drop",
        dest="soak_drop",
        metavar="P",
        type=soak_drop,
        help=f"with --soak: a cell whose figure fell more than P (default "
        f"{DEFAULT_SOAK_DROP:.0%}) from the first repetition to the last fails".replace("%", "%%"),
    )


#: (namespace attribute, flag) of these options, none of which applies to -l
NOT_FOR_LIST = (
    ("devices", "--devices"),
    ("pair", "--pair"),
    ("host_numa", "--host-numa"),
    ("wait_idle", "--wait-idle"),
    ("soak", "--soak"),
    ("soak_drop", "--soak-drop"),
)


def run_option_fields(ns: argparse.Namespace) -> dict[str, Any]:
    """The RunOptions fields these options set; a usage error for --devices with --pair
    and for --soak-drop without --soak."""
    from gpubw.model.errors import UsageError

    if ns.devices is not None and ns.pair is not None:
        raise UsageError("--devices with --pair: give one of them (--pair A,B is --devices A,B)")
    if ns.soak_drop is not None and ns.soak is None:
        raise UsageError("--soak-drop only applies with --soak DURATION")
    chosen = ns.pair if ns.pair is not None else ns.devices
    if ns.pair is not None and len(ns.pair) != 2:
        raise UsageError(f"--pair {','.join(ns.pair)}: a pair is two GPUs, A,B (e.g. --pair 0,1)")
    return {
        "devices": chosen,
        "device_pair": ns.pair is not None,
        "host_numa": ns.host_numa,
        "soak_s": ns.soak,
    }


def soak_drop_of(ns: argparse.Namespace) -> float | None:
    """The soak rule's threshold: --soak-drop, its default with --soak; None without --soak."""
    if ns.soak is None:
        return None
    return DEFAULT_SOAK_DROP if ns.soak_drop is None else float(ns.soak_drop)
