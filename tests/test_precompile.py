"""python -m gpubw.kernels.precompile: gpubw's kernels into the cache, in a process of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpubw.errors import KernelCompileError
from gpubw.kernels import cache
from gpubw.kernels.modules import GPUBW
from gpubw.kernels.precompile import main


def test_compiles_every_capability_into_the_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Each MAJOR.MINOR given lands in the cache under the key the run looks up."""
    monkeypatch.setenv("GPUBW_CACHE_DIR", str(tmp_path))
    assert main(["13000", "9.0", "8.0"]) == 0
    for cc in ((9, 0), (8, 0)):
        assert cache.is_cached(cc, 13000, source_text=GPUBW.source)
    assert not cache.is_cached((9, 0), None, source_text=GPUBW.source)  # another key


def test_usage_and_failures(capsys: pytest.CaptureFixture[str]) -> None:
    """No capability: usage on stderr, status 2; one NVRTC cannot compile: the error."""
    assert main(["13000"]) == 2
    assert "usage: python -m gpubw.kernels.precompile" in capsys.readouterr().err
    with pytest.raises(KernelCompileError, match=r"cannot compile for compute capability 1\.0"):
        main(["none", "1.0"])
