"""Tests of the runner: statuses, errors, leaks, interrupts, report metadata (gpubw.runner.core)."""

from __future__ import annotations

import datetime
import os
import signal
import sys
import time
from typing import Any, ClassVar

import attrs
import pytest

import gpubw
from _plugin_fixtures import BROKEN, GOOD, GOOD_DIST, installed
from _run import run
from gpubw import BANDWIDTH, DeviceBuffer, DeviceInfo, Matrix, RunOptions, System
from gpubw.backend.base import Backend
from gpubw.model.errors import CudaError, GpubwError, NoDriverError, SimulationError
from gpubw.model.options import Invocation
from gpubw.model.results import Status
from gpubw.runner.checks import SMALL_BUFFER_NOTE
from gpubw.runner.core import Progress
from gpubw.runner.registry import BUILTIN_DIST, Entry, LoadFailure, Registry, Unresolved

MIB = 1 << 20


def sizes(*values: int) -> RunOptions:
    """RunOptions with these buffer sizes."""
    return RunOptions(buffer_sizes=values)


class FakeBackend(Backend):
    """A backend with N devices that only counts allocations (no copies, no kernels)."""

    name = "fake"
    simulated = True

    def __init__(self, n: int = 2) -> None:
        self.n = n
        self.live: set[int] = set()
        self.next = 0x1000
        self.closed = False

    def versions(self) -> dict[str, Any]:
        return {"cuda_driver": 13000, "driver": "fake-1.0"}

    def devices(self) -> list[DeviceInfo]:
        return [
            DeviceInfo(
                ordinal=i,
                name="Fake GPU",
                uuid=f"GPU-0000000{i}-0000-0000-0000-000000000000",
                pci_bus_id=f"0000:{i + 1:02x}:00.0",
                compute_capability=(9, 0),
                sm_count=132,
                l2_bytes=50 * MIB,
                memory_bytes=2 << 30,
                memory_bus_width_bits=5120,
                memory_clock_khz=2_619_000,
                clock_khz=1_980_000,
                async_engines=2,
                numa_node=0,
            )
            for i in range(self.n)
        ]

    def can_access_peer(self, device: int, peer: int) -> bool:
        return True

    def enable_peer_access(self, device: int, peer: int) -> None:
        pass

    def memory_info(self, device: int) -> tuple[int, int]:
        return (2 << 30, 2 << 30)

    def _alloc(self) -> int:
        self.next += 0x1000
        self.live.add(self.next)
        return self.next

    def alloc_device(self, device: int, nbytes: int) -> int:
        return self._alloc()

    def alloc_host(self, nbytes: int, device: int | None) -> int:
        return self._alloc()

    def free_device(self, pointer: int) -> None:
        self.live.remove(pointer)

    def free_host(self, pointer: int) -> None:
        self.live.remove(pointer)

    def host_write(self, pointer: int, data: bytes) -> None:
        pass

    def host_read(self, pointer: int, nbytes: int) -> bytes:
        return bytes(nbytes)

    def create_stream(self, device: int) -> Any:
        return object()

    def destroy_stream(self, stream: Any) -> None:
        pass

    def create_event(self, device: int) -> Any:
        return object()

    def destroy_event(self, event: Any) -> None:
        pass

    def record_event(self, event: Any, stream: Any) -> None:
        pass

    def wait_event(self, stream: Any, event: Any) -> None:
        pass

    def elapsed_seconds(self, start: Any, end: Any) -> float:
        return 1e-3

    def synchronize(self, stream: Any, timeout_s: float) -> None:
        pass

    def memcpy_async(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        pass

    def load_kernels(self, device: int) -> None:
        pass

    def launch(self, kernel: str, grid: int, block: int, args: Any, stream: Any) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def row(key: str, value: float, n: int = 2) -> Matrix:
    return Matrix(key, f"{key} (GB/s)", BANDWIDTH, ["0"], [str(i) for i in range(n)], [[value] * n])


class Sized(gpubw.Testcase):
    """Reports its size."""

    def run(self, size, loops):
        return [row(self.key, float(size))]


class Fixed(gpubw.Testcase):
    """Ignores the size."""

    fixed_size = True

    def run(self, size, loops):
        return [row(self.key, 1.0)]


class Waives(gpubw.Testcase):
    """Never runs."""

    def filter(self):
        return self.waive("needs a thing this system lacks")


class Leaks(gpubw.Testcase):
    """Allocates two buffers, frees neither, then fails."""

    def run(self, size, loops):
        DeviceBuffer.allocate(self.system, 0, 4096)
        DeviceBuffer.allocate(self.system, 1, 4096)
        raise CudaError("cuLaunchKernel", "CUDA_ERROR_LAUNCH_FAILED")


class CountsLive(gpubw.Testcase):
    """Reports how many buffers are still handed out when it starts."""

    def run(self, size, loops):
        return [row(self.key, float(self.system.live_buffers))]


class SelfSignal(gpubw.Testcase):
    """Sends its own process a signal, then keeps working until stopped."""

    signum = signal.SIGINT

    def run(self, size, loops):
        os.kill(os.getpid(), self.signum)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            time.sleep(0.001)
        raise AssertionError("the signal did not stop the testcase")


class SelfTerm(SelfSignal):
    """Same with SIGTERM."""

    signum = signal.SIGTERM


class Swallows(gpubw.Testcase):
    """Catches every Exception, including the interrupt, and returns normally."""

    def run(self, size, loops):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except Exception:
            pass
        return [row(self.key, 1.0)]


class CarriesOn(gpubw.Testcase):
    """Catches Exception around its work and would carry on after it (records if it did)."""

    carried_on: ClassVar[list[str]] = []

    def run(self, size, loops):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except Exception:
            pass
        CarriesOn.carried_on.append(self.key)
        return [row(self.key, 1.0)]


class SwallowsEverything(gpubw.Testcase):
    """Swallows even BaseException once, then loops until a second signal stops it."""

    def run(self, size, loops):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except BaseException:
            pass
        os.kill(os.getpid(), signal.SIGINT)  # the user presses Ctrl-C again
        time.sleep(5)
        CarriesOn.carried_on.append(self.key)  # not reached: the second signal raised
        return [row(self.key, 1.0)]


class ProcessInterrupt(gpubw.Testcase):
    """Raises KeyboardInterrupt itself (not through the runner's handler)."""

    def run(self, size, loops):
        raise KeyboardInterrupt


def entry(cls: type[gpubw.Testcase], key: str, index: int = 0, plugin: str = "tests") -> Entry:
    cls = type(cls.__name__, (cls,), {"key": key, "__doc__": cls.__doc__})
    return Entry(index, key, plugin, cls=cls)


class Factory:
    """Creates the System (records it, so tests can look at it afterwards)."""

    def __init__(self, n: int = 2) -> None:
        self.n = n
        self.system: System | None = None

    def __call__(self, options: RunOptions) -> System:
        self.system = System(FakeBackend(self.n), options)
        return self.system

    @property
    def backend(self) -> FakeBackend:
        assert self.system is not None
        return self.system.backend  # type: ignore[return-value]


def test_passed_for_each_size_in_order():
    """A sized testcase runs once per size, in order, Passed with its matrices."""
    f = Factory()
    sizes = [64 * MIB, 1 << 30]
    report = run(f, [entry(Sized, "sized", 3, "dist-a")], RunOptions(buffer_sizes=sizes))
    assert [(t.key, t.status, t.size) for t in report.testcases] == [
        ("sized", Status.PASSED, 64 * MIB),
        ("sized", Status.PASSED, 1 << 30),
    ]
    first = report.testcases[0]
    assert first.matrices[0].values == ((64.0 * MIB, 64.0 * MIB),)
    assert (first.index, first.plugin, first.description) == (3, "dist-a", "Reports its size.")
    assert first.duration_s >= 0
    assert report.exit_code == 0


def test_fixed_size_runs_once_without_size():
    """A fixed_size testcase runs once whatever -b says, with size None."""
    report = run(Factory(), [entry(Fixed, "fixed")], sizes(1 * MIB, 2 * MIB, 4 * MIB))
    assert [(t.key, t.status, t.size) for t in report.testcases] == [("fixed", Status.PASSED, None)]


def test_waived_keeps_its_reason():
    """filter() returning False gives Waived with the reason; exit code stays 0."""
    report = run(Factory(), [entry(Waives, "waives")])
    (t,) = report.testcases
    assert (t.status, t.message) == (Status.WAIVED, "needs a thing this system lacks")
    assert report.exit_code == 0


def test_unresolved_and_load_failures():
    """Unresolved -t items are Not Found; selected plugins that failed to load are Errors."""
    fail = LoadFailure("broken", "dist-b", "could not load x:Y: ImportError: nope")
    sel = [
        Unresolved("bogus", "Testcase bogus not found"),
        Entry(7, "broken", "dist-b", failure=fail),
        entry(Sized, "sized"),
    ]
    report = run(Factory(), sel, sizes(MIB, 2 * MIB))
    assert [(t.key, t.status) for t in report.testcases] == [
        ("bogus", Status.NOT_FOUND),
        ("broken", Status.ERROR),
        ("sized", Status.PASSED),
        ("sized", Status.PASSED),
    ]
    assert report.testcases[0].message == "Testcase bogus not found"
    assert "'dist-b'" in report.testcases[1].message
    assert "ImportError: nope" in report.testcases[1].message
    assert report.exit_code == 1


def test_duplicates_are_kept():
    """The same testcase selected twice runs twice, like nvbandwidth."""
    e = entry(Fixed, "fixed")
    report = run(Factory(), [e, e])
    assert [t.key for t in report.testcases] == ["fixed", "fixed"]


def test_error_frees_leaked_buffers_and_keeps_going():
    """After a failing testcase its buffers are freed; later testcases run and pass."""
    f = Factory()
    sel = [entry(Sized, "before"), entry(Leaks, "leaks"), entry(CountsLive, "after")]
    report = run(f, sel, sizes(MIB))
    before, leaks, after = report.testcases
    assert before.status is Status.PASSED and before.matrices
    assert leaks.status is Status.ERROR
    assert leaks.message == "cuLaunchKernel failed: CUDA_ERROR_LAUNCH_FAILED"
    assert after.status is Status.PASSED
    assert after.matrices[0].values[0][0] == 0.0  # nothing leaked into the next testcase
    assert f.backend.live == set() and f.backend.closed


def test_stop_on_error_runs_nothing_after_an_error():
    """stop_on_error: the Error is the last result; Not Found and Waived do not stop the run."""
    sel = [entry(Sized, "before"), Unresolved("bogus", "Testcase bogus not found"),
           entry(Waives, "waived"), entry(Leaks, "leaks"), entry(Sized, "after")]  # fmt: skip
    f = Factory()
    report = run(f, sel, sizes(MIB), stop_on_error=True)
    assert [t.key for t in report.testcases] == ["before", "bogus", "waived", "leaks"]
    assert report.testcases[-1].status is Status.ERROR and report.exit_code == 1
    assert f.backend.live == set() and f.backend.closed


def test_plugin_errors_from_fixture_distribution(tmp_path):
    """filter/run exceptions, garbage results and CudaErrors of real plugins become Errors."""
    with installed(tmp_path, GOOD, BROKEN):
        reg = Registry.discover()
        sel = reg.select(
            [
                "fixture_filter_raises",
                "fixture_run_raises",
                "fixture_garbage",
                "fixture_garbage_list",
                "fixture_cuda_error",
                "fixture_good",
                "fixture_leak",
                "fixture_waived",
            ]
        )
        f = Factory()
        report = run(f, sel, sizes(MIB))
    got = {t.key: (t.status, t.message) for t in report.testcases}
    assert got["fixture_filter_raises"][0] is Status.ERROR
    assert (
        "gpubw-fixture-broken fixture_filter_raises: filter() failed"
        in got["fixture_filter_raises"][1]
    )
    assert "ValueError: fixture: filter exploded" in got["fixture_filter_raises"][1]
    assert got["fixture_run_raises"] == (
        Status.ERROR,
        "gpubw-fixture-broken fixture_run_raises: run() failed: "
        "ZeroDivisionError: fixture: run exploded",
    )
    assert got["fixture_garbage"][0] is Status.ERROR
    assert "returned str 'garbage', not Matrix results" in got["fixture_garbage"][1]
    assert "holding int 42, not Matrix results" in got["fixture_garbage_list"][1]
    assert got["fixture_cuda_error"] == (
        Status.ERROR,
        "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY",
    )
    assert got["fixture_good"][0] is Status.PASSED
    assert got["fixture_leak"] == (
        Status.ERROR,
        "gpubw-fixture-good fixture_leak: run() failed: "
        "RuntimeError: fixture: failed after allocating",
    )
    assert got["fixture_waived"] == (Status.WAIVED, "fixture: never runs here")
    assert report.testcases[5].plugin == GOOD_DIST
    assert f.backend.live == set()


def test_empty_result_is_an_error():
    """run() returning an empty list is an Error, not a silent pass."""

    class Empty(gpubw.Testcase):
        """Returns nothing."""

        def run(self, size, loops):
            return []

    (t,) = run(Factory(), [entry(Empty, "empty")]).testcases
    assert (t.status, t.message) == (Status.ERROR, "tests empty: run() returned no Matrix results")


@pytest.mark.parametrize(
    ("cls", "code", "name"), [(SelfSignal, 130, "SIGINT"), (SelfTerm, 143, "SIGTERM")]
)
def test_signal_interrupts_the_run(cls, code, name):
    """SIGINT/SIGTERM: the testcase is Interrupted, nothing else runs, results so far kept."""
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    f = Factory()
    sel = [entry(Sized, "first"), entry(cls, "stopped"), entry(Sized, "never")]
    report = run(f, sel, sizes(MIB), handle_signals=True)
    assert [(t.key, t.status) for t in report.testcases] == [
        ("first", Status.PASSED),
        ("stopped", Status.INTERRUPTED),
    ]
    assert report.testcases[1].message == f"interrupted by {name}"
    assert report.interrupted and report.signal == name
    assert report.options["signal_exit"] == code and report.options["signal"] == name
    assert report.exit_code == code
    assert f.backend.closed and f.backend.live == set()
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_swallowed_interrupt_still_stops_the_run():
    """A plugin that catches the interrupt does not keep the run going."""
    report = run(
        Factory(),
        [entry(Swallows, "swallows"), entry(Sized, "never")],
        sizes(MIB),
        handle_signals=True,
    )
    assert [(t.key, t.status) for t in report.testcases] == [("swallows", Status.INTERRUPTED)]
    assert report.exit_code == 130


def test_interrupt_is_not_swallowed_by_except_exception():
    """The interrupt is not an Exception: a plugin's `except Exception` cannot catch it."""
    CarriesOn.carried_on.clear()
    report = run(Factory(), [entry(CarriesOn, "carries_on")], sizes(MIB), handle_signals=True)
    assert [t.status for t in report.testcases] == [Status.INTERRUPTED]
    assert CarriesOn.carried_on == []


def test_second_signal_stops_a_plugin_that_swallowed_the_first():
    """A second Ctrl-C raises again while testcases run, so a stubborn plugin still stops."""
    CarriesOn.carried_on.clear()
    report = run(
        Factory(), [entry(SwallowsEverything, "stubborn")], sizes(MIB), handle_signals=True
    )
    assert [(t.key, t.status) for t in report.testcases] == [("stubborn", Status.INTERRUPTED)]
    assert report.exit_code == 130
    assert CarriesOn.carried_on == []


def test_system_closed_when_something_escapes():
    """Without signal handling a KeyboardInterrupt (Ctrl-C) propagates; the System is closed."""
    f = Factory()
    with pytest.raises(KeyboardInterrupt):
        run(f, [entry(ProcessInterrupt, "kbd"), entry(Sized, "never")], sizes(MIB))
    assert f.backend.closed


class ProcessExit(gpubw.Testcase):
    """Calls sys.exit() in filter()."""

    def filter(self):
        sys.exit("bye")


def test_base_exceptions_from_a_plugin_are_its_error():
    """With signal handling, a plugin's own KeyboardInterrupt or SystemExit is its Error."""
    # No signal arrived, so the run goes on; before 2026-11-30 they ended the run.
    f = Factory()
    sel = [entry(ProcessInterrupt, "kbd"), entry(ProcessExit, "exits"), entry(Sized, "after")]
    report = run(f, sel, sizes(MIB), handle_signals=True)
    assert [(t.key, t.status, t.message) for t in report.testcases] == [
        ("kbd", Status.ERROR, "tests kbd: run() failed: KeyboardInterrupt"),
        ("exits", Status.ERROR, "tests exits: filter() failed: SystemExit: bye"),
        ("after", Status.PASSED, ""),
    ]
    assert report.exit_code == 1 and not report.interrupted
    assert f.backend.closed and f.backend.live == set()


def test_signal_outside_plugin_code_is_recorded_and_stops_the_run():
    """A signal while gpubw's own code runs (here: the progress display) raises nothing
    there: the testcase about to run is Interrupted, nothing else runs."""
    # Before 2026-11-30 it raised out of the progress callback and the step was lost.
    events: list[str] = []

    def progress(event: Progress) -> None:
        events.append(event.phase)
        if event.phase == "start":
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # the handler runs here, and must not raise

    f = Factory()
    report = run(
        f,
        [entry(Sized, "first"), entry(Sized, "never")],
        sizes(MIB),
        progress=progress,
        handle_signals=True,
    )
    assert [(t.key, t.status, t.message) for t in report.testcases] == [
        ("first", Status.INTERRUPTED, "interrupted by SIGINT")
    ]
    assert events == ["start", "end"] and report.exit_code == 130
    assert f.backend.closed and f.backend.live == set()


def test_signal_before_the_run_gives_an_interrupted_report_without_opening_the_system():
    """A signal recorded before run() starts (CLI start-up): an interrupted Report with no
    testcases; the System is never opened."""
    from gpubw.runner.interrupts import SignalGuard

    guard = SignalGuard()
    guard.install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.02)
        f = Factory()
        report = run(f, [entry(Sized, "never")], sizes(MIB), handle_signals=True)
    finally:
        guard.uninstall()
    assert report.testcases == () and report.signal == "SIGTERM" and report.exit_code == 143
    assert f.system is None
    assert guard.snapshot is not None and guard.snapshot() is report


def test_a_signal_while_the_system_opens_stays_in_a_could_not_start_report():
    """SIGTERM while open_system runs, which then fails: the report says both (the error and
    the signal) and its exit code is 143, not the start error's 1."""
    from gpubw.runner.interrupts import SignalGuard

    def failing(options: RunOptions) -> System:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.02)
        raise GpubwError("no context")

    guard = SignalGuard()
    guard.install()
    try:
        report = run(failing, [entry(Sized, "never")], sizes(MIB), handle_signals=True)
    finally:
        guard.uninstall()
    assert report.error == "could not start: no context" and report.signal == "SIGTERM"
    assert report.exit_code == 143 and guard.report_final


def test_the_finished_report_is_final_for_the_guard():
    """run() under an installed guard hands it the complete report: the watchdog's snapshot
    is that report and a signal from then on is absorbed (report_final)."""
    from gpubw.runner.interrupts import SignalGuard

    guard = SignalGuard()
    guard.install()
    try:
        assert not guard.report_final
        report = run(Factory(), [entry(Sized, "only")], sizes(MIB), handle_signals=True)
    finally:
        guard.uninstall()
    assert guard.report_final and guard.snapshot is not None and guard.snapshot() is report
    assert report.exit_code == 0


class Chatty(gpubw.Testcase):
    """Prints, then passes."""

    def run(self, size, loops):
        print("chatty says hello")
        os.write(1, b"chatty on fd 1\n")
        return [row(self.key, 1.0)]


def test_plugin_output_is_kept_on_its_result(capfd):
    """What a testcase prints goes to its result's output, not to stdout."""
    report = run(Factory(), [entry(Chatty, "chatty"), entry(Sized, "quiet")], sizes(MIB))
    chatty, quiet = report.testcases
    assert chatty.status is Status.PASSED
    assert chatty.output == "chatty says hello\nchatty on fd 1\n"
    assert quiet.output == ""
    assert capfd.readouterr().out == ""


def test_progress_events():
    """The progress hook sees a start and an end per step, with counts and results."""
    events: list[Progress] = []
    sel = [entry(Sized, "a"), Unresolved("x", "Testcase x not found"), entry(Fixed, "b")]
    run(Factory(), sel, sizes(MIB, 2 * MIB), progress=events.append)
    assert [(e.phase, e.done, e.total, e.key, e.size) for e in events] == [
        ("start", 0, 4, "a", MIB),
        ("end", 1, 4, "a", MIB),
        ("start", 1, 4, "a", 2 * MIB),
        ("end", 2, 4, "a", 2 * MIB),
        ("start", 2, 4, "x", None),
        ("end", 3, 4, "x", None),
        ("start", 3, 4, "b", None),
        ("end", 4, 4, "b", None),
    ]
    assert events[1].result is not None and events[1].result.status is Status.PASSED


def test_progress_events_carry_the_header():
    """Every event carries the run's header: the Report so far, devices and options, no
    testcases (what a streaming writer prints first); the final Report agrees with it."""
    events: list[Progress] = []
    rep = run(Factory(), [entry(Sized, "a")], sizes(MIB, 2 * MIB), progress=events.append)
    headers = {id(e.header) for e in events}
    assert len(headers) == 1
    header = events[0].header
    assert header is not None and header.testcases == ()
    assert header.devices == rep.devices and header.devices
    assert header.run_options == rep.run_options and header.started == rep.started
    assert header.warnings == rep.warnings and header.host == rep.host


class _Ordered(FakeBackend):
    """Records the order of versions() and memory_info(); memory_info raises ``fail``."""

    def __init__(self, fail: BaseException | None = None) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.fail = fail

    def versions(self) -> dict[str, Any]:
        self.calls.append("versions")
        return super().versions()

    def memory_info(self, device: int) -> tuple[int, int]:
        self.calls.append("memory_info")
        if self.fail is not None:
            raise self.fail
        return super().memory_info(device)


def test_versions_before_the_sizes_check_and_a_failed_check_closes():
    """The versions are read before the sizes check (which waits for every device's
    context), and a check that fails in any way closes the System."""
    made: list[_Ordered] = []

    def opener(fail: BaseException | None):
        def open_system(options: RunOptions) -> System:
            made.append(_Ordered(fail))
            return System(made[-1], options)

        return open_system

    report = run(opener(None), [entry(Sized, "a")], RunOptions(buffer_sizes=[MIB]))
    assert report.testcases[0].status == Status.PASSED
    assert made[0].calls[:2] == ["versions", "memory_info"] and made[0].closed
    with pytest.raises(RuntimeError, match="driver gone"):
        run(opener(RuntimeError("driver gone")), [entry(Sized, "a")], RunOptions())
    assert made[1].closed


class _BadUnit(gpubw.Testcase):
    """Returns a matrix whose unit the schema does not know; NAN=1 makes a cell NaN."""

    nan = False

    def run(self, size, loops):
        value = float("nan") if self.nan else 1.0
        return [attrs.evolve(row("m", value), unit="furlongs/fortnight")]


class _NaN(_BadUnit):
    """Returns a NaN cell."""

    nan = True


def test_builtin_matrices_have_their_values_checked_and_plugins_their_structure_too():
    """A plugin's matrix is checked against the schema's matrix definition; gpubw's own
    (built by the same code every run, proven by test_every_builtin_matrix_matches_the_schema)
    only for its values: a NaN is an Error for both."""
    report = run(
        Factory(),
        [
            entry(_BadUnit, "plugin_unit"),
            entry(_BadUnit, "own_unit", plugin=BUILTIN_DIST),
            entry(_NaN, "own_nan", plugin=BUILTIN_DIST),
        ],
        RunOptions(),
    )
    got = {t.key: (t.status, t.message) for t in report.testcases}
    assert got["plugin_unit"][0] == Status.ERROR and "furlongs" in got["plugin_unit"][1]
    assert got["own_unit"] == (Status.PASSED, "")
    assert got["own_nan"][0] == Status.ERROR and "nan" in got["own_nan"][1]


@pytest.mark.parametrize("preset", ["h200x2", "pcie4"])
def test_every_builtin_matrix_matches_the_schema(tmp_path, preset):
    """Every built-in testcase's matrices, from a whole default run on a simulated system,
    pass the full matrix check (values and structure) that the runner leaves to plugins."""
    from gpubw.cli import command as cli
    from gpubw.model.report_io import load_report, matrix_errors, report_from_dict

    out = tmp_path / "r.json"
    args = ["--simulate", preset, "-b", "1MiB", "-i", "1", "--loop-count", "2", "-q", "-j"]
    assert cli.main([*args, "-o", str(out)]) in (0, 1)
    report = report_from_dict(load_report(out))
    results = [t for t in report.testcases if t.status == Status.PASSED]
    assert len(results) >= 10
    assert [(t.key, e) for t in results for m in t.matrices for e in matrix_errors(m)] == []


def test_report_metadata():
    """The report carries tool, backend, versions, devices, options, times and host."""
    report = run(
        Factory(3),
        [entry(Sized, "a")],
        RunOptions(samples=5, loops=4, statistic="mean", buffer_sizes=[512 * MIB]),
        system_name="fake3",
        invocation=Invocation(format="json", testcase=["a"]),
    )
    assert (report.tool, report.tool_version) == ("gpubw", gpubw.__version__)
    assert (report.backend, report.simulated, report.system_name) == ("fake", True, "fake3")
    assert report.host
    v = report.versions
    assert v["cuda_driver"] == 13000 and v["driver"] == "fake-1.0"
    assert {"python", "cuda_bindings", "cuda_core"} <= set(v)
    assert [d["ordinal"] for d in report.devices] == [0, 1, 2]
    d0 = report.devices[0]
    assert d0["name"] == "Fake GPU" and d0["sm_count"] == 132 and d0["numa_node"] == 0
    assert d0["pci_bus_id"] == "0000:01:00.0" and d0["uuid"].startswith("GPU-")
    assert d0["nominal_memory_bandwidth"] == pytest.approx(5120 / 8 * 2_619_000e3 * 2)
    o = report.options
    assert o["buffer_sizes"] == [512 * MIB] and o["samples"] == 5 and o["loops"] == 4
    assert o["statistic"] == "mean" and o["format"] == "json" and o["testcase"] == ["a"]
    assert report.run_options.loops == 4 and report.invocation is not None
    assert report.signal is None and "signal" not in o and "signal_exit" not in o
    start = datetime.datetime.fromisoformat(report.started)
    end = datetime.datetime.fromisoformat(report.finished)
    assert start.tzinfo is not None and start <= end
    assert report.duration_s >= 0
    assert report.warnings == ()


def test_package_versions_are_read_once_a_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA Python packages' versions are read from their metadata once a process, not
    by every rank of a simulated rack at every report (~1 ms each)."""
    import importlib.metadata

    from gpubw.runner import state

    reads: list[str] = []
    real = importlib.metadata.version

    def version(name: str) -> str:
        reads.append(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    state._dist_version.cache_clear()
    try:
        first = [state.software_versions({}) for _ in range(3)]
    finally:
        state._dist_version.cache_clear()
    assert first[0] == first[1] == first[2]
    assert sorted(reads) == ["cuda-bindings", "cuda-core"]


def test_small_buffer_note():
    """nvbandwidth's NOTE is recorded when a size is under 512 MiB, not for fixed-size runs."""
    assert run(Factory(), [entry(Sized, "a")], sizes(64 * MIB)).warnings == (SMALL_BUFFER_NOTE,)
    assert run(Factory(), [entry(Fixed, "f")], sizes(64 * MIB)).warnings == ()
    assert "512 MiB" in SMALL_BUFFER_NOTE


def test_system_that_cannot_start():
    """A failure creating the System becomes the report's error; no driver is raised."""

    def broken(options: RunOptions) -> System:
        raise SimulationError("model file has no devices")

    report = run(broken, [entry(Sized, "a")])
    assert report.error == "could not start: model file has no devices"
    assert report.testcases == () and report.exit_code == 1

    def no_driver(options: RunOptions) -> System:
        raise NoDriverError("no libcuda")

    with pytest.raises(NoDriverError):
        run(no_driver, [entry(Sized, "a")])


class SeesOptions(gpubw.Testcase):
    """Records the options, loops and SIGINT handler it runs with."""

    seen: ClassVar[list[Any]] = []

    def run(self, size, loops):
        SeesOptions.seen.append((self.system.options, loops, signal.getsignal(signal.SIGINT)))
        return [row(self.key, float(size))]


def test_options_travel_through_the_system_only():
    """The one RunOptions given reaches the System and the testcase's loops; no handlers by
    default."""
    SeesOptions.seen.clear()
    options = RunOptions(loops=7, samples=2, buffer_sizes=[MIB, 2 * MIB])
    handler = signal.getsignal(signal.SIGINT)
    report = run(Factory(), [entry(SeesOptions, "sees")], options)
    assert [t.size for t in report.testcases] == [MIB, 2 * MIB]
    assert SeesOptions.seen == [(options, 7, handler), (options, 7, handler)]
    assert report.run_options is options and report.invocation is None
    assert "testcase" not in report.options and report.options["loops"] == 7


def test_handle_signals_installs_and_restores():
    """handle_signals=True installs gpubw's handler for the run only."""
    SeesOptions.seen.clear()
    before = signal.getsignal(signal.SIGINT)
    run(Factory(), [entry(SeesOptions, "sees")], sizes(MIB), handle_signals=True)
    ((_, _, during),) = SeesOptions.seen
    assert during is not before and callable(during)
    assert signal.getsignal(signal.SIGINT) == before


def test_opener_must_use_the_options_it_is_given():
    """A System opened with other options than the run's is refused (and closed)."""
    made: list[System] = []

    def stubborn(options: RunOptions) -> System:
        made.append(System(FakeBackend(), RunOptions(loops=2)))
        return made[0]

    with pytest.raises(ValueError, match="open_system must open the System with the options"):
        run(stubborn, [entry(Sized, "a")], sizes(MIB))
    assert made[0].closed


# -- listener plugins (entry-point group gpubw.listeners) ---------------------------------------
LISTENER = "gpubw_fixture_listener"
MISSPELT = "gpubw_fixture_misspelt"


def test_a_listener_plugin_receives_the_events_of_a_run(tmp_path, capsys):
    """An installed run listener is constructed for every run, the API's and the command's,
    and told each event in order; the report is as without it."""
    from gpubw.cli import command as cli

    with installed(tmp_path, LISTENER):
        import gpubw_fixture_listener as plugin

        report = gpubw.run(["device_local_copy"], sizes=[MIB], simulate="h200x2")
        assert plugin.EVENTS == [
            ("run_started", "h200x2"),
            ("testcase_started", ("device_local_copy", MIB)),
            ("testcase_finished", "Passed"),
            ("run_finished", 0),
        ]
        assert report.exit_code == 0
        plugin.EVENTS.clear()
        argv = ["-t", "device_local_copy", "-b", "1", "--simulate", "h200x2", "-j", "-q"]
        assert cli.main(argv) == 0
        assert [hook for hook, _ in plugin.EVENTS] == [
            "run_started",
            "testcase_started",
            "testcase_finished",
            "run_finished",
        ]
    assert capsys.readouterr().err == ""


def test_a_misspelt_hook_is_refused_at_load(tmp_path, capsys):
    """A listener's public method that is no hook of RunListener (run_finshed) is a
    PluginError as the plugin is loaded, naming the method and the hooks; the command says
    it and exits 1 before anything runs."""
    from gpubw.cli import command as cli
    from gpubw.model.errors import PluginError

    hooks = "run_started, testcase_started, testcase_finished, run_finished, interrupted"
    with installed(tmp_path, MISSPELT):
        with pytest.raises(PluginError, match=r"Misspelt\.run_finshed is no hook") as caught:
            gpubw.run(["device_local_copy"], sizes=[MIB], simulate="h200x2")
        assert f"the hooks are {hooks}" in str(caught.value)
        assert "'fixture_misspelt' from 'gpubw-fixture-misspelt'" in str(caught.value)
        assert cli.main(["-t", "0", "-b", "1", "--simulate", "h200x2", "-q"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("gpubw: error: listener 'fixture_misspelt'")


def test_check_listener_allows_hooks_and_private_helpers_only():
    """The hooks and _private helpers pass; any other public method, a static one too, and a
    class that is no RunListener are refused."""
    from gpubw.model.errors import PluginError
    from gpubw.model.events import RunListener
    from gpubw.runner.listener_plugins import HOOKS, check_listener

    class Fine(RunListener):
        def testcase_started(self, step: Any) -> None:
            self._note(step)

        def _note(self, step: Any) -> None:
            pass

    class Extra(Fine):
        @staticmethod
        def summary() -> str:
            return ""

    assert HOOKS[0] == "run_started" and "interrupted" in HOOKS
    assert check_listener(Fine) is Fine
    with pytest.raises(PluginError, match=r"Extra\.summary is no hook"):
        check_listener(Extra)
    with pytest.raises(PluginError, match=r"not a subclass of gpubw\.model\.events\.RunListener"):
        check_listener(object)
