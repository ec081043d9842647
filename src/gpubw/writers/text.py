"""The text writer: nvbandwidth's plain layout, plus what gpubw must say on top of it.

The nvbandwidth-compatible lines (``Running <key>.``, the header, the matrix, ``SUM <key>
<v>``, ``MIN``/``MAX``/``AVG``, ``&&&& PERF``) are printed exactly as nvbandwidth prints them,
so scripts written for nvbandwidth keep working. gpubw adds: the backend line, the
SIMULATED banner, the key and reason of a waived testcase, one line per matrix saying how
bytes were counted and which statistic was taken, and size-sweep tables. Output is plain
and deterministic (no colour, no terminal width).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TextIO

from gpubw.hw.nvml import DeviceFacts, device_facts
from gpubw.model.console import printable_lines
from gpubw.model.results import (
    AXIS_HOST,
    AXIS_NONE,
    GPU_AXES,
    KIND_LATENCY,
    Matrix,
    Report,
    Status,
    TestcaseResult,
)
from gpubw.model.sizes import format_size
from gpubw.model.verdicts import FAIL, WARN, format_verdict, worst_first
from gpubw.writers import (
    Writer,
    device_pci_short,
    display_scale,
    display_unit,
    simulated_banner,
    sweeps,
)
from gpubw.writers.node_summary import health_lines, pinned_and_pageable

NOTE_LINES = (
    "NOTE: The reported results may not reflect the full capabilities of the platform.",
    "Performance can vary with software drivers, hardware clocks, and system topology.",
)

#: at most this many cells of a matrix are shown as columns of a sweep table; else the SUM
SWEEP_MAX_CELLS = 8


def _f(value: float) -> str:
    """C's ``%.2f`` (nan/inf spelled as printf does)."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.2f}"


def _cell(value: float | None, scale: float) -> str:
    return "N/A" if value is None else _f(value * scale)


class TextWriter(Writer):
    """nvbandwidth-style plain text, printed testcase by testcase as the run goes."""

    name = "text"

    def __init__(self, *, verbose: bool = False, perf_formatter: bool = False) -> None:
        super().__init__(verbose=verbose, perf_formatter=perf_formatter)
        self._header: Report | None = None
        self._sweep = False
        self._written = 0

    def write(self, report: Report, stream: TextIO) -> None:
        stream.write("\n".join(printable_lines(self.lines(report))) + "\n")

    # -- as the run goes --------------------------------------------------------------------
    def begin(self, header: Report, stream: TextIO) -> None:
        """Print the header (versions, host, devices) now."""
        self._header, self._written = header, 0
        self._sweep = _several_sizes(header)
        _emit(stream, self.header_lines(header))

    def testcase(self, result: TestcaseResult, stream: TextIO) -> None:
        """Print one finished testcase (its matrices, or why it has none)."""
        if self._header is None:
            return
        swept = self._sweep and result.size is not None
        lines = self.testcase_lines(
            result, self.verbose, self.perf_formatter, swept, result.verdicts
        )
        _emit(stream, lines)
        self._written += 1

    def end(self, report: Report, stream: TextIO) -> None:
        """Print what needs the whole run (size tables, the NOTE); the whole report if
        nothing was printed yet."""
        header, self._header = self._header, None
        if header is None:
            self.write(report, stream)
            return
        out: list[str] = []
        for t in report.testcases[self._written :]:  # none when every event came
            out += self.testcase_lines(t, self.verbose, self.perf_formatter, False)
        late = [w for w in report.warnings if w not in header.warnings]
        if late:  # e.g. freeing the system failed: said at the end, not in the header
            out += [*late, ""]
        out += self.footer_lines(report, sweeps(report))
        _emit(stream, out)

    # -- the document -----------------------------------------------------------------------
    def lines(self, report: Report) -> list[str]:
        swept, several = sweeps(report), _several_sizes(report)
        out = self.header_lines(report)
        for t in report.testcases:
            says_size = t.key in swept or several  # as begin/testcase decide it, run or not
            out += self.testcase_lines(
                t, self.verbose, self.perf_formatter, says_size, report.verdicts
            )
        return out + self.footer_lines(report, swept)

    def header_lines(self, report: Report) -> list[str]:
        """Everything before the first testcase."""
        out: list[str] = []
        if report.simulated:
            out.append(simulated_banner(report))
        out.append(f"{report.tool or 'gpubw'} Version: {report.tool_version}")
        backend = report.backend
        if report.simulated:
            backend += f" (system {report.system_name or 'model'})"
        out += [f"Backend: {backend}", ""]
        if report.world is not None and report.world.get("mpi_library"):
            # nvbandwidth's multinode build: after the version block's blank line
            out.append(f"MPI version: {' '.join(str(report.world['mpi_library']).split())}")
        if report.warnings:
            out += [*report.warnings, ""]
        v = report.versions
        cuda = v.get("cuda_driver", "unknown")
        out.append(f"CUDA Runtime Version: {v.get('cuda_runtime', cuda)}")
        out.append(f"CUDA Driver Version: {cuda}")
        out.append(f"Driver Version: {v.get('driver', 'unknown')}")
        out += ["", report.host]
        for i, d in enumerate(report.devices):
            ordinal = d.get("ordinal", i)
            out.append(f"Device {ordinal}: {d.get('name', 'unknown')} ({device_pci_short(d)})")
            if self.verbose:
                out += device_facts_lines(d)
        out.append("")
        if report.world is not None:
            out += world_lines(report.world)
        if report.error:
            out.append(f"ERROR: {report.error}")
        return out

    def footer_lines(self, report: Report, swept: dict[str, list[TestcaseResult]]) -> list[str]:
        """Everything after the last testcase: other hosts' summaries and how memory was
        shared (a run of several ranks), size tables, how the run ended, the NOTE."""
        out: list[str] = host_summary_lines(report)
        if report.world is not None and report.world.get("handle_type"):
            out += [
                f"Memory was shared across ranks with {report.world['handle_type']} handles",
                "",
            ]
        for key, results in swept.items():
            out += sweep_table(key, results)
        if report.expectations is not None:  # the run was judged: every verdict, worst first
            out += verdict_summary(report)
        if report.interrupted:
            out += ["Interrupted: the run stopped before every selected testcase ran.", ""]
        if not report.error:
            out += [*NOTE_LINES, ""]
        if report.simulated:
            out.append(simulated_banner(report))
        return out

    # -- one testcase ---------------------------------------------------------------------
    def testcase_lines(
        self,
        t: TestcaseResult,
        verbose: bool,
        perf: bool,
        swept: bool = False,
        verdicts: Sequence[Any] = (),
    ) -> list[str]:
        """One testcase; ``verdicts`` (the report's) are printed after the matrix they
        judge."""
        if t.status is Status.WAIVED:
            return [f"Waived: {t.key}: {t.message}" if t.message else f"Waived: {t.key}"]
        if t.status is Status.NOT_FOUND:
            return [f"ERROR: {t.message or f'Testcase {t.key} not found!'}"]
        out = [f"Running {t.key}."]
        if swept and t.size is not None:
            out.append(f"Buffer size: {format_size(t.size)}")
        for m in t.matrices:
            if verbose:
                out += sample_lines(m)
            out += matrix_lines(m, verbose, perf)
            if verbose and m.samples:
                out += spread_lines(m)
            mine = [v for v in verdicts if v.matrix == m.key and v.testcase == t.key
                    and v.size == t.size]  # fmt: skip
            if mine:
                out += [f"  {format_verdict(v)}" for v in mine] + [""]
        if t.status is Status.ERROR:
            out += [f"ERROR: {t.message or 'testcase failed'}", ""]
        elif t.status is Status.INTERRUPTED:
            out += [f"Interrupted: {t.message or 'testcase did not finish'}", ""]
        return out


def world_lines(world: dict[str, Any]) -> list[str]:
    """The ranks of a multi-rank run after the device list, as nvbandwidth's multinode build:
    one line per rank ``Process <rank> (<host>): device <d>: <name> (<pci>)``, gpubw's line
    on the NVLink domains the measured ranks span, and a blank line (``MPI version:`` goes in
    the version block)."""
    out = []
    width = len(str(max(int(world.get("size", 1)) - 1, 0)))
    for p in world.get("processes") or ():
        pci = f" ({p['pci']})" if p.get("pci") else ""
        out.append(
            f"Process {p.get('rank', 0):>{width}} ({p.get('host', '')}): device "
            f"{p.get('device', 0)}: {p.get('name', 'unknown')}{pci}"
        )
    out += domain_lines(world)
    return [*out, ""] if out else []


def domain_lines(world: dict[str, Any]) -> list[str]:
    """``NVLink domains: <n> (<name>: <k> ranks, ...)``: how many NVLink domains the measured
    ranks span, each with its measured ranks (the first 8 named); none for a report without
    the count."""
    count = world.get("nvlink_domains")
    if count is None:
        return []
    ranks: dict[str, int] = {}
    for p in world.get("processes") or ():
        if p.get("selected", True) and p.get("nvlink_domain") is not None:
            name = str(p["nvlink_domain"])
            ranks[name] = ranks.get(name, 0) + 1
    named = [f"{n}: {k} rank{'s' if k != 1 else ''}" for n, k in list(ranks.items())[:8]]
    more = ", ..." if len(ranks) > 8 else ""
    return [f"NVLink domains: {count}" + (f" ({', '.join(named)}{more})" if named else "")]


def host_summary_lines(report: Report) -> list[str]:
    """A run over several hosts: one line per other host and testcase (its single-node
    results; rank 0's own host is reported above as nvbandwidth does):
    ``host <name>: <matrix key> SUM <x>`` per matrix, or its status and message."""
    out = []
    for host, results in report.hosts:
        for t in results:
            if t.status is Status.PASSED:
                scale = [display_scale(m.unit) for m in t.matrices]
                out += [
                    f"host {host}: {m.key} SUM {_f(m.sum * f)}" for m, f in zip(t.matrices, scale)
                ]
            else:
                message = f": {t.message}" if t.message else ""
                out.append(f"host {host}: {t.key} {t.status.value}{message}")
    return [*out, ""] if out else []


def _several_sizes(report: Report) -> bool:
    """True when the run measured at several buffer sizes: then every sized testcase says its
    size (``Buffer size:``), known before the first one runs (also when all but one size of a
    testcase failed, which :func:`sweeps` alone would not count as a sweep)."""
    return len(set(report.run_options.buffer_sizes)) > 1


def _emit(stream: TextIO, lines: list[str]) -> None:
    """Write ``lines`` (each ended by a newline; control characters in them escaped) and
    flush, so that a reader sees them now."""
    if lines:
        stream.write("\n".join(printable_lines(lines)) + "\n")
        stream.flush()


def matrix_lines(m: Matrix, verbose: bool = False, perf: bool = False) -> list[str]:
    """The header, the table, SUM (MIN/MAX/AVG), gpubw's counting line (and the sample's
    line of a sampled matrix, the NVLink domains line of a multinode matrix over several
    domains), a blank line."""
    return [
        *table_lines(m, verbose, perf),
        counting_line(m),
        *sampled_note_lines(m),
        *domains_note_lines(m),
        "",
    ]


def sampled_note_lines(m: Matrix) -> list[str]:
    """A sampled matrix (its ``sampled`` note, --sample-pairs): how many of its cells the
    sample measured; the others print N/A."""
    note = dict(m.notes).get("sampled")
    if not isinstance(note, dict):
        return []
    return [
        f"(sampled: {note.get('measured')} of {note.get('cells')} cells measured, "
        f"--sample-pairs with seed {note.get('seed')}; the others are N/A)"
    ]


def domains_note_lines(m: Matrix) -> list[str]:
    """A multinode matrix over several NVLink domains (its ``nvlink_domains`` note): how many
    cells pair GPUs of different domains and why they are not measured."""
    note = dict(m.notes).get("nvlink_domains")
    if not isinstance(note, dict):
        return []
    names = ", ".join(str(n) for n in note.get("names", ())[:8])
    if len(note.get("names", ())) > 8:
        names += ", ..."
    domains = f"{note.get('domains')} NVLink domains: {names}"
    across = int(note.get("across", 0))
    if not across:
        return [f"(measured within each of {domains})"]
    cells = f"{across} cell{'s' if across != 1 else ''}"
    return [f"({cells} pair GPUs of different NVLink domains ({domains}); {note.get('reason')})"]


def table_lines(m: Matrix, verbose: bool = False, perf: bool = False) -> list[str]:
    """A matrix exactly as nvbandwidth prints it: the header, the table, a blank line, SUM
    (or ``&&&& PERF``) and, verbose, MIN/MAX/AVG (without the blank line after them)."""
    scale = display_scale(m.unit)
    w = max([2, *(len(label) for label in m.row_labels)])
    out = [m.description, " " * w + "".join(f"{c:>10}" for c in m.column_labels)]
    for label, row in zip(m.row_labels, m.values):
        out.append(f"{label:>{w}}" + "".join(f"{_cell(v, scale):>10}" for v in row))
    out.append("")
    # nvbandwidth's statistics count a missing cell as 0 (so MIN is 0 for an N×N matrix).
    flat = [(v or 0.0) * scale for row in m.values for v in row]
    total = sum(flat)
    if perf:
        sign = "-ns" if m.kind == KIND_LATENCY else "+GB/s"
        out.append(f"&&&& PERF {m.key} {_f(total)} {sign}")
    else:
        out.append(f"SUM {m.key} {_f(total)}")
    if verbose:
        positive = [x for x in flat if x > 0]
        out.append(f"MIN {m.key} {_f(min(flat, default=0.0))}")
        out.append(f"MAX {m.key} {_f(max([5e-324, *flat]))}")
        avg = total / len(positive) if positive else math.nan
        out.append(f"AVG {m.key} {_f(avg)}")
    return out


def spread_lines(m: Matrix) -> list[str]:
    """Verbose: the coefficient of variation of each cell's samples, in %, as a matrix."""
    noise = m.cell_stats()
    if not noise:
        return []
    w = max([2, *(len(label) for label in m.row_labels)])
    out = [f"CV (%) {m.key}", " " * w + "".join(f"{c:>10}" for c in m.column_labels)]
    for label, row in zip(m.row_labels, noise):
        cells = ("N/A" if n is None or n.cv is None else f"{n.cv * 100:.2f}" for n in row)
        out.append(f"{label:>{w}}" + "".join(f"{c:>10}" for c in cells))
    out.append("")
    return out


def verdict_summary(report: Report) -> list[str]:
    """The verdicts, worst first, and what the cells were judged against."""
    exp = report.expectations or {}
    against = [f"expectations {exp['name']} ({exp['source']})" if exp.get("source") else ""]
    if exp.get("outlier_pct") is not None:
        against.append(f"outliers below {exp['outlier_pct']:g} % of their peers' median")
    if exp.get("cv_threshold") is not None:
        against.append(f"noise above CV {exp['cv_threshold']:.0%}")
    if exp.get("soak_drop") is not None:
        against.append(f"a soak's fall above {exp['soak_drop']:.0%} from first to last")
    fails = [v for v in report.verdicts if v.severity == FAIL]
    warns = [v for v in report.verdicts if v.severity == WARN]
    out = ["Verdicts (judged against: " + "; ".join(a for a in against if a) + "):"]
    unjudged = exp.get("not_judged") or []
    if unjudged:
        out.append(f"  NOT JUDGED by {exp.get('name') or 'the expectations'} (no rule for them "
                   f"at their size): {', '.join(unjudged)}")  # fmt: skip
    if not report.testcases:
        out.append("  NOTHING JUDGED: the report holds no testcase")
    elif not fails and not warns:
        more = f" ({len(unjudged)} testcase(s) not judged)" if unjudged else ""
        out.append(f"  PASS: every judged cell is as fast as expected{more}")
    out += [f"  {format_verdict(v)}" for v in worst_first([*fails, *warns])]
    if fails:
        gpus = sorted({str(e) for v in fails for e in v.devices})
        out.append(
            f"BELOW EXPECTATION: {len(fails)} cell{'s' if len(fails) != 1 else ''} failed"
            + (f" ({'; '.join(gpus)})" if gpus else "")
            + f"; {len(warns)} noisy; exit code 3"
        )
    elif warns:
        out.append(f"PASS with {len(warns)} noisy cell{'s' if len(warns) != 1 else ''}")
    out += pinned_and_pageable(report)
    out.append("")
    return out


def device_facts_lines(record: Any) -> list[str]:
    """Verbose: a device record's NVML facts (start of run; clocks again at the end)."""
    f = device_facts(record)
    if f is None:
        return []
    out = facts_lines(f)
    end = device_facts(record, "nvml_end")
    if end is not None and end.clocks is not None and end.clocks != f.clocks:
        c = end.clocks
        out.append(
            f"  at the end: SM {c.sm_mhz}/{c.sm_max_mhz} MHz; clock reasons: "
            + (", ".join(c.reasons) or "none")
        )
    return out


def facts_lines(f: DeviceFacts, indent: str = "  ") -> list[str]:
    """NVML facts of one device, for people (``gpubw info`` and ``-v`` text)."""
    out = []
    ids = ", ".join(x for x in (f.uuid and f"UUID {f.uuid}", f.serial and f"serial {f.serial}",
                                f.vbios and f"VBIOS {f.vbios}") if x)  # fmt: skip
    if ids:
        out.append(indent + ids)
    if f.pcie is not None:
        down = ""
        if f.pcie.width_degraded:
            down = " (DEGRADED: fewer lanes than the link has)"
        elif f.pcie.gen_below_max:
            down = " (below its maximum generation: normal at idle, a fault under load)"
        out.append(f"{indent}{f.pcie}{down}")
    out.append(indent + (str(f.nvlink) if f.nvlink is not None else "NVLink: none"))
    ecc = "ECC " + {True: "on", False: "off", None: "?"}[f.ecc_enabled]
    if f.ecc_enabled:
        ecc += (f" (volatile errors: {f.ecc_volatile_corrected} corrected, "
                f"{f.ecc_volatile_uncorrected} uncorrected)")  # fmt: skip
    flags = [
        ecc,
        "persistence mode " + {True: "on", False: "off", None: "?"}[f.persistence_mode],
        "MIG " + {True: "on", False: "off", None: "?"}[f.mig_enabled],
    ]
    out.append(indent + "; ".join(flags))
    c = f.clocks
    if c is not None:
        parts = []
        if c.sm_mhz is not None:
            parts.append(f"SM {c.sm_mhz}/{c.sm_max_mhz or '?'} MHz")
        if c.memory_mhz is not None:
            parts.append(f"memory {c.memory_mhz}/{c.memory_max_mhz or '?'} MHz")
        if c.power_w is not None:
            parts.append(f"power {c.power_w:.0f}/{c.power_limit_w or 0:.0f} W")
        if c.temperature_c is not None:
            parts.append(f"{c.temperature_c} C")
        parts.append("clock reasons: " + (", ".join(c.reasons) or "none"))
        out.append(indent + "clocks " + "; ".join(parts))
    if f.processes:
        out.append(indent + "compute processes: pid " + ", ".join(str(p) for p in f.pids))
    out += health_lines(f, indent)
    if f.unavailable:
        out.append(indent + "not available: " + ", ".join(k for k, _ in f.unavailable))
    return out


def counting_line(m: Matrix) -> str:
    """gpubw's addition: how the figures were made (units, statistic, bytes counted)."""
    parts = [f"unit {display_unit(m.unit)}", f"statistic {m.statistic}"]
    if m.initiator:
        parts.append(f"initiator {m.initiator}")
    if m.bytes_counted:
        parts.append(f"bytes counted: {m.bytes_counted}")
    return "(" + "; ".join(parts) + ")"


def _endpoints(m: Matrix, r: int, c: int) -> str:
    """``src -> dst`` for a cell, read from the matrix's axes (the one row of an all-to-one
    matrix is named by its label, ``Device 0``, as nvbandwidth's ``GPU(row)`` header has it)."""
    row, col, axes = m.row_labels[r], m.column_labels[c], m.axes
    if axes.columns not in GPU_AXES:
        return f"row {row}, column {col}"
    b = f"Device {col}"
    if axes.rows == AXIS_NONE:
        return b
    a = "Host" if axes.rows == AXIS_HOST else f"Device {row}"
    return {"->": f"{a} -> {b}", "<-": f"{b} -> {a}", "<->": f"{a} <-> {b}"}[axes.arrow]


def sample_lines(m: Matrix) -> list[str]:
    """Verbose: TAB ``Sample <n>: <src> -> <dst>: <x> GB/s`` for every raw sample."""
    if not m.samples:
        return []
    scale, unit = display_scale(m.unit), display_unit(m.unit)
    out = []
    for r, row in enumerate(m.samples):
        for c, cell in enumerate(row):
            for n, x in enumerate(cell or ()):
                out.append(f"\tSample {n}: {_endpoints(m, r, c)}: {_f(x * scale)} {unit}")
    return out


def _note_text(key: str, value: Any, columns: Sequence[str] = ()) -> str:
    if key.endswith("bandwidth") and not isinstance(value, bool):
        # notes carry base units (bytes/s); the tables around them are in GB/s
        if isinstance(value, (int, float)):
            return f"{key}={value / 1e9:.0f} GB/s"
        if isinstance(value, (list, tuple)) and all(isinstance(x, (int, float)) for x in value):
            return f"{key}=[{','.join(f'{x / 1e9:.0f}' for x in value)}] GB/s"
    if isinstance(value, bool):
        return key if value else ""
    if isinstance(value, float):
        return f"{key}={value:.4g}"
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(x, bool) for x in value):
            if all(value):
                return key
            hits = [columns[i] if i < len(columns) else str(i) for i, x in enumerate(value) if x]
            return f"{key}[{','.join(hits)}]" if hits else ""
        return f"{key}=[{','.join(_note_text('', x).lstrip('=') or str(x) for x in value)}]"
    if value is None or value == "":
        return ""
    return f"{key}={value}"


def sweep_table(key: str, results: Sequence[TestcaseResult]) -> list[str]:
    """Size × value table of one testcase run at several sizes, one per matrix key."""
    out: list[str] = []
    matrix_keys: list[str] = []
    for t in results:
        for m in t.matrices:
            if m.key not in matrix_keys:
                matrix_keys.append(m.key)
    for mkey in matrix_keys:
        per_size = [(t.size or 0, m) for t in results for m in t.matrices if m.key == mkey]
        first = per_size[0][1]
        scale, unit = display_scale(first.unit), display_unit(first.unit)
        cells = [
            (r, c)
            for r in range(len(first.row_labels))
            for c in range(len(first.column_labels))
            if any(
                r < len(m.values) and c < len(m.values[r]) and m.values[r][c] is not None
                for _, m in per_size
            )
        ]
        one_row = len(first.row_labels) == 1
        if len(cells) > SWEEP_MAX_CELLS:
            cells = []
        heads = [
            first.column_labels[c]
            if one_row
            else f"{first.row_labels[r]}->{first.column_labels[c]}"
            for r, c in cells
        ]
        heads.append("SUM")
        out.append(f"Size sweep {mkey} ({unit})")
        out.append(f"{'size':>10}" + "".join(f"{h:>10}" for h in heads) + "  notes")
        for size, m in per_size:
            vals = []
            for r, c in cells:
                v = m.values[r][c] if r < len(m.values) and c < len(m.values[r]) else None
                vals.append(_cell(v, scale))
            vals.append(_f(sum((v or 0.0) for row in m.values for v in row) * scale))
            notes = "; ".join(
                s for s in (_note_text(k, v, m.column_labels) for k, v in m.notes) if s
            )
            line = f"{format_size(size):>10}" + "".join(f"{v:>10}" for v in vals)
            out.append((line + "  " + notes).rstrip())
        out.append("")
    return out
