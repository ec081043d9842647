"""Discovery of testcase and writer plugins (entry-point groups ``gpubw.testcases`` and
``gpubw.writers``), and the testcase registry. This is the only module that uses stevedore.

The writer registry (:class:`gpubw.runner.writer_registry.Writers`) was cut from this module
along the seam between the two groups: it finds, loads and orders its entry points with the
discovery here (:func:`discover_group`, :func:`load_group`, :func:`dedupe`,
:func:`list_order`); this module keeps the discovery and the testcases.

Order and indexes of testcases: gpubw's own testcases come first, in the order of
:data:`gpubw.testcases.BUILTINS` (nvbandwidth v0.10's list first, so ``-t 34`` names the same
testcase in both tools), then those of other distributions, sorted by (distribution name,
key). A testcase's key is its entry-point name: an :class:`Entry` carries it with the class,
and :meth:`Entry.create` gives it to the instance (classes are never changed). A plugin that
fails to load keeps its place and index and carries a :class:`LoadFailure`; it never stops
the others from loading; so does a built-in missing from gpubw's installed entry points.
Two entry points with one key: the built-in (or else the first in that order) is kept and
the other is recorded as a :class:`LoadFailure` naming both distributions.

Discovery is lazy: it reads the entry points (names, values, distributions; each
distribution's metadata parsed once) and imports no plugin. What it reads is kept in the
entry-point cache (:mod:`gpubw.runner.plugincache`: both groups, valid while
``sys.path`` and its distributions' ``entry_points.txt`` files are as they were), so that
while nothing is installed, removed or changed a discovery neither scans the installed
distributions nor parses any metadata; a miss scans both groups at once and refreshes it.
An :class:`Entry` imports its plugin's module through stevedore the first time it is
needed, so ``-t KEY`` imports one testcase module and ``-p`` the matched ones;
:meth:`Registry.load` and :attr:`Registry.failures` (the default suite, ``-l``) load them
all; load failures are found then, cache or not. A writer is loaded when it is asked for
by name.

A third-party plugin's import, and its testcase's ``description()``, are plugin code run
as the run's testcases are (:func:`_plugin_call`): whatever it raises, ``SystemExit``, a
``KeyboardInterrupt`` of its own or an ``AssertionError`` included, is that plugin's load
failure (listed; the run goes on), only a signal's interrupt leaves; what it prints to
standard output is captured (:mod:`gpubw.runner.capture`) and becomes the ``output`` of its
testcase's first result; the process state is put back after it
(:func:`gpubw.runner.procstate.kept`). A testcase class whose ``description()`` does not
return a string, or whose ``fixed_size`` is not a bool, is a load failure too.
"""

from __future__ import annotations

import contextlib
import re
import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import attrs

from gpubw.kernels.modules import KernelModule
from gpubw.memory.system import System
from gpubw.model.errors import GpubwError, InterruptedRun, PluginError, UsageError
from gpubw.runner import capture as _capture
from gpubw.runner.plugincache import ENTRY_POINT_GROUPS
from gpubw.runner.procstate import kept
from gpubw.testcases import BUILTINS
from gpubw.testcases.base import Testcase

#: the entry-point groups of testcases, of writers and of run listeners (those the
#: entry-point cache keeps)
TESTCASE_GROUP, WRITER_GROUP, LISTENER_GROUP = ENTRY_POINT_GROUPS
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


class Entry:
    """One testcase in the list: ``cls`` when it loaded, ``failure`` when it did not.

    An entry that :meth:`Registry.discover` found is loaded on first need (``cls``,
    ``failure``, ``description``, ``fixed_size``, :meth:`create`): its plugin's module is
    imported then, through stevedore, once; a load failure becomes its :class:`LoadFailure`,
    as it did when discovery imported everything."""

    __slots__ = ("_cls", "_description", "_failure", "_found", "_output", "index", "key", "plugin")

    def __init__(
        self,
        index: int,
        key: str,
        plugin: str,
        cls: type[Testcase] | None = None,
        failure: LoadFailure | None = None,
        *,
        found: Found | None = None,
    ) -> None:
        self.index = index
        self.key = key
        self.plugin = plugin
        self._cls = cls
        self._failure = failure
        self._found = found  # the entry point to load on first need; None once settled
        self._description: str | None = None
        self._output = ""  # what its module printed while it was imported

    def __repr__(self) -> str:
        state = "not loaded" if self._found is not None else f"cls={self._cls!r}"
        if self._failure is not None:
            state = f"failure={self._failure!r}"
        return f"Entry({self.index}, {self.key!r}, {self.plugin!r}, {state})"

    @property
    def loaded(self) -> bool:
        """Whether the plugin's class was loaded (or failed to), so that ``cls`` imports
        nothing more."""
        return self._found is None

    def _settle(self) -> None:
        found = self._found
        if found is None:
            return
        load_group(TESTCASE_GROUP, [found])
        if found.error:
            self._failure = LoadFailure(found.name, found.plugin, found.error)
        else:
            tc = _as_testcase(found)
            if isinstance(tc, str):
                self._failure = LoadFailure(found.name, found.plugin, tc)
            else:
                self._cls, self._description = tc
        self._output = found.output
        self._found = None

    @property
    def cls(self) -> type[Testcase] | None:
        self._settle()
        return self._cls

    @property
    def failure(self) -> LoadFailure | None:
        self._settle()
        return self._failure

    @property
    def builtin(self) -> bool:
        return self.plugin == BUILTIN_DIST

    @property
    def description(self) -> str:
        """The class's ``description()``, as it was when the entry loaded (checked then)."""
        if self.cls is None:
            return ""
        if self._description is None:  # an Entry made with its class, not discovered
            self._description = str(self.cls.description())
        return self._description

    def take_output(self) -> str:
        """What the plugin's module printed to standard output while it was imported, once
        (the first result of the testcase keeps it); "" after that."""
        out, self._output = self._output, ""
        return out

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
class Found:
    """One entry point of a group: its name, ``module:attr`` value and distribution; ``obj``
    once loaded, ``error`` when it could not be."""

    name: str
    value: str
    plugin: str
    obj: Any = None
    error: str = ""
    loaded: bool = False
    output: str = ""  # what its import printed to standard output


def _describe(exc: BaseException) -> str:
    """``ValueError: bad`` (a failure to load is always named with its type, gpubw's own
    errors too: unlike :func:`gpubw.runner.plugin_errors.describe`)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _scan(groups: Sequence[str]) -> dict[str, list[tuple[str, str, str]]]:
    """Every entry point of each of ``groups`` as (name, value, distribution's name),
    imported by none: one scan of the installed distributions, each distribution's
    metadata parsed once (only those that declare an entry point of ``groups``). An entry
    point two distributions declare alike (name and value) is one, the first's (as
    stevedore sees it)."""
    import importlib.metadata

    names: dict[int, str] = {}
    every = importlib.metadata.entry_points()
    out: dict[str, list[tuple[str, str, str]]] = {}
    for group in groups:
        seen: set[tuple[str, str]] = set()
        found = out[group] = []
        for ep in every.select(group=group):
            if (ep.name, ep.value) in seen:
                continue
            seen.add((ep.name, ep.value))
            dist = getattr(ep, "dist", None)
            if dist is None:
                plugin = "?"
            elif id(dist) in names:
                plugin = names[id(dist)]
            else:
                plugin = names[id(dist)] = dist.metadata["Name"] or "?"
            found.append((ep.name, ep.value, plugin))
    return out


def discover_group(group: str) -> list[Found]:
    """Every entry point of ``group`` (see :func:`_scan`): from the entry-point cache when
    it is valid; else from a scan of both groups, which refreshes the cache (a scan of
    ``group`` alone when the cache is off)."""
    from gpubw.runner import plugincache

    stamp, groups = plugincache.cached_entry_points()
    if groups is None:
        groups = _scan(ENTRY_POINT_GROUPS if stamp is not None else (group,))
        plugincache.store_entry_points(stamp, groups)
    return [Found(name, value, plugin) for name, value, plugin in groups[group]]


class _PluginFailed(Exception):
    """Plugin code ended in ``exc`` (any BaseException): carried through stevedore, which
    hands only an Exception to its failure callback (and re-raises an AssertionError)."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(str(exc))
        self.exc = exc


def _is_interrupt(exc: BaseException, ctrl_c: bool) -> bool:
    """A signal's interrupt, which leaves plugin code: gpubw's InterruptedRun, or a
    KeyboardInterrupt while Python's own SIGINT handler was installed (``ctrl_c``: Ctrl-C,
    which cannot be told from a plugin's own there)."""
    return isinstance(exc, InterruptedRun) or (ctrl_c and isinstance(exc, KeyboardInterrupt))


def _plugin_call(call: Callable[[], Any]) -> tuple[Any, str, BaseException | None]:
    """``call()`` run as plugin code: its standard output captured (unless a capture is
    active already, which then takes it), the process state put back after it
    (:func:`gpubw.runner.procstate.kept`). Returns (its value, what it printed, what it
    raised); a signal's interrupt is raised, never returned."""
    from gpubw.runner import interrupts

    ctrl_c = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    capture = _capture.OutputCapture() if not _capture.active() else None
    guard = interrupts.current()  # plugin code is interruptible as a testcase is (where
    if threading.current_thread() is not threading.main_thread():  # the signal lands)
        guard = None
    value: Any = None
    error: BaseException | None = None
    try:
        with (
            capture or contextlib.nullcontext(),
            kept(),
            guard.interruptible() if guard is not None else contextlib.nullcontext(),
        ):
            value = call()
    except BaseException as exc:
        if _is_interrupt(exc, ctrl_c):
            raise
        error = exc
    return value, capture.text if capture is not None else "", error


def load_group(group: str, found: Sequence[Found]) -> None:
    """Import the objects of ``found`` through stevedore (each ``obj``, or its ``error``):
    only these entry points, never the rest of the group; a third-party plugin's import is
    plugin code (:func:`_plugin_call`)."""
    import importlib.metadata

    import stevedore

    wanted = {(f.name, f.value): f for f in found if not f.loaded and not f.error}
    if not wanted:
        return

    class Only(stevedore.ExtensionManager):
        def list_entry_points(self) -> list[importlib.metadata.EntryPoint]:
            return [importlib.metadata.EntryPoint(n, v, group) for n, v in wanted]

        def _load_one_plugin(self, ep: Any, *args: Any, **kwargs: Any) -> Any:
            one = super()._load_one_plugin
            f = wanted[(ep.name, ep.value)]
            if f.plugin == BUILTIN_DIST:
                return one(ep, *args, **kwargs)
            try:
                value, f.output, error = _plugin_call(lambda: one(ep, *args, **kwargs))
            except InterruptedRun as exc:  # recorded by the guard: the run stops at its
                error = exc  # next step, with the report; this plugin is not loaded
            if error is not None:
                raise _PluginFailed(error)
            return value

    def on_failure(_manager: Any, ep: Any, exc: BaseException) -> None:
        cause = exc.exc if isinstance(exc, _PluginFailed) else exc
        wanted[(ep.name, ep.value)].error = f"could not load {ep.value}: {_describe(cause)}"

    _imported.update(f.plugin for f in wanted.values() if f.plugin != BUILTIN_DIST)
    manager = Only(namespace=group, invoke_on_load=False, on_load_failure_callback=on_failure)
    for ext in manager.extensions:
        wanted[(ext.name, ext.entry_point.value)].obj = ext.plugin
    for f in wanted.values():
        f.loaded = True


#: the distributions other than gpubw whose entry points this process imported (or tried to)
_imported: set[str] = set()


def plugins_imported() -> frozenset[str]:
    """The third-party distributions whose code this process has imported through the
    registry (testcases, writers, kernel modules; also those whose import failed)."""
    return frozenset(_imported)


def list_order(f: Found) -> tuple[int, int, str, str]:
    """Where ``f`` sorts in its group's list: the built-ins first, in their order, then the
    others by (distribution name, key)."""
    if f.plugin == BUILTIN_DIST:
        return (0, _BUILTIN_RANK.get(f.name, len(BUILTIN_ORDER)), "", f.name)
    return (1, 0, f.plugin.lower(), f.name)


def dedupe(found: Iterable[Found], what: str) -> tuple[list[Found], list[LoadFailure]]:
    """Keep the first of each name (found is in list order); the others become failures."""
    kept: dict[str, Found] = {}
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


def _as_testcase(f: Found) -> tuple[type[Testcase], str] | str:
    """(the testcase class of an entry point, its description), or why it cannot be one.
    The class is used as it is: its key comes from the entry point, through :class:`Entry`.
    Looking at a plugin's class runs its code (a metaclass, ``description()``): plugin code
    (:func:`_plugin_call`), whatever it raises a reason."""
    if f.plugin == BUILTIN_DIST:
        return _checked_class(f)
    value, output, error = _plugin_call(lambda: _checked_class(f))
    f.output += output
    if error is not None:
        return f"{f.value}: checking the class failed: {_describe(error)}"
    return value


def _checked_class(f: Found) -> tuple[type[Testcase], str] | str:
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
    if not isinstance(obj.fixed_size, bool):
        return f"{f.value}.fixed_size must be True or False, got {obj.fixed_size!r:.60}"
    doc = obj.__doc__
    if vars(Testcase)["description"].__func__ is getattr(obj.description, "__func__", None) and (
        doc is not None and not isinstance(doc, str)
    ):
        return f"{f.value}'s docstring is {type(doc).__name__} {doc!r:.60}, not a string"
    description = obj.description()
    if not isinstance(description, str):
        return (
            f"{f.value}.description() returned {type(description).__name__} "
            f"{description!r:.60}, not a string (the class docstring, by default)"
        )
    return obj, description


def _missing_builtins(found: list[Found]) -> list[Found]:
    """A failing stand-in for every built-in that gpubw's installed entry points lack (a
    stale installation), so the others keep their indexes."""
    present = {f.name for f in found if f.plugin == BUILTIN_DIST}
    return [
        Found(
            key,
            value,
            BUILTIN_DIST,
            error=f"gpubw's installed entry points lack {key} = {value}; reinstall gpubw",
        )
        for key, value in BUILTINS
        if key not in present
    ]


def _failure_order(f: LoadFailure) -> tuple[bool, str, str]:
    return (f.plugin != BUILTIN_DIST, f.plugin, f.key)


# -- testcases ---------------------------------------------------------------------------
class Registry:
    """The discovered testcases, in list order, and the plugins that failed to load.

    Discovery reads the entry points only; an entry's plugin is imported when the entry is
    first used (so ``-t KEY`` imports that testcase's module alone, ``-p`` the matched
    ones), and :attr:`failures` (what ``-l`` shows) loads them all."""

    def __init__(self, entries: Sequence[Entry], unlisted: Sequence[LoadFailure] = ()) -> None:
        self.entries: tuple[Entry, ...] = tuple(entries)
        self._unlisted = tuple(sorted(unlisted, key=_failure_order))
        self._by_key = {e.key: e for e in self.entries}

    @classmethod
    def discover(cls) -> Registry:
        """Find every testcase plugin: reads the entry points, imports no plugin (nor
        touches a GPU); a duplicate key is settled now, each entry loads on first use."""
        discovered = discover_group(TESTCASE_GROUP)
        discovered += _missing_builtins(discovered)
        found, duplicates = dedupe(sorted(discovered, key=list_order), "testcase")
        entries = [Entry(i, f.name, f.plugin, found=f) for i, f in enumerate(found)]
        return cls(entries, duplicates)

    def load(self, entries: Iterable[Entry] | None = None) -> Registry:
        """Load ``entries`` (default: all) not loaded yet, in one stevedore pass; returns
        self."""
        todo = list(self.entries if entries is None else entries)
        load_group(TESTCASE_GROUP, [e._found for e in todo if e._found is not None])
        for e in todo:
            e._settle()
        return self

    @property
    def failures(self) -> tuple[LoadFailure, ...]:
        """Every plugin that could not be used, gpubw's first, then by (distribution, key):
        the entries that failed to load (this loads them all) and the duplicates' losers."""
        self.load()
        listed = [e.failure for e in self.entries if e.failure is not None]
        return tuple(sorted([*self._unlisted, *listed], key=_failure_order))

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries)

    @property
    def keys(self) -> list[str]:
        return [e.key for e in self.entries]

    @property
    def unlisted_failures(self) -> list[LoadFailure]:
        """Failures without a place in the list: the losers of duplicate keys (known
        without loading anything)."""
        return list(self._unlisted)

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
        or the ``-p`` matches, or the default suite (every testcase but those whose class
        says ``in_default_suite = False``, which run only when named); the selected entries
        are loaded (their plugin modules imported) now, before anything runs, and no other."""
        if testcases and prefixes:
            raise UsageError(
                "testcases and testcase prefixes cannot be used together; give one of them",
                param="testcase_selection",
            )
        selected: list[Selected]
        if testcases:
            selected = [self.resolve(t) for t in testcases]
        elif prefixes:
            selected = list(self.with_prefixes(prefixes))
            if not selected:
                shown = " ".join(repr(p) for p in prefixes)
                raise SelectionError(
                    f"the testcase prefixes {shown} match no testcase (see gpubw -l)"
                )
        else:
            self.load()
            selected = [e for e in self.entries if e.cls is None or e.cls.in_default_suite]
        self.load(s for s in selected if isinstance(s, Entry))
        return selected


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
