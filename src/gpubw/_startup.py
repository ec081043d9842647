"""A signal while the ``gpubw`` command is still starting ends it quietly.

``gpubw/__init__.py`` imports this first; importing it calls :func:`install`. Only when
this process *is* the gpubw command (``python -m gpubw ...``, or the ``gpubw`` script),
SIGINT/SIGTERM during the imports exit at once with 128 + the signal (130, 143) and no
traceback: nothing has been written yet, so nothing is lost. A signal the parent process
set to be ignored stays ignored. :func:`gpubw.cli.main` puts the previous handlers back as
it starts, and the run then installs its :class:`gpubw.interrupts.SignalGuard`. Imported
as a library, nothing is touched.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from typing import Any

_previous: dict[int, Any] = {}
_SCRIPT_NAMES = ("gpubw", "gpubw.exe", "gpubw-script.py")


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


def install() -> None:
    """Exit quietly on SIGINT/SIGTERM until :func:`restore` (only in the gpubw command)."""
    if _previous or threading.current_thread() is not threading.main_thread():
        return
    if not is_command():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            _previous[sig] = signal.signal(sig, exit_quietly)


#: long options that mean "not a run on the real GPUs"; argparse takes any unique prefix of
#: them, so a token that is a prefix of one (3 characters or more) counts as it
_NOT_A_RUN = ("--simulate", "--list", "--help", "--version")
#: short options, alone or in a cluster (-jl), that mean the same
_NOT_A_RUN_SHORT = frozenset("lhV")
#: first words that are other commands than a run
_SUBCOMMANDS = ("plot", "compare", "check", "expect-from", "info")


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
    for sig, old in _previous.items():
        signal.signal(sig, signal.SIG_DFL if old is None else old)
    _previous.clear()


install()
