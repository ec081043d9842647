"""Run options: how a run measures (:class:`RunOptions`) and, for the record only, how it
was asked for (:class:`Invocation`).

Both travel typed: the runner hands :class:`RunOptions` to the System it opens (testcases and
the measurement engine read ``system.options``), the Report keeps both, and the JSON
``options`` object is built from them only when a report is serialized
(:func:`options_record`; :func:`options_from_record` reads it back).
"""

from __future__ import annotations

import signal as signal_module
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import attrs

MIB = 1 << 20
DEFAULT_BUFFER_SIZE = 512 * MIB
DEFAULT_LOOPS = 16
DEFAULT_SAMPLES = 3
WARMUP_ITERATIONS = 4
#: Upper bounds of the measurement options (docs/failures.md): past them a run would not end
#: in any useful time (10**20 samples), or a timeout would overflow the spin-gate kernel's
#: 64-bit nanosecond argument (near 1.8e10 s).
MAX_SAMPLES = 100_000
MAX_LOOPS = 1_000_000
MAX_GATE_TIMEOUT_S = 86_400.0
MAX_SYNC_TIMEOUT_S = 86_400.0
_BOUNDS = {"samples": MAX_SAMPLES, "loops": MAX_LOOPS}
MAX_WORLD_TIMEOUT_S = 86_400.0
#: the shortest --world-timeout: below it a healthy rank on a busy host (an MPI collective
#: takes milliseconds, a Python rank's step tens of them) reads as a dead one
MIN_WORLD_TIMEOUT_S = 1.0
_SECONDS = {
    "gate_timeout_s": MAX_GATE_TIMEOUT_S,
    "sync_timeout_s": MAX_SYNC_TIMEOUT_S,
    "world_timeout_s": MAX_WORLD_TIMEOUT_S,
}
#: exit code of a run that went fine but is below expectation (``--expect``, ``gpubw check``;
#: nvbandwidth's own codes are 0 and 1)
EXIT_BELOW_EXPECTATION = 3
#: the peer-outlier rule's default: a cell below this % of its peers' median fails
DEFAULT_OUTLIER_PCT = 90.0
#: the noise rule's default: a cell whose samples' CV exceeds this fraction is noisy
DEFAULT_CV_THRESHOLD = 0.10
#: default bound of a collective across ranks (seconds; --world-timeout)
DEFAULT_WORLD_TIMEOUT_S = 60.0
#: the largest --seed (of --sample-pairs); a seed is never negative
MAX_SEED = 2**63 - 1
#: the longest --soak (a week)
MAX_SOAK_S = 7 * 86_400.0


def _positive(instance: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{attribute.name} must be a whole number, got {value!r}")
    if value < 1:
        raise ValueError(f"{attribute.name} must be >= 1, got {value}")
    high = _BOUNDS[attribute.name]
    if value > high:
        raise ValueError(f"{attribute.name} must be at most {high}, got {value}")


def _seed(instance: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"seed must be a whole number, got {value!r}")
    if not 0 <= value <= MAX_SEED:
        raise ValueError(f"seed must be in [0, {MAX_SEED}], got {value}")


def _seconds(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    high = _SECONDS[attribute.name]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{attribute.name} must be a number of seconds, got {value!r}")
    if not 0 < value <= high:  # also refuses nan and inf
        raise ValueError(f"{attribute.name} must be in (0, {high:g}] seconds, got {value!r}")
    if attribute.name == "world_timeout_s" and value < MIN_WORLD_TIMEOUT_S:
        raise ValueError(
            f"world_timeout_s must be at least {MIN_WORLD_TIMEOUT_S:g} seconds, got {value!r}"
        )


HANDLE_TYPES = ("fabric", "posix-fd", "ipc")


def _handle_type(instance: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and value not in HANDLE_TYPES:
        raise ValueError(
            f"handle_type must be one of {', '.join(HANDLE_TYPES)} or None, got {value!r}"
        )


def _bool(instance: object, attribute: attrs.Attribute[Any], value: bool) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{attribute.name} must be True or False, got {value!r}")


def _sizes(value: Iterable[int]) -> tuple[int, ...]:
    return tuple(value)


def _check_sizes(instance: object, attribute: attrs.Attribute[Any], value: tuple[int, ...]) -> None:
    if not value:
        raise ValueError("buffer_sizes must hold at least one size")
    for size in value:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"buffer_sizes must be whole numbers of bytes >= 1, got {size!r}")


def _strings(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(str(v) for v in value)


def _device_tokens(value: Iterable[str] | None) -> tuple[str, ...] | None:
    """``--devices``/``--pair``: the GPUs as given (indexes, UUIDs or PCI bus ids); None: all."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        raise ValueError(
            f"devices must be a list of GPU indexes, UUIDs or PCI bus ids, got {value!r}"
        )
    tokens = tuple(str(v).strip() for v in value)
    if not tokens or "" in tokens:
        raise ValueError(
            f"devices must name at least one GPU and no empty one, got {list(value)!r}"
        )
    return tokens


def _host_numa(instance: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is None or value in ("local", "remote"):
        return
    if not (isinstance(value, str) and value.isdecimal() and len(value) <= 6):
        raise ValueError(
            f"host_numa must be a NUMA node number, 'local' or 'remote', got {value!r}"
        )


def _soak(instance: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"soak_s must be a number of seconds, got {value!r}")
    if not 0 < value <= MAX_SOAK_S:  # also refuses nan and inf
        raise ValueError(f"soak_s must be in (0, {MAX_SOAK_S:g}] seconds, got {value!r}")


@attrs.frozen
class RunOptions:
    """How every measurement of one run is made (nvbandwidth's -b, -i, -m, -s, -d,
    --loopCount)."""

    samples: int = attrs.field(default=DEFAULT_SAMPLES, validator=_positive)
    loops: int = attrs.field(default=DEFAULT_LOOPS, validator=_positive)
    statistic: Literal["median", "mean"] = attrs.field(
        default="median", validator=attrs.validators.in_(("median", "mean"))
    )
    verify: bool = attrs.field(default=True, validator=_bool)
    affinity: bool = attrs.field(default=True, validator=_bool)
    verbose: bool = attrs.field(default=False, validator=_bool)
    #: Longest a stream may stay held by the spin gate (and longest any sync may take).
    gate_timeout_s: float = attrs.field(default=10.0, validator=_seconds)
    #: Seconds allowed for one sample's copies to finish after the gate opens.
    sync_timeout_s: float = attrs.field(default=120.0, validator=_seconds)
    #: Bytes per buffer; every sized testcase runs once per size, in this order.
    buffer_sizes: tuple[int, ...] = attrs.field(
        default=(DEFAULT_BUFFER_SIZE,), converter=_sizes, validator=_check_sizes
    )
    #: host buffers from huge pages (mmap MAP_HUGETLB, then registered with the driver)
    host_huge_pages: bool = attrs.field(default=False, validator=_bool)
    #: Longest any collective across ranks may take (--world-timeout); only read in a run of
    #: several ranks.
    world_timeout_s: float = attrs.field(default=DEFAULT_WORLD_TIMEOUT_S, validator=_seconds)
    #: --sample-pairs: measure only this many cells (an int) or this share of them (a float
    #: in (0, 1]) of every N x N testcase; None measures every cell.
    sample_pairs: int | float | None = None
    #: --seed of the pair sample (the same seed gives the same cells on every rank and run).
    seed: int = attrs.field(default=0, validator=_seed)
    #: --handle-type: how ranks share device memory ("fabric", "posix-fd" or "ipc"); None
    #: (auto) takes the best kind every rank can use.
    handle_type: str | None = attrs.field(default=None, validator=_handle_type)
    #: --devices / --pair: the GPUs to measure, as given (indexes, UUIDs or their prefixes,
    #: PCI bus ids); None measures every GPU. Resolved when the System opens
    #: (:meth:`gpubw.memory.system.System.select_devices`).
    devices: tuple[str, ...] | None = attrs.field(default=None, converter=_device_tokens)
    #: the selection came from --pair (exactly two different GPUs)
    device_pair: bool = attrs.field(default=False, validator=_bool)
    #: --host-numa: where host buffers live: a node number ("1"), "local" (the GPU's node) or
    #: "remote" (another node); None: near the GPU's CPUs by affinity (-d: anywhere)
    host_numa: str | None = attrs.field(default=None, validator=_host_numa)
    #: --soak: repeat the selection until this many seconds have passed (None: once)
    soak_s: float | None = attrs.field(default=None, validator=_soak)
    #: --trace: record where the run's time goes (:mod:`gpubw.model.trace`) into the report's
    #: ``trace``; off, nothing is recorded
    trace: bool = attrs.field(default=False, validator=_bool)


@attrs.frozen
class Invocation:
    """How a run was asked for, kept in the Report for the record only: nothing in the run
    reads it. The CLI fills every field; :func:`gpubw.run` records its own selection."""

    #: the -t values (keys or indexes, as given)
    testcase: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    #: the -p values
    testcase_prefixes: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    #: the report format (writer name); None where no writer was asked for (the Python API)
    format: str | None = None
    #: the -o path, or None for stdout
    output: str | None = None
    #: the --simulate preset name or system file, None on real GPUs
    simulate: str | None = None
    perf_formatter: bool = False
    #: the command line (without the program name)
    argv: tuple[str, ...] = attrs.field(default=(), converter=_strings)


def options_record(
    run_options: RunOptions, invocation: Invocation | None, signal: str | None
) -> dict[str, Any]:
    """The report's JSON ``options`` object (plain JSON data), keys in their documented order:
    the sizes, the measurement options, the invocation, and ``signal_exit``/``signal`` when a
    signal stopped the run."""
    o = run_options
    record: dict[str, Any] = {
        "buffer_sizes": list(o.buffer_sizes),
        "buffer_size_mib": [s / MIB for s in o.buffer_sizes],
        "samples": o.samples,
        "loops": o.loops,
        "statistic": o.statistic,
        "verify": o.verify,
        "affinity": o.affinity,
        "verbose": o.verbose,
        "gate_timeout_s": o.gate_timeout_s,
    }
    if o.host_huge_pages:  # only when asked for: older readers never see the key
        record["host_huge_pages"] = True
    if o.sample_pairs is not None:  # only then: a full run's record is as it always was
        record.update(sample_pairs=o.sample_pairs, seed=o.seed)
    if o.handle_type is not None:
        record["handle_type"] = o.handle_type
    if o.world_timeout_s != DEFAULT_WORLD_TIMEOUT_S:
        record["world_timeout_s"] = o.world_timeout_s
    if o.trace:  # only when asked for: older readers never see the key
        record["trace"] = True
    record.update(node_options_record(o))
    if invocation is not None:
        i = invocation
        record.update(
            testcase=list(i.testcase),
            testcase_prefixes=list(i.testcase_prefixes),
            format=i.format,
            output=i.output,
            simulate=i.simulate,
            perf_formatter=i.perf_formatter,
            argv=list(i.argv),
        )
    if signal is not None:
        record["signal_exit"] = exit_status(signal=signal)
        record["signal"] = signal
    return record


def node_options_record(o: RunOptions) -> dict[str, Any]:
    """The node-check options of the record, only those given (older readers never see
    them otherwise)."""
    record: dict[str, Any] = {}
    if o.devices is not None:
        record["devices"] = list(o.devices)
        if o.device_pair:
            record["device_pair"] = True
    if o.host_numa is not None:
        record["host_numa"] = o.host_numa
    if o.soak_s is not None:
        record["soak_s"] = o.soak_s
    return record


_INVOCATION_KEYS = ("testcase", "testcase_prefixes", "format", "output", "simulate", "argv")


def options_from_record(
    record: Mapping[str, Any], interrupted: bool = False
) -> tuple[RunOptions, Invocation | None, str | None]:
    """(run options, invocation, signal) from a report's ``options`` object, the inverse of
    :func:`options_record`. Keys a report lacks (the object is free-form across versions)
    take their defaults; an interrupted report without a ``signal`` key reads as SIGINT."""
    defaults = RunOptions()
    fields = {
        name: record[name]
        for name in (
            "samples",
            "loops",
            "statistic",
            "verify",
            "affinity",
            "verbose",
            "gate_timeout_s",
            "host_huge_pages",
            "world_timeout_s",
            "sample_pairs",
            "seed",
            "handle_type",
            "devices",
            "device_pair",
            "host_numa",
            "soak_s",
            "trace",
        )
        if record.get(name) is not None
    }
    sizes = record.get("buffer_sizes") or defaults.buffer_sizes
    run_options = RunOptions(buffer_sizes=sizes, **fields)
    invocation = None
    if any(k in record for k in _INVOCATION_KEYS):
        invocation = Invocation(
            testcase=record.get("testcase") or (),
            testcase_prefixes=record.get("testcase_prefixes") or (),
            format=record.get("format"),
            output=record.get("output"),
            simulate=record.get("simulate"),
            perf_formatter=bool(record.get("perf_formatter", False)),
            argv=record.get("argv") or (),
        )
    signal = record.get("signal")
    if signal is None and interrupted:
        signal = "SIGINT"
    return run_options, invocation, None if signal is None else str(signal)


def exit_status(
    *, signal: str | int | None = None, failed: bool = False, below_expectation: bool = False
) -> int:
    """gpubw's one exit-code rule: a run stopped by a signal exits 128 + its number (130 for
    SIGINT, 143 for SIGTERM), else 1 if anything failed, else 3
    (:data:`EXIT_BELOW_EXPECTATION`) if it ran fine but a verdict failed, else 0.
    ``signal`` is a name ("SIGINT") or a number."""
    if signal is not None:
        if isinstance(signal, str):
            try:
                number = int(signal_module.Signals[signal])
            except KeyError:
                number = int(signal_module.SIGINT)
        else:
            number = int(signal)
        return 128 + number
    if failed:
        return 1
    return EXIT_BELOW_EXPECTATION if below_expectation else 0


def _signal_name(value: str | int | None) -> str | None:
    """A signal as its name ("SIGINT"); a number is converted."""
    if value is None or isinstance(value, str):
        return value
    return signal_module.Signals(value).name
