"""Put the fixture plugin distributions of tests/fixtures/ on the import path.

Each fixture folder is an installed distribution (modules + ``*.dist-info``), so gpubw finds
its entry points through importlib.metadata and stevedore like any third-party package.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
GOOD = "gpubw_fixture_good"
BROKEN = "gpubw_fixture_broken"
HOSTILE = "gpubw_fixture_hostile"
GOOD_DIST = "gpubw-fixture-good"
BROKEN_DIST = "gpubw-fixture-broken"
HOSTILE_DIST = "gpubw-fixture-hostile"


def copy_fixtures(dest: Path, *names: str) -> list[Path]:
    """Copy fixture distributions into ``dest`` (one folder each); returns the folders."""
    out = []
    for name in names:
        target = dest / name
        shutil.copytree(FIXTURES / name, target, ignore=shutil.ignore_patterns("__pycache__"))
        out.append(target)
    return out


def _forget_fixture_modules() -> None:
    for mod in [m for m in sys.modules if m.startswith("gpubw_fixture")]:
        del sys.modules[mod]


@contextlib.contextmanager
def installed(dest: Path, *names: str) -> Iterator[list[Path]]:
    """The fixture distributions ``names`` installed (on sys.path) for the block."""
    paths = copy_fixtures(dest, *names)
    sys.path[:0] = [str(p) for p in paths]
    importlib.invalidate_caches()
    try:
        yield paths
    finally:
        for p in paths:
            sys.path.remove(str(p))
        _forget_fixture_modules()
        importlib.invalidate_caches()


def subprocess_env(paths: list[Path], **extra: str) -> dict[str, str]:
    """The environment for a child gpubw that sees the fixture distributions at ``paths``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, paths), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env
