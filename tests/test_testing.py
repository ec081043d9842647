"""gpubw.testing, the plugin author's kit: what it accepts (gpubw's own testcases and
writers) and what it catches (the mistakes of the old README example)."""

from __future__ import annotations

from typing import Any, TextIO

import attrs
import pytest

from gpubw.model.results import COUNTED_ONCE, Report, Status
from gpubw.runner.writer_registry import Writers
from gpubw.testing import (
    SIMULATE,
    check_matrix,
    check_testcase,
    check_writer,
    run_testcase,
)


@pytest.fixture(scope="module")
def local() -> Report:
    """device_local_copy on the kit's simulated system."""
    return run_testcase("device_local_copy")


def test_gpubw_own_testcases_pass(local: Report, gpubw_run_testcase: Any) -> None:
    """A built-in local, host and peer testcase pass the kit (the fixture runs on
    gpubw_simulate's system)."""
    assert [t.key for t in check_testcase(local)] == ["device_local_copy"]
    assert local.system_name == SIMULATE
    check_testcase(gpubw_run_testcase("host_to_device_memcpy_ce"))
    check_testcase(gpubw_run_testcase("device_to_device_memcpy_read_ce", samples=2))


def _the_old_example(local: Report, **changes: Any) -> Any:
    """device_local_copy's counted-once matrix doubled, as the README's example did."""
    once = local.testcases[0].matrices[0]
    assert once.bytes_counting == COUNTED_ONCE
    doubled = attrs.evolve(once, values=[[2 * v for v in row] for row in once.values])
    return attrs.evolve(doubled, **changes)


def test_it_catches_a_matrix_without_samples(local: Report) -> None:
    """A figure with no samples behind it (no -v, stdev, cv, noise rule) fails."""
    with pytest.raises(AssertionError, match="no samples"):
        check_matrix(_the_old_example(local, samples=()), local)


def test_it_catches_a_figure_that_is_not_its_samples_statistic(local: Report) -> None:
    """Doubling the figure but not its samples fails: the figure is not their median."""
    with pytest.raises(AssertionError, match="is not the median of its samples"):
        check_matrix(_the_old_example(local), local)


def test_it_catches_read_write_counted_once(local: Report) -> None:
    """A read + write figure declared as counted once passes half the nominal bandwidth."""
    once = local.testcases[0].matrices[0]
    samples = [[None if s is None else tuple(2 * x for x in s) for s in r] for r in once.samples]
    with pytest.raises(AssertionError, match="count read \\+ write as COUNTED_READ_WRITE"):
        check_matrix(_the_old_example(local, samples=samples), local)
    read_write = local.testcases[0].matrices[1]
    check_matrix(read_write, local)  # the same figures, declared read + write


def test_it_names_a_result_that_did_not_pass(local: Report) -> None:
    """An Error or Waived result fails the check with its status and message."""
    broken = attrs.evolve(local.testcases[0], status=Status.ERROR, message="boom", matrices=())
    with pytest.raises(AssertionError, match="device_local_copy at 67108864 bytes: Error: boom"):
        check_testcase(attrs.evolve(local, testcases=[broken]))
    with pytest.raises(AssertionError, match="no result of 'nope'"):
        check_testcase(local, "nope")


@pytest.mark.parametrize("name", ["text", "json", "csv", "openmetrics"])
def test_gpubw_own_writers_pass(name: str, gpubw_example_report: Report) -> None:
    """Every built-in writer writes the example report (a judged run); text and CSV, which
    also stream, write the same either way."""
    assert gpubw_example_report.verdicts or gpubw_example_report.expectations is not None
    assert check_writer(name, gpubw_example_report)
    assert name in Writers.discover().names


class _Inconsistent:
    """A writer whose streamed text is not its whole text."""

    def write(self, report: Report, stream: TextIO) -> None:
        stream.write("whole\n")

    def begin(self, header: Report, stream: TextIO) -> None:
        stream.write("begin\n")

    def testcase(self, result: Any, stream: TextIO) -> None:
        pass

    def end(self, report: Report, stream: TextIO) -> None:
        pass


def test_it_catches_a_writer_that_streams_other_text(gpubw_example_report: Report) -> None:
    """A writer with write() and begin/testcase/end must write the same either way."""
    with pytest.raises(AssertionError, match="other text than write"):
        check_writer(_Inconsistent, gpubw_example_report)
