"""The verification patterns: nvbandwidth's xorshift32 words, made fast and kept on disk.

A buffer is filled with the 2 MiB pattern of a seed (word k of the buffer is word k mod
:data:`gpubw.kernels.PATTERN_WORDS` of the pattern); :func:`pattern_bytes` gives that pattern
as little-endian bytes, as the device reads them.
"""

from __future__ import annotations

import functools
from typing import Any

from gpubw.kernels import PATTERN_WORDS

#: Seeds of the verification patterns (nvbandwidth's): destination, then source/expected.
DST_SEED = 0xCAFEBABE
SRC_SEED = 0xBAADF00D

#: words of the pattern computed one by one before the rest is computed in blocks (a power
#: of two)
_PATTERN_BLOCK = 1024


def _xorshift32_words(seed: int, count: int) -> list[int]:
    """``count`` successive xorshift32 states after ``seed`` (one step each)."""
    x, m, out = seed & 0xFFFFFFFF, 0xFFFFFFFF, []
    for _ in range(count):
        x ^= (x << 13) & m
        x ^= x >> 17
        x ^= (x << 5) & m
        out.append(x)
    return out


def _apply(columns: Any, words: Any) -> Any:
    """The GF(2)-linear map whose images of the 32 unit vectors are ``columns`` (uint32),
    applied to every word of ``words``."""
    import numpy as np

    out = np.zeros_like(words)
    for bit in range(32):
        out ^= ((words >> np.uint32(bit)) & np.uint32(1)) * columns[bit]
    return out


#: words of a cached pattern compared with a plain step-by-step xorshift32 before it is used
_PATTERN_SPOT_CHECK = 64


@functools.lru_cache(maxsize=4)
def pattern_bytes(seed: int) -> bytes:
    """PATTERN_WORDS 32-bit words of xorshift32 from ``seed`` (first word = one step).

    Kept in the kernel cache (:class:`gpubw.kernels.cache.KernelCache`: SHA-256 checked, an
    unwritable directory is ignored), and its first words compared with a plain xorshift32
    before use: computing it needs numpy, whose import was ~0.1 s of a one-testcase process
    on 2 x H200 (0.25 s where numpy had no .pyc files). Computed by :func:`_pattern` on a
    miss."""
    import struct

    from gpubw.kernels.cache import KernelCache

    cache = KernelCache()
    key = f"pattern-xorshift32-{seed:08x}-{PATTERN_WORDS}w"
    check = struct.pack(f"<{_PATTERN_SPOT_CHECK}I", *_xorshift32_words(seed, _PATTERN_SPOT_CHECK))
    data = cache.get(key)
    if data is not None and len(data) == PATTERN_WORDS * 4 and data.startswith(check):
        return data
    data = _pattern(seed)
    cache.put(key, data)
    return data


def _pattern(seed: int) -> bytes:
    """:func:`pattern_bytes`, computed. xorshift32 is linear over GF(2): the first block is
    stepped one word at a time, then each further block is the previous one times the
    block's jump matrix (T to the power of the block length), so 2 MiB take milliseconds
    instead of a 0.15 s Python loop."""
    import numpy as np

    block = min(_PATTERN_BLOCK, PATTERN_WORDS)
    first = np.array(_xorshift32_words(seed, block), dtype=np.uint32)
    if block == PATTERN_WORDS:
        return first.tobytes()
    # the jump matrix T^block: T is one step of each unit vector; square it (block = 2^k)
    jump = np.array([_xorshift32_words(1 << b, 1)[0] for b in range(32)], dtype=np.uint32)
    for _ in range(block.bit_length() - 1):
        jump = _apply(jump, jump)
    out = np.empty(PATTERN_WORDS, dtype=np.uint32)
    out[:block] = first
    done = block
    while done < PATTERN_WORDS:  # double: the next `done` words jump `done` ahead
        n = min(done, PATTERN_WORDS - done)
        out[done : done + n] = _apply(jump, out[:n])
        done += n
        if done < PATTERN_WORDS:  # the jump matrix of the doubled length: jump twice
            jump = _apply(jump, jump)
    return out.tobytes()
