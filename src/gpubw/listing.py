"""``gpubw -l``: the testcase list as text or JSON, kept in a cache file between runs.

Listing every testcase means importing every plugin module (their docstrings are the
descriptions); a cache file keeps the rendered list (text and JSON) so that a second
``gpubw -l`` imports none of them, nor attrs, importlib.metadata or the plugin loader (issue 11).
:func:`main` is ``gpubw -l`` for the plain forms (``-l``, ``-j``, ``--format text|json``,
``-o FILE``); :mod:`gpubw.cli` hands it those before it builds its parser.

The cache (``$GPUBW_CACHE_DIR``, else ``$XDG_CACHE_HOME/gpubw``, else ``~/.cache/gpubw``; one
file per interpreter and ``sys.path``: ``testcase-list-<crc>.bin``) is used only while all of
this is as it was when it was written:

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
cannot be read or written is never an error: the list is made by discovery then.

The entry-point cache (``entry-points-<crc>.bin`` beside it, same key) keeps what the
registry's discovery found: every entry point of :data:`ENTRY_POINT_GROUPS` (name, value,
distribution) in scan order, so that ``-t KEY`` neither scans the metadata of every
installed distribution (importlib.metadata's entry-point scan) nor parses any. Discovery
imports nothing, so only the first two points above apply, the second with one change: a
``sys.path`` folder is known by the names of its ``*.dist-info`` / ``*.egg-info`` folders
(what the scan reads) rather than its modification time, so a file written into the
current folder (``-o out.json``) does not void it; an entry that is a file (a zip) keeps
its time. Load failures are found when an entry point is loaded, after the cache as
before it, so this cache is kept whatever loads. ``GPUBW_NO_LIST_CACHE=1`` bypasses it
too (neither read nor written).
"""

from __future__ import annotations

import marshal
import os
import sys

from gpubw.version import __version__

PROG = "gpubw"
#: what -l/--list writes
LIST_FORMATS = ("text", "json")
#: set to 1 to list without the cache file
NO_CACHE_ENV = "GPUBW_NO_LIST_CACHE"
_MAGIC = b"GPUBWL1\n"
_MISSING = (-1, -1)
#: the entry-point groups whose discovery is cached (the registry's)
ENTRY_POINT_GROUPS = ("gpubw.testcases", "gpubw.writers")
_LIST_CACHE = "testcase-list"
_ENTRY_POINT_CACHE = "entry-points"
#: what the entry-point cache holds per group: (name, value, distribution) in scan order
EntryPoints = dict[str, list[tuple[str, str, str]]]


# -- rendering ---------------------------------------------------------------------------
def render(registry: object, as_json: bool) -> str:
    """The list of a :class:`gpubw.registry.Registry` (every entry loaded) as ``-l``
    prints it."""
    import json

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
        return json.dumps(items, indent=2) + "\n"
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
    return "\n".join(lines) + "\n"


# -- the cache ---------------------------------------------------------------------------
def cache_dir() -> str:
    """Where the list cache is kept (the kernel cache's rules; it may not exist yet)."""
    explicit = os.environ.get("GPUBW_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gpubw")


def _header() -> tuple[object, ...]:
    return (__version__, sys.executable, sys.prefix, sys.version, tuple(sys.path))


def cache_path(kind: str = _LIST_CACHE) -> str:
    """This interpreter's and ``sys.path``'s cache file of ``kind`` (the list's by default)."""
    import zlib

    crc = zlib.crc32(repr(_header()).encode("utf-8", "surrogatepass"))
    return os.path.join(cache_dir(), f"{kind}-{crc:08x}.bin")


def _stat(path: str) -> tuple[int, int]:
    try:
        st = os.stat(path)
    except OSError:
        return _MISSING
    return (st.st_mtime_ns, st.st_size)


def _path_stamp(folder_mtimes: bool = True) -> list[tuple[str, tuple[int, int]]]:
    """The modification times the plugin loader keys its entry-point cache on: every ``sys.path``
    entry and every ``entry_points.txt`` of a distribution in one (listed by path, so the
    distributions' folder names are part of it). Without ``folder_mtimes`` an entry that is
    a folder stands for its distributions alone (the time is left out); a file (a zip)
    keeps its time."""
    import stat

    stamp = []
    for entry in sys.path:
        where = entry or os.curdir
        try:
            st = os.stat(where)
            mtime = st.st_mtime_ns
            if not folder_mtimes and stat.S_ISDIR(st.st_mode):
                mtime = 0
        except OSError:
            mtime = _MISSING[0]
        stamp.append((entry, (mtime, 0)))
        try:
            names = sorted(os.listdir(where))
        except OSError:
            continue
        for name in names:
            if name.endswith((".dist-info", ".egg-info")) or name.lower() == "egg-info":
                eps = os.path.join(where, name, "entry_points.txt")
                stamp.append((eps, (_stat(eps)[0], 0)))
    return stamp


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


_NOT_OURS = (OSError, EOFError, ValueError, TypeError, KeyError, IndexError, AttributeError)


def _load(path: str) -> dict[str, object] | None:
    """The cache file at ``path`` if it is one of ours, of this interpreter and ``sys.path``."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        if not data.startswith(_MAGIC):
            return None
        cached = marshal.loads(data[len(_MAGIC) :])
        if not isinstance(cached, dict) or cached["header"] != _header():
            return None
        return cached
    except _NOT_OURS:
        return None  # not a cache file of ours: made again


def _read(path: str) -> dict[str, str] | None:
    """The cached outputs, if the file is there and still valid."""
    cached = _load(path)
    try:
        if cached is None or cached["paths"] != _path_stamp():
            return None
        if any(_stat(p) != tuple(s) for p, s in cached["files"]):  # type: ignore[attr-defined]
            return None
        return {"text": cached["text"], "json": cached["json"]}  # type: ignore[dict-item]
    except _NOT_OURS:
        return None


def _write(path: str, data: dict[str, object]) -> None:
    """Store ``data`` at ``path`` atomically; any OSError leaves no file behind."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + marshal.dumps(data))
        os.replace(tmp, path)
    except OSError:
        import contextlib

        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _discover() -> dict[str, str]:
    """Both outputs from a full discovery (every plugin imported), cached when every
    testcase loaded."""
    from gpubw.registry import Registry

    use_cache = not os.environ.get(NO_CACHE_ENV)
    paths = _path_stamp() if use_cache else []  # taken first: a change during discovery
    registry = Registry.discover().load()
    out = {"text": render(registry, False), "json": render(registry, True)}
    if use_cache and all(e.failure is None for e in registry.entries):
        files = [(p, _stat(p)) for p in _module_files()]
        _write(cache_path(), {"header": _header(), "paths": paths, "files": files, **out})
    return out


def cached_entry_points() -> tuple[object, EntryPoints | None]:
    """(stamp, entry points): the cached entry points of every group in
    :data:`ENTRY_POINT_GROUPS` when the entry-point cache is valid, else None; the stamp to
    give :func:`store_entry_points` after a scan (taken now, before it: a change during the
    scan voids what it stores), None when the cache is off (``GPUBW_NO_LIST_CACHE``)."""
    if os.environ.get(NO_CACHE_ENV):
        return None, None
    stamp = _path_stamp(folder_mtimes=False)
    cached = _load(cache_path(_ENTRY_POINT_CACHE))
    try:
        if cached is None or cached["paths"] != stamp:
            return stamp, None
        groups = cached["groups"]
        if not isinstance(groups, dict) or set(groups) != set(ENTRY_POINT_GROUPS):
            return stamp, None
        return stamp, {g: [(n, v, d) for n, v, d in eps] for g, eps in groups.items()}
    except _NOT_OURS:
        return stamp, None


def store_entry_points(stamp: object, groups: EntryPoints) -> None:
    """Keep ``groups`` (every group of :data:`ENTRY_POINT_GROUPS`, as a scan found them
    after :func:`cached_entry_points` gave ``stamp``) for the next discovery; nothing when
    the cache is off (``stamp`` None) or cannot be written."""
    if stamp is None or set(groups) != set(ENTRY_POINT_GROUPS):
        return
    data = {"header": _header(), "paths": stamp, "groups": groups}
    _write(cache_path(_ENTRY_POINT_CACHE), data)


def listing(as_json: bool) -> str:
    """What ``gpubw -l`` (``-j``: ``as_json``) prints: from the cache when it is valid,
    else from a full discovery (which refreshes it)."""
    cached = None if os.environ.get(NO_CACHE_ENV) else _read(cache_path())
    out = cached or _discover()
    return out["json" if as_json else "text"]


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
    rules (:class:`gpubw.outfile.OutputTarget`: checked first, written atomically)."""
    target = None
    if output is not None and output != "-":
        from gpubw.outfile import OutputTarget

        target = OutputTarget(output).check()
    text = listing(fmt == "json")
    if target is None or target.is_stdout:
        sys.stdout.write(text)
        sys.stdout.flush()
        return 0
    with target.open("w") as f:
        f.write(text)
    return 0
