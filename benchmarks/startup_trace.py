"""A wall-clock timeline of one gpubw command, every thread (issue 11 item 5).

    GPUBW_T0=$(date +%s.%N) python3 benchmarks/startup_trace.py [--min-ms 2] -- GPUBW-ARGS...

cProfile charges a helper thread's work to whatever the main thread waits in, so it cannot
say where a one-testcase run spends its second. This runs ``gpubw.cli.command.main()`` with
``sys.argv`` set to GPUBW-ARGS (the command's own path: its early CUDA start and its exit) in
this process with every function of the ``gpubw`` modules (wrapped as each module is
imported, so the imports happen when the command does them), every ``cuda.bindings.driver``
call and every ``pynvml`` call timed by wall clock, and prints to stderr each call that took
``--min-ms`` or more: start and end in ms since the process started (``GPUBW_T0``, the shell's
clock before ``python3`` ran; else since this script started), thread, depth, name. The last
line says when the command's work ended (its ``exit_now`` called, or ``main`` returned); the
shell that ran it knows when the process ended, so the exit's cost (and printing the
timeline) is the difference. Wrapping costs ~1 us a call; the command's own time is
what the lines show, not a smaller figure.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import os
import sys
import threading
import time
import types
from typing import Any

T0 = float(os.environ.get("GPUBW_T0") or time.time())
_events: list[tuple[float, float, str, int, str]] = []
_depth = threading.local()
_lock = threading.Lock()
MIN_S = 0.002


def _timed(name: str, fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        depth = getattr(_depth, "n", 0)
        _depth.n = depth + 1
        start = time.time()
        try:
            return fn(*args, **kwargs)
        finally:
            end = time.time()
            _depth.n = depth
            if end - start >= MIN_S:
                with _lock:
                    _events.append((start, end, threading.current_thread().name, depth, name))

    return wrapper


def _wrap_module(module: types.ModuleType, prefix: str) -> None:
    for attr, value in list(vars(module).items()):
        if attr.startswith("__"):
            continue
        if isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
            setattr(module, attr, _timed(f"{prefix}.{attr}", value))
        elif isinstance(value, type) and value.__module__ == module.__name__:
            for name, member in list(vars(value).items()):
                if name.startswith("__") and name not in ("__init__", "__enter__", "__exit__"):
                    continue
                label = f"{prefix}.{value.__name__}.{name}"
                try:
                    if isinstance(member, types.FunctionType):
                        setattr(value, name, _timed(label, member))
                    elif isinstance(member, staticmethod):
                        setattr(value, name, staticmethod(_timed(label, member.__func__)))
                    elif isinstance(member, classmethod):
                        setattr(value, name, classmethod(_timed(label, member.__func__)))
                except (AttributeError, TypeError):  # frozen or slotted: leave it
                    pass


def _wrap_callables(module: types.ModuleType, prefix: str, starts: tuple[str, ...]) -> None:
    for attr, value in list(vars(module).items()):
        if attr.startswith(starts) and callable(value) and not isinstance(value, type):
            setattr(module, attr, _timed(f"{prefix}.{attr}", value))


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps each gpubw module (and the driver and NVML bindings) right after it runs."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if not (fullname.startswith("gpubw") or fullname in ("cuda.bindings.driver", "pynvml")):
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            start = time.time()
            original(module)
            with _lock:
                _events.append(
                    (start, time.time(), threading.current_thread().name, -1, f"import {fullname}")
                )
            if fullname == "cuda.bindings.driver":
                _wrap_callables(module, "cu", ("cu",))
            elif fullname == "pynvml":
                _wrap_callables(module, "nvml", ("nvml",))
            elif fullname != "gpubw.cli._startup":
                _wrap_module(module, fullname.removeprefix("gpubw."))

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _print_trace(code: int, returned: float, began: float) -> None:
    """The timeline on stderr (once): every call that took ``MIN_S`` or more, then when the
    command's work ended."""
    if _printed:
        return
    _printed.append(True)
    out = sys.stderr
    print(f"# python start -> trace script: {(began - T0) * 1e3:.0f} ms", file=out)
    for start, end, thread, depth, name in sorted(_events):
        pad = "  " * max(depth, 0)
        print(
            f"{(start - T0) * 1e3:8.1f} {(end - T0) * 1e3:8.1f} {(end - start) * 1e3:7.1f}"
            f"  {thread[:18]:18} {pad}{name}",
            file=out,
        )
    print(f"# main returned {code} at {(returned - T0) * 1e3:.1f} ms", file=out)
    out.flush()


_printed: list[bool] = []


def main() -> int:
    """Run ``gpubw GPUBW-ARGS`` as the command itself (``main()`` with ``sys.argv`` set, so it
    starts CUDA before its parser as the command does and ends through its own
    ``exit_now``), the timeline printed when the command's work is done: as ``exit_now``
    is called (before the process ends through it), else when ``main`` returns."""
    global MIN_S
    args = sys.argv[1:]
    if args[:1] == ["--min-ms"]:
        MIN_S = float(args[1]) / 1000
        args = args[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    began = time.time()
    sys.meta_path.insert(0, _Finder())
    sys.argv = ["gpubw", *args]  # so gpubw.cli._startup takes it for the command
    from gpubw.cli import _startup
    from gpubw.cli.command import main as gpubw_main

    real_exit = _startup.exit_now

    def exit_now(code: int) -> None:
        _print_trace(code, time.time(), began)
        real_exit(code)

    _startup.exit_now = exit_now  # type: ignore[assignment]
    code = gpubw_main()
    _print_trace(code, time.time(), began)  # exit_now returned: the command's exit is Python's
    return code


if __name__ == "__main__":
    sys.exit(main())
