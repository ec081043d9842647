"""Tests of expectations, verdicts and noise statistics (gpubw.acceptance.expect)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import attrs
import jsonschema
import pytest

from gpubw.acceptance import expect
from gpubw.model.errors import UsageError
from gpubw.model.report_io import load_report, report_from_dict
from gpubw.model.results import BANDWIDTH, LATENCY, Axes, Matrix, Report, Status, TestcaseResult

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
H200X2 = RESULTS / "h200x2-2026-11-29.json"
GB = 1e9
MIB = 1 << 20
H2D = "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)"
D2H = "memcpy CE CPU(row) <- GPU(column) bandwidth (GB/s)"
PEER = "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)"


def devices(n: int, name: str = "NVIDIA H200") -> list[dict]:
    return [
        {
            "ordinal": i,
            "name": name,
            "uuid": f"GPU-0000000{i}-aaaa",
            "pci_bus_id": f"0000:{0x18 + i:02x}:00.0",
        }
        for i in range(n)
    ]


def host_matrix(values: list[float], key: str = "host_to_device_memcpy_ce", header=H2D, samples=()):
    n = len(values)
    return Matrix(
        key=key,
        description=header,
        unit=BANDWIDTH,
        row_labels=["0"],
        column_labels=[str(i) for i in range(n)],
        values=[values],
        samples=samples,
    )


def peer_matrix(grid: list[list[float | None]], unit=BANDWIDTH, header=PEER, key="d2d"):
    n = len(grid)
    return Matrix(
        key=key,
        description=header,
        unit=unit,
        row_labels=[str(i) for i in range(n)],
        column_labels=[str(i) for i in range(n)],
        values=grid,
    )


def report(*matrices: Matrix, n: int | None = None, size: int = 512 * MIB, status=Status.PASSED):
    n = n if n is not None else len(matrices[0].column_labels)
    tcs = [TestcaseResult(key=m.key, status=status, size=size, matrices=[m]) for m in matrices]
    return Report(
        tool="gpubw",
        tool_version="0",
        backend="simulated",
        simulated=True,
        system_name="t",
        host="node1",
        versions={},
        devices=devices(n),
        testcases=tcs,
    )


def h200() -> Report:
    return report_from_dict(load_report(H200X2))


def fails(verdicts):
    return [v for v in verdicts if v.severity == expect.FAIL]


# -- loading ------------------------------------------------------------------------------


def write(tmp_path, doc) -> Path:
    p = tmp_path / "exp.json"
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


def test_load_valid_file_converts_units_and_sizes(tmp_path):
    """A valid file loads; GB/s and us become base units, "512MiB" becomes bytes."""
    doc = {
        "format": "gpubw-expect-v1",
        "tolerance": 0.05,
        "rules": [
            {"testcase": "a", "size": "512MiB", "min": 50, "unit": "GB/s"},
            {"testcase": "lat", "max": 1.5, "unit": "us", "tolerance": 0},
            {"testcase": "b", "size": 4096, "min": 7},
        ],
    }
    exp = expect.load_expectations(write(tmp_path, doc))
    a, lat, b = exp.rules
    assert a.size == 512 * MIB and a.min == pytest.approx(50e9) and a.tolerance == 0.05
    assert a.quantity == BANDWIDTH and lat.quantity == LATENCY
    assert lat.max == pytest.approx(1.5e-6) and lat.tolerance == 0
    assert b.size == 4096 and b.min == 7 and b.quantity is None
    assert exp.source == str(tmp_path / "exp.json")


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ("{not json", ["is not JSON", "line 1"]),
        ({"rules": []}, ["at /:", "'format' is a required property"]),
        ({"format": "x", "rules": []}, ["at /format", "gpubw-expect-v1"]),
        (
            {"format": "gpubw-expect-v1", "rules": [{"testcase": "a", "mn": 5}]},
            ["at /rules/0", "'mn' was unexpected", "allowed: basis, column, device"],
        ),
        (
            {"format": "gpubw-expect-v1", "rules": [{"testcase": "a"}]},
            ["at /rules/0", "needs a floor 'min' or a ceiling 'max'"],
        ),
        (
            {"format": "gpubw-expect-v1", "rules": [{"testcase": "a", "min": 1, "link": "nv"}]},
            ["at /rules/0/link", "'host', 'peer'"],
        ),
        (
            {"format": "gpubw-expect-v1", "rules": [{"testcase": "a", "min": -1}]},
            ["at /rules/0/min"],
        ),
        (
            {"format": "gpubw-expect-v1", "rules": [{"testcase": "a", "min": 1, "size": "12XB"}]},
            ["at /rules/0/size", "unknown unit", "KiB"],
        ),
        (
            {"format": "gpubw-expect-v1", "rules": [{"testcase": "a", "min": 5, "max": 2}]},
            ["at /rules/0", "min 5 is above max 2"],
        ),
        (
            {"format": "gpubw-expect-v1", "tolerance": 1.5, "rules": []},
            ["at /tolerance"],
        ),
    ],
)
def test_bad_files_name_path_pointer_and_what_is_allowed(tmp_path, doc, expected):
    """Every bad file is a UsageError naming the file, the JSON pointer and the problem."""
    p = write(tmp_path, doc)
    with pytest.raises(UsageError) as err:
        expect.load_expectations(p)
    msg = str(err.value)
    assert str(p) in msg
    for part in expected:
        assert part in msg, msg


def test_unreadable_file_is_a_usage_error(tmp_path):
    """A missing file is a UsageError naming it."""
    with pytest.raises(UsageError, match=r"cannot read expectations file .*nope\.json"):
        expect.load_expectations(tmp_path / "nope.json")


# -- where cells are ----------------------------------------------------------------------


def test_cell_places_name_both_ends_with_bus_id_and_uuid():
    """Host cells go host -> GPU (or GPU -> host for <-), peer cells row -> column; the
    diagonal N/A cells are skipped; GPUs carry index, bus id and UUID."""
    r = h200()
    h2d = next(t for t in r.testcases if t.key == "host_to_device_memcpy_ce").matrices[0]
    places = expect.cell_places(h2d, r.devices)
    assert [p.link for p in places] == ["host", "host"]
    assert places[1].source.kind == "host"
    dst = places[1].destination
    assert (dst.index, dst.pci_bus_id) == (1, "0000:00:07.0")
    assert dst.uuid == "GPU-cf635d90-75d9-c383-f513-766b23996505"
    d2h = next(t for t in r.testcases if t.key == "device_to_host_memcpy_ce").matrices[0]
    p = expect.cell_places(d2h, r.devices)[0]
    assert p.source.index == 0 and p.destination.kind == "host"
    d2d = next(t for t in r.testcases if t.key == "device_to_device_memcpy_read_ce").matrices[0]
    places = expect.cell_places(d2d, r.devices)
    assert [(p.link, p.source.index, p.destination.index) for p in places] == [
        ("peer", 0, 1),
        ("peer", 1, 0),
    ]


def test_cell_places_of_fan_local_and_latency_matrices():
    """All-to-one totals are per-device cells fed by the GPU's peers; local copies are one
    GPU with itself; host latency is bidirectional."""
    r = h200()
    by_key = {m.key: m for t in r.testcases for m in t.matrices}
    fan = expect.cell_places(by_key["all_to_one_write_ce"], r.devices)[1]
    assert (fan.link, fan.source.kind, fan.destination.index) == ("device", "peers", 1)
    out = expect.cell_places(by_key["one_to_all_write_ce"], r.devices)[0]
    assert (out.source.index, out.destination.kind) == (0, "peers")
    local = expect.cell_places(by_key["device_local_copy"], r.devices)[1]
    assert local.link == "device" and local.source == local.destination
    lat = expect.cell_places(by_key["host_device_latency_sm"], r.devices)[0]
    assert lat.link == "host" and lat.bidirectional


def test_cell_places_read_the_axes_not_the_header():
    """Where a cell is comes from the matrix's axes: host x GPU axes under a header that names
    nothing make host links (GPU -> host for column->row); rank x rank axes make GPU pairs."""
    d2h = attrs.evolve(
        host_matrix([1.0, 2.0], header="my figures"), axes=Axes("host", "gpu", "column->row")
    )
    places = expect.cell_places(d2h, devices(2))
    assert [(p.link, p.source.index, p.destination.kind) for p in places] == [
        ("host", 0, "host"),
        ("host", 1, "host"),
    ]
    ranks = attrs.evolve(
        peer_matrix([[None, 1.0], [1.0, None]], header=""), axes=Axes("rank", "rank", "both")
    )
    places = expect.cell_places(ranks, devices(2))
    assert [(p.link, p.source.index, p.destination.index) for p in places] == [
        ("peer", 0, 1),
        ("peer", 1, 0),
    ]
    assert all(p.bidirectional for p in places)
    assert [p.link for p in expect.cell_places(host_matrix([1.0], header="my figures"))] == ["cell"]


def test_nvbandwidth_multinode_cpu_row_header_is_read_as_gpu_pairs():
    """nvbandwidth's multinode bidirectional header says CPU(row) over N rows: its cells are
    GPU pairs both ways (a host is one row), not cells of no known place."""
    header = "memcpy CE CPU(row) <-> GPU(column) Read1 bandwidth (GB/s)"
    places = expect.cell_places(peer_matrix([[None, 1.0], [2.0, None]], header=header), devices(2))
    assert [(p.link, p.source.index, p.destination.index) for p in places] == [
        ("peer", 0, 1),
        ("peer", 1, 0),
    ]


def test_diagonal_cells_are_local_and_not_compared_with_peers():
    """In an N x N matrix with values on the diagonal, the diagonal is its own group."""
    m = peer_matrix([[1000.0, 100.0], [100.0, 1000.0]])
    places = expect.cell_places(m, devices(2))
    assert [p.link for p in places] == ["local", "peer", "peer", "local"]
    assert not fails(expect.evaluate(report(m)))


# -- the peer-outlier rule ----------------------------------------------------------------


@pytest.mark.parametrize(("slow", "flagged"), [(0.80, True), (0.26, True), (0.95, False)])
def test_one_slow_host_link_of_eight_is_named(slow, flagged):
    """On 8 GPUs, a host link at 80 % or 26 % of the others fails and names that GPU; at
    95 % it passes (the average-based compare missed both)."""
    values = [55 * GB] * 8
    values[5] = 55 * GB * slow
    verdicts = fails(expect.evaluate(report(host_matrix(values))))
    if not flagged:
        assert verdicts == []
        return
    (v,) = verdicts
    assert v.rule == expect.PEER_OUTLIER and v.destination.index == 5
    assert v.destination.pci_bus_id == "0000:1d:00.0"
    assert v.reference == pytest.approx(55 * GB) and v.expected == pytest.approx(49.5 * GB)
    assert v.measured == pytest.approx(55 * GB * slow)
    assert "GPU 5 (0000:1d:00.0" in expect.format_verdict(v)
    assert expect.failed(verdicts)


def test_two_gpus_flag_only_the_slower():
    """With two GPUs the reference is the other one: only the slower is flagged."""
    v = fails(expect.evaluate(report(host_matrix([50 * GB, 40 * GB]))))
    assert [x.destination.index for x in v] == [1]


def test_outlier_threshold_is_adjustable_and_can_be_off():
    """outlier_pct moves the limit; None turns the rule off."""
    m = host_matrix([55 * GB] * 3 + [47 * GB])
    assert len(fails(expect.evaluate(report(m)))) == 1
    assert fails(expect.evaluate(report(m), outlier_pct=80)) == []
    assert fails(expect.evaluate(report(m), outlier_pct=None)) == []
    with pytest.raises(UsageError, match="outlier threshold"):
        expect.evaluate(report(m), outlier_pct=150)


def test_latency_outlier_is_the_slow_high_one():
    """For latency, higher is worse: a cell above median / 90 % fails, a low one does not."""
    grid = [[None if r == c else 1e-6 for c in range(4)] for r in range(4)]
    grid[2][3] = 1.3e-6
    grid[1][0] = 0.5e-6
    header = "Device to Device Latency SM GPU(row) <-> GPU(column) (ns)"
    m = peer_matrix(grid, unit=LATENCY, header=header, key="device_to_device_latency_sm")
    (v,) = fails(expect.evaluate(report(m)))
    assert (v.source.index, v.destination.index, v.bidirectional) == (2, 3, True)
    assert v.expected == pytest.approx(1e-6 / 0.9)
    assert v.ratio is not None and v.ratio < 0.9


def test_peer_links_keep_nvlink_and_pcie_pairs_apart():
    """With peer_links, PCIe pairs are compared with PCIe pairs only; without it, the
    slower PCIe pairs of a mixed topology are flagged."""
    nv, pcie = 300 * GB, 50 * GB
    grid = [[None if r == c else nv for c in range(4)] for r in range(4)]
    grid[0][3] = grid[3][0] = pcie
    m = peer_matrix(grid)
    links = {(a, b): "nvlink" for a in range(4) for b in range(4) if a != b}
    links[(0, 3)] = links[(3, 0)] = "pcie"
    assert fails(expect.evaluate(report(m), peer_links=links)) == []
    flagged = fails(expect.evaluate(report(m)))
    assert sorted((v.source.index, v.destination.index) for v in flagged) == [(0, 3), (3, 0)]


def test_only_passed_testcases_are_judged():
    """Waived and Error testcases have no verdicts."""
    m = host_matrix([55 * GB, 10 * GB])
    assert expect.evaluate(report(m, status=Status.ERROR)) == []


def test_include_passed_gives_a_verdict_for_every_judged_cell():
    """include_passed adds PASS verdicts; a matrix of one cell has nothing to compare."""
    vs = expect.evaluate(report(host_matrix([55 * GB] * 4)), include_passed=True)
    assert [v.severity for v in vs] == ["pass"] * 4
    assert expect.evaluate(report(host_matrix([55 * GB])), include_passed=True) == []


# -- noise --------------------------------------------------------------------------------


def test_cell_noise_is_sample_stdev_and_cv():
    """stdev is the sample standard deviation, CV = stdev / mean; one sample has no spread."""
    samples = [[(10.0, 12.0, 14.0), (5.0,)]]
    m = host_matrix([12.0, 5.0], samples=samples)
    ((a, b),) = m.cell_stats()
    assert a.n == 3 and a.stdev == pytest.approx(statistics.stdev([10, 12, 14]))
    assert a.cv == pytest.approx(2 / 12)
    assert b.n == 1 and b.stdev is None and b.cv is None
    assert host_matrix([1.0]).cell_stats() == ()


def test_noisy_cell_is_a_warning_not_a_failure():
    """A CV above the threshold gives a NOISY warning naming the cell; below, nothing."""
    quiet = (55 * GB, 55.1 * GB, 54.9 * GB)
    noisy = (40 * GB, 55 * GB, 70 * GB)
    m = host_matrix([55 * GB, 55 * GB], samples=[[quiet, noisy]])
    vs = expect.evaluate(report(m))
    (v,) = vs
    assert (v.rule, v.severity, v.destination.index) == ("noisy", "warn", 1)
    assert v.cv == pytest.approx(statistics.stdev(noisy) / 55e9)
    assert not expect.failed(vs)
    assert "noisy: CV 27.3%" in expect.format_verdict(v)
    assert expect.evaluate(report(m), cv_threshold=0.5) == []
    assert expect.evaluate(report(m), cv_threshold=None) == []


# -- floors and ceilings ------------------------------------------------------------------


def doc(*rules, tolerance=0.0):
    return {"format": "gpubw-expect-v1", "tolerance": tolerance, "rules": list(rules)}


def test_floor_with_tolerance():
    """A floor fails below min x (1 - tolerance) and passes above it."""
    m = host_matrix([50 * GB, 47 * GB])
    rule = {"testcase": "host_to_device_memcpy_ce", "min": 50, "unit": "GB/s"}
    vs = fails(expect.evaluate(report(m), doc(rule, tolerance=0.05), outlier_pct=None))
    (v,) = vs
    assert (v.rule, v.destination.index) == ("floor", 1)
    assert v.expected == pytest.approx(47.5 * GB) and v.reference == pytest.approx(50 * GB)
    assert "/rules/0" in v.detail
    loose = doc(rule, tolerance=0.1)
    assert fails(expect.evaluate(report(m), loose, outlier_pct=None)) == []


def test_ceiling_catches_impossible_figures():
    """A ceiling fails above max x (1 + tolerance)."""
    m = host_matrix([50 * GB, 80 * GB])
    rule = {"testcase": "host_to_device_memcpy_ce", "max": 64, "unit": "GB/s"}
    (v,) = fails(expect.evaluate(report(m), doc(rule), outlier_pct=None))
    assert (v.rule, v.destination.index) == ("ceiling", 1)


def test_most_specific_rule_wins():
    """A per-device rule overrides the testcase-wide floor for that device; a per-cell rule
    overrides both."""
    m = host_matrix([55 * GB, 55 * GB, 25 * GB, 55 * GB])
    general = {"testcase": "host_to_device_memcpy_ce", "min": 50, "unit": "GB/s"}
    dev2 = {"testcase": "host_to_device_memcpy_ce", "device": 2, "min": 24, "unit": "GB/s"}
    cell = {"testcase": "host_to_device_memcpy_ce", "column": "2", "min": 30, "unit": "GB/s"}
    r = report(m)
    assert len(fails(expect.evaluate(r, doc(general), outlier_pct=None))) == 1
    assert fails(expect.evaluate(r, doc(general, dev2), outlier_pct=None)) == []
    (v,) = fails(expect.evaluate(r, doc(general, dev2, cell), outlier_pct=None))
    assert v.reference == pytest.approx(30 * GB)


def test_rules_select_by_size_matrix_link_and_quantity():
    """A rule for another size, matrix, link type or quantity does not apply."""
    m = host_matrix([10 * GB, 10 * GB])
    r = report(m, size=64 * MIB)
    base = {"testcase": "host_to_device_memcpy_ce", "min": 50, "unit": "GB/s"}
    assert len(fails(expect.evaluate(r, doc(base), outlier_pct=None))) == 2
    for extra in ({"size": "512MiB"}, {"matrix": "other"}, {"link": "peer"}):
        assert fails(expect.evaluate(r, doc({**base, **extra}), outlier_pct=None)) == []
    assert len(fails(expect.evaluate(r, doc({**base, "size": "64M"}), outlier_pct=None))) == 2
    as_latency = {"testcase": "host_to_device_memcpy_ce", "max": 1, "unit": "us"}
    assert fails(expect.evaluate(r, doc(as_latency), outlier_pct=None)) == []


# -- expectations from a known-good run, and the built-in ones ----------------------------


def test_expect_from_round_trip_and_a_degraded_run_fails():
    """A run passes the file made from it; the same run with GPU 1's host link at 80 %
    fails a floor naming GPU 1."""
    good = h200()
    exp = expect.expect_from(good, tolerance=0.05)
    jsonschema.validate(exp, expect.schema())
    assert exp["devices"] == ["NVIDIA H200"] and exp["tolerance"] == 0.05
    assert fails(expect.evaluate(good, exp)) == []
    t0 = good.testcases[0]
    m = t0.matrices[0]
    slow = attrs.evolve(m, values=[[m.values[0][0], m.values[0][1] * 0.8]], samples=())
    bad = attrs.evolve(good, testcases=[attrs.evolve(t0, matrices=[slow]), *good.testcases[1:]])
    vs = fails(expect.evaluate(bad, exp, outlier_pct=None))
    assert [(v.rule, v.testcase, v.destination.index) for v in vs] == [
        ("floor", "host_to_device_memcpy_ce", 1)
    ]


def test_expect_from_several_reports_takes_the_median_of_their_limits():
    """Three good runs: each floor is the median of the runs' worst cells, noted as such."""
    runs = [report(host_matrix([v, v + 5.0])) for v in (40e9, 50e9, 45e9)]
    doc = expect.expect_from_reports(runs, tolerance=0.05)
    (rule,) = doc["rules"]
    assert rule["min"] == 45.0 and rule["note"] == "median of 3 of 3 reports' worst cells"
    assert doc["tolerance"] == 0.05 and doc["name"].startswith("from 3 runs")
    assert expect.expect_from_reports(runs[:1]) == expect.expect_from(runs[0])


def test_expect_from_several_reports_of_different_gpus_is_a_usage_error():
    """Reports of different GPUs make no one file: a usage error naming both kinds."""
    a = report(host_matrix([1e9, 1e9]))
    b = attrs.evolve(a, devices=[{"ordinal": 0, "name": "NVIDIA L40S"}])
    with pytest.raises(UsageError, match="different GPUs"):
        expect.expect_from_reports([a, b])


def test_expect_from_rejects_a_bad_tolerance():
    """Tolerance is a fraction in [0, 1)."""
    with pytest.raises(UsageError, match="tolerance"):
        expect.expect_from(h200(), tolerance=5)


def test_builtin_h200_is_selected_by_device_name():
    """The H200 SXM file is chosen for H200 devices and not for others."""
    exp = expect.builtin_for(h200())
    assert exp is not None and exp.devices == ("NVIDIA H200",)
    assert expect.builtin_for(report(host_matrix([1.0, 1.0]))) is not None
    other = attrs.evolve(h200(), devices=[{"ordinal": 0, "name": "NVIDIA RTX 4090"}])
    assert expect.builtin_for(other) is None


def test_builtin_is_chosen_by_pci_device_id_before_the_name():
    """An H200 NVL (0x233b) reports the SXM's name; its PCI device id picks h200-nvl.json."""
    nvl = attrs.evolve(
        h200(), devices=[{"ordinal": 0, "name": "NVIDIA H200", "pci_device_id": 0x233B}]
    )
    sxm = attrs.evolve(
        h200(), devices=[{"ordinal": 0, "name": "NVIDIA H200", "pci_device_id": 0x2335}]
    )
    unknown = attrs.evolve(
        h200(), devices=[{"ordinal": 0, "name": "NVIDIA H200", "pci_device_id": 0x1}]
    )
    assert expect.builtin_for(nvl).source == "built-in h200-nvl.json"
    assert expect.builtin_for(sxm).source == "built-in h200-sxm.json"
    assert expect.builtin_for(unknown) is None


def test_every_builtin_sku_covers_every_testcase_and_says_where_each_figure_comes_from():
    """Each built-in file has rules for every built-in testcase, each rule measured or derived
    with its source; only the H200 SXM has measured ones."""
    from gpubw.testcases import BUILTINS

    keys = {k for k, _ in BUILTINS}
    files = sorted((ROOT / "src/gpubw/acceptance/expectations").glob("*.json"))
    skus = {"a100-sxm4-80gb", "a100-pcie-80gb", "h100-sxm", "h100-pcie", "h100-nvl",
            "h200-sxm", "h200-nvl", "h20", "l40s", "b200", "gb200"}  # fmt: skip
    assert {f.stem for f in files} >= skus
    for f in files:
        doc = json.loads(f.read_text(encoding="utf-8"))
        assert doc["pci_device_ids"], f.name
        assert keys <= {r["testcase"] for r in doc["rules"]}, f.name
        sources = {x["id"] for x in doc["sources"]}
        for r in doc["rules"]:
            assert r["basis"] in ("measured", "derived") and r["source"], (f.name, r)
            assert r["basis"] == "measured" or r["source"] in sources, (f.name, r)
        bases = {r["basis"] for r in doc["rules"]}
        assert bases == ({"measured", "derived"} if f.stem == "h200-sxm" else {"derived"})


@pytest.mark.parametrize(
    "name",
    [
        "h200x2-2026-11-29.json",
        "h200x2-2026-11-29-warm-cache.json",
        "h200x1-2026-11-29.json",
        "h200x1-single-gpu-machine-2026-11-29.json",
        "h200x1-single-gpu-machine-2026-11-29-warm-cache.json",
    ],
)
def test_every_measured_h200_run_passes_the_builtin(name):
    """Each committed H200 run passes the built-in H200 expectations (and the outlier rule)."""
    r = report_from_dict(load_report(RESULTS / name))
    exp = expect.builtin_for(r)
    judged = expect.evaluate(r, exp, include_passed=True)
    assert fails(judged) == []
    assert any(v.rule == "floor" for v in judged)


def test_builtin_h200_is_derived_from_the_benchmark_run():
    """The shipped rules measured on h200x2-2026-11-29 are expect_from(that run, 10 %) less
    the testcases whose figures depend on the GPU count (host-all, all-to-one, one-to-all)."""
    derived = expect.expect_from(h200(), tolerance=0.10)
    skip = ("all_to_host", "host_to_all", "all_to_one", "one_to_all")
    rules = [r for r in derived["rules"] if not r["testcase"].startswith(skip)]
    shipped = json.loads(
        (ROOT / "src/gpubw/acceptance/expectations/h200-sxm.json").read_text(encoding="utf-8")
    )
    first = "benchmarks/results/h200x2-2026-11-29.json"
    kept = [
        {k: v for k, v in r.items() if k not in ("basis", "source")}
        for r in shipped["rules"]
        if r.get("source") == first
    ]
    assert kept == rules and shipped["tolerance"] == 0.10
    assert {r["testcase"] for r in rules} >= {"device_local_copy", "host_to_device_memcpy_ce"}


def test_a_degraded_h200_fails_the_builtin_floor():
    """Device-local bandwidth at 70 % on GPU 0 fails the built-in floor and the outlier
    rule, naming GPU 0's bus id."""
    r = h200()
    i = next(i for i, t in enumerate(r.testcases) if t.key == "device_local_copy")
    t = r.testcases[i]
    m = t.matrices[0]
    slow = attrs.evolve(m, values=[[m.values[0][0] * 0.7, m.values[0][1]]], samples=())
    tcs = list(r.testcases)
    tcs[i] = attrs.evolve(t, matrices=[slow, *t.matrices[1:]])
    vs = fails(expect.evaluate(attrs.evolve(r, testcases=tcs), expect.builtin_for(r)))
    assert {v.rule for v in vs} == {"floor", "peer_outlier"}
    assert {v.source.pci_bus_id for v in vs} == {"0000:00:06.0"}


def test_verdict_dict_matches_the_schema():
    """Verdict.as_dict() is valid against the schema's verdict definition."""
    schema = expect.schema()
    sub = {"$defs": schema["$defs"], "$ref": "#/$defs/verdict"}
    vs = expect.evaluate(h200(), include_passed=True)
    m = host_matrix([55 * GB, 55 * GB], samples=[[(1.0, 2.0), (1.0, 1.0)]])
    vs += expect.evaluate(report(m))
    assert {v.rule for v in vs} == {"peer_outlier", "noisy"}
    for v in vs:
        jsonschema.validate(v.as_dict(), sub)


def test_worst_first_orders_by_severity_then_ratio():
    """Failures first, the lowest ratio first."""
    m = host_matrix([55 * GB] * 5 + [30 * GB, 45 * GB, 55 * GB])
    vs = expect.worst_first(expect.evaluate(report(m), include_passed=True))
    assert [v.destination.index for v in vs[:2]] == [5, 6]
    assert vs[2].severity == "pass"
    assert expect.EXIT_BELOW_EXPECTATION == 3


@pytest.mark.parametrize("slow", [None, 5])
def test_simulated_h200x8_with_one_slow_host_link_names_that_gpu(tmp_path, slow):
    """End to end on the simulated backend: an h200x8 whose GPU 5 has an 80 % host link gets
    outlier and built-in floor failures naming GPU 5 only; the healthy model gets none."""
    from gpubw.cli import command as cli

    good = {"h2d": {"ce": 55.5e9, "sm": 51.4e9}, "d2h": {"ce": 55.3e9, "sm": 52.6e9}}
    links = [good] * 8
    if slow is not None:
        links[slow] = {d: {k: v * 0.8 for k, v in r.items()} for d, r in good.items()}
    system = tmp_path / "system.json"
    system.write_text(json.dumps({"base": "h200x8", "host_links": links}))
    out = tmp_path / "run.json"
    assert cli.main(["--simulate", str(system), "-t", "0", "1", "-j", "-o", str(out)]) == 0
    r = report_from_dict(load_report(out))
    verdicts = fails(expect.evaluate(r, expect.builtin_for(r)))
    if slow is None:
        assert verdicts == []
        return
    assert {(v.rule, v.testcase) for v in verdicts} == {
        (rule, key)
        for rule in ("floor", "peer_outlier")
        for key in ("host_to_device_memcpy_ce", "device_to_host_memcpy_ce")
    }
    assert {g.index for v in verdicts for g in v.devices} == {slow}
    assert {g.pci_bus_id for v in verdicts for g in v.devices} == {r.devices[slow]["pci_bus_id"]}


def test_the_run_path_does_not_import_jsonschema() -> None:
    """Importing the acceptance modules (every run does) imports no jsonschema: that waits
    for a file to check (30-90 ms that a one-GPU run's start paid on its critical path)."""
    import subprocess
    import sys

    code = "import sys, gpubw.acceptance.node; print('jsonschema' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, encoding="utf-8", check=True
    )
    assert out.stdout.strip() == "False"


def test_the_builtin_files_are_what_benchmarks_expectations_makes():
    """benchmarks/expectations.py --check: the shipped files match their generator (a change
    to how cells are classified, e.g. a link type, must regenerate them)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "expectations.py"), "--check"],
        capture_output=True,
        encoding="utf-8",
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_report_given_as_expectations_is_one_short_line(capsys, tmp_path):
    """--expect naming a gpubw report (the file expect-from reads): one short line saying so
    and how to make expectations from it, exit 2 (issue 33 item 12; before: one line of
    about 7 KB listing every key of the report)."""
    from _cli import run_cli

    report = tmp_path / "run.json"
    fast = ["--simulate", "h200x1", "-t", "0", "-b", "1MiB", "-i", "1"]
    run_cli(capsys, *fast, "-j", "-o", str(report))
    code, _, err = run_cli(capsys, *fast, "--expect", str(report))
    assert code == 2
    assert err.strip() == (
        f"gpubw: error: {report} is a gpubw report, not an expectations file "
        f"(gpubw-expect-v1); make one from it with: gpubw expect-from {report} -o FILE"
    )


def test_a_problem_quoting_a_long_value_is_cut():
    """A schema problem quoting a long wrong value is cut, so the message stays short."""
    from gpubw.acceptance.expectations import expectations_from_dict

    doc = {"format": "gpubw-expect-v1", "rules": [], "tolerance": "x" * 5000}
    with pytest.raises(UsageError) as info:
        expectations_from_dict(doc, "e.json")
    assert len(str(info.value)) < 1000 and "... (cut)" in str(info.value)
