"""The cache files' key, fingerprints and the entry-point cache (gpubw.runner.plugincache)."""

from __future__ import annotations

import os
import shutil
import zipfile

import pytest

from _plugin_fixtures import FIXTURES, GOOD
from gpubw.runner import plugincache, registry

GROUPS = {"gpubw.testcases": [("k", "m:C", "d")], "gpubw.writers": [("w", "m:W", "d")]}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """The caches on, in a temporary directory, with an empty folder first on sys.path."""
    monkeypatch.delenv(plugincache.NO_CACHE_ENV, raising=False)
    monkeypatch.setenv("GPUBW_CACHE_DIR", str(tmp_path / "cache"))
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    return site


def test_a_stored_scan_is_read_back(cache):
    """What a scan stored under a fresh stamp is what the next read gives."""
    stamp, groups = plugincache.cached_entry_points()
    assert stamp is not None and groups is None
    scanned = registry._scan(plugincache.ENTRY_POINT_GROUPS)
    plugincache.store_entry_points(stamp, scanned)
    assert plugincache.cached_entry_points() == (stamp, scanned)


def test_entry_points_no_distribution_declares_are_never_used(cache):
    """A cache file naming entry points that no installed distribution declares (this:X, a
    built-in key mapped to another module, a writer swapped for another) is a miss, however
    valid its stamp: the scan decides."""
    stamp, _ = plugincache.cached_entry_points()
    scanned = registry._scan(plugincache.ENTRY_POINT_GROUPS)
    assert plugincache.declared_entry_points(stamp) is not None
    tcs, writers = scanned["gpubw.testcases"], scanned["gpubw.writers"]
    csv = "gpubw.writers.csv:CsvWriter"
    json_to_csv = [(n, csv if n == "json" else v, d) for n, v, d in writers]
    for lie in (
        {**scanned, "gpubw.testcases": [*tcs, ("zen", "this:X", "gpubw")]},
        {**scanned, "gpubw.testcases": [("zen", "this:X", "gpubw"), *tcs[1:]]},
        {**scanned, "gpubw.testcases": [(tcs[0][0], "unittest.__main__:main", "gpubw"), *tcs[1:]]},
        {**scanned, "gpubw.writers": json_to_csv},
        {**scanned, "gpubw.testcases": [(n, v, "other") for n, v, _ in tcs]},
        {**scanned, "gpubw.testcases": tcs[1:]},
    ):
        plugincache.store_entry_points(stamp, lie)
        assert plugincache.cached_entry_points() == (stamp, None)
    plugincache.store_entry_points(stamp, scanned)
    assert plugincache.cached_entry_points() == (stamp, scanned)


@pytest.mark.parametrize(
    "groups",
    [
        {"gpubw.testcases": [("k", 10**400, "d")], "gpubw.writers": []},
        {"gpubw.testcases": [("k", "m:C")], "gpubw.writers": []},
        {"gpubw.testcases": "kmd", "gpubw.writers": []},
        {"gpubw.testcases": [[1, 2, 3]], "gpubw.writers": [None]},
        [("k", "m:C", "d")],
    ],
)
def test_a_malformed_entry_point_cache_is_a_miss(cache, groups):
    """Values of the wrong type or shape in a cache file (huge ints, short tuples, strings
    for lists) are a miss, never a TypeError or OverflowError."""
    stamp, _ = plugincache.cached_entry_points()
    data = {"header": plugincache.header(), "paths": stamp, "groups": groups}
    plugincache.write_file(plugincache.cache_path("entry-points"), data)
    assert plugincache.cached_entry_points() == (stamp, None)


def test_a_change_during_the_scan_voids_what_it_stores(cache):
    """A distribution installed between the stamp and the store makes the stored scan stale."""
    stamp, _ = plugincache.cached_entry_points()
    shutil.copytree(FIXTURES / GOOD, cache, dirs_exist_ok=True)
    plugincache.store_entry_points(stamp, GROUPS)
    assert plugincache.cached_entry_points()[1] is None


def test_folder_stamp_sees_distributions_not_other_files(cache):
    """Without folder times a plain file in a sys.path folder keeps the stamp; a new
    distribution folder, or its entry_points.txt touched, changes it."""
    before = plugincache.path_stamp(folder_mtimes=False)
    watched = plugincache.path_stamp()
    (cache / "report.json").write_text("{}\n")
    t = cache.stat().st_mtime_ns + 10**9  # a folder time the clock cannot miss
    os.utime(cache, ns=(t, t))
    assert plugincache.path_stamp(folder_mtimes=False) == before
    assert plugincache.path_stamp() != watched  # the list cache still watches the folder
    shutil.copytree(FIXTURES / GOOD, cache, dirs_exist_ok=True)
    installed = plugincache.path_stamp(folder_mtimes=False)
    assert installed != before
    (eps,) = cache.glob("*.dist-info/entry_points.txt")
    t = eps.stat().st_mtime_ns + 10**9
    os.utime(eps, ns=(t, t))
    assert plugincache.path_stamp(folder_mtimes=False) != installed


def test_a_zip_on_sys_path_is_stamped_by_its_time(cache, tmp_path, monkeypatch):
    """A zip entry of sys.path keeps its modification time in the stamp."""
    archive = tmp_path / "plugins.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("x.py", "")
    monkeypatch.syspath_prepend(str(archive))
    before = plugincache.path_stamp(folder_mtimes=False)
    t = archive.stat().st_mtime_ns + 10**9
    os.utime(archive, ns=(t, t))
    assert plugincache.path_stamp(folder_mtimes=False) != before


def test_the_cache_off_reads_and_writes_nothing(cache, monkeypatch):
    """GPUBW_NO_LIST_CACHE=1: no stamp, no read, nothing stored."""
    monkeypatch.setenv(plugincache.NO_CACHE_ENV, "1")
    assert plugincache.cached_entry_points() == (None, None)
    plugincache.store_entry_points(None, GROUPS)
    assert not os.path.exists(plugincache.cache_dir())


def test_a_cache_file_of_other_groups_is_not_used(cache):
    """A stored scan that lacks a group (another gpubw's file) is a miss and is not written."""
    stamp, _ = plugincache.cached_entry_points()
    plugincache.store_entry_points(stamp, {"gpubw.testcases": []})
    assert not os.path.exists(plugincache.cache_path("entry-points"))
    assert plugincache.cached_entry_points()[1] is None
    other = {"header": plugincache.header(), "paths": stamp, "groups": {"x": []}}
    plugincache.write_file(plugincache.cache_path("entry-points"), other)
    assert plugincache.cached_entry_points()[1] is None


def test_a_stored_path_with_a_nul_byte_is_a_miss(cache, capsys):
    """A list cache whose stored module path holds a NUL byte: made again, no traceback."""
    from gpubw.cli import listing

    assert plugincache.stat_of("bad\0path") == (-1, -1)
    first = listing.listing(False)
    cached = plugincache.load_file(plugincache.cache_path())
    assert cached is not None and cached["files"]
    cached["files"] = [("bad\0path", (1, 2)), *cached["files"]]
    plugincache.write_file(plugincache.cache_path(), cached)
    assert listing.listing(False) == first
    assert plugincache.load_file(plugincache.cache_path())["files"][0][0] != "bad\0path"
