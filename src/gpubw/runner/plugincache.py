"""The cache files that spare a gpubw process the plugin scan: their key, format and the
fingerprints that say whether one is still valid; and the registry's entry-point cache.

A cache file lives in ``$GPUBW_CACHE_DIR`` (else ``$XDG_CACHE_HOME/gpubw``, else
``~/.cache/gpubw``), one per kind, interpreter and ``sys.path`` (``<kind>-<crc>.bin``, the
crc of :func:`header`); it holds a marshalled dict whose ``"header"`` must equal this
process's. Reading one that is not ours, torn or stale is never an error (None: made
again), and neither is failing to write one. ``GPUBW_NO_LIST_CACHE=1`` turns every cache
of this module off (neither read nor written). :mod:`gpubw.cli.listing` keeps ``gpubw -l``'s
output in ``testcase-list-<crc>.bin`` (its validity rule is in its docstring).

The entry-point cache (``entry-points-<crc>.bin``) keeps what the registry's discovery
found: every entry point of :data:`ENTRY_POINT_GROUPS` as (name, value, distribution's
name), in scan order, so that ``gpubw -t KEY`` neither scans the metadata of every
installed distribution (importlib.metadata's entry-point scan) nor parses any. It is
valid while gpubw's version, the interpreter and ``sys.path`` (the key) are the same and
so is :func:`path_stamp` without folder times: for every ``sys.path`` entry the names of
its ``*.dist-info`` / ``*.egg-info`` folders (what the scan reads) and the modification
time of each one's ``entry_points.txt`` (a distribution installed, removed, or its entry
points changed in place, as an editable install's), a zip entry's own time. A folder's
own modification time is left out, so a file written into the current folder (``-o
out.json``) does not void it. Discovery imports no plugin, so no module file is watched;
load failures are found when an entry point is loaded, after the cache as before it, so
this cache is kept whatever loads.
"""

from __future__ import annotations

import marshal
import os
import sys

from gpubw.version import __version__

#: set to 1 to use no cache file of this module (the list's and the entry points')
NO_CACHE_ENV = "GPUBW_NO_LIST_CACHE"
#: the entry-point groups whose discovery is cached (the registry's testcases and writers)
ENTRY_POINT_GROUPS = ("gpubw.testcases", "gpubw.writers")
#: what the entry-point cache holds per group: (name, value, distribution) in scan order
EntryPoints = dict[str, list[tuple[str, str, str]]]
#: what reading a file that is not a cache file of ours may raise
NOT_OURS = (OSError, EOFError, ValueError, TypeError, KeyError, IndexError, AttributeError)
_MAGIC = b"GPUBWL1\n"
_MISSING = (-1, -1)
_ENTRY_POINT_CACHE = "entry-points"


def cache_dir() -> str:
    """Where the cache files are kept (the kernel cache's rules; it may not exist yet)."""
    explicit = os.environ.get("GPUBW_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gpubw")


def header() -> tuple[object, ...]:
    """What every cache file is keyed on: gpubw's version, the interpreter, ``sys.path``."""
    return (__version__, sys.executable, sys.prefix, sys.version, tuple(sys.path))


def cache_path(kind: str = "testcase-list") -> str:
    """This interpreter's and ``sys.path``'s cache file of ``kind`` (the list's by default)."""
    import zlib

    crc = zlib.crc32(repr(header()).encode("utf-8", "surrogatepass"))
    return os.path.join(cache_dir(), f"{kind}-{crc:08x}.bin")


def stat_of(path: str) -> tuple[int, int]:
    """(modification time in ns, size) of ``path``; (-1, -1) when it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return _MISSING
    return (st.st_mtime_ns, st.st_size)


def path_stamp(folder_mtimes: bool = True) -> list[tuple[str, tuple[int, int]]]:
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
                stamp.append((eps, (stat_of(eps)[0], 0)))
    return stamp


def load_file(path: str) -> dict[str, object] | None:
    """The cache file at ``path`` if it is one of ours, of this interpreter and ``sys.path``
    (its other fields are the caller's to check)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        if not data.startswith(_MAGIC):
            return None
        cached = marshal.loads(data[len(_MAGIC) :])
        if not isinstance(cached, dict) or cached["header"] != header():
            return None
        return cached
    except NOT_OURS:
        return None  # not a cache file of ours: made again


def write_file(path: str, data: dict[str, object]) -> None:
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


# -- the entry-point cache ---------------------------------------------------------------
def cached_entry_points() -> tuple[object, EntryPoints | None]:
    """(stamp, entry points): the cached entry points of every group in
    :data:`ENTRY_POINT_GROUPS` when the entry-point cache is valid, else None; the stamp to
    give :func:`store_entry_points` after a scan (taken now, before it: a change during the
    scan voids what it stores), None when the cache is off (``GPUBW_NO_LIST_CACHE``)."""
    if os.environ.get(NO_CACHE_ENV):
        return None, None
    stamp = path_stamp(folder_mtimes=False)
    cached = load_file(cache_path(_ENTRY_POINT_CACHE))
    try:
        if cached is None or cached["paths"] != stamp:
            return stamp, None
        groups = cached["groups"]
        if not isinstance(groups, dict) or set(groups) != set(ENTRY_POINT_GROUPS):
            return stamp, None
        return stamp, {g: [(n, v, d) for n, v, d in eps] for g, eps in groups.items()}
    except NOT_OURS:
        return stamp, None


def store_entry_points(stamp: object, groups: EntryPoints) -> None:
    """Keep ``groups`` (every group of :data:`ENTRY_POINT_GROUPS`, as a scan found them
    after :func:`cached_entry_points` gave ``stamp``) for the next discovery; nothing when
    the cache is off (``stamp`` None) or cannot be written."""
    if stamp is None or set(groups) != set(ENTRY_POINT_GROUPS):
        return
    data = {"header": header(), "paths": stamp, "groups": groups}
    write_file(cache_path(_ENTRY_POINT_CACHE), data)
