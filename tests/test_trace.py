"""--trace: where a run's time goes, as non-overlapping events that add up to each step's wall."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from typing import Any

import pytest

import gpubw
from _node import FAST, json_run, run_cli
from gpubw.model.report_check import validate
from gpubw.model.report_io import read_report, report_to_dict
from gpubw.model.trace import CATEGORIES, NO_TRACE, STEP, Tracer

#: host CE (FIRST), its bidirectional twin (interference copies), peer CE, latency (fixed size)
SELECTION = [
    "host_to_device_memcpy_ce",
    "host_to_device_bidirectional_memcpy_ce",
    "device_to_device_memcpy_read_ce",
    "device_local_copy",
    "host_device_latency_sm",
]


class Clock:
    """A clock the test moves by hand, in seconds."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_nested_spans_never_overlap_and_the_innermost_wins():
    """An inner span takes its time from the outer one, which resumes after it."""
    clock = Clock()
    t = Tracer(clock)
    t.begin_step(0, "k", 64)
    with t.span("setup"):
        clock.t += 1.0
        with t.span("allocation"):
            clock.t += 2.0
        clock.t += 3.0
    t.end_step()
    got = [(e.category, e.start_ns, e.duration_ns) for e in t.events]
    assert got == [("setup", 0, 10**9), ("allocation", 10**9, 2 * 10**9),
                   ("setup", 3 * 10**9, 3 * 10**9), (STEP, 0, 6 * 10**9)]  # fmt: skip
    assert all((e.step, e.testcase, e.size) == (0, "k", 64) for e in t.events)


def test_split_last_gives_the_end_of_a_wait_to_its_parts_in_order():
    """warm-up 1 s, timed 2 s, interference 1 s out of a 4 s wait; never more than the wait."""
    clock = Clock()
    t = Tracer(clock)
    with t.span("warmup"):
        clock.t += 4.0
    t.split_last("warmup", [("timed", 2 * 10**9), ("interference", 10**9)])
    got = [(e.category, e.start_ns, e.duration_ns) for e in t.events]
    assert got == [
        ("warmup", 0, 10**9),
        ("timed", 10**9, 2 * 10**9),
        ("interference", 3 * 10**9, 10**9),
    ]
    t.split_last("interference", [("timed", 5 * 10**9)])
    assert [e.category for e in t.events] == ["warmup", "timed", "timed"]


def test_an_unknown_category_is_refused_naming_the_allowed_ones():
    """A typo in a span's category is a ValueError listing the categories."""
    with pytest.raises(ValueError, match=r"unknown trace category 'alloc'.*allocation"):
        Tracer(Clock()).begin("alloc")


def test_off_records_nothing_and_reads_no_clock():
    """NO_TRACE: spans are one shared null context; no event, no clock."""
    assert NO_TRACE.span("setup") is NO_TRACE.span("teardown")
    with NO_TRACE.span("setup"):
        NO_TRACE.begin_step(0, "k", None)
        NO_TRACE.end_step()
    assert NO_TRACE.events == [] and not NO_TRACE.on


def test_a_run_without_trace_has_none():
    """Off by default: no trace in the Report, the JSON or its options."""
    report = gpubw.run(["device_local_copy"], sizes=["64MiB"], simulate="h200x2")
    doc = report_to_dict(report)
    assert report.trace is None and "trace" not in doc and "trace" not in doc["options"]


@pytest.fixture(scope="module")
def traced() -> Any:
    return gpubw.run(SELECTION, sizes=["64MiB"], simulate="h200x2", trace=True)


def _by_step(report: Any) -> tuple[dict[int, float], dict[int, dict[str, float]]]:
    walls: dict[int, float] = {}
    cats: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for e in report.trace["events"]:
        if e["category"] == STEP:
            walls[e["step"]] = e["duration_ns"]
        elif e["step"] is not None:
            cats[e["step"]][e["category"]] += e["duration_ns"]
    return walls, cats


def test_the_events_add_up_to_each_steps_wall_within_2_percent(traced):
    """On the simulated clock every step's categories cover its wall time (within 2 %)."""
    assert traced.trace["clock"] == "simulated"
    walls, cats = _by_step(traced)
    assert sorted(walls) == list(range(len(SELECTION)))
    for step, wall in walls.items():
        covered = sum(cats[step].values())
        assert wall > 0 and abs(wall - covered) <= 0.02 * wall, (step, wall, dict(cats[step]))


def test_the_events_never_overlap_and_lie_within_their_step(traced):
    """Apart from the steps' own events, no two events overlap; each lies inside its step."""
    events = [e for e in traced.trace["events"] if e["category"] != STEP]
    events.sort(key=lambda e: e["start_ns"])
    for a, b in itertools.pairwise(events):
        assert a["start_ns"] + a["duration_ns"] <= b["start_ns"], (a, b)
    steps = {e["step"]: e for e in traced.trace["events"] if e["category"] == STEP}
    for e in events:
        if e["step"] is not None:
            s = steps[e["step"]]
            assert s["start_ns"] <= e["start_ns"]
            assert e["start_ns"] + e["duration_ns"] <= s["start_ns"] + s["duration_ns"]
    assert {e["category"] for e in events} <= set(CATEGORIES)


def test_timed_is_samples_x_loops_x_bytes_over_the_figure(traced):
    """A FIRST figure's timed events are its samples' loops x bytes / rate, nothing else."""
    _, cats = _by_step(traced)
    result = traced.testcases[0]
    assert result.key == "host_to_device_memcpy_ce"
    (m,) = result.matrices
    rates = [s for row in m.samples for cell in row if cell for s in cell]
    assert len(rates) == 2 * traced.run_options.samples  # two GPUs' cells
    seconds = sum(traced.run_options.loops * m.bytes_per_copy / r for r in rates)
    assert cats[0]["timed"] / 1e9 == pytest.approx(seconds, rel=1e-6)


def test_every_phase_of_a_copy_testcase_is_there(traced):
    """The host CE testcase: pinning, fill, enqueue, warm-up, timed, verification, teardown;
    its bidirectional twin's longer reverse copies as interference."""
    _, cats = _by_step(traced)
    first = {c for c, ns in cats[0].items() if ns > 0}
    assert {"host_registration", "pattern_fill", "enqueue", "warmup", "timed", "verification",
            "teardown", "allocation", "kernel_load"} <= first  # fmt: skip
    assert cats[1]["interference"] > 0.5 * cats[1]["timed"]
    assert "interference" not in cats[0]


def test_the_traced_report_is_valid_and_reads_back(traced):
    """The trace is in the schema (closed objects checked) and survives a write and read."""
    doc = report_to_dict(traced)
    validate(doc)
    assert doc["options"]["trace"] is True


def test_the_command_writes_the_trace(capsys, tmp_path):
    """gpubw --trace -j -o: the report carries the trace; read back it is the same."""
    code, doc, err = json_run(capsys, tmp_path, "--simulate", "h200x2", "-t", "0", *FAST,
                              "--trace")  # fmt: skip
    assert code == 0, err
    assert doc["trace"]["clock"] == "simulated"
    assert [e["testcase"] for e in doc["trace"]["events"] if e["category"] == STEP] == [
        "host_to_device_memcpy_ce"
    ]
    back = read_report(str(tmp_path / "r.json"))
    assert json.loads(json.dumps(back.trace)) == doc["trace"]


def test_list_refuses_trace(capsys):
    """-l --trace: a usage error naming --trace (nothing is run to trace)."""
    code, _, err = run_cli(capsys, "-l", "--trace")
    assert code == 2 and "--trace does not apply" in err
