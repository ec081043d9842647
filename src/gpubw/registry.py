"""Discovery of testcase and writer plugins (entry-point groups ``gpubw.testcases`` and
``gpubw.writers``). This is the only module that uses stevedore.

Order and indexes of testcases: gpubw's own testcases come first, in the order of
:data:`gpubw.testcases.BUILTINS` (nvbandwidth's list first, so ``-t 34`` names the same
testcase in both tools), then those of other distributions, sorted by (distribution name,
key). A testcase's key is its entry-point name: an :class:`Entry` carries it with the class,
and :meth:`Entry.create` gives it to the instance (classes are never changed). A plugin that
fails to load keeps its place and index and carries a :class:`LoadFailure`; it never stops
the others from loading; so does a built-in missing from gpubw's installed entry points.
Two entry points with one key: the built-in (or else the first in that order) is kept and
the other is recorded as a :class:`LoadFailure` naming both distributions.
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import attrs

from gpubw.errors import GpubwError, PluginError, UsageError
from gpubw.kernels.modules import KernelModule
from gpubw.system import System
from gpubw.testcase import Testcase
from gpubw.testcases import BUILTINS

TESTCASE_GROUP = "gpubw.testcases"
WRITER_GROUP = "gpubw.writers"
#: The distribution that provides the built-ins.
BUILTIN_DIST = "gpubw"

#: The built-in keys in list order (indexes 0, 1, ...), from :data:`gpubw.testcases.BUILTINS`.
BUILTIN_ORDER: tuple[str, ...] = tuple(key for key, _ in BUILTINS)
_BUILTIN_RANK = {key: i for i, key in enumerate(BUILTIN_ORDER)}


class SelectionError(GpubwError):
    """The testcase selection cannot run at all (e.g. no key matches any ``-p`` prefix)."""


@attrs.frozen
class LoadFailure:
    """A plugin that could not be used: import error, wrong type, duplicate key."""

    key: str
    plugin: str  # the distribution that provides it
    message: str


@attrs.frozen
class Entry:
    """One testcase in the list: ``cls`` when it loaded, ``failure`` when it did not."""

    index: int
    key: str
    plugin: str
    cls: type[Testcase] | None = None
    failure: LoadFailure | None = None

    @property
    def builtin(self) -> bool:
        return self.plugin == BUILTIN_DIST

    @property
    def description(self) -> str:
        return self.cls.description() if self.cls is not None else ""

    @property
    def fixed_size(self) -> bool:
        return bool(self.cls is not None and self.cls.fixed_size)

    def create(self, system: System) -> Testcase:
        """A new instance of the testcase on ``system``, under this entry's key; PluginError
        with the reason if the plugin did not load."""
        if self.cls is None:
            why = self.failure.message if self.failure is not None else "no class"
            raise PluginError(f"testcase {self.key!r} from {self.plugin!r} did not load: {why}")
        return self.cls(system, self.key)


@attrs.frozen
class Unresolved:
    """A ``-t`` item that names no testcase (nvbandwidth's "not found" / "out of bound")."""

    token: str
    message: str


Selected = Entry | Unresolved


# -- discovery ---------------------------------------------------------------------------
@attrs.define
class _Found:
    name: str
    value: str
    plugin: str
    obj: Any = None
    error: str = ""


def _owners(group: str) -> dict[tuple[str, str], list[str]]:
    """(entry-point name, value) -> names of the distributions declaring it."""
    owners: dict[tuple[str, str], list[str]] = {}
    for ep in importlib.metadata.entry_points(group=group):
        dist = getattr(ep, "dist", None)
        name = dist.metadata["Name"] if dist is not None else "?"
        owners.setdefault((ep.name, ep.value), []).append(name)
    return owners


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _discover(group: str) -> list[_Found]:
    """Load every entry point of ``group`` through stevedore, failures included."""
    import stevedore

    # stevedore caches the entry points of a namespace per process; drop that so plugins
    # installed (or put on sys.path) since the last discovery are seen.
    stevedore.ExtensionManager.ENTRY_POINT_CACHE.pop(group, None)
    failed: list[tuple[Any, BaseException]] = []

    def on_failure(_manager: Any, ep: Any, exc: BaseException) -> None:
        failed.append((ep, exc))

    manager = stevedore.ExtensionManager(
        namespace=group, invoke_on_load=False, on_load_failure_callback=on_failure
    )
    owners = _owners(group)

    def plugin_of(ep: Any) -> str:
        names = owners.get((ep.name, ep.value)) or ["?"]
        return names[0]

    found = [
        _Found(ext.name, ext.entry_point.value, plugin_of(ext.entry_point), ext.plugin)
        for ext in manager.extensions
    ]
    found += [
        _Found(ep.name, ep.value, plugin_of(ep), error=f"could not load {ep.value}: {_describe(e)}")
        for ep, e in failed
    ]
    return found


def _sort_key(f: _Found) -> tuple[int, int, str, str]:
    if f.plugin == BUILTIN_DIST:
        return (0, _BUILTIN_RANK.get(f.name, len(BUILTIN_ORDER)), "", f.name)
    return (1, 0, f.plugin.lower(), f.name)


def _dedupe(found: Iterable[_Found], what: str) -> tuple[list[_Found], list[LoadFailure]]:
    """Keep the first of each name (found is in list order); the others become failures."""
    kept: dict[str, _Found] = {}
    failures = []
    for f in found:
        first = kept.get(f.name)
        if first is None:
            kept[f.name] = f
            continue
        failures.append(
            LoadFailure(
                f.name,
                f.plugin,
                f"duplicate {what} {f.name!r}: declared by {first.plugin!r} ({first.value}) "
                f"and by {f.plugin!r} ({f.value}); {first.plugin!r}'s is used",
            )
        )
    return list(kept.values()), failures


def _as_testcase(f: _Found) -> type[Testcase] | str:
    """The testcase class of an entry point, or why it cannot be one. The class is used as
    it is: its key comes from the entry point, through :class:`Entry`."""
    obj = f.obj
    if not (isinstance(obj, type) and issubclass(obj, Testcase)):
        what = (
            f"the class {obj.__module__}.{obj.__qualname__}"
            if isinstance(obj, type)
            else f"{type(obj).__name__} {obj!r:.60}"
        )
        return f"{f.value} is {what}, not a subclass of gpubw.Testcase"
    for klass in obj.__mro__:
        if klass is Testcase:
            break
        if "key" in vars(klass):
            # An old-style plugin: refused rather than half-honoured, so that no key is
            # ever anything but the entry-point name.
            return (
                f"{f.value} sets key = {vars(klass)['key']!r} in class {klass.__qualname__}; "
                f"a testcase's key is its entry-point name ({f.name!r}): remove the attribute"
            )
    modules = obj.kernel_modules
    if not (isinstance(modules, tuple) and all(isinstance(m, KernelModule) for m in modules)):
        return (
            f"{f.value}.kernel_modules must be a tuple of gpubw.KernelModule, got {modules!r:.80}"
        )
    return obj


def _missing_builtins(found: list[_Found]) -> list[_Found]:
    """A failing stand-in for every built-in that gpubw's installed entry points lack (a
    stale installation), so the others keep their indexes."""
    present = {f.name for f in found if f.plugin == BUILTIN_DIST}
    return [
        _Found(
            key,
            value,
            BUILTIN_DIST,
            error=f"gpubw's installed entry points lack {key} = {value}; reinstall gpubw",
        )
        for key, value in BUILTINS
        if key not in present
    ]


# -- testcases ---------------------------------------------------------------------------
class Registry:
    """The discovered testcases, in list order, and the plugins that failed to load."""

    def __init__(self, entries: Sequence[Entry], failures: Sequence[LoadFailure]) -> None:
        self.entries: tuple[Entry, ...] = tuple(entries)
        self.failures: tuple[LoadFailure, ...] = tuple(failures)
        self._by_key = {e.key: e for e in self.entries}

    @classmethod
    def discover(cls) -> Registry:
        """Load every testcase plugin (imports their modules; touches no GPU)."""
        discovered = _discover(TESTCASE_GROUP)
        discovered += _missing_builtins(discovered)
        found, failures = _dedupe(sorted(discovered, key=_sort_key), "testcase")
        entries = []
        for index, f in enumerate(found):
            if f.error:
                fail = LoadFailure(f.name, f.plugin, f.error)
                failures.append(fail)
                entries.append(Entry(index, f.name, f.plugin, failure=fail))
                continue
            tc = _as_testcase(f)
            if isinstance(tc, str):
                fail = LoadFailure(f.name, f.plugin, tc)
                failures.append(fail)
                entries.append(Entry(index, f.name, f.plugin, failure=fail))
            else:
                entries.append(Entry(index, f.name, f.plugin, cls=tc))
        failures.sort(key=lambda x: (x.plugin != BUILTIN_DIST, x.plugin, x.key))
        return cls(entries, failures)

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries)

    @property
    def keys(self) -> list[str]:
        return [e.key for e in self.entries]

    @property
    def unlisted_failures(self) -> list[LoadFailure]:
        """Failures without a place in the list: the losers of duplicate keys."""
        listed = {e.failure for e in self.entries if e.failure is not None}
        return [f for f in self.failures if f not in listed]

    def by_key(self, key: str) -> Entry | None:
        return self._by_key.get(key)

    def by_index(self, index: int) -> Entry | None:
        return self.entries[index] if 0 <= index < len(self.entries) else None

    def resolve(self, token: str) -> Selected:
        """One ``-t`` item, nvbandwidth's way: an integer (C ``strtol`` rules: leading blanks
        and a sign allowed, the whole string must parse, "" is 0) is an index; anything
        else must equal a key exactly."""
        index = strtol_index(token)
        if index is not None:
            entry = self.by_index(index)
            if entry is None:
                return Unresolved(token, f"Testcase index {index} out of bound")
            return entry
        entry = self.by_key(token)
        if entry is None:
            return Unresolved(token, f"Testcase {token} not found")
        return entry

    def with_prefixes(self, prefixes: Sequence[str]) -> list[Entry]:
        """Every entry whose key starts with any prefix, in list order ("" matches all)."""
        return [e for e in self.entries if any(e.key.startswith(p) for p in prefixes)]

    def select(self, testcases: Sequence[str] = (), prefixes: Sequence[str] = ()) -> list[Selected]:
        """What to run: ``-t`` items in order (duplicates kept, unresolved ones included),
        or the ``-p`` matches, or everything."""
        if testcases and prefixes:
            raise UsageError(
                "testcases and testcase prefixes cannot be used together; give one of them",
                param="testcase_selection",
            )
        if testcases:
            return [self.resolve(t) for t in testcases]
        if prefixes:
            matched = self.with_prefixes(prefixes)
            if not matched:
                shown = " ".join(repr(p) for p in prefixes)
                raise SelectionError(
                    f"the testcase prefixes {shown} match no testcase (see gpubw -l)"
                )
            return list(matched)
        return list(self.entries)


_BLANKS = " \t\n\v\f\r"
_STRTOL = re.compile(r"[+-]?[0-9]+")


def strtol_index(token: str) -> int | None:
    """The integer ``token`` is under C ``strtol`` (base 10) when it consumes the whole
    string, else None. Leading blanks and a sign are allowed; "" is 0 (strtol consumes
    nothing and the rest is empty)."""
    if token == "":
        return 0
    body = token.lstrip(_BLANKS)
    if _STRTOL.fullmatch(body):
        return int(body)
    return None


# -- writers -----------------------------------------------------------------------------
class Writers:
    """The report writers (entry-point group ``gpubw.writers``)."""

    def __init__(self, writers: dict[str, tuple[str, Any]], failures: Sequence[LoadFailure]):
        self._writers = writers  # name -> (plugin, class)
        self.failures = tuple(failures)

    @classmethod
    def discover(cls) -> Writers:
        found, failures = _dedupe(sorted(_discover(WRITER_GROUP), key=_sort_key), "writer")
        writers: dict[str, tuple[str, Any]] = {}
        for f in found:
            if f.error:
                failures.append(LoadFailure(f.name, f.plugin, f.error))
            elif not callable(getattr(f.obj, "write", None)):
                failures.append(
                    LoadFailure(f.name, f.plugin, f"{f.value} has no write(report, stream)")
                )
            else:
                writers[f.name] = (f.plugin, f.obj)
        return cls(writers, failures)

    @property
    def names(self) -> list[str]:
        """The names of the writers that loaded, sorted."""
        return sorted(self._writers)

    def get(self, name: str) -> Any:
        """The writer class called ``name``: UsageError if none is installed, PluginError if
        it is installed but could not be loaded."""
        if name in self._writers:
            return self._writers[name][1]
        for fail in self.failures:
            if fail.key == name:
                raise PluginError(f"writer {name!r} from {fail.plugin!r}: {fail.message}")
        allowed = ", ".join(self.names) or "none is installed"
        raise UsageError(f"unknown output format {name!r}; allowed: {allowed}")


def writer(name: str) -> Any:
    """The writer class called ``name`` (it has ``write(report, stream)``)."""
    return Writers.discover().get(name)
