"""Element types of the STREAM kernels, and how a testcase picks one.

Bandwidth is counted in bytes, so the figures must not depend on the element type: every
kernel moves 16-byte vectors (4 fp32, 8 fp16 or 2 fp64 elements) and the counted bytes are
the same for every type. The type only changes the arithmetic (scale, add, triad, the read's
sum, the strided read's + 1) and the strided read's element stride.

The type is, in order of precedence: a testcase class's ``dtype`` attribute (a subclass pins
it), the environment variable ``GPUBW_STREAM_DTYPE``, or ``fp32``.
"""

from __future__ import annotations

import os
import struct

import attrs
from gpubw import UsageError

#: Environment variable naming the element type (fp32, fp16, fp64).
DTYPE_ENV = "GPUBW_STREAM_DTYPE"
DEFAULT_DTYPE = "fp32"
#: Bytes per vectorized access.
VECTOR_BYTES = 16


@attrs.frozen
class DType:
    """One element type: its name, kernel-name suffix, size and struct/numpy codes."""

    name: str  # "fp32"
    suffix: str  # "f32": kernels are named stream_<op>_<suffix>
    itemsize: int
    struct_code: str  # "f", "e", "d"
    numpy_name: str  # "float32", "float16", "float64"

    def bits(self, value: float) -> int:
        """The element's bit pattern of ``value`` (exact for the values STREAM uses)."""
        return int.from_bytes(struct.pack("<" + self.struct_code, value), "little")

    def vector(self, value: float) -> bytes:
        """16 bytes: ``value`` repeated over one vector."""
        return struct.pack("<" + self.struct_code, value) * (VECTOR_BYTES // self.itemsize)

    def pattern(self, value: float) -> tuple[int, int]:
        """The vector of ``value`` as two little-endian u64 (lo, hi): the fill and check
        kernels' pattern arguments."""
        v = self.vector(value)
        return int.from_bytes(v[:8], "little"), int.from_bytes(v[8:], "little")


FP32 = DType("fp32", "f32", 4, "f", "float32")
FP16 = DType("fp16", "f16", 2, "e", "float16")
FP64 = DType("fp64", "f64", 8, "d", "float64")

DTYPES: dict[str, DType] = {t.name: t for t in (FP32, FP16, FP64)}
_ALIASES = {
    "float32": "fp32",
    "float": "fp32",
    "f32": "fp32",
    "float16": "fp16",
    "half": "fp16",
    "f16": "fp16",
    "float64": "fp64",
    "double": "fp64",
    "f64": "fp64",
}


def dtype(name: str) -> DType:
    """The element type called ``name`` (fp32, fp16, fp64, or an alias such as float16);
    ValueError for any other name."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in DTYPES:
        raise ValueError(f"unknown STREAM element type {name!r}; allowed: {', '.join(DTYPES)}")
    return DTYPES[key]


def resolve_dtype(attribute: str | None) -> DType:
    """The class attribute if set (ValueError if unknown: the testcase's own bug), else
    ``$GPUBW_STREAM_DTYPE`` (UsageError if unknown: the user's setting), else fp32."""
    if attribute:
        return dtype(attribute)
    try:
        return dtype(os.environ.get(DTYPE_ENV, "") or DEFAULT_DTYPE)
    except ValueError as exc:
        raise UsageError(f"{DTYPE_ENV}: {exc}") from None
