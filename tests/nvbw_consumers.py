"""How three tools that run nvbandwidth read its output, ported to Python for the tests.

Only the parsing is ported (which fields are read, the patterns lines must match, the shell
pipeline), in this project's own code; each port names the file and the commit it follows.
Nothing here runs a benchmark or judges figures beyond what the tool itself does.

* :func:`dcgm_read` -- NVIDIA DCGM's nvbandwidth diagnostic plugin (``nvbandwidth -j -v``):
  it cuts the JSON object out of the output, reads its fields and fails on a testcase whose
  status is ``ERROR``.
* :func:`nhc_blocks`, :func:`nhc_rows`, :func:`nhc_check` -- Azure's health checks
  (``nvbandwidth -t h2d d2h [p2p] -i 10``, plain text through bash, awk and bc), and
  :func:`nhc_v010_rows`, their newest parse (PR #164, for nvbandwidth v0.10).
* :func:`superbench_read` -- microsoft/superbenchmark's nvbandwidth benchmark (plain text,
  regular expressions), and :func:`superbench_list` for its ``nvbandwidth --list``.

As a script, over saved outputs (benchmarks/gpu_check.sh, step ``nvbwcompat``)::

    python3 tests/nvbw_consumers.py --json A.json [B.json ...] --text A.txt [B.txt ...]

prints what each consumer reads from each file and exits 1 when one of them fails to read a
file or finds a cell without a value.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# -- DCGM ---------------------------------------------------------------------------------------
# Port of NVIDIA/DCGM nvvs/plugin_src/nvbandwidth/NVBandwidthPlugin.cpp (sanitizeOutput,
# NVBandwidthPlugin::AttemptToReadOutput) @a2389ab957656bdfb3c576648d5884fd5d169019 and
# NVBandwidthResult.cpp (the ParseJson overloads) @37b325dee7e166a0fce7da8261432d760d4e9fc7
# (first ported at 72fa3feaa67d716a75323a8f47c34ff3ee73f824; the parse is unchanged). The plugin
# runs `nvbandwidth -j -v [-t X...]` with standard error merged into standard output
# (ForkAndExecCommand, stderrToStdout=true): the JSON is found between the first line holding
# only `{` and the last holding only `}`; `CUDA Runtime Version` must be an int and each
# status one of error/waived/not found/passed (any other fails the whole parse).

DCGM_STATUSES = ("error", "waived", "not found", "passed")
_FLT_MAX = 3.4028234663852886e38
_FLT_MIN = 1.1754943508222875e-38
_STOF = re.compile(
    r"[ \t\n\v\f\r]*[+-]?(?:inf(?:inity)?|nan|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)",
    re.IGNORECASE,
)


@dataclass
class DcgmTestCase:
    """What the plugin keeps of one testcase."""

    name: str
    status: str
    description: str = ""
    stats: dict[str, float] = field(default_factory=dict)  # sum, min, max, average
    matrix: list[list[float]] = field(default_factory=list)  # "N/A" as NaN


@dataclass
class DcgmResult:
    """What the plugin keeps of the whole document."""

    cuda_runtime_version: int
    driver_version: str
    git_version: str
    error: str | None
    warning: str
    testcases: list[DcgmTestCase]

    @property
    def has_error(self) -> bool:
        """The plugin fails the diagnostic when a testcase's status is ERROR."""
        return any(t.status == "error" for t in self.testcases)


def _find(text: str, char: str) -> int:
    """C++ ``find``: the index, or -1 for npos."""
    return text.find(char)


def _first_not_of(text: str, chars: str) -> int:
    return next((i for i, c in enumerate(text) if c not in chars), -1)


def _last_not_of(text: str, chars: str) -> int:
    return next((i for i in range(len(text) - 1, -1, -1) if text[i] not in chars), -1)


def _only_char(line: str, char: str) -> bool:
    """The plugin's test of a line holding nothing but ``char`` (and tabs, a newline)."""
    if not line:
        return False
    at = _find(line, char)
    return _first_not_of(line, "\t") == at and _last_not_of(line, "\t\n") == at


def dcgm_json_span(output: str) -> str:
    """The text the plugin hands to its JSON reader: from the start of the first line that is
    only ``{`` to the first character of the last line that is only ``}`` ("" if none)."""
    start, pos = -1, 0
    while pos < len(output):
        newline = output.find("\n", pos)
        if newline < 0:
            break
        if _only_char(output[pos : newline + 1], "{"):
            start = pos
            break
        pos = newline + 1
    if start < 0:
        return ""
    end, pos = -1, len(output) - 1
    while pos > 0:
        newline = output.rfind("\n", 0, pos + 1)
        if newline < 0:
            break
        if _only_char(output[newline + 1 : pos + 1], "}"):
            end = newline + 1
            break
        pos = newline - 1
    return output[start : end + 1] if end >= 0 and start < end else ""


def _stof(text: str) -> float:
    """``std::stof``: the longest number at the start (after blanks); ValueError where it
    throws invalid_argument or out_of_range."""
    m = _STOF.match(text)
    if m is None:
        raise ValueError(f"stof: invalid argument {text!r}")
    value = float(m.group().strip())
    size = abs(value)
    if math.isfinite(value) and (size > _FLT_MAX or 0 < size < _FLT_MIN):
        raise ValueError(f"stof: out of range {text!r}")
    return value


def _is_int(value: Any) -> bool:
    """jsoncpp's ``isInt``: an integer (or an integral double) that fits in 32 bits."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return float(value).is_integer() and -(2**31) <= value < 2**31


def _is_numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _as_string(value: Any) -> str:
    """jsoncpp's ``asString`` of a matrix cell (a number becomes its text; null is "")."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else repr(value)


def _dcgm_matrix(rows: Any) -> list[list[float]] | None:
    if not isinstance(rows, list) or not rows:
        return None
    matrix = []
    for row in rows:
        cells = row if isinstance(row, list) else []
        values = []
        for cell in cells:
            if isinstance(cell, str) and cell == "N/A":
                values.append(math.nan)
                continue
            try:
                values.append(_stof(_as_string(cell)))
            except ValueError:
                return None
        if not values:
            return None
        matrix.append(values)
    return matrix


def _dcgm_testcase(doc: Any) -> DcgmTestCase | None:
    if not isinstance(doc, dict):
        return None
    name, status = doc.get("name"), doc.get("status")
    if not isinstance(name, str) or not isinstance(status, str):
        return None
    if status.lower() not in DCGM_STATUSES:
        return None
    t = DcgmTestCase(name, status.lower())
    if isinstance(doc.get("bandwidth_description"), str):
        t.description = doc["bandwidth_description"]
    t.stats = {
        k: float(doc[k]) for k in ("sum", "min", "max", "average") if _is_numeric(doc.get(k))
    }
    if isinstance(doc.get("bandwidth_matrix"), list):
        matrix = _dcgm_matrix(doc["bandwidth_matrix"])
        if matrix is None:
            return None
        t.matrix = matrix
    return t


def dcgm_parse(span: str) -> DcgmResult | None:
    """The plugin's reading of the JSON it cut out; None where it gives up (the whole result
    is then invalid: a missing field, a status it does not know, a cell that is no number)."""
    try:
        root = json.loads(span)
    except ValueError:
        return None
    nvb = root.get("nvbandwidth") if isinstance(root, dict) else None
    if not isinstance(nvb, dict) or not _is_int(nvb.get("CUDA Runtime Version")):
        return None
    fields = ("Driver Version", "git_version")
    if any(not isinstance(nvb.get(k), str) for k in fields) or not isinstance(
        nvb.get("testcases"), list
    ):
        return None
    testcases = [_dcgm_testcase(t) for t in nvb["testcases"]]
    if any(t is None for t in testcases):
        return None
    error = nvb["error"] if isinstance(nvb.get("error"), str) else None
    warning = nvb["warning"] if isinstance(nvb.get("warning"), str) else ""
    return DcgmResult(
        int(nvb["CUDA Runtime Version"]),
        nvb["Driver Version"],
        nvb["git_version"],
        error,
        warning,
        [t for t in testcases if t is not None],
    )


def dcgm_read(output: str) -> tuple[bool, DcgmResult | None]:
    """(the plugin reports an error, what it read) for nvbandwidth's standard output."""
    span = dcgm_json_span(output)
    if not span:
        return True, None
    result = dcgm_parse(span)
    if result is None:
        return True, None
    return result.has_error, result


# -- Azure NHC ----------------------------------------------------------------------------------
# Port of Azure/azurehpc-health-checks customTests/azure_gpu_bandwidth.nhc (check_nvBW_gpu_bw's
# loop over the output and evaluate_nvBW_result), commit 0e0a1ac26a64b32ac4dd7632a529638505d3314a.
# It runs `nvbandwidth -t host_to_device_memcpy_ce device_to_host_memcpy_ce
# [device_to_device_memcpy_read_ce] -i 10` and dies on a non-zero exit code; its image builds
# nvbandwidth v0.4, whose NOTE lines come before the first testcase.

NHC_TESTS = {
    "host_to_device_memcpy_ce": "H2D",
    "device_to_host_memcpy_ce": "D2H",
    "device_to_device_memcpy_read_ce": "P2P",
}
_BC_NUMBER = re.compile(r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)")
_BC_NAME = re.compile(r"[a-z][a-z0-9_]*")


def nhc_blocks(output: str) -> dict[str, list[str]]:
    """Each testcase's lines as the script keeps them: the output split into non-empty lines
    (bash word splitting on newlines); a ``Running`` line starts a testcase, named by the rest
    of the line without dots and leading blanks; every line without ``memcpy`` is kept for the
    testcase being read, and the first kept line of each (the column numbers) is dropped."""
    blocks: dict[str, list[str]] = {}
    current, kept = "", []
    for line in (piece for piece in output.split("\n") if piece):
        if line.startswith("Running"):
            if current:
                blocks[current] = kept[1:]
            current, kept = line[len("Running") :].replace(".", "").lstrip(" \t"), []
        if "memcpy" not in line:
            kept.append(line)
    if current:
        blocks[current] = kept[1:]
    return blocks


def nhc_rows(lines: list[str]) -> list[list[str]]:
    """awk's fields 2 to NF of every kept line: the values of each matrix row."""
    return [line.split()[1:] for line in lines]


def _bc(token: str) -> float | None:
    """What ``echo "TOKEN >= X" | bc -l`` can compare: a number, a lower-case name (a bc
    variable, 0); None where bc stops with a syntax error (the comparison is then false)."""
    if _BC_NUMBER.fullmatch(token):
        return float(token)
    return 0.0 if _BC_NAME.fullmatch(token) else None


def nhc_check(output: str, pcie_gbps: float, p2p_gbps: float | None = None) -> list[str]:
    """What the script says of the output: one message per ``die`` or ``warning`` (an empty
    list: the check passes). A cell passes from the expected figure x 1.05, warns from the
    expected figure, and fails below it or where bc cannot read it."""
    said = []
    for test, lines in nhc_blocks(output).items():
        figures = {"H2D": pcie_gbps, "D2H": pcie_gbps, "P2P": p2p_gbps}
        expected = figures.get(NHC_TESTS.get(test, ""))
        if expected is None:
            said.append(f"die: failed to parse results ({test})")
            continue
        for peer, cells in enumerate(nhc_rows(lines)):
            for gpu, cell in enumerate(cells):
                if "N/A" in cell:
                    continue
                value = _bc(cell)
                if value is None or value < expected:
                    said.append(f"die: {test} GPU {gpu} peer {peer}: {cell} < {expected}")
                elif value < expected * 1.05:
                    said.append(f"warning: {test} GPU {gpu} peer {peer}: {cell}")
    return said


# NHC at its newest (PR #164, Azure/azurehpc-health-checks, "Add aarch64/Grace NVIDIA image
# support", merged 2026-08-30): parse_nvbandwidth_results, as its bats tests in
# test/unit-tests/nhc-gpu-agnostic.sh and its fixture test/data/nvbandwidth_v0.10_output.txt
# @384f6659542dceab045d6ae688ede02a44d95e24 pin it down (the merged function's code is not
# public here; the PR branch's check_nvBW_gpu_bw, michael-beebe/azurehpc-health-checks
# @4cfbabbfe01262379aca38fc728c1fb4f162a329, is, and tests/nhc_check_gpu_bw.sh runs it in
# bash for tests/test_nvbw_nhc.py): per testcase, exactly the matrix data rows (an index,
# then numbers or N/A); the title, column header, SUM, COEFFICIENT_OF_VARIATION, NOTE and
# blank lines dropped; a testcase with no rows, or fewer than its GPU count asks for, fails
# the parse.

_NHC_DATA_ROW = re.compile(r"\s*\d+(?:\s+(?:[0-9]+\.[0-9]+|N/A))+\s*")


class NhcParseError(ValueError):
    """parse_nvbandwidth_results returns non-zero: a testcase's rows are missing."""


def nhc_v010_rows(output: str, ngpus: int, keys: list[str]) -> dict[str, str]:
    """``result_lines_array[key]`` for each asked key: its data rows joined by newlines,
    whitespace as printed. A peer (``device_to_device``) testcase needs ``ngpus`` rows, the
    others one."""
    rows: dict[str, list[str]] = {}
    current = ""
    for line in output.split("\n"):
        if line.startswith("Running "):
            current = line[len("Running ") :].rstrip(".").strip()
            rows.setdefault(current, [])
        elif current and _NHC_DATA_ROW.fullmatch(line):
            rows[current].append(line.strip())
    out = {}
    for key in keys:
        want = ngpus if "device_to_device" in key else 1
        got = rows.get(key, [])
        if len(got) < want:
            raise NhcParseError(f"{key}: {len(got)} matrix rows, {want} expected")
        out[key] = "\n".join(got)
    return out


# -- superbench -----------------------------------------------------------------------------------
# Port of microsoft/superbenchmark superbench/benchmarks/micro_benchmarks/nvbandwidth.py
# (_process_raw_line, _process_raw_result, _get_all_test_cases), commit
# 266019e5e6fe6fe49d7ab0c675b2b76fdc299f19 (first ported at
# 700d6501f110ed17a7016f1b9f2e453926f7b7a1; _get_all_test_cases takes any standard error
# output of `--list` as failure: no testcases). It runs
# `nvbandwidth --bufferSize N [--testcase ...] --testSamples N ...` and reads the text.

_SB_RUNNING = re.compile(r"Running\s+(.+)")
_SB_SUM = re.compile(r"SUM (\S+) (\d+\.\d+)")
_SB_NOT_FOUND = re.compile(r"ERROR: Testcase (\S+) not found!")
_SB_LISTED = re.compile(r"(\d+),\s+(\w+):")


@dataclass
class SuperbenchResult:
    """What the benchmark records: its metrics, the testcases it saw run or refused, and its
    return code."""

    metrics: dict[str, float] = field(default_factory=dict)
    executed: set[str] = field(default_factory=set)
    unsupported: set[str] = field(default_factory=set)
    return_code: str = "SUCCESS"


@dataclass
class _SbState:
    test: str = ""
    kind: str | None = None
    header: list[str] = field(default_factory=list)
    row_name: str = ""
    column_name: str = ""


def _sb_end(line: str, mark: str) -> str:
    """The three characters before ``mark`` (the script slices them, even from index -1)."""
    at = line.find(mark)
    return line[at - 3 : at].lower()


def _sb_line(line: str, st: _SbState, out: SuperbenchResult) -> None:
    line = line.strip()
    found = _SB_NOT_FOUND.match(line)
    if found:
        out.unsupported.add(found.group(1).lower())
        return
    running = _SB_RUNNING.fullmatch(line)
    if running:
        st.test = running.group(1).lower()[:-1]
        out.executed.add(st.test)
        return
    if st.test and line.startswith(("memcpy", "memory latency")):
        st.kind = "bw" if "bandwidth" in line else "lat"
        st.row_name, st.column_name = _sb_end(line, "(row)"), _sb_end(line, "(column)")
        return
    is_row = line[:1].isdigit()
    if st.test and st.kind and is_row and not st.header:
        st.header = line.split()
        return
    if st.test and st.kind and is_row:
        row, *values = line.split()
        for column, value in enumerate(values):
            if value != "N/A":
                name = f"{st.test}_{st.row_name}{row}_{st.column_name}{st.header[column]}"
                out.metrics[f"{name}_{st.kind}"] = float(value)
        return
    total = _SB_SUM.match(line)
    if total:
        out.metrics[f"{st.test}_sum_{st.kind}"] = float(total.group(2))
        st.test, st.kind, st.header, st.row_name, st.column_name = "", None, [], "", ""


def superbench_read(output: str, asked: list[str]) -> SuperbenchResult:
    """The benchmark's reading of the text; ``asked``: its test_cases (given, or all that
    ``--list`` listed). Return codes: INVALID_ARGUMENT for a testcase refused as unknown or
    seen neither run nor refused (it says "waived"); RESULT_PARSING_FAILURE with no metric."""
    out, st = SuperbenchResult(), _SbState()
    for line in output.splitlines():
        _sb_line(line, st, out)
    missing = [t for t in asked if t not in out.unsupported and t not in out.executed]
    if out.unsupported or missing:
        out.return_code = "INVALID_ARGUMENT"
    if not out.metrics:
        out.return_code = "MICROBENCHMARK_RESULT_PARSING_FAILURE"
    return out


def superbench_list(output: str, stderr: str = "", returncode: int = 0) -> list[str]:
    """The testcase names the benchmark takes from ``nvbandwidth --list``: none at all when
    the command wrote anything to standard error or exited non-zero (_get_all_test_cases)."""
    if stderr or returncode != 0:
        return []
    return [name for _, name in _SB_LISTED.findall(output)]


# -- the script ----------------------------------------------------------------------------


def _json_summary(path: Path) -> tuple[bool, str]:
    failed, result = dcgm_read(path.read_text(encoding="utf-8"))
    if result is None:
        return False, "DCGM: cannot read it (the plugin reports an error)"
    cells = [v for t in result.testcases for row in t.matrix for v in row]
    passed = sum(t.status == "passed" for t in result.testcases)
    line = (f"DCGM: {len(result.testcases)} testcases ({passed} passed), {len(cells)} cells, "
            f"error status: {failed}, git_version {result.git_version!r}")  # fmt: skip
    return not failed and bool(cells), line


def _text_summary(path: Path) -> tuple[bool, list[str]]:
    text = path.read_text(encoding="utf-8")
    sb = superbench_read(text, [])
    blocks = {k: v for k, v in nhc_blocks(text).items() if k in NHC_TESTS}
    cells = [c for rows in blocks.values() for row in nhc_rows(rows) for c in row]
    bad = [c for c in cells if "N/A" not in c and _bc(c) is None]
    last = list(nhc_blocks(text).values())[-1:] or [[]]
    note = [line for line in last[0] if line.startswith(("NOTE:", "Performance can vary"))]
    lines = [
        f"superbench: {len(sb.metrics)} metrics from {len(sb.executed)} testcases, "
        f"return code {sb.return_code}",
        f"NHC: its testcases {sorted(blocks)}: {len(cells) - len(bad)} cells read, bc cannot "
        f"read {bad[:4]}; rows after the last testcase's matrix: {len(note)} NOTE line(s)",
    ]
    return bool(sb.metrics) and sb.return_code == "SUCCESS", lines


def main(argv: list[str] | None = None) -> int:
    """Print what each consumer reads from each file; 1 if one of them fails to read one."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", nargs="*", default=[], help="nvbandwidth -j outputs (DCGM)")
    p.add_argument("--text", nargs="*", default=[], help="nvbandwidth text (NHC, superbench)")
    a = p.parse_args(argv)
    ok = True
    for name in a.json:
        good, line = _json_summary(Path(name))
        ok &= good
        print(f"{name}: {line}")
    for name in a.text:
        good, lines = _text_summary(Path(name))
        ok &= good
        print(f"{name}:", *lines, sep="\n  ")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
