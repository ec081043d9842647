"""What a run announces as it goes, and the one interface that subscribes to it.

A run (:func:`gpubw.runner.core.run`) calls its listeners' hooks in this order::

    run_started(header, system)            once the System is open and checked
    testcase_started(step)                  } for each testcase and size, in order
    testcase_finished(finished, so_far)     }
    run_finished(report)                    the complete Report, once
    interrupted(report)                     only from the signal watchdog's thread, when a
                                            stuck testcase did not stop after a second signal

Listeners are called in the order they were given. A hook that returns a value passes it on:
``run_started`` may add to the header (the NVML facts), ``testcase_finished`` may add the
verdicts on the result, ``run_finished`` may add to the Report (facts, warnings, verdicts);
the next listener sees what the previous one returned, and the run returns what the last one
returned. This is how progress display, live output, partial writes, the NVML watch and
verdicts, and the emergency write plug into a run, the same way from the ``gpubw`` command
and from :func:`gpubw.run`; pytest's hook implementations are the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from gpubw.model.results import Report, TestcaseResult
from gpubw.model.verdicts import Verdict

__all__ = ["Finished", "RunEvents", "RunListener", "Step"]


@attrs.frozen
class Step:
    """Where the run is: this testcase's ``key`` and ``size`` (None: a fixed-size one),
    ``done`` steps finished before it, out of ``total`` (one per testcase and size)."""

    done: int
    total: int
    key: str
    size: int | None
    #: --soak: the repetition of the selection this step belongs to (None: not a soak)
    repetition: int | None = None


@attrs.frozen
class Finished:
    """One step's end: its result, and the verdicts on it where the run is judged."""

    step: Step
    result: TestcaseResult
    verdicts: tuple[Verdict, ...] = ()


class RunListener:
    """One subscriber to a run's events; every hook here does nothing (subclass and
    override the ones you need). Hooks run on the run's thread, except :meth:`interrupted`."""

    def run_started(self, header: Report, system: Any) -> Report:
        """The System is open: ``header`` is the Report without testcases (devices,
        versions, options, warnings); returns it, or a copy with more in it."""
        return header

    def testcase_started(self, step: Step) -> None:
        """A testcase is about to run at one size."""

    def testcase_finished(self, finished: Finished, so_far: Report) -> Finished:
        """A testcase finished at one size; ``so_far`` is the partial Report with every
        result so far (this one included; its ``error`` says what is still missing).
        Returns ``finished``, or a copy with more in it."""
        return finished

    def run_finished(self, report: Report) -> Report:
        """The run is over; returns ``report``, or a copy with more in it."""
        return report

    def interrupted(self, report: Report) -> None:
        """Called from the signal watchdog's thread when a testcase did not stop within the
        grace period of a second signal: ``report`` is the run as it stands (the stuck
        testcase Interrupted); the process exits right after."""


class RunEvents(RunListener):
    """Every listener of a run, called in order (see the module docstring)."""

    def __init__(self, listeners: Sequence[RunListener] = ()) -> None:
        self.listeners = tuple(listeners)

    @property
    def writes_when_interrupted(self) -> bool:
        """Whether any listener does something in :meth:`interrupted` (the CLI's write);
        without one, a run has no signal watchdog."""
        return any(type(x).interrupted is not RunListener.interrupted for x in self.listeners)

    def run_started(self, header: Report, system: Any) -> Report:
        for listener in self.listeners:
            header = listener.run_started(header, system)
        return header

    def testcase_started(self, step: Step) -> None:
        for listener in self.listeners:
            listener.testcase_started(step)

    def testcase_finished(self, finished: Finished, so_far: Report) -> Finished:
        for listener in self.listeners:
            finished = listener.testcase_finished(finished, so_far)
        return finished

    def run_finished(self, report: Report) -> Report:
        for listener in self.listeners:
            report = listener.run_finished(report)
        return report

    def interrupted(self, report: Report) -> None:
        for listener in self.listeners:
            listener.interrupted(report)
