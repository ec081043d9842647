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

A cache file is data, never authority (``$GPUBW_CACHE_DIR`` may be a folder others can
write to, and gpubw often runs as root): it is read only when it is a regular file of this
user's that nobody else may write, of at most :data:`MAX_CACHE_BYTES`
(:func:`gpubw.model.infile.read_cache_file`: otherwise one warning and it is made again), its
fields must have the types gpubw writes, and the entry points it holds are used only when
the installed distributions declare exactly those (:func:`declared_entry_points` reads their
``entry_points.txt`` and the ``Name`` of those that declare one of gpubw's groups, ~1 ms,
without importlib.metadata's scan): anything else is a miss, and the scan decides.
"""

from __future__ import annotations

import marshal
import os
import sys

from gpubw.model.errors import GpubwError
from gpubw.model.infile import read_cache_file, read_input
from gpubw.version import __version__

#: set to 1 to use no cache file of this module (the list's and the entry points')
NO_CACHE_ENV = "GPUBW_NO_LIST_CACHE"
#: the entry-point groups whose discovery is cached (the registry's testcases and writers,
#: and the run listeners of :mod:`gpubw.runner.listener_plugins`)
ENTRY_POINT_GROUPS = ("gpubw.testcases", "gpubw.writers", "gpubw.listeners")
#: what the entry-point cache holds per group: (name, value, distribution) in scan order
EntryPoints = dict[str, list[tuple[str, str, str]]]
#: the largest cache file of this module that is read (the list's of ~100 testcases: ~100 KiB)
MAX_CACHE_BYTES = 4 << 20
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
    """(modification time in ns, size) of ``path``; (-1, -1) when it cannot be read, or
    cannot be a path (a NUL byte in a cache file's stored path: a miss, never a traceback)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
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
    (its other fields are the caller's to check); None for anything else, and one warning
    for a file that must not be trusted (:func:`gpubw.model.infile.read_cache_file`)."""
    data = read_cache_file(path, MAX_CACHE_BYTES)
    if data is None or not data.startswith(_MAGIC):
        return None
    try:
        cached = marshal.loads(data[len(_MAGIC) :])
        if not isinstance(cached, dict) or cached.get("header") != header():
            return None
        return cached
    except Exception:  # not a cache file of ours, whatever it holds: made again
        return None


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
    :data:`ENTRY_POINT_GROUPS` when the entry-point cache is valid and the installed
    distributions declare exactly those (:func:`declared_entry_points`), else None; the stamp
    to give :func:`store_entry_points` after a scan (taken now, before it: a change during the
    scan voids what it stores), None when the cache is off (``GPUBW_NO_LIST_CACHE``)."""
    if os.environ.get(NO_CACHE_ENV):
        return None, None
    stamp = path_stamp(folder_mtimes=False)
    cached = load_file(cache_path(_ENTRY_POINT_CACHE))
    if cached is None or cached.get("paths") != stamp:
        return stamp, None
    groups = _as_entry_points(cached.get("groups"))
    if groups is None or not _same(groups, declared_entry_points(stamp)):
        return stamp, None
    return stamp, groups


def _as_entry_points(value: object) -> EntryPoints | None:
    """``value`` as :data:`EntryPoints` when it is one (every group, each a list of three
    strings per entry point), else None."""
    if not isinstance(value, dict) or set(value) != set(ENTRY_POINT_GROUPS):
        return None
    out: EntryPoints = {}
    for group, eps in value.items():
        if not isinstance(eps, (list, tuple)):
            return None
        triples = [tuple(t) for t in eps if isinstance(t, (list, tuple)) and len(t) == 3]
        if len(triples) != len(eps) or not all(isinstance(x, str) for t in triples for x in t):
            return None
        out[group] = triples
    return out


def _same(cached: EntryPoints, declared: EntryPoints | None) -> bool:
    return declared is not None and all(
        sorted(cached[g]) == sorted(declared[g]) for g in ENTRY_POINT_GROUPS
    )


def store_entry_points(stamp: object, groups: EntryPoints) -> None:
    """Keep ``groups`` (every group of :data:`ENTRY_POINT_GROUPS`, as a scan found them
    after :func:`cached_entry_points` gave ``stamp``) for the next discovery; nothing when
    the cache is off (``stamp`` None) or cannot be written."""
    if stamp is None or set(groups) != set(ENTRY_POINT_GROUPS):
        return
    data = {"header": header(), "paths": stamp, "groups": groups}
    write_file(cache_path(_ENTRY_POINT_CACHE), data)


# -- what the installed distributions declare ---------------------------------------------
_EPS_FILE = "entry_points.txt"
#: the largest entry_points.txt, and the part of METADATA that holds its headers, read
_MAX_METADATA_BYTES = 1 << 20


def declared_entry_points(stamp: object) -> EntryPoints | None:
    """What the installed distributions declare in :data:`ENTRY_POINT_GROUPS`, as a scan
    finds it ((name, value, distribution's ``Name``), the first distribution of a name on
    ``sys.path`` only, an entry point declared alike twice once), read from the
    ``entry_points.txt`` files that ``stamp`` (:func:`path_stamp` without folder times) lists
    and the metadata of the distributions that declare one. None when this reading cannot
    tell (a zip or an egg on ``sys.path``, a file it cannot read or parse): a scan does."""
    out: EntryPoints = {g: [] for g in ENTRY_POINT_GROUPS}
    names: set[str] = set()
    for path, (mtime, _) in stamp:  # type: ignore[attr-defined]
        folder, base = os.path.split(path)
        if base != _EPS_FILE or not folder.endswith((".dist-info", ".egg-info")):
            if mtime not in (0, _MISSING[0]):
                return None  # a sys.path entry that is a file (a zip): not read here
            continue
        stem = os.path.basename(folder)
        name = _normalized(stem.lower().rpartition(".")[0].partition("-")[0])
        if name in names:
            continue  # shadowed by an earlier distribution of that name
        names.add(name)
        if mtime == _MISSING[0]:
            continue  # no entry points
        if not _add_declared(out, folder, path):
            return None
    return out


def _add_declared(out: EntryPoints, folder: str, path: str) -> bool:
    """Add what the distribution in ``folder`` declares (its entry_points.txt at ``path``)
    in ``out``'s groups; False when that cannot be read."""
    declared = _entry_point_lines(path)
    if declared is None:
        return False
    ours = [(g, n, v) for g, n, v in declared if g in out]
    if not ours:
        return True
    dist = _dist_name(folder)
    if dist is None:
        return False
    for group, name, value in ours:
        if not any((name, value) == (n, v) for n, v, _ in out[group]):
            out[group].append((name, value, dist))
    return True


def _normalized(name: str) -> str:
    import re

    return re.sub(r"[-_.]+", "-", name).lower().replace("-", "_")


def _text(path: str) -> str | None:
    try:
        return read_input(path, "metadata file", _MAX_METADATA_BYTES)
    except (OSError, UnicodeDecodeError, GpubwError):
        return None


def _entry_point_lines(path: str) -> list[tuple[str, str, str]] | None:
    """(group, name, value) of every line of the entry_points.txt at ``path``, parsed as
    importlib.metadata parses it; None when it cannot be read or parsed."""
    text = _text(path)
    if text is None:
        return None
    if "gpubw." not in text:
        return []
    out = []
    section = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line.strip("[]")
        elif section is not None:
            name, eq, value = line.partition("=")
            if not eq:
                return None
            out.append((section, name.strip(), value.strip()))
    return out


def _dist_name(folder: str) -> str | None:
    """The ``Name`` of the distribution in ``folder`` as importlib.metadata reads it (METADATA,
    else PKG-INFO; "?" without one); None when it cannot be told simply (a folded header)."""
    for meta in ("METADATA", "PKG-INFO"):
        text = _text(os.path.join(folder, meta))
        if text:
            return _name_header(text)
    return None


def _name_header(text: str) -> str | None:
    found = None
    last = ""
    for line in text.splitlines():
        if not line.strip():
            break
        if line[0] in " \t":
            if last == "name":
                return None  # a folded Name: left to importlib.metadata
            continue
        key, colon, value = line.partition(":")
        if not colon:
            break
        last = key.lower()
        if last == "name" and found is None:
            found = value.lstrip(" \t")
    return found or "?"
