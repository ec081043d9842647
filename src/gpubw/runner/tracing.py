"""The run's trace (``--trace``) as a run listener: it marks each step on the System's
:class:`gpubw.model.trace.Tracer` and puts what the tracer recorded into the Report.

The memory and measurement layers record their spans on ``system.trace`` (allocation, host
registration, pattern fill, warm-up, timed copies, verification, kernel load, teardown, ...);
this listener, the first of the run's (:func:`gpubw.runner.spec.build_spec` puts it there
when the options ask for a trace), opens a step when a testcase starts, before the other
listeners' work at its start (the NVML process check), and closes it when it has finished,
before theirs at its end. At the run's end the System is closed (its teardown recorded) and
the Report gets the trace (:attr:`gpubw.model.results.Report.trace`), before any other
listener writes it.
"""

from __future__ import annotations

from typing import Any

import attrs

from gpubw.model.events import Finished, RunListener, Step
from gpubw.model.results import Report
from gpubw.model.trace import NO_TRACE, Tracer

__all__ = ["TraceListener"]


class TraceListener(RunListener):
    """Steps marked on the System's tracer; the trace into the Report at the end."""

    def __init__(self) -> None:
        self.trace: Tracer = NO_TRACE

    def run_started(self, header: Report, system: Any) -> Report:
        self.trace = getattr(system, "trace", NO_TRACE)
        return header

    def testcase_started(self, step: Step) -> None:
        self.trace.begin_step(step.done, step.key, step.size)

    def testcase_finished(self, finished: Finished, so_far: Report) -> Finished:
        self.trace.end_step()
        return finished

    def run_finished(self, report: Report) -> Report:
        if not self.trace.on:
            return report
        return attrs.evolve(report, trace=self.trace.record())
