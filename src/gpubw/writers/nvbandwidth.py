"""nvbandwidth's own output, exactly: ``--format nvbandwidth`` (plain text) and
``--format nvbandwidth-json`` (its ``-j`` document), for the tools that parse nvbandwidth.

The shape is NVIDIA nvbandwidth's, line for line and key for key, of one release: v0.10 by
default, v0.8 on request (the writer option ``--nvbandwidth-version``; what differs is
:mod:`gpubw.model.nvbandwidth_versions`). v0.8's (reference: nvbandwidth-behaviour.md, §7):
the version block, the small
buffer NOTE where nvbandwidth records it, the CUDA and driver lines, the host and its devices
(or, in a run of several ranks, the ``MPI version:`` line and one ``Process <r> (<host>):
device <d>: ...`` line per rank), then per testcase ``Running <key>.``, its matrices (header,
columns, rows, blank, ``SUM <key> <v>``, ``MIN``/``MAX``/``AVG`` with ``-v``, blank),
``Waived: `` or ``ERROR: Testcase <id> not found!``, and the two NOTE lines at the end. v0.10
adds ``COEFFICIENT_OF_VARIATION <key> <cv>`` after each testcase's last SUM (none for latency),
writes ``Waived <key>: <reason>``, and its CUDA lines as ``13.3 (13030)``. None of gpubw's
additions: no counting line, no banner, no ``Backend:`` line, no sweep tables. Names (devices,
keys, descriptions, messages) are written :func:`~gpubw.model.console.printable`: a line break
or ESC in one cannot forge a line; the JSON keeps them as they are (JSON-escaped).

The JSON is jsoncpp's: keys sorted, one TAB per level, ``" : "``, every array one element per
line, doubles as ``%.17g``, cells as ``%g`` strings in GB/s (ns for latency) and ``"N/A"``,
the whole ended by two newlines (:func:`jsoncpp_dumps`).

What gpubw has that nvbandwidth has not is left out or mapped:

* matrices counted read + write (``device_local_copy``'s ``_read_write``) are left out where
  the testcase has a matrix counted as nvbandwidth counts (a plugin's only matrix is kept);
* a testcase that failed (Error, Interrupted): nvbandwidth stops the process there, so the
  output stops there too: the text ends after its ``Running`` line (no NOTE), the JSON keeps it
  with status ``Running``, sets ``error`` and lists nothing after it;
* Not Found is nvbandwidth's ``ERROR`` (JSON status ``ERROR``);
* ``git_version`` (``Built from Git version:``) names gpubw, and a simulated run says so
  there: ``gpubw-0.1.0 (SIMULATED h200x2)`` (:func:`git_version`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, TextIO

from gpubw.hw.nvml import CC_BOUNCE_BUFFERS
from gpubw.model.console import printable, printable_lines
from gpubw.model.nvbandwidth_versions import (
    DEFAULT,
    MULTINODE_TESTCASES,
    V08,
    VERSION_OPTION,
    VERSIONS,
    NvbVersion,
    not_found_text,
    strtol_index,
    testcase_cv,
    unknown_item,
    version_named,
)
from gpubw.model.options import DEFAULT_BUFFER_SIZE
from gpubw.model.results import (
    COUNTED_READ_WRITE,
    KIND_LATENCY,
    Matrix,
    Report,
    Status,
    TestcaseResult,
)
from gpubw.writers import Writer, WriterOption, device_pci_short, display_scale
from gpubw.writers.text import NOTE_LINES, sample_lines, table_lines, world_lines

#: the nvbandwidth release these writers reproduce unless told another
NVBANDWIDTH_VERSION = DEFAULT.version
#: the writers' option that picks the release
RELEASE = WriterOption(
    VERSION_OPTION,
    "the nvbandwidth release whose output to write (v0.10's by default; "
    "gpubw-nvbandwidth takes GPUBW_NVBANDWIDTH_VERSION)",
    choices=tuple(VERSIONS),
    default=None,
    metavar="|".join(VERSIONS),
)
#: nvbandwidth v0.8's warning for a buffer below its 512 MiB default, word for word ("64MB"
#: is stale in nvbandwidth; gpubw's own reports say 512 MiB)
SMALL_BUFFER_WARNING = V08.small_buffer_note()
#: the start of gpubw's own wording of that warning (replaced by nvbandwidth's)
_GPUBW_SMALL_BUFFER = "NOTE: You have chosen a buffer size that is smaller than the default"
#: statuses after which nvbandwidth's process would have ended
_FATAL = (Status.ERROR, Status.INTERRUPTED)


def git_version_text(tool_version: str, simulated: str | None = None) -> str:
    """What nvbandwidth prints as its git version: gpubw's version, and for a simulated
    system ``(SIMULATED <name>)``."""
    text = f"gpubw-{tool_version}"
    return text if simulated is None else f"{text} (SIMULATED {simulated or 'model'})"


def git_version(report: Report) -> str:
    """:func:`git_version_text` of a Report."""
    return git_version_text(report.tool_version, report.system_name if report.simulated else None)


def warnings(report: Report, release: NvbVersion = DEFAULT) -> list[str]:
    """The run's warnings as nvbandwidth records them: its own small-buffer wording (when a
    buffer is below 512 MiB, as nvbandwidth decides it) first, then the others."""
    sizes = report.run_options.buffer_sizes
    note = release.small_buffer_note()
    small = [note] if any(s < DEFAULT_BUFFER_SIZE for s in sizes) else []
    return small + [w for w in report.warnings if not w.startswith(_GPUBW_SMALL_BUFFER)]


def kept_matrices(result: TestcaseResult) -> list[Matrix]:
    """The matrices nvbandwidth would print: gpubw's read + write additions are left out
    where the testcase has another matrix."""
    usual = [m for m in result.matrices if m.bytes_counting != COUNTED_READ_WRITE]
    return usual or list(result.matrices)


def not_found_message(result: TestcaseResult) -> str:
    """nvbandwidth's words for an unresolved ``-t`` item (they end with ``!``)."""
    item = unknown_item(result.key)
    if item is not None:
        return not_found_text(item, strtol_index(item))
    message = result.message or f"Testcase {result.key} not found"
    return message if message.endswith("!") else message + "!"


def not_found_name(result: TestcaseResult) -> str:
    """The ``-t`` item an unresolved testcase was."""
    item = unknown_item(result.key)
    return result.key if item is None else item


def listed(report: Report) -> list[TestcaseResult]:
    """The testcases nvbandwidth's build would print: outside MPI (a single-node build) not
    the multinode ones gpubw waived there (``--format nvbandwidth`` of gpubw's default suite)."""
    if report.world is not None:
        return list(report.testcases)
    return [t for t in report.testcases if not _single_node_waiver(t)]


def _single_node_waiver(t: TestcaseResult) -> bool:
    return t.status is Status.WAIVED and t.key in MULTINODE_TESTCASES


def failure_message(report: Report) -> str:
    """Why nvbandwidth's process would have ended: the run's error, or the first testcase
    that failed or was interrupted, on rank 0's host or another ("" when none)."""
    if report.error:
        return report.error
    where = [("", report.testcases), *((f"host {h}: ", ts) for h, ts in report.hosts)]
    for prefix, results in where:
        for t in results:
            if t.status in _FATAL:
                return f"{prefix}{t.key}: {t.message or t.status.value}"
    return ""


# -- plain text ------------------------------------------------------------------------------


def version_lines(git: str, release: NvbVersion = DEFAULT) -> list[str]:
    """nvbandwidth's version block (and a blank line) with ``git`` as its git version."""
    return [f"nvbandwidth Version: {release.version}", f"Built from Git version: {git}", ""]


def _cuda_lines(report: Report, release: NvbVersion) -> list[str]:
    cuda = int(report.versions.get("cuda_driver") or 0)
    text = release.cuda_text(cuda)
    driver = report.versions.get("driver", "unknown")
    return [f"CUDA Runtime Version: {text}", f"{release.driver_label}: {text}",
            f"Driver Version: {driver}", ""]  # fmt: skip


def header_lines(report: Report, release: NvbVersion = DEFAULT) -> list[str]:
    """Everything nvbandwidth prints before its first testcase."""
    out = version_lines(git_version(report), release)
    world = report.world
    if world is not None and world.get("mpi_library"):
        out.append(f"MPI version: {' '.join(str(world['mpi_library']).split())}")
    out += warnings(report, release)
    if not report.devices:  # the run could not start: nvbandwidth stops here
        return printable_lines(out)
    out += _cuda_lines(report, release) + _cc_lines(report, release)
    if world is not None:
        return printable_lines(out + world_lines(world))
    out.append(report.host)
    for i, d in enumerate(report.devices):
        out.append(f"Device {d.get('ordinal', i)}: {d.get('name', 'unknown')} "
                   f"({device_pci_short(d)})")  # fmt: skip
    return printable_lines([*out, ""])


def _cc_lines(report: Report, release: NvbVersion) -> list[str]:
    """v0.10's line (then a blank one) when the node runs in Confidential Computing mode
    (NVML said so, the report's ``nvml.confidential_compute``), before the host name."""
    nvml = report.nvml or {}
    if not release.cc_line or nvml.get("confidential_compute") is not True:
        return []
    return [CC_BOUNCE_BUFFERS, ""]


def _cv_lines(matrices: Sequence[Matrix], release: NvbVersion) -> list[str]:
    """v0.10's line after the last SUM of a bandwidth testcase (none for latency)."""
    if not release.cv_lines or not matrices or matrices[-1].kind == KIND_LATENCY:
        return []
    return [f"COEFFICIENT_OF_VARIATION {matrices[-1].key} {testcase_cv(matrices):.2f}"]


def testcase_lines(
    t: TestcaseResult, verbose: bool = False, perf: bool = False, release: NvbVersion = DEFAULT
) -> list[str]:
    """One testcase as nvbandwidth prints it (a failed one: only its ``Running`` line, the
    last line nvbandwidth would print); every name written printable."""
    if t.status is Status.WAIVED:
        return [printable(release.waived_line(t.key, t.message))]
    if t.status is Status.NOT_FOUND:
        return [printable(f"ERROR: {not_found_message(t)}")]
    out = [f"Running {t.key}."]
    if t.status in _FATAL:
        return printable_lines(out)
    matrices = kept_matrices(t)
    if verbose:
        out += [line for m in matrices for line in sample_lines(m)]
    for n, m in enumerate(matrices):
        out += table_lines(m, verbose, perf)
        out += _cv_lines(matrices, release) if n + 1 == len(matrices) else []
        out.append("")
    return printable_lines(out)


def _emit(stream: TextIO, lines: Sequence[str]) -> None:
    if lines:
        stream.write("\n".join(lines) + "\n")
        stream.flush()


class NvbandwidthTextWriter(Writer):
    """nvbandwidth's plain text, exactly (no gpubw additions), testcase by testcase."""

    name = "nvbandwidth"
    options = (RELEASE,)

    def __init__(self, *, verbose: bool = False, perf_formatter: bool = False) -> None:
        super().__init__(verbose=verbose, perf_formatter=perf_formatter)
        #: the release's name (``--nvbandwidth-version``); None: the default
        self.nvbandwidth_version: str | None = None
        self._header: Report | None = None
        self._written = 0
        self._stopped = False

    def write(self, report: Report, stream: TextIO) -> None:
        self._header = None
        self.begin(report, stream)
        for result in report.testcases:
            self.testcase(result, stream)
        self.end(report, stream)

    def begin(self, header: Report, stream: TextIO) -> None:
        """The version block, the CUDA and driver lines and the devices."""
        self._header, self._written, self._stopped = header, 0, False
        _emit(stream, header_lines(header, self.release))

    @property
    def release(self) -> NvbVersion:
        """The nvbandwidth release this writer writes."""
        return version_named(self.nvbandwidth_version)

    def testcase(self, result: TestcaseResult, stream: TextIO) -> None:
        """One finished testcase; nothing after one that failed (nvbandwidth stops)."""
        self._written += 1
        if self._header is None or self._stopped:
            return
        if self._header.world is None and _single_node_waiver(result):
            return  # a single-node build has no multinode testcases
        self._stopped = result.status in _FATAL
        _emit(stream, testcase_lines(result, self.verbose, self.perf_formatter, self.release))

    def end(self, report: Report, stream: TextIO) -> None:
        """Late warnings and the NOTE, unless the run stopped on a failure."""
        header, self._header = self._header, None
        if header is None:  # the run could not start: only what nvbandwidth printed by then
            _emit(stream, header_lines(report, self.release))
            return
        for result in report.testcases[self._written :]:
            self._header = header
            self.testcase(result, stream)
        self._header = None
        if self._stopped or report.error or report.interrupted:
            return
        late = [w for w in report.warnings if w not in header.warnings]
        _emit(stream, [*printable_lines(late), *NOTE_LINES, ""])


# -- JSON ------------------------------------------------------------------------------------


def cell_text(value: float | None, scale: float) -> str:
    """A cell as nvbandwidth's JSON holds it: C++'s default stream format (``%g``)."""
    return "N/A" if value is None else f"{value * scale:g}"


def matrix_stats(m: Matrix) -> dict[str, float]:
    """``sum``, ``min``, ``max``, ``average`` of a matrix in display units, as nvbandwidth
    computes them: a missing cell counts as 0, the maximum starts at the smallest normal
    double, the average divides by the cells above 0 (NaN when none)."""
    scale = display_scale(m.unit)
    flat = [(v or 0.0) * scale for row in m.values for v in row]
    positive = sum(1 for x in flat if x > 0)
    total = sum(flat)
    return {
        "sum": total,
        "min": min([1.7976931348623157e308, *flat]),
        "max": max([2.2250738585072014e-308, *flat]),
        "average": total / positive if positive else math.nan,
    }


def testcase_entry(t: TestcaseResult, verbose: bool = False) -> dict[str, Any]:
    """One element of nvbandwidth's ``testcases`` array."""
    status = {Status.PASSED: "Passed", Status.WAIVED: "Waived", Status.NOT_FOUND: "ERROR"}
    name = not_found_name(t) if t.status is Status.NOT_FOUND else t.key
    entry: dict[str, Any] = {"name": name, "status": status.get(t.status, "Running")}
    matrices = kept_matrices(t) if t.status is Status.PASSED else []
    if not matrices:
        return entry
    rows = [
        [cell_text(v, display_scale(m.unit)) for v in row] for m in matrices for row in m.values
    ]
    last = matrices[-1]  # nvbandwidth overwrites the description and the sum per matrix
    stats = matrix_stats(last)
    entry.update(bandwidth_matrix=rows, bandwidth_description=last.description, sum=stats["sum"])
    if verbose:
        entry.update(min=stats["min"], max=stats["max"], average=stats["average"])
    return entry


def document(
    report: Report, verbose: bool = False, release: NvbVersion = DEFAULT
) -> dict[str, Any]:
    """nvbandwidth's ``-j`` document for a Report (the same keys in v0.8 and v0.10: no v0.10
    JSON is public; ``CUDA Runtime Version`` stays an int, as DCGM requires)."""
    nv: dict[str, Any] = {"version": release.version, "git_version": git_version(report)}
    if report.devices:
        nv["CUDA Runtime Version"] = int(report.versions.get("cuda_driver") or 0)
        nv["Driver Version"] = str(report.versions.get("driver", "unknown"))
        nv["GPU Device list"] = [
            f"{d.get('ordinal', i)}: {d.get('name', 'unknown')} ({device_pci_short(d)}): "
            f"({report.host})"
            for i, d in enumerate(report.devices)
        ]
    entries = []
    for t in listed(report):
        entries.append(testcase_entry(t, verbose))
        if t.status in _FATAL:
            break
    if entries:
        nv["testcases"] = entries
    recorded = warnings(report, release)
    if recorded:
        nv["warning"] = recorded[-1]  # nvbandwidth keeps only the last one
    error = failure_message(report)
    if error:
        nv["error"] = error
    return {"nvbandwidth": nv}


def _scalar(value: Any) -> str:
    """A scalar as jsoncpp writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "null"
        if math.isinf(value):
            return "1e+9999" if value > 0 else "-1e+9999"
        text = f"{value:.17g}"
        return text if ("." in text or "e" in text) else text + ".0"
    return json.dumps(str(value))  # ASCII-only escapes, as jsoncpp writes them


def _dump(value: Any, depth: int, out: list[str]) -> None:
    """Append ``value``'s jsoncpp text to ``out``; the caller has placed the first line."""
    pad = "\t" * depth
    if isinstance(value, dict) and value:
        out.append("{")
        for n, key in enumerate(sorted(value, key=lambda k: str(k).encode())):
            out.append(f"\n{pad}\t{json.dumps(str(key))} : ")
            child = value[key]
            if isinstance(child, (dict, list)) and child:
                out.append(f"\n{pad}\t")
            _dump(child, depth + 1, out)
            out.append("," if n + 1 < len(value) else "")
        out.append(f"\n{pad}}}")
    elif isinstance(value, list) and value:
        out.append("[")
        for n, child in enumerate(value):
            out.append(f"\n{pad}\t")
            _dump(child, depth + 1, out)
            out.append("," if n + 1 < len(value) else "")
        out.append(f"\n{pad}]")
    elif isinstance(value, (dict, list)):
        out.append("{}" if isinstance(value, dict) else "[]")
    else:
        out.append(_scalar(value))


def jsoncpp_dumps(value: Any) -> str:
    """``value`` as jsoncpp 1.9's ``toStyledString()`` writes it, plus the ``std::endl``
    nvbandwidth prints after it (so the text ends with two newlines)."""
    out: list[str] = []
    _dump(value, 0, out)
    return "".join(out) + "\n\n"


class NvbandwidthJsonWriter(Writer):
    """nvbandwidth's ``-j`` document, exactly (jsoncpp's layout, nvbandwidth's keys)."""

    name = "nvbandwidth-json"
    options = (RELEASE,)
    #: the release's name (``--nvbandwidth-version``); None: the default
    nvbandwidth_version: str | None = None

    def write(self, report: Report, stream: TextIO) -> None:
        release = version_named(self.nvbandwidth_version)
        stream.write(jsoncpp_dumps(document(report, self.verbose, release)))
