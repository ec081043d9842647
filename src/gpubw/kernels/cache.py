"""Compile gpubw's CUDA C kernels with NVRTC and keep the binaries in an on-disk cache.

The cache directory is ``$GPUBW_CACHE_DIR``, else ``$XDG_CACHE_HOME/gpubw/kernels``, else
``~/.cache/gpubw/kernels``. An entry's key is the SHA-256 of everything the binary depends on:
the source text, the target architecture and output kind, the compiler options, the driver
version and the NVRTC version. Entries are written atomically (temporary file, then
``os.replace``, mode 0644 less the umask) and carry a checksum, so a torn or corrupt entry is
simply compiled again. A cache that cannot be read or written is not an error: gpubw
compiles and goes on. An entry is read only when gpubw may trust it
(:func:`gpubw.model.infile.read_cache_file`: a regular file, not a link, of this user's,
that no one else may write, of at most :data:`MAX_ENTRY_BYTES`); any other is ignored with
one warning on standard error, so a FIFO or ``/dev/zero`` in its place cannot hang or
exhaust a run.

Nothing here needs a GPU: NVRTC runs on the CPU, which is how CI compiles every kernel.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import attrs

from gpubw.kernels import PATTERN_WORDS, source
from gpubw.model.errors import KernelCompileError, UsageError
from gpubw.model.infile import read_cache_file
from gpubw.model.outfile import replace_regular_file

log = logging.getLogger(__name__)

#: File name of the kernel source shipped in this package.
SOURCE_NAME = "gpubw.cu"
#: Cache entry layout: MAGIC, 32-byte SHA-256 of the payload, payload.
_MAGIC = b"GPUBWK1\n"
_DIGEST = 32
#: the largest cache entry read (a cubin of gpubw.cu is ~100 KiB, a pattern 2 MiB)
MAX_ENTRY_BYTES = 64 << 20
#: the mode of an entry (less the umask): others may read it, only its owner write it
ENTRY_MODE = 0o644


def cache_dir() -> Path:
    """Where compiled kernels are kept (the directory may not exist yet)."""
    explicit = os.environ.get("GPUBW_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "gpubw" / "kernels"


def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC library; KernelCompileError if it cannot be loaded."""
    try:
        from cuda.bindings import nvrtc

        result, major, minor = nvrtc.nvrtcVersion()
    except Exception as exc:  # library missing, or an incompatible binding
        raise KernelCompileError(
            f"NVRTC (the CUDA runtime compiler) could not be loaded: {exc}. "
            "Install it with: pip install 'cuda-toolkit[nvrtc]'"
        ) from exc
    if int(result) != 0:
        raise KernelCompileError(f"nvrtcVersion failed: {result!r}")
    return int(major), int(minor)


def nvrtc_supported_archs() -> tuple[int, ...]:
    """Architectures (as 10 x major + minor) this NVRTC can emit SASS for."""
    from cuda.bindings import nvrtc

    result, archs = nvrtc.nvrtcGetSupportedArchs()
    if int(result) != 0:
        raise KernelCompileError(f"nvrtcGetSupportedArchs failed: {result!r}")
    return tuple(int(a) for a in archs)


@attrs.frozen
class Target:
    """What to compile for: ``cubin`` for ``sm_XY``, or ``ptx`` for ``compute_XY`` (JIT by
    the driver, used only when NVRTC does not know the device's architecture)."""

    kind: str  # "cubin" or "ptx"
    arch: str  # "sm_90" or "compute_90"


def choose_target(compute_capability: tuple[int, int]) -> Target:
    """SASS for the device's exact architecture when NVRTC supports it; otherwise PTX for the
    newest architecture NVRTC knows that is not newer than the device."""
    major, minor = compute_capability
    cc = 10 * major + minor
    try:
        supported = nvrtc_supported_archs()
    except Exception:  # an old NVRTC without the query: try the exact architecture
        supported = (cc,)
    if cc in supported:
        return Target("cubin", f"sm_{major}{minor}")
    older = [a for a in supported if a <= cc]
    if not older:
        raise KernelCompileError(
            f"NVRTC {'.'.join(map(str, nvrtc_version()))} cannot compile for compute capability "
            f"{major}.{minor} (it supports {', '.join(str(a) for a in supported)})"
        )
    best = max(older)
    return Target("ptx", f"compute_{best}")


def compile_options() -> tuple[tuple[str, str], ...]:
    """The macros every compile of gpubw.cu gets (part of the cache key).

    ``GPUBW_KERNEL_DEFINES="NAME=VALUE,..."`` adds macros (for tuning the copy kernel, e.g.
    ``GPUBW_COPY_UNROLL=4``; see benchmarks/tune_copy.py)."""
    extra = []
    for item in os.environ.get("GPUBW_KERNEL_DEFINES", "").split(","):
        if item.strip():
            name, _, value = item.strip().partition("=")
            extra.append((name, value or "1"))
    return (("GPUBW_PATTERN_WORDS", f"{PATTERN_WORDS}ULL"), *extra)


def cache_key(
    source_text: str,
    target: Target,
    driver_version: int | None,
    nvrtc: tuple[int, int],
    options: Sequence[tuple[str, str]] = (),
) -> str:
    """SHA-256 hex digest of everything a compiled binary depends on."""
    h = hashlib.sha256()
    for part in (
        "gpubw-kernel-cache-v1",
        source_text,
        target.kind,
        target.arch,
        str(driver_version),
        f"{nvrtc[0]}.{nvrtc[1]}",
        repr(tuple(options)),
    ):
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


def compile_source(source_text: str, target: Target, name: str = SOURCE_NAME) -> bytes:
    """Compile with NVRTC (through ``cuda.core.Program``); KernelCompileError with the log on
    failure. ``name`` is the program's name in compiler messages."""
    try:
        from cuda.core import Program, ProgramOptions
    except Exception as exc:
        raise KernelCompileError(f"cuda.core could not be imported: {exc}") from exc
    options = ProgramOptions(
        name=name,
        arch=target.arch,
        std="c++17",
        define_macro=list(compile_options()),
    )
    logs = io.StringIO()
    try:
        program = Program(source_text, "c++", options)
        try:
            code = program.compile(target.kind, logs=logs).code
        finally:
            program.close()
    except KernelCompileError:
        raise
    except Exception as exc:
        text = logs.getvalue().strip()
        detail = f"{exc}\n{text}" if text else str(exc)
        raise KernelCompileError(
            f"NVRTC could not compile {name} for {target.arch}:\n{detail}"
        ) from exc
    return code.encode("utf-8") if isinstance(code, str) else bytes(code)


#: binaries this process compiled but could not store (key -> payload)
_unwritten: dict[str, bytes] = {}


class KernelCache:
    """The on-disk store of compiled kernels. Every failure to read or write is logged at
    debug level and otherwise ignored."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory if directory is not None else cache_dir()

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.bin"

    def get(self, key: str) -> bytes | None:
        """The stored binary, or None when absent, unreadable or corrupt (one this process
        could not write is kept in memory and returned from there)."""
        blob = read_cache_file(str(self.path(key)), MAX_ENTRY_BYTES)
        if blob is None:
            return _unwritten.get(key)
        head = len(_MAGIC) + _DIGEST
        if len(blob) <= head or not blob.startswith(_MAGIC):
            log.debug("ignoring malformed kernel cache entry %s", self.path(key))
            return None
        digest, payload = blob[len(_MAGIC) : head], blob[head:]
        if hashlib.sha256(payload).digest() != digest:
            log.debug("ignoring corrupt kernel cache entry %s", self.path(key))
            return None
        return payload

    def put(self, key: str, payload: bytes) -> None:
        """Store atomically; silently give up if the directory is not writable."""
        blob = _MAGIC + hashlib.sha256(payload).digest() + payload
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            if replace_regular_file(str(self.path(key)), blob, mode=ENTRY_MODE):
                return
            log.debug("kernel cache entry %s is not a regular file; left alone", key)
        except (OSError, UsageError) as exc:
            log.debug("kernel cache %s not writable: %s", self.directory, exc)
        # kept for this process: the command's kernel helper thread compiles for the backend
        # through the cache, which must not compile the same binary again
        _unwritten[key] = payload


def load_or_compile(
    compute_capability: tuple[int, int],
    driver_version: int | None,
    *,
    cache: KernelCache | None = None,
    source_text: str | None = None,
    name: str = SOURCE_NAME,
) -> tuple[bytes, Target]:
    """The binary of a kernel source (gpubw.cu unless ``source_text`` is given, e.g. a
    plugin's module, then ``name`` names it) for a device of ``compute_capability``: from the
    cache, or compiled now (and stored). Returns the image for cuModuleLoadData and what it
    is."""
    text = source_text if source_text is not None else source(SOURCE_NAME)
    target = choose_target(compute_capability)
    store = cache if cache is not None else KernelCache()
    key = cache_key(
        text, target, driver_version, nvrtc_version(), (("name", name), *compile_options())
    )
    image = store.get(key)
    if image is None:
        image = compile_source(text, target, name)
        store.put(key, image)
    if target.kind == "ptx" and not image.endswith(b"\0"):
        image += b"\0"  # cuModuleLoadData reads PTX as a NUL-terminated string
    return image, target
