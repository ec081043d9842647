"""The run command: the command line parsed into a :class:`gpubw.runner.spec.RunSpec` (the
same :func:`gpubw.runner.spec.build_spec` as :func:`gpubw.run`), the run, its report written
by the listeners, the exit code chosen.

Cut out of :mod:`gpubw.cli.command` (which stays a small dispatcher, light enough for
``gpubw -l``) along the seam between picking the work and doing a run. This module is
imported only when a run happens, under the run's :class:`gpubw.runner.interrupts.
SignalGuard` (installed by the dispatcher first), so its imports are top-level.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

import attrs

from gpubw.acceptance.node import Judging, RunWatch
from gpubw.backend import cuda_start
from gpubw.cli import _startup, listing
from gpubw.cli.accept import judging as judged
from gpubw.cli.args import (
    DEFAULT_FORMAT,
    build_parser,
    given_flags,
    parse_command_line,
    writer_settings,
)
from gpubw.cli.argtypes import buffer_sizes
from gpubw.cli.flavour import GPUBW, Flavour
from gpubw.cli.listing import LIST_FORMATS, PROG
from gpubw.cli.live import LiveOutput, Output, PartialWrites, progress_mode
from gpubw.cli.node_options import NOT_FOR_LIST, run_option_fields, soak_drop_of
from gpubw.cli.together import (
    Start,
    fingerprint,
    launched_with_ranks,
    refused_with_ranks,
    start_together,
)
from gpubw.model.console import to_stderr
from gpubw.model.errors import UsageError
from gpubw.model.events import RunListener
from gpubw.model.infile import refuse_input_as_output
from gpubw.model.options import RunOptions
from gpubw.model.results import Report
from gpubw.runner import capture
from gpubw.runner import core as runner
from gpubw.runner.checks import is_sample_pairs_note
from gpubw.runner.interrupts import SignalGuard
from gpubw.runner.plugin_errors import writer_errors
from gpubw.runner.ranks import finish, rank_prefix
from gpubw.runner.spec import RunRequest, RunSpec, build_spec
from gpubw.runner.writer_registry import Writers
from gpubw.world import World, world_from_environment
from gpubw.writers import make_writer


@attrs.frozen
class _Setup:
    """What the command line gives before the world is known: how the run measures, the
    writer's name, and where the report goes."""

    options: RunOptions
    fmt: str
    output: Output


def _error(message: str, prog: str) -> None:
    to_stderr(f"{prog}: error: {message}")


def run_command(argv: list[str], guard: SignalGuard, flavour: Flavour | None = None) -> int:
    """The run: its spec from the command line, the run, its report written by the
    listeners (:func:`_listeners`); returns the exit code (rank 0's, on every rank). Under
    an MPI launcher the ranks start together or not at all (:mod:`gpubw.cli.together`).
    ``flavour`` None: gpubw's own (:data:`gpubw.cli.flavour.GPUBW`)."""
    flavour = GPUBW if flavour is None else flavour
    ranks = launched_with_ranks()
    try:
        ns, setup = _setup(argv)
    except UsageError as exc:
        if not ranks:
            raise
        return refused_with_ranks(exc, flavour.prog, flavour.usage_exit)
    if not isinstance(setup, _Setup):  # -l
        return setup
    world = world_from_environment(timeout_s=setup.options.world_timeout_s)
    code = 1
    try:
        spec, judging, start = _agreed_spec(ns, argv, setup, world, guard, flavour)
        if start.refusal is not None:  # a rank's usage error, or ranks asked for different runs
            code = flavour.usage_exit
            if world.rank == 0:
                _error(start.refusal, flavour.prog)
            return code
        assert spec is not None  # (one process raised its usage errors)
        if start.signum is not None and guard.signum is None:
            guard.adopt(start.signum)  # another rank was signalled: every rank stops now
        capture.hold_stdout(keep=_startup.is_command())  # late plugin threads print nowhere
        listeners, live = _listeners(ns, spec, judging, setup.output, world)
        with live:
            report = runner.run(attrs.evolve(spec, listeners=listeners), world)
        code = flavour.exit_code(report)
        failure = flavour.failure(report)
        if failure and (world.rank == 0 or world.size > 1):
            _error(rank_prefix(world) + failure, flavour.prog)
    finally:
        capture.release_stdout()
        code = finish(world, code)
    return code


def _setup(argv: list[str]) -> tuple[argparse.Namespace, _Setup | int]:
    """The command line parsed, and what needs no world; for ``-l``, its exit code instead.
    Usage errors are raised."""
    ns, rest = parse_command_line(argv)
    if ns.list:
        writer_settings(None, rest)  # anything left is unrecognized
        return ns, _list_command(ns)
    fmt = _format(ns)
    ns.writer_settings = writer_settings(Writers.discover().get(fmt), rest)
    if ns.simulate is None:  # the real GPUs: start CUDA while the rest of the run is set up
        cuda_start.prestart()
    sizes = buffer_sizes(ns.buffer_size)
    return ns, _Setup(run_options(ns, sizes), fmt, Output(ns.output))


#: (namespace attribute, flag) of the options that do not apply to -l: refused with it, never
#: silently ignored (-l honours -j, --format in LIST_FORMATS and -o)
_NOT_FOR_LIST = (
    ("buffer_size", "-b/--buffer-size"),
    ("testcase", "-t/--testcase"),
    ("prefixes", "-p/--testcase-prefixes"),
    ("samples", "-i/--samples"),
    ("loops", "--loop-count"),
    ("gate_timeout", "--gate-timeout"),
    ("simulate", "--simulate"),
    ("use_mean", "-m/--use-mean"),
    ("skip_verification", "-s/--skip-verification"),
    ("disable_affinity", "-d/--disable-affinity"),
    ("verbose", "-v/--verbose"),
    ("perf_formatter", "--perf-formatter"),
    ("expect", "--expect"),
    ("outlier_pct", "--outlier-pct"),
    ("cv_threshold", "--cv-threshold"),
    ("host_huge_pages", "--host-huge-pages"),
    ("trace", "--trace"),
)


def _list_command(ns: argparse.Namespace) -> int:
    """``gpubw -l`` that needed the parser: the testcase list as text or JSON (``-j``,
    ``--format``), on stdout or into ``-o FILE``; an option that only applies to a run is a
    usage error."""
    given = given_flags(ns)
    parser = build_parser()
    for dest, flag in (*_NOT_FOR_LIST, *NOT_FOR_LIST):
        if dest in given or getattr(ns, dest) != parser.get_default(dest):
            raise UsageError(
                f"-l/--list only lists the testcases; {flag} does not apply to it "
                "(-l takes -j/--json, --format text|json and -o/--output)"
            )
    fmt = ns.format or ("json" if ns.json else "text")
    if ns.json and fmt != "json":
        raise UsageError(
            f"-j/--json means --format json; it cannot be combined with --format {fmt}"
        )
    if fmt not in LIST_FORMATS:
        raise UsageError(f"-l/--list writes {' or '.join(LIST_FORMATS)}, not --format {fmt!r}")
    return listing.main(fmt, ns.output)


def _format(ns: argparse.Namespace) -> str:
    """The writer's name (``--format``, ``-j``); an unknown one is a usage error now."""
    fmt: str = ns.format or ("json" if ns.json else DEFAULT_FORMAT)
    if ns.json and fmt != "json":
        raise UsageError(
            f"-j/--json means --format json; it cannot be combined with --format {fmt}"
        )
    Writers.discover().get(fmt)
    return fmt


def run_options(ns: argparse.Namespace, sizes: list[int]) -> RunOptions:
    """How the run measures, from the command line."""
    return RunOptions(
        samples=ns.samples,
        loops=ns.loops,
        statistic="mean" if ns.use_mean else "median",
        verify=not ns.skip_verification,
        affinity=not ns.disable_affinity,
        verbose=ns.verbose,
        gate_timeout_s=ns.gate_timeout,
        buffer_sizes=sizes,
        host_huge_pages=ns.host_huge_pages,
        trace=ns.trace,
        world_timeout_s=ns.world_timeout,
        sample_pairs=ns.sample_pairs,
        seed=ns.seed,
        handle_type=None if ns.handle_type == "auto" else ns.handle_type,
        **run_option_fields(ns),
    )


def run_request(
    ns: argparse.Namespace, argv: list[str], options: RunOptions, fmt: str, flavour: Flavour
) -> RunRequest:
    """The run the command line asks for (its listeners come per rank: :func:`_listeners`)."""
    return RunRequest(
        ns.testcase,
        ns.prefixes,
        options,
        ns.simulate,
        format=fmt,
        output=ns.output,
        perf_formatter=ns.perf_formatter,
        argv=argv,
        warnings=flavour.warnings,
        handle_signals=True,
        stop_on_error=flavour.stop_on_error,
    )


def _agreed_spec(
    ns: argparse.Namespace,
    argv: list[str],
    setup: _Setup,
    world: World,
    guard: SignalGuard,
    flavour: Flavour,
) -> tuple[RunSpec | None, Judging | None, Start]:
    """``(spec, judging, start)``: the run, how it is judged, and, under MPI, what the ranks
    agreed before it (:class:`gpubw.cli.together.Start`). One process raises its usage
    errors."""
    spec = judging = error = None
    try:
        # -o may not be a file the run reads: the report would replace its own input
        refuse_input_as_output(ns.output, {"--simulate": ns.simulate, "--expect": ns.expect})
        spec = build_spec(run_request(ns, argv, setup.options, setup.fmt, flavour))
        judging = _judging(ns)  # a bad expectations file: exit 2 before the run
    except UsageError as exc:
        if world.size == 1:
            raise
        error = exc
    if world.size == 1:
        return spec, judging, Start()
    mine = None if spec is None else fingerprint(ns, spec)
    return spec, judging, start_together(world, error, mine, guard.signum)


def _listeners(
    ns: argparse.Namespace, spec: RunSpec, judging: Judging | None, output: Output, world: World
) -> tuple[list[RunListener], contextlib.AbstractContextManager[Any]]:
    """Who follows the run on this rank (rank 0 only: the notes on standard error, the NVML
    watch and the verdicts, the report and the progress, the partial writes of an MPI run
    with -o, then the listener plugins of the spec), and the context the run goes in (the
    progress bar's)."""
    if world.rank != 0:
        return [], contextlib.nullcontext()
    fmt = spec.invocation.format if spec.invocation is not None else None
    assert fmt is not None
    writer_cls = Writers.discover().get(fmt)

    def make() -> Any:
        with writer_errors(fmt):  # one that cannot be made is a PluginError naming it
            return make_writer(
                writer_cls, verbose=ns.verbose, perf=ns.perf_formatter, settings=ns.writer_settings
            )

    rack = spec.simulation is not None and spec.simulation.hosts is not None
    watch = RunWatch(judging, facts=not (rack and world.size == 1), wait_idle_s=ns.wait_idle)
    live = LiveOutput(make(), fmt, output, mode=progress_mode(ns.quiet, sys.stderr))
    listeners: list[RunListener] = [_Notes(), watch, live]
    if world.size > 1 and output.rewritable:
        # a rank killed by the launcher takes the others down: keep -o valid meanwhile
        listeners.append(PartialWrites(make, output))
    # the trace's listener (--trace) stays first: it marks each step before the others work
    # on it, and its trace is in the Report before the report is written
    from gpubw.runner.tracing import TraceListener

    tracing = [x for x in spec.listeners if isinstance(x, TraceListener)]
    rest = [x for x in spec.listeners if not isinstance(x, TraceListener)]
    return [*tracing, *listeners, *rest], live


class _Notes(RunListener):
    """The run's notes (a raised ``--sample-pairs`` fraction: a warning of the report), said
    on standard error too, once the System is open, as the command always said them."""

    def run_started(self, header: Report, system: Any) -> Report:
        for warning in header.warnings:
            if is_sample_pairs_note(warning):
                to_stderr(f"{PROG}: {warning}")
        return header


def _judging(ns: argparse.Namespace) -> Judging | None:
    """How the run is judged (``--expect``, ``--outlier-pct``, ``--cv-threshold``), or None
    for a plain run. A bad expectations file is a usage error now, before the run."""
    soak_drop = soak_drop_of(ns)
    if not judged(ns):  # a plain soak is judged by the soak rule only
        return None if soak_drop is None else Judging(None, False, None, None, soak_drop)
    expectations = None
    if ns.expect is not None and ns.expect != "builtin":
        from gpubw.acceptance.expect import load_expectations  # a judged run only

        expectations = load_expectations(ns.expect)
    return Judging(expectations, ns.expect == "builtin", ns.outlier_pct, ns.cv_threshold, soak_drop)
