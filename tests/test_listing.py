"""Tests of gpubw -l's cache file and light import path (gpubw.cli.listing)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from _plugin_fixtures import BROKEN, FIXTURES, GOOD, installed
from gpubw.cli import command as cli
from gpubw.cli import listing
from gpubw.runner import registry


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """The list cache on, in a temporary directory."""
    monkeypatch.delenv(listing.NO_CACHE_ENV, raising=False)
    monkeypatch.setenv("GPUBW_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _cli(capsys, *argv: str) -> str:
    assert cli.main(list(argv)) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return out


def _gpubw(env: dict[str, str], *argv: str, code: str = "pass") -> subprocess.CompletedProcess[str]:
    """A fresh ``gpubw ARGV`` process (``code`` runs after main, before exit)."""
    prog = f"import sys; from gpubw.cli.command import main; rc = main({list(argv)!r})"
    prog += f"; {code}; sys.exit(rc)"
    proc = subprocess.run(
        [sys.executable, "-c", prog], env=env, capture_output=True, encoding="utf-8"
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def _env(cache_dir: Path, *site: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != listing.NO_CACHE_ENV}
    env["GPUBW_CACHE_DIR"] = str(cache_dir)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, site), env.get("PYTHONPATH", "")])
    return env


@pytest.mark.parametrize("plugin", [False, True])
def test_cache_hit_is_byte_identical_to_a_discovery(capsys, cache, monkeypatch, tmp_path, plugin):
    """-l from the cache prints exactly what a full discovery prints, text and JSON (also
    with a third-party plugin), and discovers nothing."""
    if plugin:
        with installed(tmp_path / "site", GOOD):
            _check_cache_hit(capsys, cache, monkeypatch)
            assert "(from gpubw-fixture-good)" in _cli(capsys, "-l")
    else:
        _check_cache_hit(capsys, cache, monkeypatch)


def _check_cache_hit(capsys, cache, monkeypatch):
    fresh_text = _cli(capsys, "-l")
    fresh_json = _cli(capsys, "-l", "-j")
    assert list(cache.glob("testcase-list-*.bin"))

    def no_discovery() -> None:
        raise AssertionError("the registry was used on a cache hit")

    discover = registry.Registry.discover

    monkeypatch.setattr(registry.Registry, "discover", no_discovery)
    assert _cli(capsys, "-l") == fresh_text
    assert _cli(capsys, "--list", "--format", "json") == fresh_json
    monkeypatch.setattr(registry.Registry, "discover", discover)
    monkeypatch.setenv(listing.NO_CACHE_ENV, "1")
    assert _cli(capsys, "-l") == fresh_text
    assert _cli(capsys, "-l", "-j") == fresh_json
    monkeypatch.delenv(listing.NO_CACHE_ENV)
    json.loads(fresh_json)


def test_cache_hit_writes_to_o(capsys, cache, tmp_path):
    """-l -j -o FILE from the cache writes the same bytes as without it."""
    _cli(capsys, "-l", "-j")
    target = tmp_path / "list.json"
    assert _cli(capsys, "-l", "-j", "-o", str(target)) == ""
    assert target.read_text() == _cli(capsys, "-l", "-j")


def test_a_new_distribution_on_a_known_path_appears(tmp_path):
    """A plugin distribution installed into a sys.path folder after the cache was written
    is listed by the next -l."""
    site = tmp_path / "site"
    site.mkdir()
    env = _env(tmp_path / "cache", site)
    before = _gpubw(env, "-l").stdout
    assert "fixture_good" not in before
    assert _gpubw(env, "-l").stdout == before  # a hit
    shutil.copytree(FIXTURES / GOOD, site, dirs_exist_ok=True)
    after = _gpubw(env, "-l").stdout
    assert "fixture_good:" in after and "(from gpubw-fixture-good)" in after


def test_an_edited_plugin_module_refreshes_its_description(tmp_path):
    """Editing a plugin's module (mtime and size change) refreshes its description."""
    site = tmp_path / "site"
    shutil.copytree(FIXTURES / GOOD, site)
    env = _env(tmp_path / "cache", site)
    old = "Returns one row: the buffer size in bytes/s for every device."
    assert old in _gpubw(env, "-l").stdout
    module = site / "gpubw_fixture_good.py"
    module.write_text(module.read_text().replace(old, "An edited description, longer."))
    out = _gpubw(env, "-l").stdout
    assert old not in out and "An edited description, longer." in out


def test_a_plugin_broken_after_caching_shows_as_failed(tmp_path):
    """A plugin that loaded when the cache was written and fails now is listed as failed."""
    site = tmp_path / "site"
    shutil.copytree(FIXTURES / GOOD, site)
    env = _env(tmp_path / "cache", site)
    assert "Plugins that could not be loaded" not in _gpubw(env, "-l").stdout
    (site / "gpubw_fixture_good.py").write_text("raise RuntimeError('fixture: broke later')\n")
    out = _gpubw(env, "-l").stdout
    failures = out.split("Plugins that could not be loaded:", 1)[1]
    assert "fixture_good (gpubw-fixture-good)" in failures and "broke later" in failures


def test_a_failing_plugin_is_never_served_from_the_cache(capsys, cache, tmp_path):
    """A list with a plugin that failed to load is not cached: every -l shows the failure
    as it is now."""
    with installed(tmp_path / "site", GOOD, BROKEN):
        first = _cli(capsys, "-l")
        assert "fixture_import_raises (gpubw-fixture-broken)" in first
        assert not list(cache.glob("testcase-list-*.bin"))
        assert _cli(capsys, "-l") == first


def test_an_unwritable_cache_dir_still_lists(capsys, monkeypatch, tmp_path):
    """A cache folder that cannot be made or written never fails -l."""
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.delenv(listing.NO_CACHE_ENV, raising=False)
    monkeypatch.setenv("GPUBW_CACHE_DIR", str(blocker / "cache"))
    out = _cli(capsys, "-l")
    assert "38, device_local_copy:" in out
    assert _cli(capsys, "-l") == out
    assert blocker.read_text() == "not a folder"


def test_a_corrupt_cache_file_is_rewritten(capsys, cache):
    """A cache file that is not one (torn, foreign) is ignored and replaced."""
    out = _cli(capsys, "-l")
    (path,) = cache.glob("testcase-list-*.bin")
    path.write_bytes(b"GPUBWL1\n\x00garbage")
    assert _cli(capsys, "-l") == out
    assert path.read_bytes() != b"GPUBWL1\n\x00garbage"


@pytest.mark.parametrize(
    ("argv", "parsed"),
    [
        (["-l"], ("text", None)),
        (["--list", "-j"], ("json", None)),
        (["-l", "--format", "json", "-o", "x"], ("json", "x")),
        (["-j", "-l", "--format", "json"], ("json", None)),
        (["-l", "-o", "-"], ("text", "-")),
        (["-l", "--output=x", "--format=json"], ("json", "x")),
        (["-l", "--output=-x"], ("text", "-x")),
        (["-l", "--format=csv"], None),
        (["-l", "--out", "x"], None),
        (["-l", "-b", "1"], None),
        (["-l", "-o", "a", "-o", "b"], None),
        (["-l", "-j", "--format", "text"], None),
        (["-l", "--format", "csv"], None),
        (["-l", "-o"], None),
        (["-lj"], None),
        (["-j"], None),
    ],
)
def test_plain_list_args(argv, parsed):
    """Only the plain -l forms skip the parser; anything else goes through it."""
    assert listing.plain_list_args(argv) == parsed


#: all that gpubw imports of itself for -l from the cache (the packages' __init__ files are
#: docstrings only)
LIST_MODULES = {
    "gpubw",
    "gpubw.cli",
    "gpubw.model",
    "gpubw.runner",
    "gpubw.cli._startup",
    "gpubw.version",
    "gpubw.model.errors",
    "gpubw.model.infile",
    "gpubw.model.console",  # the text escaped, errors to stderr: os and sys only
    "gpubw.cli.listing",
    "gpubw.runner.plugincache",
}
#: what -l from the cache must not import
HEAVY = ("attr", "attrs", "importlib.metadata", "stevedore", "argparse", "numpy", "jsonschema")


def test_a_cache_hit_imports_only_the_listing(tmp_path):
    """gpubw -l from the cache imports no plugin, registry, option or argparse module, nor
    attrs, importlib.metadata or stevedore: only gpubw.cli.command, gpubw.cli.listing and their
    base."""
    env = _env(tmp_path / "cache")
    dump = "print(sorted(sys.modules), file=sys.stderr)"
    miss = json.loads(_gpubw(env, "-l", code=dump).stderr.replace("'", '"'))
    assert "gpubw.runner.registry" in miss  # the first -l discovers
    hit = json.loads(_gpubw(env, "-l", code=dump).stderr.replace("'", '"'))
    assert {m for m in hit if m.split(".")[0] == "gpubw"} == {*LIST_MODULES, "gpubw.cli.command"}
    assert not [m for m in hit if any(m == h or m.startswith(h + ".") for h in HEAVY)]


def test_t_key_imports_only_that_testcase(tmp_path):
    """-t KEY loads that testcase's module alone: no other built-in testcase module and no
    third-party plugin module is imported."""
    with installed(tmp_path, GOOD, BROKEN) as paths:
        env = _env(tmp_path / "cache", *paths)
        argv = ["-t", "device_local_copy", "-b", "1", "--simulate", "h200x1", "-j"]
        dump = (
            "print(sorted(m for m in sys.modules if m.startswith(('gpubw.testcases.', "
            "'gpubw_fixture'))), file=sys.stderr)"
        )
        proc = _gpubw(env, *argv, "-o", os.devnull, code=dump)
    loaded = set(json.loads(proc.stderr.strip().splitlines()[-1].replace("'", '"')))
    shared = ("gpubw.testcases.base", "gpubw.testcases.shapes")  # the base class and shapes
    testcase_modules = {m for m in loaded if m not in shared}
    assert testcase_modules == {"gpubw.testcases.local"}, loaded


#: ``python -m gpubw ARGV`` that reports on stderr, at exit, how often the installed
#: distributions' entry points were scanned (the module-level scan, or any distribution's)
_COUNT_SCANS = """
import atexit, importlib.metadata as md, runpy, sys
scans = []
scan, dist_eps = md.entry_points, md.Distribution.entry_points
md.entry_points = lambda *a, **k: scans.append(1) or scan(*a, **k)
md.Distribution.entry_points = property(lambda d: scans.append(1) or dist_eps.fget(d))
atexit.register(lambda: print("SCANS", len(scans), file=sys.stderr))
sys.argv = ["gpubw", *sys.argv[1:]]
runpy.run_module("gpubw", run_name="__main__", alter_sys=True)
"""


def test_a_second_t_run_scans_no_distribution(tmp_path):
    """python -m gpubw -t KEY run twice: the second takes the entry points from the cache
    and scans no installed distribution's entry points (the first does)."""
    env = _env(tmp_path / "cache")
    argv = ["--simulate", "h200x2", "-t", "device_local_copy", "-b", "64", "-q", "-j"]

    def scans() -> int:
        cmd = [sys.executable, "-c", _COUNT_SCANS, *argv, "-o", os.devnull]
        proc = subprocess.run(cmd, env=env, capture_output=True, encoding="utf-8", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        return int(proc.stderr.rsplit("SCANS ", 1)[1])

    assert scans() > 0
    assert list((tmp_path / "cache").glob("entry-points-*.bin"))
    assert scans() == 0


def test_sigterm_during_a_plain_list_exits_143_and_keeps_o(capsys, tmp_path, monkeypatch):
    """SIGTERM while a plain -l lists ends it with 143 (as SIGINT with 130), the -o file as
    it was, and the previous SIGTERM handler back."""
    target = tmp_path / "list.txt"
    target.write_text("old\n")

    def terminated(_as_json: bool) -> str:
        os.kill(os.getpid(), signal.SIGTERM)
        return "never written\n"

    monkeypatch.setattr(listing, "listing", terminated)
    before = signal.getsignal(signal.SIGTERM)
    assert cli.main(["-l", "-o", str(target)]) == 128 + signal.SIGTERM
    assert target.read_text() == "old\n"
    assert signal.getsignal(signal.SIGTERM) is before
    assert not [p for p in tmp_path.iterdir() if p.name != "list.txt"]
    assert capsys.readouterr().out == ""
