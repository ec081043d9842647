"""The modules' old import paths (gpubw/_compat): each is the moved module itself."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import gpubw

COMPAT = Path(gpubw.__file__).with_name("_compat")
OLD = sorted(p.stem for p in COMPAT.glob("*.py"))


def test_every_old_top_level_module_has_a_path() -> None:
    """The 37 modules that sat at the top of src/gpubw before the layer packages (all but
    cli, runner and acceptance, which are packages of the same name now) keep their path."""
    assert len(OLD) == 37
    assert "measurement" in OLD and "results" in OLD and "testcase" in OLD


@pytest.mark.parametrize("old", OLD)
def test_an_old_path_is_the_new_module(old: str) -> None:
    """``import gpubw.<old>`` gives the very module object of its new path (patching one
    patches both), and the new module's name is the new path."""
    module = importlib.import_module(f"gpubw.{old}")
    assert module.__name__ != f"gpubw.{old}"
    assert importlib.import_module(module.__name__) is module
    assert sys.modules[f"gpubw.{old}"] is module


def test_a_plugin_written_against_old_paths_still_works() -> None:
    """Code of a third party that imports gpubw's old module paths runs unchanged, in a
    fresh process."""
    code = (
        "from gpubw.testcase import Testcase; from gpubw.results import Matrix, BANDWIDTH;"
        "from gpubw.measurement import MemcpyOperation; from gpubw.initiators import CE;"
        "import gpubw; assert Testcase is gpubw.Testcase and Matrix is gpubw.Matrix;"
        "assert MemcpyOperation is gpubw.MemcpyOperation and CE is gpubw.CE; print('ok')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, encoding="utf-8", timeout=60
    )
    assert done.stdout == "ok\n", done.stderr
