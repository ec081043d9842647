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
from gpubw.model.errors import GpubwError, InterruptedRun, NoDriverError, PluginError, UsageError

# Everything else is imported where it is used: ``gpubw -l`` from its cache imports none of
# it (argparse, attrs, the options, the registry; see gpubw.cli.listing).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterator, Sequence
    from typing import IO, Any

    from gpubw.cli.args import (
        DEFAULT_FORMAT,
        DEFAULT_GATE_TIMEOUT_S,
        EXIT_CODES,
        PARAM_FLAGS,
        SUGGESTED_PRESET,
        build_parser,
        usage_message,
    )
    from gpubw.cli.live import LiveOutput
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
    "LIST_FORMATS",
    "PARAM_FLAGS",
    "PROG",
    "SUGGESTED_PRESET",
    "build_parser",
    "main",
    "make_writer",
    "preset_names",
    "usage_message",
]


# -- output --------------------------------------------------------------------------------
class _Output:
    """Where the report goes: stdout, or ``-o FILE`` by :class:`gpubw.model.outfile.OutputTarget`'s
    rules (atomic for a regular file, in place for a device or FIFO, checked up front so
    that an unwritable FILE is a usage error before anything runs)."""

    def __init__(self, path: str | None) -> None:
        from gpubw.model.outfile import OutputTarget

        self.path = path
        self._target = None if path is None else OutputTarget(path).check()

    @property
    def to_stdout(self) -> bool:
        """True when the report goes to standard output (no ``-o``, or ``-o -``): then it is
        written as the run goes."""
        return self._target is None or self._target.is_stdout

    @contextlib.contextmanager
    def stream(self, stdout: IO[str] | None = None) -> Iterator[IO[str]]:
        """The stream to write the report to; ``stdout`` replaces ``sys.stdout`` where the
        report goes to standard output."""
        if self._target is None or (stdout is not None and self._target.is_stdout):
            out = sys.stdout if stdout is None else stdout
            yield out
            out.flush()
            return
        with self._target.open("w") as f:
            yield f

    def discard(self) -> None:
        """Nothing to clean: an unfinished atomic write removes its own temporary file."""


def _error(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)


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

    given = given_flags(ns)
    parser = build_parser()
    for dest, flag in _NOT_FOR_LIST:
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


def _system_opener(simulate: str | None) -> Callable[[RunOptions], Any]:
    """What opens the run's System (:func:`gpubw.api.system_opener`); a bad --simulate is a
    UsageError now, naming the flag."""
    from gpubw.api import system_opener

    try:
        return system_opener(simulate)
    except UsageError as exc:
        raise UsageError(f"--simulate: {exc}") from None


# -- main ----------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code. As the ``gpubw`` command itself (no
    ``argv``), a signal never ends it with a traceback (:mod:`gpubw.cli._startup`), and it ends
    the process once all is written (:func:`gpubw.cli._startup.exit_now`)."""
    command = argv is None
    if command:
        _startup.defer()  # the first signal raises InterruptedRun once; later ones absorbed
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        code = _dispatch(args, command=command)
    except InterruptedRun as exc:  # the signal came while an error was being reported
        code = 128 + exc.signum
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


def _dispatch(args: list[str], command: bool) -> int:
    """The command line's work, its errors printed and turned into the exit code."""
    from gpubw.cli import _startup

    try:
        if command and _startup.looks_like_gpu_run(args):
            # CUDA's start (~0.45 s of driver work) is the longest step of a short run: begin
            # it before the option parser and the run's modules are imported (issue 11 item 5)
            from gpubw.backend.cuda_start import prestart

            prestart()
        plain_list = _plain_list(args)
        if plain_list is not None:  # gpubw -l without the parser (see gpubw.cli.listing)
            return _list_plainly(*plain_list)
        if args and args[0] == "plot":
            return _plot(args[1:])
        if args and args[0] == "compare":
            return _compare(args[1:])
        if args and args[0] in _ACCEPT_COMMANDS:
            return _accept_command(args[0], args[1:])
        return _main(args, command=command)
    except SystemExit as exc:  # -h, --version, and plot's own argparse
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except UsageError as exc:
        from gpubw.cli.args import usage_message

        _error(usage_message(exc))
        return 2
    except NoDriverError as exc:
        from gpubw.cli.args import SUGGESTED_PRESET

        _error(str(exc))
        if "--simulate" not in str(exc):
            print(
                f"{PROG}: to try gpubw without a GPU, simulate a system: "
                f"{PROG} --simulate {SUGGESTED_PRESET}",
                file=sys.stderr,
            )
        names = preset_names()
        if names:
            print(f"{PROG}: simulated systems: {', '.join(names)}", file=sys.stderr)
        return 1
    except InterruptedRun as exc:
        from gpubw.model.options import exit_status

        return exit_status(signal=exc.signum)
    except KeyboardInterrupt:
        from gpubw.model.options import exit_status

        return exit_status(signal=signal.SIGINT)
    except BrokenPipeError:  # e.g. gpubw -l | head: the reader left; say nothing more
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except GpubwError as exc:
        _error(str(exc))
        return 1
    except OSError as exc:
        _error(f"{exc.strerror or exc}{f': {exc.filename}' if exc.filename else ''}")
        return 1
    finally:
        start = sys.modules.get("gpubw.backend.cuda_start")
        if start is not None:  # a CUDA start nobody took over, contexts still being released
            for problem in start.settle():
                print(f"{PROG}: warning: freeing CUDA at the end: {problem}", file=sys.stderr)


def _main(argv: list[str], command: bool = False) -> int:
    """The run command, under a :class:`gpubw.runner.interrupts.SignalGuard` from start to exit: a
    signal at any moment after this gives a valid report (see docs/failures.md). In the
    gpubw process itself (``command``), once the report is written and the exit code
    chosen, SIGINT/SIGTERM are ignored: a burst's last signals may arrive while Python shuts
    down, after it has put back the default handlers, and would kill the process (Python
    leaves ignored signals alone). Called in-process, the previous handlers are put back."""
    from gpubw.runner.interrupts import SignalGuard

    guard = SignalGuard()
    guard.install()
    try:
        code = _run_command(argv, guard)
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


def _run_command(argv: list[str], guard: Any) -> int:
    from gpubw.cli.args import DEFAULT_FORMAT, attach_negative_values, build_parser

    ns = build_parser().parse_args(attach_negative_values(argv))
    if ns.list:
        return _list_command(ns)
    if ns.simulate is None:  # the real GPUs: start CUDA while the rest of the run is set up
        from gpubw.backend.cuda_start import prestart

        prestart()
    from gpubw.cli.accept import judging
    from gpubw.cli.live import progress_mode
    from gpubw.model.options import DEFAULT_BUFFER_SIZE, Invocation, RunOptions
    from gpubw.model.sizes import parse_sizes
    from gpubw.runner.registry import Writers

    sizes = [DEFAULT_BUFFER_SIZE] if ns.buffer_size is None else parse_sizes(ns.buffer_size)

    fmt = ns.format or ("json" if ns.json else DEFAULT_FORMAT)
    if ns.json and fmt != "json":
        raise UsageError(
            f"-j/--json means --format json; it cannot be combined with --format {fmt}"
        )
    writer_cls = Writers.discover().get(fmt)

    options = RunOptions(
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
    )
    invocation = Invocation(
        testcase=ns.testcase,
        testcase_prefixes=ns.prefixes,
        format=fmt,
        output=ns.output,
        simulate=ns.simulate,
        perf_formatter=ns.perf_formatter,
        argv=argv,
    )
    output = _Output(ns.output)
    from gpubw.runner.ranks import finish, rank_prefix, run_simulated, simulated_hosts, with_world
    from gpubw.world import world_from_environment

    world = world_from_environment(timeout_s=ns.world_timeout)
    root = world.rank == 0
    code = 1
    from gpubw.cli.guarded import guard_the_run, report_stdout, run_finished

    try:
        guard_the_run(ns, command=_startup.is_command())  # -o not an input; stdout held
        opener = with_world(_system_opener(ns.simulate), world)
        from gpubw import api
        from gpubw.runner import core as runner

        selection, warnings = api.select(ns.testcase, ns.prefixes)
        judge_cells = judging(ns)
        expectations = None
        if ns.expect is not None and ns.expect != "builtin":
            from gpubw.acceptance.expect import load_expectations

            expectations = load_expectations(ns.expect)  # a bad file: exit 2 before the run
        partial = None
        if root and world.size > 1 and ns.output is not None:
            # a rank killed by the launcher takes the others down: keep -o valid meanwhile
            def partial(so_far: Any) -> None:
                writer = make_writer(
                    writer_cls, verbose=ns.verbose, perf_formatter=ns.perf_formatter
                )
                with output.stream() as stream:
                    writer.write(so_far, stream)

        live = _live_output(
            writer_cls,
            fmt,
            output,
            verbose=ns.verbose,
            perf=ns.perf_formatter,
            mode=progress_mode(ns.quiet, sys.stderr) if root else "off",
        )
        from gpubw.acceptance.node import RunWatch, judge

        hosts = simulated_hosts(ns.simulate) if world.size == 1 else None
        # only rank 0 shows progress, streams and writes; NVML is watched around its run
        watch = RunWatch(opener, live, expect_builtin=ns.expect == "builtin") if root else None
        if watch is not None and judge_cells and hasattr(type(live.writer), "verdicts_of"):
            watch.judge_as_it_goes(expectations, ns.outlier_pct, ns.cv_threshold)
            live.writer.verdicts_of = watch.verdicts_of  # verdicts as it goes
        if root:
            guard.emergency_write = _emergency(live, output)
        with live:
            if hosts is not None:  # a simulated rack: its ranks emulated in this process
                report = run_simulated(
                    ns.simulate,
                    hosts,
                    lambda open_rank, rank_world: runner.run(
                        open_rank,
                        selection,
                        options,
                        invocation=invocation,
                        system_name=ns.simulate or "",
                        warnings=warnings,
                        progress=live if rank_world.rank == 0 else None,
                    ),
                    ns.world_timeout,
                )
            else:
                report = runner.run(
                    watch.opener if watch is not None else opener,
                    selection,
                    options,
                    invocation=invocation,
                    system_name=ns.simulate or "",
                    warnings=warnings,
                    progress=watch.progress if watch is not None else None,
                    handle_signals=True,
                    partial=partial,
                )
        if watch is not None and watch.refused is not None:  # --expect builtin, no match
            raise watch.refused
        if hosts is not None and guard.signum is not None and report.signal is None:
            # a simulated rack's ranks run on threads that a signal cannot stop: the run
            # finished, and the report says it was signalled (exit 128 + n)
            import attrs

            report = attrs.evolve(report, signal=signal.Signals(guard.signum).name)
        guard.writing()  # from here a signal is only recorded; a watchdog waits for this
        if watch is not None and hosts is None:
            report = watch.finish(report)
        if judge_cells and root:
            builtin = watch.builtin if watch is not None else None
            exp = builtin if ns.expect == "builtin" else expectations if ns.expect else None
            own = watch.own if watch is not None else frozenset()
            report = judge(report, exp, ns.outlier_pct, ns.cv_threshold, own=own)
        if root:
            _write(live, report, output, stdout=report_stdout())
        code = report.exit_code
        if report.error and (root or world.size > 1):
            _error(rank_prefix(world) + report.error)
    finally:
        output.discard()
        run_finished()
        code = finish(world, code)
    return code


def make_writer(cls: Any, *, verbose: bool = False, perf_formatter: bool = False) -> Any:
    """A writer of class ``cls`` with these flags, whatever its ``__init__`` accepts: the
    flags as keyword arguments if it takes them, else constructed without arguments and the
    flags set as attributes (a plugin writer need not subclass
    :class:`gpubw.writers.Writer`)."""
    import inspect

    flags = {"verbose": verbose, "perf_formatter": perf_formatter}
    try:
        inspect.signature(cls).bind(**flags)
    except TypeError:  # an __init__ without the flags: construct, then set them
        writer = cls()
        with contextlib.suppress(AttributeError):  # __slots__ without them: it ignores flags
            writer.verbose, writer.perf_formatter = verbose, perf_formatter
        return writer
    except ValueError:  # no signature to inspect (a C extension class): just try it
        pass
    return cls(**flags)


def _live_output(
    writer_cls: Any, name: str, output: _Output, *, verbose: bool, perf: bool, mode: str
) -> LiveOutput:
    """The writer, driven as the run goes when the report goes to stdout
    (:class:`gpubw.cli.live.LiveOutput`); a writer that cannot be made is a PluginError."""
    from gpubw.cli.live import LiveOutput

    try:
        writer = make_writer(writer_cls, verbose=verbose, perf_formatter=perf)
    except (GpubwError, OSError):
        raise
    except BaseException as exc:
        raise PluginError(f"writer {name!r} failed: {_describe_base(exc)}") from exc
    from gpubw.cli.guarded import report_stdout  # the held standard output (see there)

    return LiveOutput(writer, name, stream=report_stdout() if output.to_stdout else None, mode=mode)


def _describe_base(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _write(
    live: LiveOutput, report: Any, output: _Output, *, stdout: IO[str] | None = None
) -> None:
    """Write what is left of the report (all of it with -o); a writer's own bug -- any
    exception, ``SystemExit`` or a ``KeyboardInterrupt`` it raised itself (while the report
    is written a signal never raises) -- becomes a PluginError."""
    live.finish(report, output, stdout=stdout)


def _emergency(live: LiveOutput, output: _Output) -> Callable[[Any], None]:
    """What the signal watchdog calls to write the report while the main thread is stuck in
    a plugin: the same writer and output, standard output being the real one (a capture
    may be redirecting the process's fd 1 and ``sys.stdout`` at that moment)."""

    def write(report: Any) -> None:
        from gpubw.runner.capture import real_stdout_fd

        with os.fdopen(os.dup(real_stdout_fd()), "w", encoding="utf-8") as stdout:
            _write(live, report, output, stdout=stdout)

    return write


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
    """``gpubw compare CANDIDATE BASELINE``: 1 if any cell fails, else 0 (nothing printed
    when the result went to a file with -o)."""
    from gpubw.cli.compare import compare_files

    lines, failed = compare_files(argv)
    if lines:
        print("\n".join(lines))
    return 1 if failed else 0


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
