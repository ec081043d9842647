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

This module is the dispatcher, kept small and light for ``gpubw -l`` (a plain ``-l`` is
answered from :mod:`gpubw.cli.listing`'s cache without the option parser): :func:`main`
picks the work (``-l``, a sub-command of :data:`COMMANDS`, or a run, :mod:`gpubw.cli.run`),
imports the module that does it, and turns its errors into messages and exit codes. Nothing
here imports CUDA at import time: ``gpubw -l`` never touches a GPU.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

from gpubw.cli import _startup
from gpubw.cli.listing import PROG
from gpubw.model.console import to_stderr
from gpubw.model.errors import GpubwError, InterruptedRun, NoDriverError, UsageError

# Everything else is imported where it is used: ``gpubw -l`` from its cache imports none of
# it (argparse, attrs, the options, the registry; see gpubw.cli.listing).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from gpubw.cli.flavour import Flavour

__all__ = ["COMMANDS", "EXIT_PIPE_CLOSED", "main", "preset_names", "run_command"]

#: the sub-commands: name -> (module, function) that runs one with the rest of its command
#: line and returns the exit code; the module is imported only when its command is given
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("gpubw.cli.accept", "check_main"),
    "expect-from": ("gpubw.cli.accept", "expect_from_main"),
    "info": ("gpubw.cli.accept", "info_main"),
    "compare": ("gpubw.cli.compare", "compare_main"),
    "plot": ("gpubw.cli.plot", "main"),
    "fleet": ("gpubw.cli.fleet", "fleet_main"),
    "completion": ("gpubw.cli.completion", "completion_main"),
}


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


# -- systems -------------------------------------------------------------------------------
def preset_names() -> list[str]:
    """Names of the simulated presets."""
    from gpubw.backend.sim import presets

    return sorted(presets.names())


# -- main ----------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code. As the ``gpubw`` command itself (no
    ``argv``), a signal never ends it with a traceback (:mod:`gpubw.cli._startup`), and it ends
    the process once all is written (:func:`gpubw.cli._startup.exit_now`)."""
    return run_command(list(sys.argv[1:] if argv is None else argv), argv is None)


def run_command(args: list[str], command: bool, flavour: Flavour | None = None) -> int:
    """:func:`main`'s work for the gpubw command line ``args``, spoken in ``flavour`` (None:
    gpubw's own; another command's runs only a run: :mod:`gpubw.cli.nvbandwidth`);
    ``command``: this process is the command itself (not a call from Python)."""
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


def _dispatch(args: list[str], command: bool, flavour: Flavour | None) -> int:
    """The command line's work, its errors printed and turned into the exit code."""
    prog = PROG if flavour is None else flavour.prog
    try:
        if command and _startup.looks_like_gpu_run(args):
            # CUDA's start (~0.45 s of driver work) is the longest step of a short run: begin
            # it before the option parser and the run's modules are imported (issue 11 item 5)
            from gpubw.backend.cuda_start import prestart

            prestart()
        return _work(args, command, flavour)
    except SystemExit as exc:  # -h, --version, and plot's own argparse
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except UsageError as exc:
        from gpubw.cli.args import usage_message

        _error(usage_message(exc), prog)
        return 2 if flavour is None else flavour.usage_exit
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
        _error(f"{exc.strerror or exc}{f': {exc.filename}' if exc.filename else ''}", prog)
        return 1
    except GpubwError as exc:
        _error(str(exc), prog)
        return 1
    except OSError as exc:
        _error(f"{exc.strerror or exc}{f': {exc.filename}' if exc.filename else ''}", prog)
        return 1
    finally:
        start = sys.modules.get("gpubw.backend.cuda_start")
        if start is not None:  # a CUDA start nobody took over, contexts still being released
            for problem in start.settle():
                to_stderr(f"{PROG}: warning: freeing CUDA at the end: {problem}")


def _work(args: list[str], command: bool, flavour: Flavour | None) -> int:
    """What the first words ask for: a plain ``-l``, a sub-command, or a run (another
    command's flavour: always a run)."""
    plain = None if flavour is not None else _plain_list(args)
    if plain is not None:  # gpubw -l without the parser (see gpubw.cli.listing)
        return _list_plainly(*plain)
    if flavour is None and args and args[0] in COMMANDS:
        return _subcommand(args)
    return _run(args, command, flavour)


def _subcommand(args: list[str]) -> int:
    """A sub-command of :data:`COMMANDS`, its module imported now, given the rest of the
    command line."""
    import importlib

    module, function = COMMANDS[args[0]]
    code: int = getattr(importlib.import_module(module), function)(args[1:])
    return code


def _no_driver(exc: NoDriverError, flavour: Flavour | None) -> None:
    """No NVIDIA driver: the error, and how to try gpubw without a GPU."""
    from gpubw.cli.args import SUGGESTED_PRESET

    prog = PROG if flavour is None else flavour.prog
    message = str(exc)
    if flavour is not None:  # its command may take no --simulate (gpubw-nvbandwidth)
        before_name = flavour.simulate_hint.split("NAME")[0]
        if not before_name.startswith(flavour.prog):  # e.g. "GPUBW_SIMULATE="
            message = message.replace("--simulate ", before_name)
    _error(message, prog)
    if flavour is not None or "--simulate" not in str(exc):
        hint = f"{PROG} --simulate NAME" if flavour is None else flavour.simulate_hint
        how = hint.replace("NAME", SUGGESTED_PRESET)
        to_stderr(f"{prog}: to try gpubw without a GPU, simulate a system: {how}")
    names = preset_names()
    if names:
        to_stderr(f"{prog}: simulated systems: {', '.join(names)}")


def _run(argv: list[str], command: bool, flavour: Flavour | None) -> int:
    """The run command (:mod:`gpubw.cli.run`, imported now), under a
    :class:`gpubw.runner.interrupts.SignalGuard` from start to exit: a signal at any moment
    after this gives a valid report (see docs/failures.md). In the gpubw process itself
    (``command``), once the report is written and the exit code chosen, SIGINT/SIGTERM are
    ignored: a burst's last signals may arrive while Python shuts down, after it has put
    back the default handlers, and would kill the process (Python leaves ignored signals
    alone). Called in-process, the previous handlers are put back."""
    from gpubw.runner.interrupts import SignalGuard

    guard = SignalGuard()
    guard.owns_process = command  # a second signal ends it, whatever is running
    guard.install()
    recorded = _startup.recorded_signal()  # an MPI rank's signal before the guard
    if recorded is not None:
        guard.adopt(recorded)
    try:
        from gpubw.cli import run  # under the guard: a signal now gives a valid report

        code = run.run_command(argv, guard, flavour)
    finally:
        guard.uninstall(signal.SIG_IGN if command else None)
    if guard.signum is None or guard.report_final:
        # a signal after the complete report was final is absorbed: the exit code is the
        # report's (the report and the process never say different things)
        return code
    from gpubw.model.options import exit_status

    return exit_status(signal=guard.signum)


# -- -l ------------------------------------------------------------------------------------
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
