"""Tests of testcase/writer discovery, order, lookup and load failures (gpubw.runner.registry)."""

from __future__ import annotations

import collections
import importlib
import importlib.metadata
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

import gpubw
from _plugin_fixtures import BROKEN, BROKEN_DIST, FIXTURES, GOOD, GOOD_DIST, installed
from gpubw.cli import listing
from gpubw.model.errors import PluginError, UsageError
from gpubw.runner import registry
from gpubw.runner.registry import (
    BUILTIN_ORDER,
    Entry,
    Registry,
    SelectionError,
    Unresolved,
    strtol_index,
)
from gpubw.runner.writer_registry import Writers, writer
from gpubw.testcases import BUILTINS

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


@pytest.fixture
def plugins(tmp_path):
    with installed(tmp_path, GOOD, BROKEN) as paths:
        yield paths


@pytest.fixture(scope="module")
def builtin():
    return Registry.discover()


def _pyproject_testcases() -> list[tuple[str, str]]:
    text = PYPROJECT.read_text()
    section = text.split('[project.entry-points."gpubw.testcases"]', 1)[1].split("\n[", 1)[0]
    return re.findall(r'^([a-z0-9_]+)\s*=\s*"([^"]+)"', section, flags=re.M)


def test_pyprojects_entry_points_are_exactly_builtins():
    """pyproject.toml's gpubw.testcases entry points are BUILTINS, item for item and in order,
    and so are the installed ones (as a set: entry points come in no guaranteed order)."""
    assert _pyproject_testcases() == list(BUILTINS)
    installed_eps = {
        (ep.name, ep.value)
        for ep in importlib.metadata.entry_points(group="gpubw.testcases")
        if ep.dist is not None and ep.dist.name == "gpubw"
    }
    assert installed_eps == set(BUILTINS)


def test_builtin_order_is_nvbandwidths():
    """BUILTIN_ORDER is BUILTINS' keys: nvbandwidth v0.10's 44 (0-43) and 13 multinode (44-56),
    then gpubw's (57, 58)."""
    assert tuple(key for key, _ in BUILTINS) == BUILTIN_ORDER
    assert len(BUILTIN_ORDER) == len(set(BUILTIN_ORDER)) == 59
    assert BUILTIN_ORDER[0] == "host_to_device_memcpy_ce"
    assert BUILTIN_ORDER[32] == "host_device_latency_sm"
    assert BUILTIN_ORDER[33] == "device_to_device_latency_sm"
    assert BUILTIN_ORDER[34:44] == (
        "device_to_device_memcpy_read_tma",
        "device_to_device_memcpy_write_tma",
        "device_to_device_bidirectional_memcpy_read_tma",
        "device_to_device_bidirectional_memcpy_write_tma",
        "device_local_copy",
        "device_local_copy_sm",
        "device_local_read_sm",
        "device_local_write_sm",
        "device_to_device_latency_tma",
        "device_local_copy_tma",
    )
    assert BUILTIN_ORDER[44] == "multinode_device_to_device_memcpy_read_ce"
    assert BUILTIN_ORDER[56] == "multinode_bisect_write_ce"
    assert BUILTIN_ORDER[57:] == (
        "host_to_device_pageable_memcpy_ce",
        "device_to_host_pageable_memcpy_ce",
    )


def test_the_default_suite_leaves_out_what_runs_only_when_named(builtin):
    """No -t/-p: every testcase but the pageable ones (in_default_suite = False); named, they
    run, by key or index."""
    default = [e.key for e in builtin.select()]
    assert "host_to_device_pageable_memcpy_ce" not in default
    assert "device_to_host_pageable_memcpy_ce" not in default
    assert default[:57] == list(BUILTIN_ORDER[:57])
    named = builtin.select(["57", "device_to_host_pageable_memcpy_ce"])
    assert [e.key for e in named] == list(BUILTIN_ORDER[57:])


def test_builtins_come_first_in_nvbandwidth_order(builtin):
    """Built-ins keep BUILTIN_ORDER and their indexes; every one is gpubw's."""
    assert builtin.keys[: len(BUILTIN_ORDER)] == list(BUILTIN_ORDER)
    for i, entry in enumerate(builtin.entries[: len(BUILTIN_ORDER)]):
        assert entry.index == i
        assert entry.plugin == "gpubw"
        assert entry.builtin


def test_builtins_load_as_testcases_keyed_by_entry_point(builtin, sim_system):
    """Every testcase (built-ins, and the STREAM plugin's if installed) loads as the unchanged
    class its entry point names, stating no key; an instance made by its entry gets the
    entry-point name as its key."""
    assert not builtin.failures, builtin.failures
    system = sim_system("h200x1")
    for entry in builtin.entries:
        assert entry.cls is not None and issubclass(entry.cls, gpubw.Testcase)
        assert not hasattr(entry.cls, "key"), entry.key
        if entry.builtin:
            module, _, name = dict(BUILTINS)[entry.key].partition(":")
            assert entry.cls.__module__ == module and entry.cls.__qualname__ == name
        assert entry.create(system).key == entry.key
        assert entry.description


def test_a_builtin_missing_from_the_installation_keeps_its_index(monkeypatch):
    """A built-in that gpubw's installed entry points lack (a stale install) is a failure at
    its own index, telling to reinstall; the others keep theirs."""
    discover = registry.discover_group

    def stale(group):
        return [f for f in discover(group) if f.name != "host_to_device_memcpy_sm"]

    monkeypatch.setattr(registry, "discover_group", stale)
    reg = Registry.discover()
    assert reg.keys[: len(BUILTIN_ORDER)] == list(BUILTIN_ORDER)
    entry = reg.by_index(16)
    assert entry is not None and entry.key == "host_to_device_memcpy_sm"
    assert entry.cls is None and entry.failure is not None
    assert "reinstall gpubw" in entry.failure.message
    with pytest.raises(PluginError, match=r"did not load: .*reinstall gpubw"):
        entry.create(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("token", "index"),
    [
        ("0", 0),
        ("34", 34),
        ("+3", 3),
        ("-1", -1),
        (" 7", 7),
        ("\t\n5", 5),
        ("", 0),
        ("007", 7),
        ("3 ", None),
        (" ", None),
        ("1a", None),
        ("0x1", None),
        ("--1", None),
        ("+", None),
        ("host", None),
    ],
)
def test_strtol_index(token, index):
    """-t items parse as indexes under C strtol rules: blanks and sign first, all consumed."""
    assert strtol_index(token) == index


def test_resolve_by_index_and_key(builtin):
    """An index and a key name the same testcase, v0.10's: -t 34 is the TMA read, -t 38
    device_local_copy (v0.8's 34)."""
    assert builtin.resolve("34").key == "device_to_device_memcpy_read_tma"  # type: ignore[union-attr]
    assert builtin.resolve("38").key == "device_local_copy"  # type: ignore[union-attr]
    assert builtin.resolve("device_local_copy") is builtin.resolve("38")
    assert builtin.resolve(" +0").key == BUILTIN_ORDER[0]  # type: ignore[union-attr]


def test_resolve_failures_have_nvbandwidths_messages(builtin):
    """Unknown keys and indexes out of range become Unresolved with nvbandwidth's wording."""
    n = len(builtin)
    assert builtin.resolve(str(n)) == Unresolved(str(n), f"Testcase index {n} out of bound")
    assert builtin.resolve("-1") == Unresolved("-1", "Testcase index -1 out of bound")
    assert builtin.resolve("bogus") == Unresolved("bogus", "Testcase bogus not found")
    upper = BUILTIN_ORDER[0].upper()
    assert builtin.resolve(upper) == Unresolved(upper, f"Testcase {upper} not found")


def test_select_testcases_keeps_order_and_duplicates(builtin):
    """-t items come back in the order given, duplicates and unresolved ones included."""
    sel = builtin.select(["4", "0", "4", "nope"])
    assert [s.key if isinstance(s, Entry) else s.token for s in sel] == [
        BUILTIN_ORDER[4],
        BUILTIN_ORDER[0],
        BUILTIN_ORDER[4],
        "nope",
    ]


def test_prefixes_walk_list_order_without_duplicates(builtin):
    """-p keeps list order, matches each testcase once, and "" matches everything."""
    sel = builtin.select(prefixes=["device_to_device", "device_"])
    keys = [e.key for e in sel]  # type: ignore[union-attr]
    assert keys == [k for k in BUILTIN_ORDER if k.startswith("device_")]
    assert len(keys) == len(set(keys))
    assert builtin.select(prefixes=["device_", "device_to_device"]) == sel
    assert builtin.select(prefixes=[""]) == list(builtin.entries)


def test_prefixes_matching_nothing_is_an_error(builtin):
    """A prefix list that matches no key raises SelectionError; prefixes never match indexes."""
    with pytest.raises(SelectionError, match="'3'"):
        builtin.select(prefixes=["3"])
    with pytest.raises(SelectionError, match="match no testcase"):
        builtin.select(prefixes=["HOST", "zzz"])


def test_testcases_and_prefixes_together_is_a_usage_error(builtin):
    """-t with -p is refused."""
    with pytest.raises(UsageError, match="cannot be used together"):
        builtin.select(["0"], ["host"])


def test_no_selection_means_the_default_suite(builtin):
    """Without -t or -p every testcase of the default suite runs, in list order: all but
    those that run only when named (in_default_suite = False)."""
    default = [e for e in builtin.entries if e.cls is None or e.cls.in_default_suite]
    assert builtin.select() == default
    assert len(default) == len(builtin.entries) - 2  # the two pageable testcases


def test_third_party_follow_sorted_by_distribution_then_key(plugins):
    """Third-party testcases come after the built-ins, sorted by (distribution, key)."""
    reg = Registry.discover()
    n = len(BUILTIN_ORDER)
    assert reg.keys[:n] == list(BUILTIN_ORDER)
    rest = reg.entries[n:]
    assert [e.index for e in rest] == list(range(n, len(reg)))
    pairs = [(e.plugin, e.key) for e in rest]
    assert pairs == sorted(pairs)
    assert {BROKEN_DIST, GOOD_DIST} <= {e.plugin for e in rest}
    assert reg.by_key("fixture_good").plugin == GOOD_DIST  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("fixture_missing_module", ["ModuleNotFoundError", "gpubw_fixture_nonexistent"]),
        ("fixture_import_raises", ["RuntimeError", "boom at import"]),
        ("fixture_missing_attr", ["AttributeError", "NoSuchClass"]),
        ("fixture_not_testcase", ["NotATestcase", "not a subclass of gpubw.Testcase"]),
    ],
)
def test_broken_plugins_are_recorded_and_keep_their_place(plugins, key, words):
    """A plugin that cannot be loaded is a LoadFailure with the reason, listed at its index."""
    reg = Registry.discover()
    entry = reg.by_key(key)
    assert entry is not None and entry.cls is None and entry.failure is not None
    assert entry.failure.plugin == BROKEN_DIST
    for word in words:
        assert word in entry.failure.message
    assert entry.failure in reg.failures
    assert reg.entries[entry.index] is entry


def test_broken_plugins_do_not_stop_the_others(plugins):
    """Good plugins and every built-in still load next to broken ones."""
    reg = Registry.discover()
    for key in [*BUILTIN_ORDER, "fixture_good", "fixture_run_raises", "fixture_garbage"]:
        entry = reg.by_key(key)
        assert entry is not None and entry.cls is not None, key


def test_duplicate_of_a_builtin_keeps_the_builtin(plugins):
    """A third-party entry point reusing a built-in key loses; the failure names both."""
    reg = Registry.discover()
    entry = reg.by_key("host_to_device_memcpy_ce")
    assert entry is not None and entry.plugin == "gpubw" and entry.index == 0
    (dup,) = [f for f in reg.failures if f.key == "host_to_device_memcpy_ce"]
    assert dup.plugin == BROKEN_DIST
    assert "'gpubw'" in dup.message and repr(BROKEN_DIST) in dup.message
    assert dup in reg.unlisted_failures


def test_duplicate_between_plugins_keeps_the_first_distribution(plugins):
    """Two plugins with one key: the first in (distribution, key) order is kept."""
    reg = Registry.discover()
    entry = reg.by_key("fixture_shared")
    assert entry is not None and entry.plugin == BROKEN_DIST
    (dup,) = [f for f in reg.failures if f.key == "fixture_shared"]
    assert dup.plugin == GOOD_DIST
    assert repr(BROKEN_DIST) in dup.message and repr(GOOD_DIST) in dup.message
    assert len([e for e in reg.entries if e.key == "fixture_shared"]) == 1


def test_one_class_under_two_keys_gets_both_keys(plugins, sim_system):
    """A class registered under two entry points is the same, unchanged class; each entry's
    instances answer to its own key."""
    reg = Registry.discover()
    good, alias = reg.by_key("fixture_good"), reg.by_key("fixture_good_alias")
    assert good is not None and alias is not None
    assert good.cls is not None and good.cls is alias.cls
    system = sim_system("h200x1")
    assert good.create(system).key == "fixture_good"
    assert alias.create(system).key == "fixture_good_alias"
    assert alias.description == good.description


def test_an_old_style_class_key_is_a_clear_load_failure(plugins):
    """A plugin class that still sets ``key =`` does not load: the failure names the class,
    its key and the entry-point name that is the key now; the others load."""
    reg = Registry.discover()
    entry = reg.by_key("fixture_old_style_key")
    assert entry is not None and entry.cls is None and entry.failure is not None
    message = entry.failure.message
    assert "sets key = 'my_old_key' in class OldStyleKey" in message
    assert "entry-point name ('fixture_old_style_key')" in message
    assert "remove the attribute" in message
    with pytest.raises(PluginError, match=r"did not load: .*sets key = 'my_old_key'"):
        entry.create(None)  # type: ignore[arg-type]
    inherited = reg.by_key("fixture_old_style_inherited")
    assert inherited is not None and inherited.failure is not None
    assert "in class OldStyleKey" in inherited.failure.message
    assert reg.by_key("fixture_run_raises").cls is not None  # type: ignore[union-attr]


def test_kernel_modules_must_be_a_tuple_of_kernel_modules(plugins):
    """A class whose kernel_modules is not a tuple of KernelModule is a load failure."""
    entry = Registry.discover().by_key("fixture_bad_kernel_modules")
    assert entry is not None and entry.failure is not None
    assert "kernel_modules must be a tuple of gpubw.KernelModule" in entry.failure.message


def test_registry_has_no_module_level_testcases_helper():
    """Discovery is Registry.discover(); the old registry.testcases() alias is gone."""
    assert not hasattr(registry, "testcases")


def test_select_a_broken_plugin_gives_its_entry(plugins):
    """Selecting a plugin that failed to load yields its entry (the runner reports it)."""
    reg = Registry.discover()
    (entry,) = reg.select(["fixture_import_raises"])
    assert isinstance(entry, Entry) and entry.failure is not None
    prefixed = reg.select(prefixes=["fixture_import"])
    assert prefixed == [entry]


def test_plugins_disappear_when_uninstalled(tmp_path):
    """Discovery reflects what is installed now, not what was seen earlier in the process."""
    with installed(tmp_path, GOOD):
        assert Registry.discover().by_key("fixture_good") is not None
    assert Registry.discover().by_key("fixture_good") is None


def test_builtin_writers_and_unknown_names():
    """text and json are writers with write(); an unknown name lists the allowed ones."""
    writers = Writers.discover()
    assert {"text", "json"} <= set(writers.names)
    assert callable(writer("text")().write)
    with pytest.raises(UsageError, match=r"unknown output format 'nope'; allowed: .*json.*text"):
        writers.get("nope")


def test_third_party_and_broken_writers(plugins):
    """A plugin writer is found by name; one that fails to load is a PluginError."""
    writers = Writers.discover()
    assert "fixture_lines" in writers.names
    assert writers.get("fixture_lines").__name__ == "LinesWriter"
    with pytest.raises(PluginError, match="ModuleNotFoundError"):
        writers.get("fixture_broken_writer")
    assert "fixture_broken_writer" not in writers.names


def test_registry_is_the_only_entry_point_reader() -> None:
    """No module of gpubw but the registry reads entry points (one way to find plugins)."""
    src = Path(gpubw.__file__).parent
    readers = sorted(
        str(p.relative_to(src))
        for p in src.rglob("*.py")
        if re.search(r"\bentry_points\(|\bstevedore\b", p.read_text("utf-8"))
    )
    assert readers == ["runner/registry.py"]


def _fixture_modules() -> set[str]:
    return {m for m in sys.modules if m.startswith("gpubw_fixture")}


def test_discovery_imports_no_plugin_and_an_entry_loads_on_first_use(plugins):
    """Discovery imports no plugin module; using one entry imports its module alone, once;
    the failures (what -l shows) load every entry."""
    reg = Registry.discover()
    assert _fixture_modules() == set()
    assert not any(e.loaded for e in reg.entries)
    (good,) = reg.select(["fixture_good"])
    assert isinstance(good, Entry) and good.cls is not None
    assert _fixture_modules() == {GOOD}
    assert [e.key for e in reg.entries if e.loaded] == ["fixture_good"]
    assert good.cls is reg.by_key("fixture_good").cls  # type: ignore[union-attr]
    assert reg.by_key("fixture_import_raises").loaded is False  # type: ignore[union-attr]
    assert any(f.key == "fixture_import_raises" for f in reg.failures)
    assert all(e.loaded for e in reg.entries)
    assert {GOOD, "gpubw_fixture_broken", "gpubw_fixture_boom"} >= _fixture_modules()


def test_a_selection_loads_only_the_selected(plugins):
    """A -p selection loads the matched entries, before anything runs, and no other; -t
    loads the named ones (an index too)."""
    reg = Registry.discover()
    selected = reg.select(prefixes=["fixture_fixed", "fixture_waived"])
    assert {e.key for e in reg.entries if e.loaded} == {"fixture_fixed", "fixture_waived"}
    assert [e.key for e in selected if isinstance(e, Entry) and e.cls] == [
        "fixture_fixed",
        "fixture_waived",
    ]
    index = str(reg.by_key("fixture_slow").index)  # type: ignore[union-attr]
    reg.select(["fixture_leak", index, "nope"])
    loaded = {e.key for e in reg.entries if e.loaded}
    assert loaded == {"fixture_fixed", "fixture_waived", "fixture_leak", "fixture_slow"}


def test_each_distributions_metadata_is_parsed_once(plugins, monkeypatch):
    """Discovery reads each distribution's metadata once, only for those with testcases."""
    reads: list[object] = []
    metadata = importlib.metadata.Distribution.metadata

    def counted(dist):  # type: ignore[no-untyped-def]
        reads.append(dist)
        return metadata.fget(dist)

    monkeypatch.setattr(importlib.metadata.Distribution, "metadata", property(counted))
    reg = Registry.discover()
    owners = {e.plugin for e in reg.entries} | {f.plugin for f in reg.unlisted_failures}
    read = collections.Counter(metadata.fget(d)["Name"] for d in reads)  # type: ignore[attr-defined]
    assert set(read.values()) == {1} and len(read) == len(owners)


def test_a_writer_loads_only_when_asked_for(plugins):
    """Writers.discover imports no writer module; get(name) imports that one."""
    writers = Writers.discover()
    assert _fixture_modules() == set()
    assert writers.get("fixture_lines").__name__ == "LinesWriter"
    assert _fixture_modules() == {GOOD}


# -- the entry-point cache ---------------------------------------------------------------
@pytest.fixture
def ep_cache(tmp_path, monkeypatch):
    """The entry-point cache on, in a temporary directory."""
    monkeypatch.delenv(listing.NO_CACHE_ENV, raising=False)
    monkeypatch.setenv("GPUBW_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _no_scan(monkeypatch) -> None:
    """Make any scan of the installed distributions' entry points or metadata fail."""

    def scanned(*_a, **_k):  # type: ignore[no-untyped-def]
        raise AssertionError("the installed distributions were scanned")

    monkeypatch.setattr(importlib.metadata, "entry_points", scanned)
    monkeypatch.setattr(importlib.metadata, "distributions", scanned)
    monkeypatch.setattr(importlib.metadata.Distribution, "metadata", property(scanned))
    monkeypatch.setattr(importlib.metadata.Distribution, "entry_points", property(scanned))


def _shape(reg: Registry) -> list[tuple[int, str, str]]:
    return [(e.index, e.key, e.plugin) for e in reg.entries]


def _forget_fixtures() -> None:
    for name in _fixture_modules():
        del sys.modules[name]


def test_a_valid_entry_point_cache_is_used_without_scanning(plugins, ep_cache, monkeypatch):
    """A second discovery with a valid cache scans no distribution and gives the same
    entries, indexes, duplicates and writers; the selected entry still loads."""
    first = Registry.discover()
    writers = Writers.discover()
    assert list(ep_cache.glob("entry-points-*.bin"))
    _no_scan(monkeypatch)
    again = Registry.discover()
    assert _shape(again) == _shape(first)
    assert again.unlisted_failures == first.unlisted_failures
    assert Writers.discover()._found.keys() == writers._found.keys()
    (good,) = again.select(["fixture_good"])
    assert isinstance(good, Entry) and good.cls is not None and good.cls.__name__ == "Good"
    assert Writers.discover().get("fixture_lines").__name__ == "LinesWriter"


def test_a_failing_plugin_is_reported_the_same_on_a_cache_hit(plugins, ep_cache, monkeypatch):
    """Load failures (import errors, wrong types, duplicates, a broken writer) are the same
    from the cache as from a scan, for -t, -l (rendered) and writers."""
    from gpubw.cli import listing as lst

    scanned = Registry.discover()
    failures, text = scanned.failures, lst.render(scanned, False)
    (selected,) = Registry.discover().select(["fixture_import_raises"])
    writer_failures = Writers.discover().failures
    _forget_fixtures()
    _no_scan(monkeypatch)
    hit = Registry.discover()
    (again,) = Registry.discover().select(["fixture_import_raises"])
    assert isinstance(selected, Entry) and isinstance(again, Entry)
    assert again.failure == selected.failure and "boom at import" in again.failure.message  # type: ignore[union-attr]
    assert hit.failures == failures and any(f.plugin == BROKEN_DIST for f in failures)
    assert lst.render(hit, False) == text
    assert Writers.discover().failures == writer_failures
    with pytest.raises(PluginError, match="ModuleNotFoundError"):
        Writers.discover().get("fixture_broken_writer")


def test_a_builtin_missing_is_a_failure_on_a_cache_hit(ep_cache, tmp_path, monkeypatch):
    """A built-in missing from gpubw's installed entry points (a stale installation: here a
    gpubw distribution first on sys.path whose entry_points.txt lacks one) is still a failure
    at its index when the scan comes from the cache."""
    real = Path(str(importlib.metadata.distribution("gpubw")._path))  # type: ignore[attr-defined]
    site = _site(tmp_path, monkeypatch)
    stale = site / real.name
    stale.mkdir()
    for name in ("METADATA", "PKG-INFO"):
        if (real / name).exists():
            shutil.copy(real / name, stale / name)
    text = (real / "entry_points.txt").read_text()
    lines = [ln for ln in text.splitlines() if not ln.startswith("host_to_device_memcpy_sm ")]
    (stale / "entry_points.txt").write_text("\n".join(lines) + "\n")
    importlib.invalidate_caches()
    Registry.discover()
    _no_scan(monkeypatch)
    entry = Registry.discover().by_index(16)
    assert entry is not None and entry.key == "host_to_device_memcpy_sm"
    assert entry.failure is not None and "reinstall gpubw" in entry.failure.message


def _site(tmp_path: Path, monkeypatch) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    return site


def test_installing_removing_or_changing_a_plugin_voids_the_cache(ep_cache, tmp_path, monkeypatch):
    """A plugin distribution installed into a sys.path folder, its entry points edited in
    place (an editable install) or removed: each is seen by the next discovery."""
    site = _site(tmp_path, monkeypatch)
    try:
        assert Registry.discover().by_key("fixture_good") is None
        assert Registry.discover().by_key("fixture_good") is None  # a hit
        shutil.copytree(FIXTURES / GOOD, site, dirs_exist_ok=True)
        importlib.invalidate_caches()
        reg = Registry.discover()
        good = reg.by_key("fixture_good")
        assert good is not None and good.plugin == GOOD_DIST and good.cls is not None
        assert reg.by_key("fixture_fixed") is not None
        (eps,) = site.glob("*.dist-info/entry_points.txt")
        before = eps.stat().st_mtime_ns
        eps.write_text(eps.read_text().replace("fixture_fixed = ", "fixture_renamed = "))
        os.utime(eps, ns=(before + 10**9, before + 10**9))
        reg = Registry.discover()
        assert reg.by_key("fixture_fixed") is None and reg.by_key("fixture_renamed") is not None
        shutil.rmtree(eps.parent)
        importlib.invalidate_caches()
        assert Registry.discover().by_key("fixture_good") is None
    finally:
        _forget_fixtures()


def test_a_plain_file_written_on_sys_path_keeps_the_cache(ep_cache, tmp_path, monkeypatch):
    """A file that is no distribution written into a sys.path folder (a report in the current
    folder) does not void the entry-point cache."""
    site = _site(tmp_path, monkeypatch)
    first = _shape(Registry.discover())
    (site / "report.json").write_text("{}\n")
    _no_scan(monkeypatch)
    assert _shape(Registry.discover()) == first


def test_no_list_cache_bypasses_the_entry_point_cache(ep_cache, monkeypatch):
    """GPUBW_NO_LIST_CACHE=1: every discovery scans, no cache file is read or written."""
    monkeypatch.setenv(listing.NO_CACHE_ENV, "1")
    scans: list[object] = []
    scan = registry._scan
    monkeypatch.setattr(registry, "_scan", lambda groups: scans.append(groups) or scan(groups))
    first = _shape(Registry.discover())
    assert _shape(Registry.discover()) == first
    assert scans == [(registry.TESTCASE_GROUP,)] * 2
    assert not ep_cache.exists()


def test_an_unwritable_cache_dir_still_discovers(tmp_path, monkeypatch):
    """A cache folder that cannot be made never fails discovery; each one scans."""
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.delenv(listing.NO_CACHE_ENV, raising=False)
    monkeypatch.setenv("GPUBW_CACHE_DIR", str(blocker / "cache"))
    scans: list[object] = []
    scan = registry._scan
    monkeypatch.setattr(registry, "_scan", lambda groups: scans.append(1) or scan(groups))
    first = _shape(Registry.discover())
    assert first[38] == (38, "device_local_copy", "gpubw")
    assert _shape(Registry.discover()) == first
    assert len(scans) == 2  # nothing cached between the two: each scanned
    assert {"text", "json"} <= set(Writers.discover().names)
    assert blocker.read_text() == "not a folder"


def test_a_corrupt_entry_point_cache_is_rescanned(ep_cache):
    """An entry-point cache file that is not one is ignored and written again."""
    first = _shape(Registry.discover())
    (path,) = ep_cache.glob("entry-points-*.bin")
    path.write_bytes(b"GPUBWL1\n\x00garbage")
    assert _shape(Registry.discover()) == first
    assert path.read_bytes() != b"GPUBWL1\n\x00garbage"


# -- a plugin's import is interruptible and bounded (issue 33 item 3) ------------------------
def _hanging_import(tmp_path: Path, stubborn: bool) -> tuple[int, str, Path]:
    """``gpubw -t 0 fixture_import_hangs -o r.json`` in a child whose plugin import never
    ends: SIGINT once the import has begun (its note file is there), and SIGINT again
    (``stubborn``: the plugin swallows the first) once 15 s pass without an exit; SIGKILL
    past 120 s. Returns (exit code, stderr, the -o path)."""
    import signal
    import subprocess
    import time

    from _plugin_fixtures import copy_fixtures, subprocess_env

    paths = copy_fixtures(tmp_path, "gpubw_fixture_hangs")
    note, out = tmp_path / "hanging", tmp_path / "r.json"
    env = subprocess_env(paths, GPUBW_FIXTURE_HANGING=str(note))
    if stubborn:
        env["GPUBW_FIXTURE_STUBBORN"] = "1"
    argv = ["--simulate", "h200x1", "-t", "0", "fixture_import_hangs", "-b", "1MiB", "-i", "1"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpubw", *argv, "-j", "-o", str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        encoding="utf-8",
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not note.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            if not stubborn:
                raise
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=105)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("gpubw did not end after SIGINT during a plugin's import")
    return proc.returncode, err, out


def test_a_plugin_hanging_at_import_is_interrupted_with_the_report(tmp_path: Path) -> None:
    """A plugin import that never ends is plugin code like a testcase's run(): SIGINT
    interrupts it, the run stops before its first testcase, the interrupted report is
    written, exit 130 (before: every signal was absorbed; only SIGKILL ended it)."""
    import json

    code, err, out = _hanging_import(tmp_path, stubborn=False)
    assert code == 130, err
    doc = json.loads(out.read_text())
    assert doc["interrupted"] is True and doc["exit_code"] == 130 and doc["testcases"] == []


def test_a_plugin_swallowing_signals_at_import_is_bounded(tmp_path: Path) -> None:
    """A plugin import that swallows every signal: a second SIGINT ends the process 2 s
    later, exit 130, standard error saying that no report was written."""
    code, err, _ = _hanging_import(tmp_path, stubborn=True)
    assert code == 130, err
    assert "did not stop within 2 s of a second signal; no report was written" in err
