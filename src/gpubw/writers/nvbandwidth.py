"""nvbandwidth's own output, exactly: ``--format nvbandwidth`` (plain text) and
``--format nvbandwidth-json`` (its ``-j`` document), for the tools that parse nvbandwidth.

The shape is NVIDIA nvbandwidth v0.8's, line for line and key for key
(docs: /work/shared/reference/nvbandwidth-behaviour.md, §7): the version block, the small
buffer NOTE where nvbandwidth records it, the CUDA and driver lines, the host and its devices
(or, in a run of several ranks, the ``MPI version:`` line and one ``Process <r> (<host>):
device <d>: ...`` line per rank), then per testcase ``Running <key>.``, its matrices (header,
columns, rows, blank, ``SUM <key> <v>``, ``MIN``/``MAX``/``AVG`` with ``-v``, blank),
``Waived: `` or ``ERROR: Testcase <id> not found!``, and the two NOTE lines at the end. None
of gpubw's additions: no counting line, no banner, no ``Backend:`` line, no sweep tables.

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

from gpubw.model.options import DEFAULT_BUFFER_SIZE
from gpubw.model.results import (
    COUNTED_READ_WRITE,
    Matrix,
    Report,
    Status,
    TestcaseResult,
)
from gpubw.writers import Writer, device_pci_short, display_scale
from gpubw.writers.text import NOTE_LINES, sample_lines, table_lines, world_lines

#: the nvbandwidth release whose output these writers reproduce
NVBANDWIDTH_VERSION = "v0.8"
#: nvbandwidth's warning for a buffer below its 512 MiB default, word for word ("64MB" is
#: stale in nvbandwidth; gpubw's own reports say 512 MiB)
SMALL_BUFFER_WARNING = (
    "NOTE: You have chosen a buffer size that is smaller than the default buffer size. "
    "It is suggested to use the default buffer size (64MB) to achieve maximal peak bandwidth."
)
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


def warnings(report: Report) -> list[str]:
    """The run's warnings as nvbandwidth records them: its own small-buffer wording (when a
    buffer is below 512 MiB, as nvbandwidth decides it) first, then the others."""
    sizes = report.run_options.buffer_sizes
    small = [SMALL_BUFFER_WARNING] if any(s < DEFAULT_BUFFER_SIZE for s in sizes) else []
    return small + [w for w in report.warnings if not w.startswith(_GPUBW_SMALL_BUFFER)]


def kept_matrices(result: TestcaseResult) -> list[Matrix]:
    """The matrices nvbandwidth would print: gpubw's read + write additions are left out
    where the testcase has another matrix."""
    usual = [m for m in result.matrices if m.bytes_counting != COUNTED_READ_WRITE]
    return usual or list(result.matrices)


def not_found_message(result: TestcaseResult) -> str:
    """nvbandwidth's words for an unresolved ``-t`` item (they end with ``!``)."""
    message = result.message or f"Testcase {result.key} not found"
    return message if message.endswith("!") else message + "!"


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


def version_lines(git: str) -> list[str]:
    """nvbandwidth's version block (and a blank line) with ``git`` as its git version."""
    return [f"nvbandwidth Version: {NVBANDWIDTH_VERSION}", f"Built from Git version: {git}", ""]


def header_lines(report: Report) -> list[str]:
    """Everything nvbandwidth prints before its first testcase."""
    out = version_lines(git_version(report))
    world = report.world
    if world is not None and world.get("mpi_library"):
        out.append(f"MPI version: {' '.join(str(world['mpi_library']).split())}")
    out += warnings(report)
    if not report.devices:  # the run could not start: nvbandwidth stops here
        return out
    cuda = report.versions.get("cuda_driver", 0)
    out += [f"CUDA Runtime Version: {cuda}", f"CUDA Driver Version: {cuda}"]
    out += [f"Driver Version: {report.versions.get('driver', 'unknown')}", ""]
    if world is not None:
        return out + world_lines(world)
    out.append(report.host)
    for i, d in enumerate(report.devices):
        out.append(f"Device {d.get('ordinal', i)}: {d.get('name', 'unknown')} "
                   f"({device_pci_short(d)})")  # fmt: skip
    return [*out, ""]


def testcase_lines(t: TestcaseResult, verbose: bool = False, perf: bool = False) -> list[str]:
    """One testcase as nvbandwidth prints it (a failed one: only its ``Running`` line, the
    last line nvbandwidth would print)."""
    if t.status is Status.WAIVED:
        return ["Waived: "]
    if t.status is Status.NOT_FOUND:
        return [f"ERROR: {not_found_message(t)}"]
    out = [f"Running {t.key}."]
    if t.status in _FATAL:
        return out
    matrices = kept_matrices(t)
    if verbose:
        out += [line for m in matrices for line in sample_lines(m)]
    for m in matrices:
        out += [*table_lines(m, verbose, perf), ""]
    return out


def _emit(stream: TextIO, lines: Sequence[str]) -> None:
    if lines:
        stream.write("\n".join(lines) + "\n")
        stream.flush()


class NvbandwidthTextWriter(Writer):
    """nvbandwidth's plain text, exactly (no gpubw additions), testcase by testcase."""

    name = "nvbandwidth"

    def __init__(self, *, verbose: bool = False, perf_formatter: bool = False) -> None:
        super().__init__(verbose=verbose, perf_formatter=perf_formatter)
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
        _emit(stream, header_lines(header))

    def testcase(self, result: TestcaseResult, stream: TextIO) -> None:
        """One finished testcase; nothing after one that failed (nvbandwidth stops)."""
        self._written += 1
        if self._header is None or self._stopped:
            return
        self._stopped = result.status in _FATAL
        _emit(stream, testcase_lines(result, self.verbose, self.perf_formatter))

    def end(self, report: Report, stream: TextIO) -> None:
        """Late warnings and the NOTE, unless the run stopped on a failure."""
        header, self._header = self._header, None
        if header is None:  # the run could not start: only what nvbandwidth printed by then
            _emit(stream, header_lines(report))
            return
        for result in report.testcases[self._written :]:
            self._header = header
            self.testcase(result, stream)
        self._header = None
        if self._stopped or report.error or report.interrupted:
            return
        late = [w for w in report.warnings if w not in header.warnings]
        _emit(stream, [*late, *NOTE_LINES, ""])


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
    entry: dict[str, Any] = {"name": t.key, "status": status.get(t.status, "Running")}
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


def document(report: Report, verbose: bool = False) -> dict[str, Any]:
    """nvbandwidth's ``-j`` document for a Report."""
    nv: dict[str, Any] = {"version": NVBANDWIDTH_VERSION, "git_version": git_version(report)}
    if report.devices:
        nv["CUDA Runtime Version"] = int(report.versions.get("cuda_driver") or 0)
        nv["Driver Version"] = str(report.versions.get("driver", "unknown"))
        nv["GPU Device list"] = [
            f"{d.get('ordinal', i)}: {d.get('name', 'unknown')} ({device_pci_short(d)}): "
            f"({report.host})"
            for i, d in enumerate(report.devices)
        ]
    entries = []
    for t in report.testcases:
        entries.append(testcase_entry(t, verbose))
        if t.status in _FATAL:
            break
    if entries:
        nv["testcases"] = entries
    recorded = warnings(report)
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

    def write(self, report: Report, stream: TextIO) -> None:
        stream.write(jsoncpp_dumps(document(report, self.verbose)))
