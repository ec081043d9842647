"""Test support: the runner called the way the tests like to call it (an opener that takes
only the options, the selection, the options, a few keywords), turned into a RunSpec."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gpubw.model.events import Finished, RunListener
from gpubw.model.options import RunOptions
from gpubw.model.results import Report
from gpubw.runner import core as runner
from gpubw.runner.spec import RunSpec
from gpubw.world import World


class Partial(RunListener):
    """``partial(report_so_far)`` after every testcase (as an MPI run's -o rewrites)."""

    def __init__(self, partial: Callable[[Report], None]) -> None:
        self.partial = partial

    def testcase_finished(self, finished: Finished, so_far: Report) -> Finished:
        self.partial(so_far)
        return finished


def run(
    open_system: Callable[[RunOptions], Any],
    selection: Sequence[Any],
    options: RunOptions | None = None,
    *,
    progress: Callable[[runner.Progress], None] | None = None,
    partial: Callable[[Report], None] | None = None,
    listeners: Sequence[RunListener] = (),
    **fields: Any,
) -> Report:
    """:func:`gpubw.runner.core.run` of a RunSpec made of these (``fields``: RunSpec's)."""

    def opener(opts: RunOptions, world: World | None = None) -> Any:
        return open_system(opts)

    extra: list[RunListener] = list(listeners)
    if progress is not None:
        extra.append(runner.ProgressListener(progress))
    if partial is not None:
        extra.append(Partial(partial))
    spec = RunSpec(
        selection, options or RunOptions(), open_system=opener, listeners=extra, **fields
    )
    return runner.run(spec)
