"""The nvbandwidth writers (gpubw.writers.nvbandwidth): v0.8's and v0.10's text and JSON."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import attrs
import pytest

from _writer_reports import (
    DEVICES,
    MIB,
    bidirectional,
    latency,
    n_by_n,
    one_by_n,
    passed,
    report,
)
from gpubw.model.nvbandwidth_versions import V010, V08
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


def text(rep, release: str = "0.8", **flags: bool) -> str:
    """The text writer's output, of nvbandwidth ``release`` (``--nvbandwidth-version``)."""
    out = io.StringIO()
    writer = NvbandwidthTextWriter(**flags)
    writer.nvbandwidth_version = release
    writer.write(rep, out)
    return out.getvalue()


def streamed(rep, release: str = "0.8", **flags: bool) -> str:
    """The same report through begin / testcase / end, as a run writes it."""
    writer, out = NvbandwidthTextWriter(**flags), io.StringIO()
    writer.nvbandwidth_version = release
    writer.begin(attrs.evolve(rep, testcases=()), out)
    for t in rep.testcases:
        writer.testcase(t, out)
    writer.end(rep, out)
    return out.getvalue()


def as_json(rep, verbose: bool = False, release: str = "0.8") -> str:
    out = io.StringIO()
    writer = NvbandwidthJsonWriter(verbose=verbose)
    writer.nvbandwidth_version = release
    writer.write(rep, out)
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
                                 bidirectional(), 6)]), release=V08)["nvbandwidth"]  # fmt: skip
    (t,) = nv["testcases"]
    assert len(t["bandwidth_matrix"]) == 6
    assert t["bandwidth_description"].endswith("Total bandwidth (GB/s)")
    assert t["sum"] == pytest.approx(2.001 * (389.4 + 389.2))


def test_verbose_json_adds_min_max_average() -> None:
    """-v: min (a missing cell counts 0), max, average over the cells above 0; latency in ns."""
    nv = document(report([passed("lat", [latency()], 33)]), verbose=True, release=V08)[
        "nvbandwidth"
    ]
    (t,) = nv["testcases"]
    assert t["min"] == 0.0
    assert t["max"] == pytest.approx(830.12)
    assert t["average"] == pytest.approx((830.12 + 829.5) / 2)
    empty = attrs.evolve(n_by_n(), values=[[None, None], [None, None]])
    (t,) = document(report([passed("none", [empty])]), verbose=True, release=V08)["nvbandwidth"][
        "testcases"
    ]
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
    assert (
        len(
            document(report([both]), release=V08)["nvbandwidth"]["testcases"][0]["bandwidth_matrix"]
        )
        == 1
    )
    alone = passed("stream_copy", [twice])
    assert [m.key for m in kept_matrices(alone)] == ["device_local_copy_read_write"]


def test_a_failed_testcase_ends_the_output() -> None:
    """After an Error nothing more: its Running line (no NOTE); JSON: status Running, error set."""
    error = TestcaseResult("all_to_host_memcpy_ce", Status.ERROR, "CUDA_ERROR_OUT_OF_MEMORY")
    rep = report([passed("host_to_device_memcpy_ce", [one_by_n()], 0), error, BOGUS])
    out = text(rep)
    assert out.endswith("SUM host_to_device_memcpy_ce 109.89\n\nRunning all_to_host_memcpy_ce.\n")
    assert streamed(rep) == out
    nv = document(rep, release=V08)["nvbandwidth"]
    assert [t["status"] for t in nv["testcases"]] == ["Passed", "Running"]
    assert nv["error"] == failure_message(rep) == "all_to_host_memcpy_ce: CUDA_ERROR_OUT_OF_MEMORY"


def test_interrupted_and_unstarted_runs() -> None:
    """Interrupted: no NOTE; not started: the version block only (JSON: version, git, error)."""
    rep = attrs.evolve(documented_report(), signal="SIGINT")
    assert "NOTE: The reported" not in text(rep)
    dead = attrs.evolve(report([]), devices=(), error="could not start: no device")
    assert text(dead) == "nvbandwidth Version: v0.8\nBuilt from Git version: gpubw-0.1.0\n\n"
    assert sorted(document(dead, release=V08)["nvbandwidth"]) == ["error", "git_version", "version"]


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
    assert (
        document(rep, release=V08)["nvbandwidth"]["warning"]
        == "Warning: there are more processes than GPUs"
    )


def test_simulated_runs_say_so_in_the_git_version() -> None:
    """The git version names gpubw and the simulated system, in text and JSON."""
    rep = report([BOGUS], simulated=True)
    assert text(rep).splitlines()[1] == "Built from Git version: gpubw-0.1.0 (SIMULATED dgx-h200-2)"
    assert (
        document(rep, release=V08)["nvbandwidth"]["git_version"]
        == "gpubw-0.1.0 (SIMULATED dgx-h200-2)"
    )


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


# -- v0.10 ---------------------------------------------------------------------------------------


def test_v010_header_and_cv_lines() -> None:
    """v0.10: v0.10.0, 'X.Y (N)' CUDA lines, CV after the last SUM only, none for latency."""
    rep = report([passed("host_to_device_memcpy_ce", [one_by_n(samples=True)], 0),
                  passed("device_to_device_bidirectional_memcpy_read_ce", bidirectional(), 6),
                  passed("device_to_device_latency_sm", [latency()], 33)])  # fmt: skip
    lines = text(rep, "0.10").splitlines()
    assert lines[0] == "nvbandwidth Version: v0.10.0"
    assert lines[3:6] == ["CUDA Runtime Version: 12.8 (12080)",
                          "CUDA Driver Version (API): 12.8 (12080)",
                          "Driver Version: 570.124.06"]  # fmt: skip
    sums = [n for n, line in enumerate(lines) if line.startswith("SUM ")]
    cv = [n for n, line in enumerate(lines) if line.startswith("COEFFICIENT_OF_VARIATION ")]
    assert cv == [sums[0] + 1, sums[3] + 1]  # after H2D's and after the bidirectional _total
    assert lines[cv[1]] == (
        "COEFFICIENT_OF_VARIATION device_to_device_bidirectional_memcpy_read_ce_total 0.00"
    )
    # two cells, samples (54.80, 54.8731, 54.90) and (55.0, 55.0212, 55.1): mean of stdev/mean
    assert lines[cv[0]] == "COEFFICIENT_OF_VARIATION host_to_device_memcpy_ce 0.00"
    assert streamed(rep, "0.10") == text(rep, "0.10")
    assert document(rep, release=V010)["nvbandwidth"]["version"] == "v0.10.0"


def test_testcase_cv_is_the_mean_of_the_cells_run_to_run_cv() -> None:
    """CV: mean over measured cells of each cell's sample stdev / mean (last matrix)."""
    from gpubw.model.nvbandwidth_versions import testcase_cv

    noisy = attrs.evolve(one_by_n(), samples=(((1.0, 2.0, 3.0), (10.0, 10.0, 10.0)),))
    assert testcase_cv([noisy]) == pytest.approx((1.0 / 2.0 + 0.0) / 2)
    assert testcase_cv([one_by_n()]) == 0.0  # no samples: 0


def test_v010_waived_line_names_the_testcase_and_reason() -> None:
    """v0.10: 'Waived <key>: <reason>' with no Running line; v0.8: 'Waived: '."""
    waived = TestcaseResult("host_to_device_bidirectional_memcpy_ce", Status.WAIVED,
                            "bounce-buffer confidential computing enabled")  # fmt: skip
    rep = report([waived])
    assert ("Waived host_to_device_bidirectional_memcpy_ce: bounce-buffer confidential "
            "computing enabled\n") in text(rep, "0.10")  # fmt: skip
    assert "Running" not in text(rep, "0.10")
    assert "\nWaived: \n" in text(rep, "0.8")


@pytest.mark.parametrize("release", ["0.10", "0.8"])
def test_multinode_waivers_are_left_out_outside_mpi(release: str) -> None:
    """A single-node run's Waived multinode testcases: not printed, not in the JSON."""
    waived = TestcaseResult("multinode_bisect_write_ce", Status.WAIVED, "needs MPI")
    rep = report([passed("host_to_device_memcpy_ce", [one_by_n()], 0), waived])
    assert "Waived" not in text(rep, release) and "Waived" not in streamed(rep, release)
    (only,) = json.loads(as_json(rep, release=release))["nvbandwidth"]["testcases"]
    assert only["name"] == "host_to_device_memcpy_ce"


FORGED = "x\r\nSUM fake 999\n\x1b[2KDevice 9: forged"


@pytest.mark.parametrize("release", ["0.10", "0.8"])
def test_names_cannot_forge_lines(release: str) -> None:
    """A device name, matrix header, key or message with CR/LF/ESC is escaped (JSON keeps it)."""
    devices = [dict(d, name=FORGED) for d in DEVICES]
    matrix = attrs.evolve(one_by_n(f"plugin{FORGED}"), description=f"head{FORGED}")
    tests = [
        passed(f"plugin{FORGED}", [matrix]),
        TestcaseResult(f"k{FORGED}", Status.NOT_FOUND, f"Testcase k{FORGED} not found"),
        TestcaseResult(f"w{FORGED}", Status.WAIVED, f"why{FORGED}"),
    ]
    rep = attrs.evolve(report(tests), devices=devices, host=f"host{FORGED}")
    for out in (text(rep, release), streamed(rep, release)):
        lines = out.splitlines()
        assert not [line for line in lines if line.startswith(("SUM fake", "Device 9"))]
        assert "\x1b" not in out and "\r" not in out
    nv = json.loads(as_json(rep, release=release))["nvbandwidth"]
    assert nv["GPU Device list"][0].startswith(f"0: {FORGED} (")
    assert nv["testcases"][0]["name"] == f"plugin{FORGED}"
