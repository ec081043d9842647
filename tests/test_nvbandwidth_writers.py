"""The nvbandwidth writers (gpubw.writers.nvbandwidth): v0.8's text and -j JSON, exactly."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import attrs
import pytest

from _writer_reports import (
    MIB,
    bidirectional,
    latency,
    n_by_n,
    one_by_n,
    passed,
    report,
)
from gpubw.model.options import RunOptions
from gpubw.model.results import COUNTED_READ_WRITE, Status, TestcaseResult
from gpubw.writers.nvbandwidth import (
    SMALL_BUFFER_WARNING,
    NvbandwidthJsonWriter,
    NvbandwidthTextWriter,
    document,
    failure_message,
    jsoncpp_dumps,
    kept_matrices,
)

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
REAL_JSON = sorted(RESULTS.glob("nvbandwidth-v0.8-*.json"))
BOGUS = TestcaseResult("bogus", Status.NOT_FOUND, "Testcase bogus not found")

#: nvbandwidth-behaviour.md §7.1's example (-t 0 4 bogus on two H200), its git version aside
DOCUMENTED_TEXT = """\
nvbandwidth Version: v0.8
Built from Git version: gpubw-0.1.0

CUDA Runtime Version: 12080
CUDA Driver Version: 12080
Driver Version: 570.124.06

gpu-node-17
Device 0: NVIDIA H200 (00000000:1b:00)
Device 1: NVIDIA H200 (00000000:43:00)

Running host_to_device_memcpy_ce.
memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)
           0         1
 0     54.87     55.02

SUM host_to_device_memcpy_ce 109.89

Running device_to_device_memcpy_read_ce.
memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)
           0         1
 0       N/A    389.44
 1    388.91       N/A

SUM device_to_device_memcpy_read_ce 778.35

ERROR: Testcase bogus not found!
NOTE: The reported results may not reflect the full capabilities of the platform.
Performance can vary with software drivers, hardware clocks, and system topology.

"""


def documented_report(**fields: object):
    tests = [
        passed("host_to_device_memcpy_ce", [one_by_n()], 0),
        passed("device_to_device_memcpy_read_ce", [n_by_n()], 4),
        BOGUS,
    ]
    return attrs.evolve(report(tests), **fields)


def text(rep, **flags: bool) -> str:
    out = io.StringIO()
    NvbandwidthTextWriter(**flags).write(rep, out)
    return out.getvalue()


def streamed(rep, **flags: bool) -> str:
    """The same report through begin / testcase / end, as a run writes it."""
    writer, out = NvbandwidthTextWriter(**flags), io.StringIO()
    writer.begin(attrs.evolve(rep, testcases=()), out)
    for t in rep.testcases:
        writer.testcase(t, out)
    writer.end(rep, out)
    return out.getvalue()


def as_json(rep, verbose: bool = False) -> str:
    out = io.StringIO()
    NvbandwidthJsonWriter(verbose=verbose).write(rep, out)
    return out.getvalue()


@pytest.mark.parametrize("path", REAL_JSON, ids=lambda p: p.name)
def test_jsoncpp_layout_is_byte_for_byte_nvbandwidths(path: Path) -> None:
    """Every real nvbandwidth -j file decoded and written again is the same bytes."""
    raw = path.read_text(encoding="utf-8")
    assert jsoncpp_dumps(json.loads(raw)) == raw


def test_jsoncpp_scalars_and_containers() -> None:
    """jsoncpp's forms: sorted keys (upper case first), %.17g with .0, null, ±1e+9999, [] {}."""
    doc = {"b": [1.0, 1e17, 0.1, math.nan, -math.inf], "B": {}, "a": [], "é": "ü\n", "t": True}
    assert jsoncpp_dumps(doc) == (
        '{\n\t"B" : {},\n\t"a" : [],\n\t"b" : \n\t[\n\t\t1.0,\n\t\t1e+17,\n\t\t'
        '0.10000000000000001,\n\t\tnull,\n\t\t-1e+9999\n\t],\n\t"t" : true,\n\t'
        '"\\u00e9" : "\\u00fc\\n"\n}\n\n'
    )


def test_text_is_the_documented_example() -> None:
    """-t 0 4 bogus on two GPUs: line for line the example of the behaviour reference."""
    assert text(documented_report()) == DOCUMENTED_TEXT


def test_streamed_text_equals_the_whole_text() -> None:
    """begin/testcase/end write what write() writes, with and without -v."""
    rep = documented_report()
    assert streamed(rep) == text(rep)
    rep = report([passed("x", [one_by_n(samples=True)], 0), BOGUS])
    assert streamed(rep, verbose=True) == text(rep, verbose=True)


def test_json_holds_nvbandwidths_keys() -> None:
    """JSON keys: versions, devices with the host, %g cells, N/A, the sum; Not Found is ERROR."""
    nv = json.loads(as_json(documented_report()))["nvbandwidth"]
    assert sorted(nv) == ["CUDA Runtime Version", "Driver Version", "GPU Device list",
                          "git_version", "testcases", "version"]  # fmt: skip
    assert nv["CUDA Runtime Version"] == 12080 and nv["version"] == "v0.8"
    assert nv["GPU Device list"][1] == "1: NVIDIA H200 (00000000:43:00): (gpu-node-17)"
    h2d, d2d, bogus = nv["testcases"]
    assert h2d == {
        "bandwidth_description": "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
        "bandwidth_matrix": [["54.8731", "55.0212"]],
        "name": "host_to_device_memcpy_ce",
        "status": "Passed",
        "sum": pytest.approx(109.8943),
    }
    assert d2d["bandwidth_matrix"] == [["N/A", "389.44"], ["388.91", "N/A"]]
    assert bogus == {"name": "bogus", "status": "ERROR"}


def test_three_matrices_share_one_bandwidth_matrix() -> None:
    """A bidirectional testcase: 3N rows (1, 2, Total); description and sum the Total's."""
    nv = document(report([passed("device_to_device_bidirectional_memcpy_read_ce",
                                 bidirectional(), 6)]))["nvbandwidth"]  # fmt: skip
    (t,) = nv["testcases"]
    assert len(t["bandwidth_matrix"]) == 6
    assert t["bandwidth_description"].endswith("Total bandwidth (GB/s)")
    assert t["sum"] == pytest.approx(2.001 * (389.4 + 389.2))


def test_verbose_json_adds_min_max_average() -> None:
    """-v: min (a missing cell counts 0), max, average over the cells above 0; latency in ns."""
    nv = document(report([passed("lat", [latency()], 33)]), verbose=True)["nvbandwidth"]
    (t,) = nv["testcases"]
    assert t["min"] == 0.0
    assert t["max"] == pytest.approx(830.12)
    assert t["average"] == pytest.approx((830.12 + 829.5) / 2)
    empty = attrs.evolve(n_by_n(), values=[[None, None], [None, None]])
    (t,) = document(report([passed("none", [empty])]), verbose=True)["nvbandwidth"]["testcases"]
    assert math.isnan(t["average"]) and t["max"] == 2.2250738585072014e-308


def test_gpubw_only_matrices_are_left_out() -> None:
    """device_local_copy's read + write matrix is not printed; a plugin's only matrix is."""
    once = one_by_n("device_local_copy")
    twice = attrs.evolve(
        once, key="device_local_copy_read_write", bytes_counting=COUNTED_READ_WRITE
    )
    both = passed("device_local_copy", [once, twice], 34)
    assert [m.key for m in kept_matrices(both)] == ["device_local_copy"]
    assert "read_write" not in text(report([both]))
    assert len(document(report([both]))["nvbandwidth"]["testcases"][0]["bandwidth_matrix"]) == 1
    alone = passed("stream_copy", [twice])
    assert [m.key for m in kept_matrices(alone)] == ["device_local_copy_read_write"]


def test_a_failed_testcase_ends_the_output() -> None:
    """After an Error nothing more: its Running line (no NOTE); JSON: status Running, error set."""
    error = TestcaseResult("all_to_host_memcpy_ce", Status.ERROR, "CUDA_ERROR_OUT_OF_MEMORY")
    rep = report([passed("host_to_device_memcpy_ce", [one_by_n()], 0), error, BOGUS])
    out = text(rep)
    assert out.endswith("SUM host_to_device_memcpy_ce 109.89\n\nRunning all_to_host_memcpy_ce.\n")
    assert streamed(rep) == out
    nv = document(rep)["nvbandwidth"]
    assert [t["status"] for t in nv["testcases"]] == ["Passed", "Running"]
    assert nv["error"] == failure_message(rep) == "all_to_host_memcpy_ce: CUDA_ERROR_OUT_OF_MEMORY"


def test_interrupted_and_unstarted_runs() -> None:
    """Interrupted: no NOTE; not started: the version block only (JSON: version, git, error)."""
    rep = attrs.evolve(documented_report(), signal="SIGINT")
    assert "NOTE: The reported" not in text(rep)
    dead = attrs.evolve(report([]), devices=(), error="could not start: no device")
    assert text(dead) == "nvbandwidth Version: v0.8\nBuilt from Git version: gpubw-0.1.0\n\n"
    assert sorted(document(dead)["nvbandwidth"]) == ["error", "git_version", "version"]


def test_warnings_are_nvbandwidths() -> None:
    """nvbandwidth's small-buffer NOTE after the version block; the JSON keeps the last warning."""
    gpubw_note = "NOTE: You have chosen a buffer size that is smaller than the default buffer "
    rep = documented_report(
        run_options=RunOptions(buffer_sizes=[MIB]),
        warnings=(gpubw_note + "size. (512 MiB)", "Warning: there are more processes than GPUs"),
    )
    lines = text(rep).splitlines()
    assert lines[3:5] == [SMALL_BUFFER_WARNING, "Warning: there are more processes than GPUs"]
    assert lines[5].startswith("CUDA Runtime Version")
    assert document(rep)["nvbandwidth"]["warning"] == "Warning: there are more processes than GPUs"


def test_simulated_runs_say_so_in_the_git_version() -> None:
    """The git version names gpubw and the simulated system, in text and JSON."""
    rep = report([BOGUS], simulated=True)
    assert text(rep).splitlines()[1] == "Built from Git version: gpubw-0.1.0 (SIMULATED dgx-h200-2)"
    assert document(rep)["nvbandwidth"]["git_version"] == "gpubw-0.1.0 (SIMULATED dgx-h200-2)"


def test_multinode_header_lists_the_processes() -> None:
    """Under MPI: the MPI version and one Process line per rank; bisect labels set the column."""
    world = {"size": 2, "mpi_library": "MPICH Version: 5.0\nMPICH Device: ch4",
             "processes": [{"rank": r, "host": "n1", "device": r, "name": "NVIDIA H200",
                            "pci": f"00000000:{r}b:00"} for r in (0, 1)]}  # fmt: skip
    bisect = attrs.evolve(one_by_n(), key="multinode_bisect_write_ce", row_labels=["0->1"],
                          column_labels=["0"], values=[[251.8e9]])  # fmt: skip
    lines = text(attrs.evolve(report([passed("multinode_bisect_write_ce", [bisect], 47)]),
                              world=world)).splitlines()  # fmt: skip
    assert lines[3] == "MPI version: MPICH Version: 5.0 MPICH Device: ch4"
    assert lines[8:11] == [
        "Process 0 (n1): device 0: NVIDIA H200 (00000000:0b:00)",
        "Process 1 (n1): device 1: NVIDIA H200 (00000000:1b:00)",
        "",
    ]
    assert lines[13:15] == ["             0", "0->1    251.80"]
