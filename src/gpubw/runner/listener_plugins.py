"""Run listeners from plugins: the entry-point group ``gpubw.listeners``, checked.

A distribution declares a :class:`gpubw.model.events.RunListener` subclass under
``[project.entry-points."gpubw.listeners"]``; every run (the ``gpubw`` command's and
:func:`gpubw.run`'s: :func:`gpubw.runner.spec.build_spec`) constructs each one without
arguments and tells it the run's events, as pytest loads the plugins of ``pytest11``. Found
and imported by the registry, the way testcases and writers are (:mod:`gpubw.runner.registry`).

A listener is checked as it is loaded, as pluggy checks hook implementations against their
specifications: every public method of the class must be a hook of
:class:`~gpubw.model.events.RunListener` (:data:`HOOKS`), so that a misspelt hook
(``run_finshed``) is a :class:`PluginError` naming it and the hooks allowed, never a method
that is silently never called.
"""

from __future__ import annotations

import inspect

from gpubw.model.errors import GpubwError, PluginError
from gpubw.model.events import RunListener
from gpubw.runner.plugin_errors import describe
from gpubw.runner.registry import (
    LISTENER_GROUP,
    Found,
    dedupe,
    discover_group,
    list_order,
    load_group,
)

#: the hooks a listener may implement: RunListener's public methods, in the order a run calls
#: them
HOOKS: tuple[str, ...] = tuple(
    name
    for name, value in vars(RunListener).items()
    if inspect.isfunction(value) and not name.startswith("_")
)


def check_listener(cls: object, name: str = "", plugin: str = "") -> type[RunListener]:
    """``cls``, a RunListener subclass every public method of which is a hook; else a
    PluginError naming the listener (``name`` from ``plugin``), the method and the hooks
    allowed."""
    who = f"listener {name!r} from {plugin!r}" if name else "listener"
    if not (isinstance(cls, type) and issubclass(cls, RunListener)):
        raise PluginError(f"{who}: {cls!r} is not a subclass of gpubw.model.events.RunListener")
    for klass in cls.__mro__:
        if klass is RunListener or klass is object:
            continue
        for method, value in vars(klass).items():
            if method.startswith("_") or method in HOOKS:
                continue
            if inspect.isfunction(value) or isinstance(value, (classmethod, staticmethod)):
                raise PluginError(
                    f"{who}: {cls.__qualname__}.{method} is no hook of a run listener; "
                    f"the hooks are {', '.join(HOOKS)} (a helper method's name starts with _)"
                )
    return cls


def plugin_listeners() -> tuple[RunListener, ...]:
    """One of every listener installed (in list order: by distribution, then name), each
    checked (:func:`check_listener`) and constructed; a duplicate name, a listener that
    cannot be imported, checked or constructed is a PluginError naming it."""
    found, duplicates = dedupe(sorted(discover_group(LISTENER_GROUP), key=list_order), "listener")
    if duplicates:
        raise PluginError(f"listener {duplicates[0].key!r}: {duplicates[0].message}")
    load_group(LISTENER_GROUP, found)
    return tuple(_construct(f) for f in found)


def _construct(f: Found) -> RunListener:
    if f.error:
        raise PluginError(f"listener {f.name!r} from {f.plugin!r}: {f.error}")
    cls = check_listener(f.obj, f.name, f.plugin)
    try:
        return cls()
    except GpubwError:
        raise
    except Exception as exc:
        raise PluginError(f"listener {f.name!r} from {f.plugin!r} failed: {describe(exc)}") from exc
