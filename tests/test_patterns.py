"""The verification patterns (gpubw.kernels.patterns): xorshift32 words, computed and cached."""

from __future__ import annotations

import pathlib

import pytest

from gpubw.kernels.patterns import DST_SEED, SRC_SEED, pattern_bytes


def test_pattern_bytes_equal_the_plain_xorshift32_sequence() -> None:
    """The block-jump pattern is word for word the xorshift32 sequence stepped one by one
    (what the verification kernels and nvbandwidth compute)."""
    import array

    from gpubw.kernels import PATTERN_WORDS
    from gpubw.kernels.patterns import _xorshift32_words

    for seed in (0xCAFEBABE, 0xBAADF00D, 1):
        expected = array.array("I", _xorshift32_words(seed, PATTERN_WORDS))
        assert pattern_bytes(seed) == expected.tobytes()  # little-endian, as the device


def test_pattern_is_computed_then_cached_without_numpy(tmp_path: pathlib.Path) -> None:
    """A first process computes the pattern and caches it, a second reads it from the cache,
    checked; neither imports numpy (its import cost ~0.25 s where it has no .pyc files)."""
    import os
    import subprocess
    import sys

    code = (
        "import sys, struct; from gpubw.kernels import patterns\n"
        "calls = []; compute = patterns._pattern\n"
        "patterns._pattern = lambda seed: calls.append(seed) or compute(seed)\n"
        "p = patterns.pattern_bytes(patterns.SRC_SEED); x = patterns.SRC_SEED\n"
        "for k in range(3):\n"
        "    x ^= (x << 13) & 0xFFFFFFFF; x ^= x >> 17; x ^= (x << 5) & 0xFFFFFFFF\n"
        "    assert struct.unpack_from('<I', p, 4 * k)[0] == x and len(p) == 2 * 1024 * 1024\n"
        "print(len(calls), 'numpy' in sys.modules)\n"
    )
    env = {**os.environ, "GPUBW_CACHE_DIR": str(tmp_path)}
    runs = [
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, encoding="utf-8")
        for _ in range(2)
    ]
    assert [r.stdout.strip() for r in runs] == ["1 False", "0 False"], [r.stderr for r in runs]


def test_a_bad_cached_pattern_is_computed_again(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A corrupt cache entry, or one holding other words, is ignored and rewritten."""
    from gpubw.kernels import patterns
    from gpubw.kernels.cache import KernelCache

    monkeypatch.setenv("GPUBW_CACHE_DIR", str(tmp_path))
    patterns._pattern_bytes.cache_clear()
    good = patterns.pattern_bytes(SRC_SEED)
    (entry,) = tmp_path.glob("pattern-*.bin")
    for bad in (entry.read_bytes()[:-1] + b"\x00", None):
        if bad is None:  # a well-formed entry of the wrong words (the other seed's)
            KernelCache(tmp_path).put(entry.stem, patterns._pattern(DST_SEED))
        else:
            entry.write_bytes(bad)
        patterns._pattern_bytes.cache_clear()
        assert patterns.pattern_bytes(SRC_SEED) == good
        assert KernelCache(tmp_path).get(entry.stem) == good
    patterns._pattern_bytes.cache_clear()


def test_concurrent_callers_compute_a_pattern_once(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel helper thread and the main thread asking for a pattern at once: one
    computes it, the other waits and gets the same bytes."""
    import threading

    from gpubw.kernels import patterns

    monkeypatch.setenv("GPUBW_CACHE_DIR", str(tmp_path))
    patterns._pattern_bytes.cache_clear()
    calls: list[int] = []
    compute = patterns._pattern

    def counted(seed: int) -> bytes:
        calls.append(seed)
        return compute(seed)

    monkeypatch.setattr(patterns, "_pattern", counted)
    got: list[bytes] = []
    threads = [
        threading.Thread(target=lambda: got.append(patterns.pattern_bytes(SRC_SEED)))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    patterns._pattern_bytes.cache_clear()
    assert calls == [SRC_SEED] and len(got) == 4 and len(set(got)) == 1
