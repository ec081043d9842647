"""The ``gpubw`` command's start: a signal at any moment ends it without a traceback.

The entry points (``gpubw/__main__.py`` and :mod:`gpubw.cli.command`, which the ``gpubw`` script
imports) call :func:`install` as their first statement, before any heavy import; importing
``gpubw`` itself touches no handler. Only when this process *is* the gpubw command
(``python -m gpubw ...``, or the ``gpubw`` script) does anything change:

1. :func:`install`: SIGINT/SIGTERM exit at once with 128 + the signal (130, 143), quietly:
   nothing has been written yet, so nothing is lost. It uses only modules the interpreter
   has already loaded (``_signal``, ``os``, ``sys``): nothing to interrupt on the way.
2. :func:`defer` (:func:`gpubw.cli.command.main`, as it starts its work): the first signal raises
   :class:`~gpubw.model.errors.InterruptedRun` where the command is, so that what it was doing
   (writing a file) is undone by its own clean-up; every later signal is only recorded, so
   no clean-up and no error report can be torn by a burst. A run then installs its
   :class:`gpubw.runner.interrupts.SignalGuard`, which takes over the same two signals.
3. :func:`ignore` (as ``main`` returns): the exit code is chosen, signals change nothing.

A signal the parent process set to be ignored stays ignored throughout. Imported as a
library, or called off the main thread, nothing is touched.
"""

from __future__ import annotations

import _signal
import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from typing import Any

#: the signals the command handles (numbers: ``signal`` costs ~9 ms of imports (enum))
SIGINT, SIGTERM = _signal.SIGINT, _signal.SIGTERM
HANDLED = (SIGINT, SIGTERM)
_previous: dict[int, Any] = {}
#: the command's script names: gpubw's, and gpubw-nvbandwidth's (or a link named nvbandwidth to
#: it, standing in for NVIDIA's binary)
_SCRIPT_NAMES = ("gpubw", "gpubw.exe", "gpubw-script.py", "gpubw-nvbandwidth", "nvbandwidth")
#: the first signal :func:`defer`'s (or an MPI rank's recording) handler saw (None: none yet)
_deferred_signal: int | None = None
#: True in an MPI rank of several: signals before its run are recorded, not acted on
_recording = False
#: the standard descriptors (0, 1, 2) that were closed when the command started and that
#: :func:`standard_streams` opened on /dev/null: ``-o /dev/stdout`` there would lose the report
closed_at_start: set[int] = set()


def exit_quietly(signum: int, _frame: object) -> None:
    """A signal handler that ends the process at once with 128 + the signal, quietly."""
    os._exit(128 + signum)


def is_command() -> bool:
    """True when this process was started as the gpubw command."""
    orig = list(getattr(sys, "orig_argv", []))
    if "-m" in orig:
        i = orig.index("-m")
        if orig[i + 1 : i + 2] == ["gpubw"]:
            return True
    if "-mgpubw" in orig:
        return True
    argv0 = sys.argv[0] if sys.argv else ""
    return os.path.basename(argv0) in _SCRIPT_NAMES


def _set(handler: Any) -> bool:
    """Install ``handler`` for SIGINT/SIGTERM where not ignored; False off the main thread.
    The handlers found first are kept for :func:`restore`."""
    try:
        for sig in HANDLED:
            old = _signal.getsignal(sig)
            if old is _signal.SIG_IGN and sig not in _previous:
                continue
            _previous.setdefault(sig, old)
            _signal.signal(sig, handler)
    except ValueError:  # not the main thread
        return False
    return True


def install() -> None:
    """Exit quietly on SIGINT/SIGTERM (only in the gpubw command, main thread). Under an MPI
    launch of several ranks a signal is only recorded instead (:func:`recorded_signal`):
    a rank that left now would leave the others waiting in ``MPI_Init`` for ever, so it
    goes on to meet them and the ranks stop together (:mod:`gpubw.cli.together`)."""
    if _previous or not is_command():
        return
    global _recording
    from gpubw.world.launch_env import several_ranks

    _recording = several_ranks(os.environ)
    _set(_record if _recording else exit_quietly)
    standard_streams()


def _record(signum: int, _frame: object) -> None:
    global _deferred_signal
    if _deferred_signal is None:
        _deferred_signal = signum


def recorded_signal() -> int | None:
    """The first signal an MPI rank received before its run took the signals over."""
    return _deferred_signal if _recording else None


def standard_streams() -> None:
    """Descriptors 0, 1 and 2 open, and gpubw's text never unencodable on them (the
    command only, before it opens any file):

    * a closed descriptor (``2>&-``) is opened on /dev/null, so that no file gpubw opens
      later (a report, a temporary file) can become standard output or error and receive
      what is meant for them; Python left ``sys.stdout`` / ``sys.stderr`` None for it, and
      gets a stream on /dev/null instead (``print`` to a None stderr writes to stdout);
    * standard output and error write what their encoding cannot say as backslash escapes
      (``PYTHONIOENCODING=ascii``: ``\xb7`` for a middle dot) instead of failing."""
    for fd, flags in ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
        except OSError:
            closed_at_start.add(fd)
            null = os.open(os.devnull, flags)
            if null != fd:  # not the lowest free descriptor: lower ones are open now
                os.dup2(null, fd)
                os.close(null)
    for name, fd in (("stdout", 1), ("stderr", 2)):
        stream = getattr(sys, name)
        if stream is None:
            stream = open(fd, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
            setattr(sys, name, stream)
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:  # noqa: SIM105 (contextlib is not imported yet: start-up time)
                reconfigure(errors="backslashreplace")
            except (OSError, ValueError):
                pass


def _raise_once(signum: int, _frame: object) -> None:
    global _deferred_signal
    if _deferred_signal is not None:
        return  # a burst: the first one is being handled; this one is only absorbed
    _deferred_signal = signum
    from gpubw.model.errors import InterruptedRun  # already imported by gpubw.cli.command

    raise InterruptedRun(signum)


def defer() -> None:
    """From now on the first SIGINT/SIGTERM raises InterruptedRun once; later ones are
    absorbed (only after :func:`install` took the signals, i.e. in the command; an MPI
    rank keeps recording them)."""
    if _previous and not _recording:
        _set(_raise_once)


def deferring() -> bool:
    """Whether :func:`defer`'s handler is the one installed now."""
    return any(_signal.getsignal(sig) is _raise_once for sig in HANDLED)


def ignore() -> None:
    """Signals change nothing from now on (the command's exit code is chosen)."""
    if _previous:
        _set(_signal.SIG_IGN)


#: long options that mean "not a run on the real GPUs"; argparse takes any unique prefix of
#: them, so a token that is a prefix of one (3 characters or more) counts as it
_NOT_A_RUN = ("--simulate", "--list", "--help", "--version")
#: short options, alone or in a cluster (-jl), that mean the same
_NOT_A_RUN_SHORT = frozenset("lhV")
#: first words that are other commands than a run
_SUBCOMMANDS = ("plot", "compare", "fleet", "check", "expect-from", "info", "completion")


def looks_like_gpu_run(args: list[str]) -> bool:
    """Whether this command line is, before any parsing, a run on the real GPUs: no
    subcommand, no ``--simulate``, ``-l``, ``-h`` or ``--version`` (or an abbreviation of
    them). The command then starts CUDA (:mod:`gpubw.backend.cuda_start`) before it even
    imports its option parser. Only a guess, erring towards False: a False costs ~20 ms (CUDA
    starts after the parse instead), a True for a command line the parser then refuses costs
    the wait for ``cuInit`` before the usage error (the contexts are not made)."""
    if args and args[0] in _SUBCOMMANDS:
        return False
    for token in args:
        if token == "--":
            break
        if token.startswith("--"):
            name = token.split("=", 1)[0]
            if len(name) >= 3 and any(long.startswith(name) for long in _NOT_A_RUN):
                return False
        elif token[:1] == "-" and token[1:2].isalpha() and _NOT_A_RUN_SHORT & set(token[1:]):
            return False
    return True


#: the module that, once imported, makes MPI_Finalize part of the interpreter's exit
_MPI_MODULE = "mpi4py.MPI"


def exit_now(code: int) -> None:
    """End the gpubw command now with ``code``, the way it would end anyway but without
    Python's own finalization: the atexit handlers run, standard output and error are
    flushed, then ``os._exit``. Tearing down the ~300 modules of a run does nothing the
    command needs and took ~40 ms of a one-testcase run (issue 11 item 5). Returns without
    doing anything (the caller then returns as usual) unless this process is the gpubw
    command, the main thread is the only thread left, MPI is not loaded (mpi4py finalizes MPI
    from the interpreter's own C-level exit, which ``os._exit`` would skip: a rank leaving
    without ``MPI_Finalize`` may fail its launcher), and both streams flush."""
    import threading

    if not is_command() or threading.active_count() > 1 or _MPI_MODULE in sys.modules:
        return
    if threading.current_thread() is not threading.main_thread():
        return
    import atexit

    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed or broken stream: Python's exit deals with it
        return
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(code)


def restore() -> None:
    """Put back the handlers that were there before :func:`install`."""
    global _deferred_signal, _recording
    for sig, old in _previous.items():
        _signal.signal(sig, _signal.SIG_DFL if old is None else old)
    _previous.clear()
    _deferred_signal = None
    _recording = False
