"""Run options shared by the runner, the measurement engine and testcases."""

from __future__ import annotations

from typing import Literal

import attrs

MIB = 1 << 20
DEFAULT_BUFFER_SIZE = 512 * MIB
DEFAULT_LOOPS = 16
DEFAULT_SAMPLES = 3
WARMUP_ITERATIONS = 4


def _positive(instance: object, attribute: attrs.Attribute, value: int) -> None:
    if value < 1:
        raise ValueError(f"{attribute.name} must be >= 1, got {value}")


@attrs.frozen
class RunOptions:
    """How every measurement of one run is made (nvbandwidth's -i, -m, -s, -d, --loopCount)."""

    samples: int = attrs.field(default=DEFAULT_SAMPLES, validator=_positive)
    loops: int = attrs.field(default=DEFAULT_LOOPS, validator=_positive)
    statistic: Literal["median", "mean"] = "median"
    verify: bool = True
    affinity: bool = True
    verbose: bool = False
    #: Longest a stream may stay held by the spin gate (and longest any sync may take).
    gate_timeout_s: float = 10.0
    #: Seconds allowed for one sample's copies to finish after the gate opens.
    sync_timeout_s: float = 120.0
