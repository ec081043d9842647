"""The node-check options of a run (issue 21): which GPUs (``--devices``, ``--pair``), where
host buffers live (``--host-numa``), waiting for idle GPUs (``--wait-idle``) and the soak
(``--soak``, ``--soak-drop``). Added to the main parser by :func:`add_node_options`; their
values go into :class:`gpubw.model.options.RunOptions` (:func:`run_option_fields`) and the NVML
watch (:class:`gpubw.acceptance.node.RunWatch`). Their values' parsers are
:mod:`gpubw.cli.argtypes`'s."""

from __future__ import annotations

import argparse
from typing import Any

from gpubw.cli.argtypes import devices, duration, host_numa, soak_drop, wait_idle
from gpubw.cli.parsing import Once

#: the default of --soak-drop: a cell whose figure fell more than this from the first
#: repetition to the last fails
DEFAULT_SOAK_DROP = 0.05


def add_node_options(p: argparse.ArgumentParser) -> None:
    """The node-check options (README, "Is this node healthy?")."""
    add = p.add_argument
    add(
        "--devices",
        action=Once,
        metavar="LIST",
        type=devices,
        help="measure only these GPUs: indexes, UUIDs (or a unique start, GPU-8932) or PCI bus "
        "ids, comma separated; the other cells are null",
    )
    add(
        "--pair",
        action=Once,
        metavar="A,B",
        type=devices,
        help="measure only this pair of GPUs, both directions (as --devices A,B)",
    )
    add(
        "--host-numa",
        action=Once,
        dest="host_numa",
        metavar="N|local|remote",
        type=host_numa,
        help="put host buffers on NUMA node N, on each GPU's own node (local) or on another "
        "node (remote); the report records each host buffer's node",
    )
    add(
        "--wait-idle",
        action=Once,
        dest="wait_idle",
        metavar="SECONDS",
        type=wait_idle,
        help="before each testcase wait, at most SECONDS, until no other program computes on "
        "the selected GPUs; then go on and warn",
    )
    add(
        "--soak",
        action=Once,
        metavar="DURATION",
        type=duration,
        help="repeat the selection until DURATION (e.g. 10m) has passed, recording clocks, "
        "temperature, power and throttle reasons between repetitions (simulated: DURATION of "
        "modelled or of wall time, whichever passes first)",
    )
    add(
        "--soak-drop",
        action=Once,
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
