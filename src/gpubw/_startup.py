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


def restore() -> None:
    """Put back the handlers that were there before :func:`install`."""
    for sig, old in _previous.items():
        signal.signal(sig, signal.SIG_DFL if old is None else old)
    _previous.clear()


install()
