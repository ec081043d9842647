"""The one argument parser class of the ``gpubw`` command and its sub-commands.

:class:`Parser` is argparse with two changes: an error is a
:class:`gpubw.model.errors.UsageError` (one line, exit 2; the command prints it), and a
unique prefix of a long option is that option even when the option has aliases
(``--buf`` is ``--buffer-size``, which is also spelt ``--bufferSize``: argparse alone calls
it ambiguous between the two spellings of one option). :class:`Once` is the action of an
option that takes one value: given twice, it is that usage error, never the last value kept
silently.
"""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from gpubw.model.errors import UsageError

#: the main command's name: its errors need no prefix (the command prints ``gpubw: error:``)
PROG = "gpubw"


class Parser(argparse.ArgumentParser):
    """argparse that raises UsageError and counts an option's aliases once in prefixes."""

    def error(self, message: str) -> NoReturn:
        lead = "" if self.prog == PROG else f"{self.prog}: "
        raise UsageError(f"{lead}{message} (see {self.prog} -h)")

    def _get_option_tuples(self, option_string: str) -> list[Any]:
        """The options a prefix matches, one per option (its first matching spelling)."""
        seen: set[int] = set()
        unique = []
        for match in super()._get_option_tuples(option_string):
            if id(match[0]) not in seen:  # match[0]: the action, shared by its aliases
                seen.add(id(match[0]))
                unique.append(match)
        return unique


#: the namespace attribute where :class:`Once` notes the options given
GIVEN = "_given"


class Once(argparse.Action):
    """Store a value, refusing a second one (nvbandwidth rejects a repeated option, and a
    second ``--expect`` must not silently drop the first)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        seen = namespace.__dict__.setdefault(GIVEN, set())
        if self.dest in seen:
            raise argparse.ArgumentError(self, "given more than once")
        seen.add(self.dest)
        setattr(namespace, self.dest, values)
