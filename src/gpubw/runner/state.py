"""The state of one run as it goes: what the report will say about the system, the
warnings, the results so far and the step running now, and the Report made of it at any
moment (the final one, a partial one after each step, the signal watchdog's snapshot).

Cut out of :mod:`gpubw.runner.core` along the seam between running the steps and keeping
what they produced: the loop appends, this module turns it into Reports.
"""

from __future__ import annotations

import datetime
import functools
import importlib.metadata
import platform
import signal
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from gpubw.model.results import Report, Status, TestcaseResult
from gpubw.runner.checks import small_buffer_warnings
from gpubw.runner.interrupts import Signals
from gpubw.runner.spec import RunSpec
from gpubw.version import __version__


def now() -> str:
    """This moment, as the report's ``started`` and ``finished`` say it."""
    return datetime.datetime.now().astimezone().isoformat(timespec="milliseconds")


@functools.cache
def _dist_version(name: str) -> str | None:
    """An installed distribution's version (None: not installed), read once a process: each
    rank of a simulated rack asks twice, and reading the metadata costs ~1 ms."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def software_versions(backend_versions: dict[str, Any]) -> dict[str, Any]:
    """The backend's versions plus Python's and the CUDA Python packages' (read from their
    metadata, without importing them)."""
    versions = dict(backend_versions)
    versions.setdefault("python", platform.python_version())
    versions.setdefault("cuda_bindings", _dist_version("cuda-bindings"))
    versions.setdefault("cuda_core", _dist_version("cuda-core"))
    return versions


@attrs.define
class RunState:
    """What a run has so far, readable from the signal watchdog's thread."""

    meta: dict[str, Any]
    warnings: list[str]
    started: str
    t0: float
    results: list[TestcaseResult] = attrs.field(factory=list)
    #: the step running now: (its TestcaseResult fields, its start time, its place in
    #: ``results``), or None
    current: tuple[dict[str, Any], float, int] | None = None
    #: the Report's world, hosts and host fields of a run of several ranks (once known)
    rank_fields: Callable[[], dict[str, Any]] = dict

    def fields(self) -> dict[str, Any]:
        """The Report's fields but its testcases and warnings (what the run is on)."""
        return {**self.meta, **self.rank_fields()}

    def so_far(self, total: int) -> Report:
        """The Report with every result so far, saying that it is partial: its ``error``
        names what is missing (so its exit code is never a success), ``started`` is the
        run's start and ``finished`` the moment of this snapshot."""
        done = len(self.results)
        missing = (
            f"incomplete report: written after {done} of {total} testcase steps; the run did "
            "not finish writing it (a rank lost, or the run killed): "
            f"{total - done} step(s) missing"
        )
        return Report(
            testcases=list(self.results),
            warnings=list(self.warnings),
            started=self.started,
            finished=now(),
            duration_s=time.perf_counter() - self.t0,
            error=missing,
            **self.fields(),
        )

    def report(self, signum: int | None, extra_warnings: Sequence[str] = ()) -> Report:
        return Report(
            testcases=list(self.results),
            warnings=[*self.warnings, *extra_warnings],
            signal=None if signum is None else signal.Signals(signum).name,
            started=self.started,
            finished=now(),
            duration_s=time.perf_counter() - self.t0,
            **self.meta,
        )

    def snapshot(self, guard: Signals) -> Report:
        """The report as it stands, the running step Interrupted (for the watchdog)."""
        signum = guard.signum if guard.signum is not None else int(signal.SIGINT)
        name = signal.Signals(signum).name
        results = list(self.results)
        current = self.current
        extra = []
        if current is not None and current[2] == len(results):  # not yet in the results
            common, t0, _ = current
            results.append(
                TestcaseResult(
                    status=Status.INTERRUPTED,
                    message=f"interrupted by {name}; it did not stop within "
                    f"{guard.grace_s:g} s of a second signal, so gpubw did not wait for it",
                    duration_s=time.perf_counter() - t0,
                    **common,
                )
            )
            extra.append(
                f"the report was written without waiting for {common['key']}, which did not "
                f"stop within {guard.grace_s:g} s of a second signal; its resources were "
                "freed by the process exit"
            )
        state = attrs.evolve(self, results=results, current=None)
        return state.report(signum, extra)


def start_state(spec: RunSpec) -> RunState:
    """The run's state before its System opens (what a report says when it cannot)."""
    name = spec.name
    return RunState(
        meta=dict(
            tool="gpubw",
            tool_version=__version__,
            system_name=name,
            host=socket.gethostname(),
            run_options=spec.options,
            invocation=spec.invocation,
            backend="simulated" if name else "cuda",
            simulated=bool(name),
            versions=software_versions({}),
            devices=(),
        ),
        warnings=[
            *spec.warnings,
            *small_buffer_warnings(spec.selection, spec.options.buffer_sizes),
        ],
        started=now(),
        t0=time.perf_counter(),
    )
