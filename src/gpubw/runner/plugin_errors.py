"""How a plugin's failure is worded: the one description of an exception that plugin code
raised (a testcase's, a writer's), and the one guard that turns a writer's own bug into a
:class:`PluginError` naming it.

Cut out of :mod:`gpubw.runner.core` (testcase errors) and the command (writer errors), which
each wrote the same words by hand.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from gpubw.model.errors import GpubwError, PluginError


def describe(exc: BaseException) -> str:
    """A message for what plugin code raised: gpubw's own errors as they are, others with
    their type (they are plugin bugs): ``ValueError: bad``, or ``SystemExit`` alone."""
    if isinstance(exc, GpubwError):
        return str(exc)
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@contextlib.contextmanager
def writer_errors(name: str) -> Iterator[None]:
    """A writer's own bug (while it is made or while it writes) becomes a PluginError naming
    it; gpubw's errors and OSError (e.g. a closed pipe) pass as they are."""
    try:
        yield
    except (GpubwError, OSError):
        raise
    except BaseException as exc:  # SystemExit, a KeyboardInterrupt the writer raised
        raise PluginError(f"writer {name!r} failed: {describe(exc)}") from exc
