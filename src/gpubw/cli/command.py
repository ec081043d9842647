"""The ``gpubw`` command: nvbandwidth's options, plus output files, formats and simulation.

Only :func:`main` prints errors and picks exit codes:

====  ====================================================================================
0     every selected testcase Passed or was Waived; ``-h``, ``-l``
1     a testcase Error or Not Found, a prefix that matches nothing, no driver, a run that
      could not start
2     a usage error: a bad option value, ``-t`` with ``-p``, an unknown format, an
      unwritable ``-o``, an unreadable ``--simulate``, a bad expectations file
3     the run went fine but a cell is below expectation (``--expect``, ``--outlier-pct``,
      ``gpubw check``): a slow node, not a broken run
130   interrupted by SIGINT (Ctrl-C); 143 by SIGTERM
141   standard output is a pipe whose reader left (``gpubw | head``): gpubw stops quietly,
      as a program killed by SIGPIPE would (128 + 13); an ``-o`` file is still written
====  ====================================================================================

Nothing here imports CUDA at import time: ``gpubw -l`` never touches a GPU.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

from gpubw.cli import _startup
from gpubw.cli.listing import LIST_FORMATS, PROG
from gpubw.model.console import to_stderr
from gpubw.model.errors import GpubwError, InterruptedRun, NoDriverError, PluginError, UsageError

# Everything else is imported where it is used: ``gpubw -l`` from its cache imports none of
# it (argparse, attrs, the options, the registry; see gpubw.cli.listing).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence
    from typing import Any

    from gpubw.cli.args import (
        DEFAULT_FORMAT,
        DEFAULT_GATE_TIMEOUT_S,
        EXIT_CODES,
        PARAM_FLAGS,
        SUGGESTED_PRESET,
        build_parser,
        usage_message,
    )
    from gpubw.model.options import RunOptions

#: the names of :mod:`gpubw.cli.args` re-exported here, imported on first use (PEP 562)
_FROM_CLI_ARGS = frozenset(
    {
        "DEFAULT_FORMAT",
        "DEFAULT_GATE_TIMEOUT_S",
        "EXIT_CODES",
        "PARAM_FLAGS",
        "SUGGESTED_PRESET",
        "build_parser",
        "usage_message",
    }
)

if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        """A name of :mod:`gpubw.cli.args` re-exported here, imported on first use."""
        if name in _FROM_CLI_ARGS:
            from gpubw.cli import args as cli_args

            return getattr(cli_args, name)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_FORMAT",
    "DEFAULT_GATE_TIMEOUT_S",
    "EXIT_CODES",
    "GPUBW",
    "LIST_FORMATS",
    "PARAM_FLAGS",
    "PROG",
    "SUGGESTED_PRESET",
    "Flavour",
    "build_parser",
    "main",
    "preset_names",
    "run_command",
    "usage_message",
]


# -- output --------------------------------------------------------------------------------
def _error(message: str, prog: str = PROG) -> None:
    to_stderr(f"{prog}: error: {message}")


#: the exit code when standard output is a pipe whose reader left: 128 + SIGPIPE, as the
#: shell reports a program that SIGPIPE killed
EXIT_PIPE_CLOSED = 128 + 13


def _stdout_gone() -> bool:
    """Whether standard output is a pipe (or socket) whose reader has left: polling it
    reports an error or hang-up. Then a BrokenPipeError came from it, not from an ``-o``
    FIFO."""
    import select

    fd = 1
    capture = sys.modules.get("gpubw.runner.capture")
    if capture is not None:  # the real standard output (held, or saved by a capture)
        fd = capture.real_stdout_fd()
    try:
        poll = select.poll()
        poll.register(fd, select.POLLOUT)
        events = poll.poll(0)
    except (OSError, ValueError):
        return False
    return any(mask & (select.POLLERR | select.POLLHUP) for _, mask in events)


def _pipe_closed() -> int:
    """The reader of standard output left: nothing more goes there (/dev/null takes fd 1, so
    that Python's last flush at exit cannot fail either); exit 141, quietly."""
    capture = sys.modules.get("gpubw.runner.capture")
    held = capture.real_stdout_fd() if capture is not None else 1
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        for fd in {1, held}:  # and the held copy of the real standard output
            os.dup2(null, fd)
        os.close(null)
    return EXIT_PIPE_CLOSED


class Flavour:
    """How the run command speaks: gpubw's own way (:data:`GPUBW`), or another command's
    that runs gpubw underneath (``gpubw-nvbandwidth``: :mod:`gpubw.cli.nvbandwidth`). The
    command line it is given is always gpubw's own; the flavour decides only how the run
    ends: the name on error lines, the exit code of a usage error, the exit code of a run
    (``exit_code(report)``) and the error line it prints after one (``failure(report)``, ""
    for none), whether a testcase Error stops the run, extra warnings for the report, and
    how to suggest a simulated system when there is no driver."""

    __slots__ = ("exit_code", "failure", "prog", "simulate_hint", "stop_on_error",
                 "usage_exit", "warnings")  # fmt: skip

    def __init__(
        self,
        *,
        prog: str = PROG,
        usage_exit: int = 2,
        exit_code: Callable[[Any], int] | None = None,
        failure: Callable[[Any], str] | None = None,
        stop_on_error: bool = False,
        warnings: tuple[str, ...] = (),
        simulate_hint: str = "",
    ) -> None:
        self.prog, self.usage_exit, self.stop_on_error = prog, usage_exit, stop_on_error
        self.exit_code = exit_code or (lambda report: int(report.exit_code))
        self.failure = failure or (lambda report: str(report.error))
        self.warnings = warnings
        self.simulate_hint = simulate_hint or f"{PROG} --simulate NAME"


#: the gpubw command's own flavour
GPUBW = Flavour()


# -- -l ------------------------------------------------------------------------------------
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
)


def _list_command(ns: argparse.Namespace) -> int:
    """``gpubw -l``: the testcase list as text or JSON (``-j``, ``--format``), on stdout or
    into ``-o FILE``; an option that only applies to a run is a usage error."""
    from gpubw.cli import listing
    from gpubw.cli.args import build_parser, given_flags
    from gpubw.cli.node_options import NOT_FOR_LIST

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


# -- systems -------------------------------------------------------------------------------
def preset_names() -> list[str]:
    """Names of the simulated presets."""
    from gpubw.backend import presets

    return sorted(presets.names())


def _simulation(simulate: str | None) -> Any:
    """``--simulate``, resolved (:func:`gpubw.runner.simulation.resolve_simulation`); a bad
    one is a UsageError now, naming the flag."""
    from gpubw.runner.simulation import resolve_simulation

    try:
        return resolve_simulation(simulate)
    except UsageError as exc:
        raise UsageError(f"--simulate: {exc}") from None


# -- main ----------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code. As the ``gpubw`` command itself (no
    ``argv``), a signal never ends it with a traceback (:mod:`gpubw.cli._startup`), and it ends
    the process once all is written (:func:`gpubw.cli._startup.exit_now`)."""
    return run_command(list(sys.argv[1:] if argv is None else argv), argv is None, GPUBW)


def run_command(args: list[str], command: bool, flavour: Flavour) -> int:
    """:func:`main`'s work for the gpubw command line ``args`` in ``flavour``; ``command``:
    this process is the command itself (not a call from Python)."""
    if command:
        _startup.defer()  # the first signal raises InterruptedRun once; later ones absorbed
    try:
        code = _dispatch(args, command, flavour)
    except InterruptedRun as exc:  # the signal came while an error was being reported
        code = 128 + exc.signum  # (options.exit_status's rule, without importing attrs now)
    finally:
        if command:
            _startup.ignore()  # the code is chosen: a late signal changes nothing
    if command and not _plugin_code_ran():
        _startup.exit_now(code)
    return code


def _plugin_code_ran() -> bool:
    """Whether a third-party plugin's code was imported: then the command leaves Python the
    usual way (the plugin may count on it: files it left open are flushed, C libraries' exit
    handlers run), not by :func:`gpubw.cli._startup.exit_now`."""
    registry = sys.modules.get("gpubw.runner.registry")
    return registry is not None and bool(registry.plugins_imported())


def _dispatch(args: list[str], command: bool, flavour: Flavour) -> int:
    """The command line's work, its errors printed and turned into the exit code."""
    from gpubw.cli import _startup

    try:
        if command and _startup.looks_like_gpu_run(args):
            # CUDA's start (~0.45 s of driver work) is the longest step of a short run: begin
            # it before the option parser and the run's modules are imported (issue 11 item 5)
            from gpubw.backend.cuda_start import prestart

            prestart()
        if flavour is not GPUBW:  # another command's run: never -l or a sub-command
            return _main(args, command, flavour)
        return _subcommand(args, command)
    except SystemExit as exc:  # -h, --version, and plot's own argparse
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except UsageError as exc:
        from gpubw.cli.args import usage_message

        _error(usage_message(exc), flavour.prog)
        return flavour.usage_exit
    except NoDriverError as exc:
        _no_driver(exc, flavour)
        return 1
    except InterruptedRun as exc:
        from gpubw.model.options import exit_status

        return exit_status(signal=exc.signum)
    except KeyboardInterrupt:
        from gpubw.model.options import exit_status

        return exit_status(signal=signal.SIGINT)
    except BrokenPipeError as exc:  # e.g. gpubw | head: the reader left; say nothing more
        if _stdout_gone():
            return _pipe_closed()
        _error(f"{exc.strerror or exc}{f': {exc.filename}' if exc.filename else ''}", flavour.prog)
        return 1
    except GpubwError as exc:
        _error(str(exc), flavour.prog)
        return 1
    except OSError as exc:
        _error(f"{exc.strerror or exc}{f': {exc.filename}' if exc.filename else ''}", flavour.prog)
        return 1
    finally:
        start = sys.modules.get("gpubw.backend.cuda_start")
        if start is not None:  # a CUDA start nobody took over, contexts still being released
            for problem in start.settle():
                to_stderr(f"{PROG}: warning: freeing CUDA at the end: {problem}")


def _subcommand(args: list[str], command: bool) -> int:
    """The work the first words ask for: ``-l``, a sub-command, or a run."""
    plain_list = _plain_list(args)
    if plain_list is not None:  # gpubw -l without the parser (see gpubw.cli.listing)
        return _list_plainly(*plain_list)
    if args and args[0] == "completion":
        from gpubw.cli.completion import completion_main

        return completion_main(args[1:])
    if args and args[0] == "plot":
        return _plot(args[1:])
    if args and args[0] == "compare":
        return _compare(args[1:])
    if args and args[0] in _ACCEPT_COMMANDS:
        return _accept_command(args[0], args[1:])
    return _main(args, command=command)


def _no_driver(exc: NoDriverError, flavour: Flavour = GPUBW) -> None:
    """No NVIDIA driver: the error, and how to try gpubw without a GPU."""
    from gpubw.cli.args import SUGGESTED_PRESET

    prog = flavour.prog
    _error(str(exc), prog)
    if flavour is not GPUBW or "--simulate" not in str(exc):
        how = flavour.simulate_hint.replace("NAME", SUGGESTED_PRESET)
        to_stderr(f"{prog}: to try gpubw without a GPU, simulate a system: {how}")
    names = preset_names()
    if names:
        to_stderr(f"{prog}: simulated systems: {', '.join(names)}")


def _main(argv: list[str], command: bool = False, flavour: Flavour = GPUBW) -> int:
    """The run command, under a :class:`gpubw.runner.interrupts.SignalGuard` from start to exit: a
    signal at any moment after this gives a valid report (see docs/failures.md). In the
    gpubw process itself (``command``), once the report is written and the exit code
    chosen, SIGINT/SIGTERM are ignored: a burst's last signals may arrive while Python shuts
    down, after it has put back the default handlers, and would kill the process (Python
    leaves ignored signals alone). Called in-process, the previous handlers are put back."""
    from gpubw.runner.interrupts import SignalGuard

    guard = SignalGuard()
    guard.install()
    recorded = _startup.recorded_signal()  # an MPI rank's signal before the guard
    if recorded is not None:
        guard.adopt(recorded)
    try:
        code = _run_command(argv, guard, flavour)
    finally:
        guard.uninstall(signal.SIG_IGN if command else None)
    if guard.signum is None or guard.report_final:
        # a signal after the complete report was final is absorbed: the exit code is the
        # report's (the report and the process never say different things)
        return code
    from gpubw.model.options import exit_status

    return exit_status(signal=guard.signum)


def _plain_list(args: list[str]) -> tuple[str, str | None] | None:
    """(format, output) of a plain ``gpubw -l`` that needs no option parser, else None (the
    whole command line then goes through the parser, which refuses what -l does not take)."""
    if "-l" not in args and "--list" not in args:
        return None
    from gpubw.cli.listing import plain_list_args

    return plain_list_args(args)


def _interrupted(signum: int, _frame: object) -> None:
    raise InterruptedRun(signum)


def _list_plainly(fmt: str, output: str | None) -> int:
    """A plain ``gpubw -l``, with no SignalGuard (gpubw.runner.interrupts costs more than the whole
    list from its cache): SIGTERM ends it as SIGINT does, through :func:`main` (exit 143,
    an ``-o`` file left as it was); off the main thread signals are left alone."""
    from gpubw.cli import listing

    if _startup.deferring():  # the command: its start-up handler raises once, for both
        return listing.main(fmt, output)
    try:
        old = signal.signal(signal.SIGTERM, _interrupted)
    except ValueError:  # not the main thread
        return listing.main(fmt, output)
    try:
        return listing.main(fmt, output)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if old is None else old)


def _run_command(argv: list[str], guard: Any, flavour: Flavour = GPUBW) -> int:
    """The run: its spec from the command line, the run, its report written by the
    listeners (:func:`_listeners`); returns the exit code (rank 0's, on every rank). Under
    an MPI launcher the ranks start together or not at all (:mod:`gpubw.cli.together`)."""
    from gpubw.cli.together import launched_with_ranks

    ranks = launched_with_ranks()
    try:
        ns, setup = _setup(argv)
    except UsageError as exc:
        if not ranks:
            raise
        return _refused_with_ranks(exc, flavour)
    if ns is None:  # -l
        return int(setup)
    import attrs

    from gpubw.runner import capture
    from gpubw.runner import core as runner
    from gpubw.runner.ranks import finish, rank_prefix
    from gpubw.world import world_from_environment

    options, _fmt, output = setup
    world = world_from_environment(timeout_s=options.world_timeout_s)
    code = 1
    try:
        spec, judging, start = _agreed_spec(ns, argv, setup, world, guard, flavour)
        if start.refusal is not None:  # a rank's usage error, or ranks asked for different runs
            code = flavour.usage_exit
            if world.rank == 0:
                _error(start.refusal, flavour.prog)
            return code
        if start.signum is not None and guard.signum is None:
            guard.adopt(start.signum)  # another rank was signalled: every rank stops now
        capture.hold_stdout(keep=_startup.is_command())  # late plugin threads print nowhere
        listeners, live = _listeners(ns, spec, judging, output, world)
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


def _setup(argv: list[str]) -> tuple[Any, Any]:
    """The command line parsed, and what needs no world: ``(ns, (options, format,
    output))``; for ``-l``, ``(None, its exit code)``. Usage errors are raised."""
    from gpubw.cli.args import parse_command_line, writer_settings
    from gpubw.cli.live import Output

    ns, rest = parse_command_line(argv)
    if ns.list:
        writer_settings(None, rest)  # anything left is unrecognized
        return None, _list_command(ns)
    fmt = _format(ns)
    ns.writer_settings = _writer_settings(fmt, rest)
    if ns.simulate is None:  # the real GPUs: start CUDA while the rest of the run is set up
        from gpubw.backend.cuda_start import prestart

        prestart()
    sizes = _sizes(ns)
    options = _run_options(ns, sizes)
    return ns, (options, fmt, Output(ns.output))


def _agreed_spec(
    ns: argparse.Namespace,
    argv: list[str],
    setup: Any,
    world: Any,
    guard: Any,
    flavour: Flavour = GPUBW,
) -> Any:
    """``(spec, judging, start)``: the run, how it is judged, and, under MPI, what the ranks
    agreed before it (:class:`gpubw.cli.together.Start`). One process raises its usage
    errors."""
    from gpubw.cli.together import Start, fingerprint, start_together
    from gpubw.model.infile import refuse_input_as_output

    options, fmt, _output = setup
    spec = judging = error = None
    try:
        # -o may not be a file the run reads: the report would replace its own input
        refuse_input_as_output(ns.output, {"--simulate": ns.simulate, "--expect": ns.expect})
        spec = _run_spec(ns, argv, options, fmt, flavour)
        judging = _judging(ns)  # a bad expectations file: exit 2 before the run
    except UsageError as exc:
        if world.size == 1:
            raise
        error = exc
    if world.size == 1:
        return spec, judging, Start()
    mine = None if spec is None else fingerprint(ns, spec)
    return spec, judging, start_together(world, error, mine, guard.signum)


def _refused_with_ranks(error: UsageError, flavour: Flavour = GPUBW) -> int:
    """This MPI rank's command line is unusable: it still joins the world (the others would
    otherwise wait in MPI_Init for ever), so that every rank ends with exit 2 at once."""
    from gpubw.cli.together import start_together
    from gpubw.runner.ranks import finish
    from gpubw.world import world_from_environment

    world = world_from_environment()
    start = start_together(world, error, None, None)
    if world.rank == 0:
        _error(start.refusal or str(error), flavour.prog)
    return finish(world, flavour.usage_exit)


def _sizes(ns: argparse.Namespace) -> list[int]:
    from gpubw.model.options import DEFAULT_BUFFER_SIZE
    from gpubw.model.sizes import parse_sizes

    return [DEFAULT_BUFFER_SIZE] if ns.buffer_size is None else parse_sizes(ns.buffer_size)


def _format(ns: argparse.Namespace) -> str:
    """The writer's name (``--format``, ``-j``); an unknown one is a usage error now."""
    from gpubw.cli.args import DEFAULT_FORMAT
    from gpubw.runner.registry import Writers

    fmt: str = ns.format or ("json" if ns.json else DEFAULT_FORMAT)
    if ns.json and fmt != "json":
        raise UsageError(
            f"-j/--json means --format json; it cannot be combined with --format {fmt}"
        )
    Writers.discover().get(fmt)
    return fmt


def _writer_settings(fmt: str, rest: list[str]) -> dict[str, str | None]:
    """The options writer ``fmt`` declares, from what the main parser left (``rest``)."""
    from gpubw.cli.args import writer_settings
    from gpubw.runner.registry import Writers

    return writer_settings(Writers.discover().get(fmt), rest)


def _run_options(ns: argparse.Namespace, sizes: list[int]) -> RunOptions:
    """How the run measures, from the command line."""
    from gpubw.cli.node_options import run_option_fields
    from gpubw.model.options import RunOptions

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
        world_timeout_s=ns.world_timeout,
        sample_pairs=ns.sample_pairs,
        seed=ns.seed,
        handle_type=None if ns.handle_type == "auto" else ns.handle_type,
        **run_option_fields(ns),
    )


def _run_spec(
    ns: argparse.Namespace, argv: list[str], options: RunOptions, fmt: str, flavour: Flavour
) -> Any:
    """The run the command line asks for (its listeners come per rank: :func:`_listeners`)."""
    from gpubw import api
    from gpubw.model.options import Invocation
    from gpubw.runner.core import RunSpec

    simulation = _simulation(ns.simulate)
    selection, warnings = api.select(ns.testcase, ns.prefixes)
    invocation = Invocation(
        testcase=ns.testcase,
        testcase_prefixes=ns.prefixes,
        format=fmt,
        output=ns.output,
        simulate=ns.simulate,
        perf_formatter=ns.perf_formatter,
        argv=argv,
    )
    return RunSpec(
        selection,
        options,
        simulation=simulation,
        invocation=invocation,
        warnings=[*warnings, *flavour.warnings],
        handle_signals=True,
        stop_on_error=flavour.stop_on_error,
    )


def _listeners(
    ns: argparse.Namespace, spec: Any, judging: Any, output: Any, world: Any
) -> tuple[list[Any], contextlib.AbstractContextManager[Any]]:
    """Who follows the run on this rank (rank 0 only: the NVML watch and the verdicts, the
    report and the progress, the partial writes of an MPI run with -o), and the context the
    run goes in (the progress bar's)."""
    if world.rank != 0:
        return [], contextlib.nullcontext()
    from gpubw.acceptance.node import RunWatch
    from gpubw.cli.live import LiveOutput, PartialWrites, progress_mode
    from gpubw.runner.registry import Writers

    fmt = spec.invocation.format
    writer_cls = Writers.discover().get(fmt)

    def make() -> Any:
        return _make_writer(writer_cls, fmt, ns)

    rack = spec.simulation is not None and spec.simulation.hosts is not None
    watch = RunWatch(judging, facts=not (rack and world.size == 1), wait_idle_s=ns.wait_idle)
    live = LiveOutput(make(), fmt, output, mode=progress_mode(ns.quiet, sys.stderr))
    listeners: list[Any] = [watch, live]
    if world.size > 1 and output.rewritable:
        # a rank killed by the launcher takes the others down: keep -o valid meanwhile
        listeners.append(PartialWrites(make, output))
    return listeners, live


def _judging(ns: argparse.Namespace) -> Any:
    """How the run is judged (``--expect``, ``--outlier-pct``, ``--cv-threshold``), or None
    for a plain run. A bad expectations file is a usage error now, before the run."""
    from gpubw.acceptance.node import Judging
    from gpubw.cli.accept import judging
    from gpubw.cli.node_options import soak_drop_of

    soak_drop = soak_drop_of(ns)
    if not judging(ns):  # a plain soak is judged by the soak rule only
        return None if soak_drop is None else Judging(None, False, None, None, soak_drop)
    expectations = None
    if ns.expect is not None and ns.expect != "builtin":
        from gpubw.acceptance.expect import load_expectations

        expectations = load_expectations(ns.expect)
    return Judging(expectations, ns.expect == "builtin", ns.outlier_pct, ns.cv_threshold, soak_drop)


def _make_writer(cls: Any, name: str, ns: argparse.Namespace) -> Any:
    """The writer of the run; one that cannot be made is a PluginError naming it."""
    from gpubw.writers import make_writer

    try:
        return make_writer(
            cls, verbose=ns.verbose, perf=ns.perf_formatter, settings=ns.writer_settings
        )
    except (GpubwError, OSError):
        raise
    except BaseException as exc:
        raise PluginError(f"writer {name!r} failed: {_describe_base(exc)}") from exc


def _describe_base(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


_ACCEPT_COMMANDS = ("check", "expect-from", "info")


def _accept_command(name: str, argv: list[str]) -> int:
    """``gpubw check``, ``gpubw expect-from``, ``gpubw info`` (:mod:`gpubw.cli.accept`)."""
    from gpubw.cli import accept as accept_cli

    run = {
        "check": accept_cli.check_main,
        "expect-from": accept_cli.expect_from_main,
        "info": accept_cli.info_main,
    }[name]
    return run(argv)


def _compare(argv: list[str]) -> int:
    """``gpubw compare CANDIDATE BASELINE``: 3 if any cell fails (a regression, as check's
    below expectation), else 0 (nothing printed when the result went to a file with -o)."""
    from gpubw.cli.compare import compare_files
    from gpubw.model.options import EXIT_BELOW_EXPECTATION

    lines, failed = compare_files(argv)
    if lines:
        print("\n".join(lines))
    return EXIT_BELOW_EXPECTATION if failed else 0


def _plot(argv: list[str]) -> int:
    """``gpubw plot REPORT.json -o FILE.png``: handed to :func:`gpubw.tools.plot.main`."""
    hint = "gpubw plot needs matplotlib: pip install 'gpubw[plot]'"
    try:
        from gpubw.tools import plot
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] == "matplotlib":
            raise UsageError(hint) from None
        raise GpubwError(f"the plot command is not available: {exc}") from None
    try:
        return int(plot.main(argv) or 0)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] == "matplotlib":
            raise UsageError(hint) from None
        raise
