"""A plugin author's kit: run a testcase or writer plugin on a simulated system and check
what it makes, without a GPU.

For a testcase (an installed ``gpubw.testcases`` entry point)::

    from gpubw.testing import check_testcase, run_testcase

    report = run_testcase("local_read_write", simulate="h200x2")
    check_testcase(report)  # an AssertionError says what is wrong

:func:`check_testcase` holds each of the testcase's results to what gpubw's own testcases
give: it ran (Passed, not Error or Waived); every matrix has a description, a kind, a unit
and a way of counting bytes that agree; every applicable cell has its raw ``samples`` (one
per ``-i`` sample: ``gpubw -v`` prints them, the report has their stdev and cv, and the noise
rule can judge the cell), and the cell's figure is their median (or mean, ``-m``); figures
within one device's memory are possible for the bytes counting the matrix declares (a copy
counted once moves each byte twice through that memory, so it cannot pass half the
device's nominal memory bandwidth; read + write cannot pass all of it); and the report is
one gpubw writes (it matches the report schema).

For a writer (an installed ``gpubw.writers`` entry point, or its class)::

    from gpubw.testing import check_writer

    text = check_writer("my_format")  # written from a simulated run's report

:func:`check_writer` constructs the writer as gpubw does (:func:`gpubw.writers.make_writer`,
with option values), writes a report whole and, for a streaming writer, call by call, and
checks that both give the same text. :func:`example_report` is that report.

As a pytest plugin (loaded by pytest wherever gpubw is installed: the ``pytest11`` entry
point), it gives the fixtures ``gpubw_simulate`` (the system: ``"h200x2"``; override the
fixture for another), ``gpubw_run_testcase`` (:func:`run_testcase` on that system) and
``gpubw_example_report`` (:func:`example_report`, once per session). Nothing here is
imported at pytest's start but pytest: gpubw is imported when a fixture or function is used.
"""

from __future__ import annotations

import io
import math
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

#: the simulated system plugins are tried on (two H200 with NVLink: host, peer and local
#: copies all apply)
SIMULATE = "h200x2"
#: a size small enough for a quick simulated run, large enough to be past the L2 cache
SIZE = "64MiB"
#: how close a cell's figure must be to its samples' statistic (relative)
REL = 1e-9


def run_testcase(
    key: str,
    *,
    simulate: str = SIMULATE,
    sizes: Sequence[str | int] = (SIZE,),
    samples: int = 3,
    loops: int = 4,
    **options: Any,
) -> Any:
    """Run the installed testcase ``key`` on a simulated system, as ``gpubw -t KEY
    --simulate SIMULATE`` would (the same registry, plugin capture and matrix checks), and
    return the :class:`gpubw.Report`. ``options`` are :class:`gpubw.RunOptions` fields."""
    from gpubw.api import run

    return run([key], sizes=list(sizes), samples=samples, loops=loops, simulate=simulate, **options)


def check_testcase(report: Any, key: str | None = None) -> list[Any]:
    """Assert that every result of testcase ``key`` (default: every testcase of the report)
    passed and holds matrices gpubw can use (see the module's docstring); return those
    results."""
    from gpubw.api import report_to_json

    results = [t for t in report.testcases if key is None or t.key == key]
    assert results, f"the report has no result of {key!r}"
    for t in results:
        where = f"{t.key}" + (f" at {t.size} bytes" if t.size is not None else "")
        assert t.status.value == "Passed", f"{where}: {t.status.value}: {t.message}"
        assert t.matrices, f"{where}: passed with no matrix"
        for m in t.matrices:
            check_matrix(m, report, f"{where}, matrix {m.key}")
    report_to_json(report)  # GpubwError if it does not match the schema
    return results


def check_matrix(m: Any, report: Any, where: str = "") -> None:
    """Assert that one matrix is sound: shape, kind, unit and counting agree, samples
    behind every applicable cell, figures possible for the counting (see the module)."""
    from gpubw.model.results import COUNTED_NONE, KIND_LATENCY, LATENCY

    where = where or m.key
    assert m.description.strip(), f"{where}: no description"
    assert len(m.values) == len(m.row_labels), f"{where}: {len(m.values)} rows of values"
    assert all(len(row) == len(m.column_labels) for row in m.values), f"{where}: ragged values"
    latency = m.kind == KIND_LATENCY
    assert (m.unit == LATENCY) == latency, f"{where}: kind {m.kind} with unit {m.unit}"
    assert (m.bytes_counting == COUNTED_NONE) == latency, (
        f"{where}: a {m.kind} matrix counted {m.bytes_counting!r}"
    )
    check_samples(m, report.run_options, where)
    if not latency:
        check_bytes_counting(m, report.devices, where)


def _applicable(m: Any) -> Iterator[tuple[int, int, float]]:
    for r, row in enumerate(m.values):
        for c, value in enumerate(row):
            if value is not None:
                yield r, c, value


def check_samples(m: Any, run_options: Any, where: str = "") -> None:
    """Assert that every applicable cell has its samples (as many as the run took), that
    the figure is their statistic, and that they vary (stdev and cv can be computed)."""
    where = where or m.key
    assert m.samples, (
        f"{where}: no samples (pass samples=[[...]] to Matrix: gpubw -v, stdev, cv and the "
        "noise rule need them)"
    )
    spread = m.cell_stats()
    for r, c, value in _applicable(m):
        cell = m.samples[r][c]
        label = f"{where} [{m.row_labels[r]}][{m.column_labels[c]}]"
        assert cell, f"{label}: no samples behind the figure"
        assert len(cell) == run_options.samples, (
            f"{label}: {len(cell)} samples, the run took {run_options.samples}"
        )
        expected = _statistic(cell, m.statistic)
        if expected is not None:
            assert math.isclose(value, expected, rel_tol=REL), (
                f"{label}: the figure {value:.6g} is not the {m.statistic} of its samples "
                f"({expected:.6g}): scale the samples as the figure"
            )
        assert spread[r][c].stdev is not None, f"{label}: no spread"


def _statistic(samples: Sequence[float], name: str) -> float | None:
    """The median or mean of ``samples`` (None for another statistic)."""
    functions: Mapping[str, Callable[[Sequence[float]], float]] = {
        "median": statistics.median,
        "mean": statistics.fmean,
    }
    f = functions.get(name)
    return None if f is None else float(f(samples))


def check_bytes_counting(m: Any, devices: Sequence[Mapping[str, Any]], where: str = "") -> None:
    """Assert that the figures of cells inside one device's memory are possible for the
    matrix's bytes counting: counted once, at most half the device's nominal memory
    bandwidth (each byte copied is read and written there); read + write, at most all."""
    from gpubw.model.results import COUNTED_ONCE
    from gpubw.model.verdicts import DEVICE, LOCAL, cell_places

    where = where or m.key
    share = 0.5 if m.bytes_counting == COUNTED_ONCE else 1.0
    for place in cell_places(m, devices):
        if place.link not in (LOCAL, DEVICE) or place.destination.index is None:
            continue
        nominal = _nominal(devices, place.destination.index)
        value = m.values[place.row][place.column]
        if nominal and value is not None:
            assert value <= share * nominal, (
                f"{where} [{m.row_labels[place.row]}][{m.column_labels[place.column]}]: "
                f"{value / 1e9:.1f} GB/s inside GPU {place.destination.index}, more than "
                f"{share:g} x its nominal {nominal / 1e9:.1f} GB/s allows for bytes counted "
                f"{m.bytes_counting!r}: count read + write as COUNTED_READ_WRITE"
            )


def _nominal(devices: Sequence[Mapping[str, Any]], index: int) -> float | None:
    d = next((d for d in devices if d.get("ordinal") == index), None)
    return None if d is None else d.get("nominal_memory_bandwidth")


def example_report(simulate: str = SIMULATE) -> Any:
    """A small simulated run for writer tests: host, peer, bidirectional, latency and local
    testcases (the built-ins 0, 4, 6, 33 and 34), 3 samples each, judged by the outlier and
    noise rules, so that it carries verdicts."""
    from gpubw.acceptance.node import judge
    from gpubw.api import run

    report = run([0, 4, 6, 33, 34], sizes=["4MiB"], samples=3, loops=2, simulate=simulate)
    return judge(report, None, 90.0, 0.10)


def check_writer(
    writer: Any,
    report: Any = None,
    *,
    verbose: bool = False,
    settings: Mapping[str, str | None] | None = None,
) -> str:
    """Write ``report`` (default: :func:`example_report`) with ``writer`` (an installed
    writer's name, or its class) as gpubw does, and return the text. Asserts that it is
    text; a streaming writer's calls (begin, testcase, end) must give what ``write`` gives
    when it has both."""
    from gpubw.runner.writer_registry import writer as installed
    from gpubw.writers import (
        ReportWriter,
        StreamingWriter,
        make_writer,
        write_streamed,
        write_whole,
    )

    cls = installed(writer) if isinstance(writer, str) else writer
    report = example_report() if report is None else report
    made = make_writer(cls, verbose=verbose, settings=settings)
    whole = io.StringIO()
    write_whole(made, report, whole)
    text = whole.getvalue()
    assert isinstance(text, str) and text, f"{cls.__name__} wrote nothing"
    if isinstance(made, StreamingWriter) and isinstance(made, ReportWriter):
        streamed = io.StringIO()
        write_streamed(make_writer(cls, verbose=verbose, settings=settings), report, streamed)
        assert streamed.getvalue() == text, (
            f"{cls.__name__}: begin/testcase/end write other text than write()"
        )
    return text


# -- the pytest plugin -------------------------------------------------------------------
try:
    import pytest
except ImportError:  # used without pytest: the functions above still work
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture
    def gpubw_simulate() -> str:
        """The simulated system the kit's fixtures run on (override it for another)."""
        return SIMULATE

    @pytest.fixture
    def gpubw_run_testcase(gpubw_simulate: str) -> Callable[..., Any]:
        """:func:`run_testcase` on ``gpubw_simulate``'s system."""

        def run(key: str, **kwargs: Any) -> Any:
            kwargs.setdefault("simulate", gpubw_simulate)
            return run_testcase(key, **kwargs)

        return run

    @pytest.fixture(scope="session")
    def gpubw_example_report() -> Any:
        """:func:`example_report`, made once per session."""
        return example_report()


__all__ = [
    "SIMULATE",
    "check_bytes_counting",
    "check_matrix",
    "check_samples",
    "check_testcase",
    "check_writer",
    "example_report",
    "run_testcase",
]
