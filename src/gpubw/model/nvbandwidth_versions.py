"""The facts that differ between the nvbandwidth releases gpubw's nvbandwidth flavour emulates
(v0.10, the default, and v0.8), kept in this one module so that a wrong guess is corrected in
one place.

Sources (docs/compatibility.md, "The nvbandwidth flavour"): NVIDIA nvbandwidth v0.8's code for
v0.8; for v0.10, real v0.10.0 output (tests/data/nvbandwidth/, each file's source in its
README) and NVIDIA's release notes (NVIDIA/nvbandwidth PR #69). What no public v0.10 sample
shows is marked "guess" below.

:func:`testcase_cv` is the one place that computes v0.10's ``COEFFICIENT_OF_VARIATION``.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence

import attrs

from gpubw.model.results import Matrix

#: the environment variable that picks the release ``gpubw-nvbandwidth`` emulates
VERSION_ENV = "GPUBW_NVBANDWIDTH_VERSION"
#: the writer option that picks it for ``--format nvbandwidth`` / ``nvbandwidth-json``
VERSION_OPTION = "--nvbandwidth-version"

#: v0.8's list (a single-node build), indexes 0-34
V08_TESTCASES = (
    "host_to_device_memcpy_ce", "device_to_host_memcpy_ce",
    "host_to_device_bidirectional_memcpy_ce", "device_to_host_bidirectional_memcpy_ce",
    "device_to_device_memcpy_read_ce", "device_to_device_memcpy_write_ce",
    "device_to_device_bidirectional_memcpy_read_ce",
    "device_to_device_bidirectional_memcpy_write_ce",
    "all_to_host_memcpy_ce", "all_to_host_bidirectional_memcpy_ce", "host_to_all_memcpy_ce",
    "host_to_all_bidirectional_memcpy_ce", "all_to_one_write_ce", "all_to_one_read_ce",
    "one_to_all_write_ce", "one_to_all_read_ce",
    "host_to_device_memcpy_sm", "device_to_host_memcpy_sm",
    "host_to_device_bidirectional_memcpy_sm", "device_to_host_bidirectional_memcpy_sm",
    "device_to_device_memcpy_read_sm", "device_to_device_memcpy_write_sm",
    "device_to_device_bidirectional_memcpy_read_sm",
    "device_to_device_bidirectional_memcpy_write_sm",
    "all_to_host_memcpy_sm", "all_to_host_bidirectional_memcpy_sm", "host_to_all_memcpy_sm",
    "host_to_all_bidirectional_memcpy_sm", "all_to_one_write_sm", "all_to_one_read_sm",
    "one_to_all_write_sm", "one_to_all_read_sm",
    "host_device_latency_sm", "device_to_device_latency_sm",
    "device_local_copy",
)  # fmt: skip
#: v0.10's list, indexes 0-43 (a real v0.10.0 ``--list``): v0.8's 0-33, the TMA and local ones
V010_TESTCASES = (
    *V08_TESTCASES[:34],
    "device_to_device_memcpy_read_tma", "device_to_device_memcpy_write_tma",
    "device_to_device_bidirectional_memcpy_read_tma",
    "device_to_device_bidirectional_memcpy_write_tma",
    "device_local_copy", "device_local_copy_sm", "device_local_read_sm",
    "device_local_write_sm", "device_to_device_latency_tma", "device_local_copy_tma",
)  # fmt: skip
#: the multinode build's testcases, after the single-node list (v0.8's 35-47; the same 13
#: keys follow v0.10's 43 at 44-56: guess, no v0.10 multinode listing is public)
MULTINODE_TESTCASES = (
    "multinode_device_to_device_memcpy_read_ce", "multinode_device_to_device_memcpy_write_ce",
    "multinode_device_to_device_bidirectional_memcpy_read_ce",
    "multinode_device_to_device_bidirectional_memcpy_write_ce",
    "multinode_device_to_device_memcpy_read_sm", "multinode_device_to_device_memcpy_write_sm",
    "multinode_device_to_device_bidirectional_memcpy_read_sm",
    "multinode_device_to_device_bidirectional_memcpy_write_sm",
    "multinode_device_to_device_all_to_one_write_sm",
    "multinode_device_to_device_all_from_one_read_sm",
    "multinode_device_to_device_broadcast_one_to_all_sm",
    "multinode_device_to_device_broadcast_all_to_all_sm",
    "multinode_bisect_write_ce",
)  # fmt: skip

#: options of every release (long names; see gpubw.cli.nvbandwidth_args.OPTIONS)
_V08_OPTIONS = (
    "help", "bufferSize", "list", "testcase", "testcasePrefixes", "verbose",
    "skipVerification", "disableAffinity", "testSamples", "useMean", "json", "loopCount",
    "perfFormatter",
)  # fmt: skip
#: v0.10's: README's help (v0.9's -P and -H, v0.10's -F, --pair, --version); -j,
#: --loopCount and --perfFormatter kept as hidden aliases (guess: DCGM still runs -j)
_V010_OPTIONS = (*_V08_OPTIONS, "targetNumPairs", "useHugePages", "format", "pair", "version")


@attrs.frozen
class NvbVersion:
    """One nvbandwidth release as gpubw's flavour writes it."""

    #: the name ``GPUBW_NVBANDWIDTH_VERSION`` / ``--nvbandwidth-version`` take
    name: str
    #: ``nvbandwidth Version:`` and the JSON ``version``
    version: str
    #: the single-node build's testcases, in list (and default-run) order
    testcases: tuple[str, ...]
    #: the options its command line accepts (long names)
    options: tuple[str, ...]
    #: the second CUDA line's label
    driver_label: str = "CUDA Driver Version"
    #: the CUDA lines as ``13.3 (13030)`` (v0.10) rather than ``13030``
    cuda_as_release: bool = False
    #: ``COEFFICIENT_OF_VARIATION <key> <cv>`` after a testcase's last SUM (v0.10)
    cv_lines: bool = False
    #: ``Waived <key>: <reason>`` (v0.10) rather than ``Waived: ``
    waived_with_reason: bool = False
    #: ``Detected platform using encrypted bounce buffers for CPU<->GPU traffic.`` and a blank
    #: line after the CUDA lines on a Confidential Computing node (v0.10; seen in a real log)
    cc_line: bool = False
    #: ``-l``: the line of 23 ``=`` after the title and a blank line after each entry (v0.8)
    list_rules: bool = True
    #: the default size its small-buffer NOTE names (v0.8's stale "64MB"; v0.10: guess, from
    #: a pre-release v0.9 fork)
    small_buffer_default: str = "64MB"
    #: its command line is p-ranav/argparse's (v0.10: its help; a refused command line is
    #: argparse's message then the help on standard error: guess, the exact text is not
    #: public), not Boost's (v0.8: the version block, ``ERROR: Invalid Arguments ``, the
    #: words given and the help, on standard output)
    argparse_cli: bool = False
    #: ``-l``: the first line of a description after this (v0.10's descriptions begin with
    #: their own TAB); later lines after one TAB
    list_first_indent: str = "\t"

    def build(self, multinode: bool) -> tuple[str, ...]:
        """This build's list: the multinode testcases follow in an MPI build only."""
        return self.testcases + (MULTINODE_TESTCASES if multinode else ())

    def cuda_text(self, value: int) -> str:
        """A CUDA version as this release prints it (``13030`` or ``13.3 (13030)``)."""
        if not self.cuda_as_release:
            return str(value)
        return f"{value // 1000}.{value % 1000 // 10} ({value})"

    def small_buffer_note(self) -> str:
        """The NOTE for a buffer below the 512 MiB default, word for word."""
        return (
            "NOTE: You have chosen a buffer size that is smaller than the default buffer size. "
            f"It is suggested to use the default buffer size ({self.small_buffer_default}) "
            "to achieve maximal peak bandwidth."
        )

    def waived_line(self, key: str, reason: str) -> str:
        """A waived testcase's one line (no ``Running`` line before it in either release)."""
        if not self.waived_with_reason:
            return "Waived: "
        return f"Waived {key}: {reason or 'waived'}"


V08 = NvbVersion(name="0.8", version="v0.8", testcases=V08_TESTCASES, options=_V08_OPTIONS)
V010 = NvbVersion(
    name="0.10",
    version="v0.10.0",
    testcases=V010_TESTCASES,
    options=_V010_OPTIONS,
    driver_label="CUDA Driver Version (API)",
    cuda_as_release=True,
    cv_lines=True,
    waived_with_reason=True,
    cc_line=True,
    list_rules=False,
    small_buffer_default="512MB",
    argparse_cli=True,
    list_first_indent="\t\t",
)
VERSIONS = {v.name: v for v in (V010, V08)}
DEFAULT = V010
#: what the option and the variable accept ("0.10", "v0.10", "0.10.0"; "0.8", "v0.8")
_ALIASES = {"0.10": V010, "0.10.0": V010, "0.8": V08, "0.8.0": V08}


def version_named(name: str | None, where: str = VERSION_OPTION) -> NvbVersion:
    """The release ``name`` means (None or "": the default, v0.10); a ValueError naming
    ``where`` and the values allowed otherwise."""
    if not name:
        return DEFAULT
    found = _ALIASES.get(name.strip().lower().removeprefix("v"))
    if found is None:
        allowed = ", ".join(VERSIONS)
        raise ValueError(f"{where} {name!r}: not an nvbandwidth release gpubw emulates ({allowed})")
    return found


#: how gpubw-nvbandwidth hands gpubw's run a ``-t`` item the emulated build does not have but
#: gpubw does (an index beyond the release's list, gpubw's being longer; a multinode key
#: outside MPI): a token no testcase has, that the writers print as nvbandwidth's
#: ``Testcase index <i> out of bound!`` / ``Testcase <key> not found!``
_UNKNOWN = "nvbandwidth-unknown:"


def unknown_token(item: str) -> str:
    """The ``-t`` token that stands for ``item`` (an index or a key) unknown to the build."""
    return f"{_UNKNOWN}{item}"


def unknown_item(token: str) -> str | None:
    """The item an :func:`unknown_token` stands for; None for any other token."""
    return token[len(_UNKNOWN) :] if token.startswith(_UNKNOWN) else None


_STRTOL = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")


def strtol_index(item: str) -> int | None:
    """``item`` as nvbandwidth reads a ``-t`` item: an index when C ``strtol`` (base 10)
    consumes all of it ("" is 0), else None (a key)."""
    if item == "":
        return 0
    match = _STRTOL.fullmatch(item)
    return int(match.group(1)) if match else None


def not_found_text(item: str, index: int | None) -> str:
    """nvbandwidth's words for a ``-t`` item it does not have (``index``: the item read as
    an index, None for a key)."""
    if index is not None:
        return f"Testcase index {index} out of bound!"
    return f"Testcase {item} not found!"


def testcase_cv(matrices: Sequence[Matrix]) -> float:
    """v0.10's run-to-run coefficient of variation of a testcase, as gpubw computes it: the
    mean, over the measured cells of its last matrix (of all its matrices when that one has
    no samples), of each cell's sample standard deviation over its samples' mean (a
    fraction). A cell with one sample, or a mean of 0, counts as 0; no samples at all: 0.
    NVIDIA has not published its formula (docs/compatibility.md)."""
    chosen = [m for m in matrices[-1:] if _cells(m)] or list(matrices)
    cvs = [_cv(cell) for m in chosen for cell in _cells(m)]
    return sum(cvs) / len(cvs) if cvs else 0.0


def _cells(m: Matrix) -> list[tuple[float, ...]]:
    return [cell for row in m.samples for cell in row if cell]


def _cv(samples: tuple[float, ...]) -> float:
    finite = [x for x in samples if math.isfinite(x)]
    if len(finite) < 2:
        return 0.0
    mean = statistics.fmean(finite)
    return statistics.stdev(finite) / mean if mean > 0 else 0.0


__all__ = [
    "DEFAULT",
    "MULTINODE_TESTCASES",
    "V010",
    "V08",
    "VERSIONS",
    "VERSION_ENV",
    "VERSION_OPTION",
    "NvbVersion",
    "not_found_text",
    "strtol_index",
    "testcase_cv",
    "unknown_item",
    "unknown_token",
    "version_named",
]
