"""What the run command does so that plugin code cannot take the run over (issue 24).

The run's own steps (:mod:`gpubw.cli.command`) call two functions of this module:
:func:`guard_the_run` as the run begins, :func:`run_finished` as it ends.

* ``-o FILE`` may not be one of the files the run reads (``--simulate FILE``, ``--expect
  FILE``): the report would replace what it was made from (a usage error before anything
  runs). ``-o`` itself is made absolute before anything runs
  (:class:`gpubw.model.outfile.OutputTarget`).
* Standard output is held for the report (:func:`gpubw.runner.capture.hold_stdout`): from
  here on file descriptor 1 and ``sys.stdout`` lead nowhere, so a plugin's thread that goes
  on printing after its testcase returned cannot get into ``-j`` output; the report is
  written through :func:`report_stdout`. In the gpubw command the hold lasts until the
  process exits; called in-process, :func:`run_finished` puts standard output back.

The rest (a plugin module's import and a testcase's code as plugin code: its output
captured, its exceptions its own, the process state put back after it, a forked child
ended) is the runner's: :mod:`gpubw.runner.registry`, :mod:`gpubw.runner.procstate`.
"""

from __future__ import annotations

import argparse
from typing import TextIO

from gpubw.model.infile import refuse_input_as_output
from gpubw.runner import capture


def guard_the_run(ns: argparse.Namespace, *, command: bool) -> None:
    """Refuse an ``-o`` that names an input of the run; hold standard output (until the
    process exits when ``command``)."""
    refuse_input_as_output(ns.output, {"--simulate": ns.simulate, "--expect": ns.expect})
    capture.hold_stdout(keep=command)


def report_stdout() -> TextIO:
    """The standard output the report goes to (:func:`gpubw.runner.capture.report_stdout`)."""
    stream: TextIO = capture.report_stdout()
    return stream


def run_finished() -> None:
    """Standard output as it was before :func:`guard_the_run` (a hold that is not kept)."""
    capture.release_stdout()
