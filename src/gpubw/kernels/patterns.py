"""The verification patterns: nvbandwidth's xorshift32 words, made fast and kept on disk.

A buffer is filled with the 2 MiB pattern of a seed (word k of the buffer is word k mod
:data:`gpubw.kernels.PATTERN_WORDS` of the pattern); :func:`pattern_bytes` gives that pattern
as little-endian bytes, as the device reads them.
"""

from __future__ import annotations

import functools
import struct
import threading

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


def _map_word(columns: list[int], word: int) -> int:
    """The GF(2)-linear map whose images of the 32 unit vectors are ``columns``, applied to
    one 32-bit ``word``."""
    out = 0
    for bit in range(32):
        if (word >> bit) & 1:
            out ^= columns[bit]
    return out


def _map_lanes(columns: list[int], lanes: int, count: int) -> int:
    """The same map applied to each of ``count`` 32-bit words packed little-endian in the
    integer ``lanes`` (word k in bits 32k..32k+31), all at once: per bit b, the lanes' bit b
    moved to each lane's bit 0 times ``columns[b]`` (< 2**32, so nothing carries into the
    next lane)."""
    ones = int.from_bytes(b"\x01\0\0\0" * count, "little")
    out = 0
    for bit, column in enumerate(columns):
        if column:
            out ^= ((lanes >> bit) & ones) * column
    return out


#: words of a cached pattern compared with a plain step-by-step xorshift32 before it is used
_PATTERN_SPOT_CHECK = 64


#: one caller computes or reads a pattern at a time (the command's kernel helper thread makes
#: them early; a caller meanwhile waits for it instead of computing them again)
_lock = threading.Lock()


def pattern_bytes(seed: int) -> bytes:
    """PATTERN_WORDS 32-bit words of xorshift32 from ``seed`` (first word = one step).

    Kept in the kernel cache (:class:`gpubw.kernels.cache.KernelCache`: SHA-256 checked, an
    unwritable directory is ignored), and its first words compared with a plain xorshift32
    before use. Computed by :func:`_pattern` on a miss (~40 ms per seed). Thread-safe."""
    with _lock:
        return _pattern_bytes(seed)


@functools.lru_cache(maxsize=4)
def _pattern_bytes(seed: int) -> bytes:
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
    block's jump matrix (T to the power of the block length), applied to all its words at
    once as one big integer, so 2 MiB take ~40 ms of plain Python instead of a 0.15 s loop
    (and no numpy, whose import cost ~0.25 s in an image without byte-compiled files)."""
    block = min(_PATTERN_BLOCK, PATTERN_WORDS)
    first = _xorshift32_words(seed, block)
    packed = int.from_bytes(struct.pack(f"<{block}I", *first), "little")
    if block < PATTERN_WORDS:
        # the jump matrix T^block: T is one step of each unit vector; square it (block = 2^k)
        jump = [_xorshift32_words(1 << b, 1)[0] for b in range(32)]
        for _ in range(block.bit_length() - 1):
            jump = [_map_word(jump, column) for column in jump]
        done = block
        while done < PATTERN_WORDS:  # double: the next `n` words jump `done` ahead
            n = min(done, PATTERN_WORDS - done)
            head = packed & ((1 << (32 * n)) - 1)
            packed |= _map_lanes(jump, head, n) << (32 * done)
            done += n
            if done < PATTERN_WORDS:  # the jump matrix of the doubled length: jump twice
                jump = [_map_word(jump, column) for column in jump]
    return packed.to_bytes(4 * PATTERN_WORDS, "little")
