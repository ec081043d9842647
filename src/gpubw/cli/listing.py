"""``gpubw -l``: the testcase list as text or JSON, kept in a cache file between runs.

Listing every testcase means importing every plugin module (their docstrings are the
descriptions); a cache file keeps the rendered list (text and JSON) so that a second
``gpubw -l`` imports none of them, nor attrs, importlib.metadata or the plugin loader (issue 11).
:func:`main` is ``gpubw -l`` for the plain forms (``-l``, ``-j``, ``--format text|json``,
``-o FILE``); :mod:`gpubw.cli.command` hands it those before it builds its parser.

The cache (``$GPUBW_CACHE_DIR``, else ``$XDG_CACHE_HOME/gpubw``, else ``~/.cache/gpubw``; one
file per interpreter and ``sys.path``: ``testcase-list-<crc>.bin``; its key, file format and
fingerprints are :mod:`gpubw.runner.plugincache`'s, shared with the registry's entry-point cache)
is used only while all of this is as it was when it was written:

* gpubw's version, the interpreter (``sys.executable``, ``sys.prefix``, its version) and
  ``sys.path``;
* the modification time of every ``sys.path`` entry and of every ``entry_points.txt`` in
  their ``*.dist-info`` / ``*.egg-info`` folders (as the plugin loader's entry-point cache: a
  distribution installed, removed or changed);
* the modification time and size of every module file the discovery imported, outside the
  standard library: gpubw's own, every plugin's (an edited description in an editable
  install) and their dependencies'.

A list in which any testcase failed to load is never cached: the next ``-l`` imports the
plugins again, so a failure shows as it is now, never as it was. Anything else the output
could depend on (a plugin reading the environment in its docstring's place) is not tracked;
``GPUBW_NO_LIST_CACHE=1`` lists without the cache (neither read nor written). A cache that
cannot be read or written is never an error: the list is made by discovery then. A cache
file is read only when gpubw may trust it (a regular file of this user's that no one else
may write, of bounded size: :func:`gpubw.runner.plugincache.load_file`), its fields must
have the types gpubw writes, and what it holds is printed through :func:`json_escaped`, so even
a forged one cannot send escape sequences to the terminal.
"""

from __future__ import annotations

import os
import sys

from gpubw.runner.plugincache import (
    NO_CACHE_ENV,
    cache_path,
    header,
    load_file,
    path_stamp,
    stat_of,
    write_file,
)
from gpubw.version import __version__

PROG = "gpubw"
#: what -l/--list writes
LIST_FORMATS = ("text", "json")
__all__ = [
    "LIST_FORMATS",
    "NO_CACHE_ENV",
    "PROG",
    "json_escaped",
    "listing",
    "main",
    "plain_list_args",
    "render",
]


# -- rendering ---------------------------------------------------------------------------
def render(registry: object, as_json: bool) -> str:
    """The list of a :class:`gpubw.runner.registry.Registry` (every entry loaded) as ``-l``
    prints it."""
    import json

    from gpubw.model.schemas import LIST_VERSION  # (a list from the cache imports nothing)

    entries = registry.entries  # type: ignore[attr-defined]
    if as_json:
        items: list[dict[str, object]] = [
            {
                "index": e.index,
                "key": e.key,
                "description": e.description,
                "plugin": e.plugin,
                "fixed_size": e.fixed_size,
                "load_failure": e.failure.message if e.failure else None,
            }
            for e in entries
        ]
        items += [
            {
                "index": None,
                "key": f.key,
                "description": "",
                "plugin": f.plugin,
                "fixed_size": False,
                "load_failure": f.message,
            }
            for f in registry.unlisted_failures  # type: ignore[attr-defined]
        ]
        doc = {
            "schema_version": LIST_VERSION,
            "tool": PROG,
            "tool_version": __version__,
            "testcases": items,
        }
        return json_escaped(json.dumps(doc, indent=2) + "\n")
    lines = [f"{PROG} Version: {__version__}", "", "Index, Name:", "\tDescription"]
    lines.append("=" * 23)
    for e in entries:
        lines.append(f"{e.index}, {e.key}:")
        if e.failure is not None:
            lines.append(f"\t(could not be loaded from {e.plugin!r}: see below)")
        else:
            lines += ["\t" + line for line in (e.description or "(no description)").splitlines()]
            if not e.builtin:
                lines.append(f"\t(from {e.plugin})")
        lines.append("")
    failures = registry.failures  # type: ignore[attr-defined]
    if failures:
        lines.append("Plugins that could not be loaded:")
        lines += [f"\t{f.key} ({f.plugin}): {f.message}" for f in failures]
        lines.append("")
    return json_escaped("\n".join(lines) + "\n")


def json_escaped(text: str) -> str:
    """``text`` with every character that is not printable, other than a newline or a tab (an
    ANSI escape sequence's ESC, a carriage return, a NUL), written as a ``\\uXXXX`` escape:
    what ``-l`` prints cannot move the cursor or recolour the terminal, whether a plugin's
    description holds it or a cache file (read as data) does. A list that JSON made holds
    none (json.dumps escapes them itself), so the escape keeps JSON valid. (Not
    :func:`gpubw.model.console.printable`, whose Python escapes would not be JSON.)"""
    if text.replace("\n", "").replace("\t", "").isprintable():  # the usual case, at C speed
        return text
    return "".join(c if c.isprintable() or c in "\n\t" else _escape(c) for c in text)


def _escape(c: str) -> str:
    code = ord(c)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # a UTF-16 surrogate pair, as JSON writes one
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


# -- the cache ----------------------------------------------------------------------------
def _module_files() -> list[str]:
    """The files of every module imported so far (after a discovery: gpubw's, the plugins'
    and their dependencies'), less the standard library's (the interpreter's version
    covers those)."""
    stdlib = os.path.dirname(os.__file__) + os.sep
    files = set()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not isinstance(path, str):
            continue
        if path.startswith(stdlib) and not any(
            part in path for part in ("site-packages", "dist-packages")
        ):
            continue
        files.add(path)
    return sorted(files)


def _read(path: str) -> dict[str, str] | None:
    """The cached outputs, if the file is there, is one gpubw may trust
    (:func:`gpubw.runner.plugincache.load_file`), holds what it should and is still valid."""
    cached = load_file(path)
    if cached is None or cached.get("paths") != path_stamp():
        return None
    files, text, as_json = cached.get("files"), cached.get("text"), cached.get("json")
    if not (isinstance(text, str) and isinstance(as_json, str) and _file_stats(files)):
        return None
    if any(stat_of(p) != tuple(s) for p, s in files):  # type: ignore[attr-defined]
        return None
    return {"text": text, "json": as_json}


def _file_stats(value: object) -> bool:
    """Whether ``value`` is a list of (path, (int, int)), as the cache's ``files`` are."""
    return isinstance(value, list) and all(
        isinstance(item, tuple)
        and len(item) == 2
        and isinstance(item[0], str)
        and isinstance(item[1], tuple)
        and len(item[1]) == 2
        and all(type(n) is int for n in item[1])
        for item in value
    )


def _discover() -> dict[str, str]:
    """Both outputs from a full discovery (every plugin imported), cached when every
    testcase loaded."""
    from gpubw.runner.registry import Registry

    use_cache = not os.environ.get(NO_CACHE_ENV)
    paths = path_stamp() if use_cache else []  # taken first: a change during discovery
    registry = Registry.discover().load()
    out = {"text": render(registry, False), "json": render(registry, True)}
    if use_cache and all(e.failure is None for e in registry.entries):
        files = [(p, stat_of(p)) for p in _module_files()]
        write_file(cache_path(), {"header": header(), "paths": paths, "files": files, **out})
    return out


def listing(as_json: bool) -> str:
    """What ``gpubw -l`` (``-j``: ``as_json``) prints: from the cache when it is valid,
    else from a full discovery (which refreshes it)."""
    cached = None if os.environ.get(NO_CACHE_ENV) else _read(cache_path())
    out = cached or _discover()
    return json_escaped(out["json" if as_json else "text"])


# -- the command -------------------------------------------------------------------------
def plain_list_args(argv: list[str]) -> tuple[str, str | None] | None:
    """(format, output) when ``argv`` is a plain ``-l`` that needs no option parser: only
    ``-l``/``--list``, ``-j``/``--json``, ``--format[=]text|json`` and
    ``-o``/``--output[=]FILE`` (each once), consistent. None for anything else, which the
    full parser then handles (and refuses with its messages where it must)."""
    listed = as_json = False
    values: dict[str, str] = {}  # "--output" / "--format" -> the value given
    i = 0
    while i < len(argv):
        token = argv[i]
        name, eq, value = token.partition("=")
        if token in ("-l", "--list"):
            listed = True
        elif token in ("-j", "--json"):
            as_json = True
        elif eq and name in ("--output", "--format"):
            if name in values:
                return None
            values[name] = value  # --output=VALUE: taken as it is
        elif token in ("-o", "--output", "--format") and i + 1 < len(argv):
            name, value = ("--output" if token == "-o" else token), argv[i + 1]
            if name in values or (value.startswith("-") and value != "-"):
                return None  # the parser's business (given twice, missing, negative)
            values[name] = value
            i += 1
        else:
            return None
        i += 1
    chosen = values.get("--format") or ("json" if as_json else "text")
    if not listed or chosen not in LIST_FORMATS or (as_json and chosen != "json"):
        return None
    return chosen, values.get("--output")


def main(fmt: str, output: str | None) -> int:
    """Print the list (``fmt``: text or json) to stdout, or into ``output`` by ``-o``'s
    rules (:class:`gpubw.model.outfile.OutputTarget`: checked first, written atomically)."""
    target = None
    if output is not None and output != "-":
        from gpubw.model.outfile import OutputTarget

        target = OutputTarget(output).check()
    text = listing(fmt == "json")
    if fmt == "text":  # names and docstrings a plugin chose: no control character gets out
        from gpubw.model.console import printable_lines

        text = "\n".join(printable_lines(text.split("\n")))
    if target is None or target.is_stdout:
        sys.stdout.write(text)
        sys.stdout.flush()
        return 0
    with target.open("w") as f:
        f.write(text)
    return 0
