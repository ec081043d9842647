"""The report writers installed (entry-point group ``gpubw.writers``): found, loaded and
checked by name.

Cut from :mod:`gpubw.runner.registry` along the seam between its two entry-point groups:
that module keeps the discovery (the entry-point cache, the plugin loader, the list order, the
duplicates) and the testcases; this one is the writers' registry built on it. A writer's
module is imported when it is asked for by name (:meth:`Writers.get`, :func:`writer`), every
writer's for :attr:`Writers.names` and :attr:`Writers.failures`; a plugin that fails to load,
or whose class is neither writer protocol (:mod:`gpubw.writers`), is a
:class:`~gpubw.runner.registry.LoadFailure`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpubw.model.errors import PluginError, UsageError
from gpubw.runner.registry import (
    WRITER_GROUP,
    Found,
    LoadFailure,
    dedupe,
    discover_group,
    list_order,
    load_group,
)


def _is_writer_class(obj: Any) -> bool:
    """Whether ``obj`` is a class of one of the two writer protocols (:mod:`gpubw.writers`)."""
    from gpubw.writers import ReportWriter, StreamingWriter

    return isinstance(obj, type) and issubclass(obj, (ReportWriter, StreamingWriter))


class Writers:
    """The report writers (entry-point group ``gpubw.writers``); a writer's module is
    imported when it is asked for (:meth:`get`), all of them for :attr:`names` and
    :attr:`failures`."""

    def __init__(self, found: Sequence[Found], failures: Sequence[LoadFailure]):
        self._found = {f.name: f for f in found}  # name -> entry point (deduplicated)
        self._duplicates = tuple(failures)

    @classmethod
    def discover(cls) -> Writers:
        found, failures = dedupe(sorted(discover_group(WRITER_GROUP), key=list_order), "writer")
        return cls(found, failures)

    def _settle(self, found: Sequence[Found]) -> None:
        load_group(WRITER_GROUP, found)

    @staticmethod
    def _failure(f: Found) -> LoadFailure | None:
        if f.error:
            return LoadFailure(f.name, f.plugin, f.error)
        if not _is_writer_class(f.obj):
            return LoadFailure(
                f.name,
                f.plugin,
                f"{f.value} has neither write(report, stream) nor begin/testcase/end "
                "(gpubw.writers.ReportWriter, StreamingWriter)",
            )
        return None

    @property
    def failures(self) -> tuple[LoadFailure, ...]:
        """The duplicates' losers, then the writers that could not be loaded (loads all)."""
        self._settle(list(self._found.values()))
        loaded = [self._failure(f) for f in self._found.values()]
        return (*self._duplicates, *(f for f in loaded if f is not None))

    @property
    def names(self) -> list[str]:
        """The names of the writers that loaded, sorted (loads all)."""
        self._settle(list(self._found.values()))
        return sorted(name for name, f in self._found.items() if self._failure(f) is None)

    def get(self, name: str) -> Any:
        """The writer class called ``name``: UsageError if none is installed, PluginError if
        it is installed but could not be loaded."""
        found = self._found.get(name)
        if found is not None:
            self._settle([found])
            fail = self._failure(found)
            if fail is None:
                return found.obj
            raise PluginError(f"writer {name!r} from {fail.plugin!r}: {fail.message}")
        allowed = ", ".join(self.names) or "none is installed"
        raise UsageError(f"unknown output format {name!r}; allowed: {allowed}")


def writer(name: str) -> Any:
    """The writer class called ``name`` (it has ``write(report, stream)``)."""
    return Writers.discover().get(name)
