"""The on-disk cache of compiled kernels (and of the verification patterns): keyed storage
of binary images, read without trusting it.

The cache directory is ``$GPUBW_CACHE_DIR``, else ``$XDG_CACHE_HOME/gpubw/kernels``, else
``~/.cache/gpubw/kernels``. An entry's key is the SHA-256 of everything the binary depends on
(:func:`cache_key`): the source text, the target architecture and output kind, the compiler
options, the driver version and the NVRTC version. Entries are written atomically (temporary
file, then ``os.replace``, mode 0644 less the umask) and carry a checksum, so a torn or
corrupt entry is simply compiled again. A cache that cannot be read or written is not an
error: gpubw compiles and goes on. An entry is read only when gpubw may trust it
(:func:`gpubw.model.infile.read_cache_file`: a regular file, not a link, of this user's,
that no one else may write, of at most :data:`MAX_ENTRY_BYTES`); any other is ignored with
one warning on standard error, so a FIFO or ``/dev/zero`` in its place cannot hang or
exhaust a run.

Cut from the compile along the layers: the NVRTC compile is the backend's
(:mod:`gpubw.backend.nvrtc`, which reads and fills this cache); this module never calls CUDA.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from gpubw.model.errors import UsageError
from gpubw.model.infile import read_cache_file
from gpubw.model.outfile import replace_regular_file

log = logging.getLogger(__name__)

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


def cache_key(
    source_text: str,
    target: tuple[str, str],
    driver_version: int | None,
    nvrtc: tuple[int, int],
    options: Sequence[tuple[str, str]] = (),
) -> str:
    """SHA-256 hex digest of everything a compiled binary depends on: its source, its target
    (the output kind and architecture: ``("cubin", "sm_90")``), the driver and NVRTC
    versions, the compile options."""
    kind, arch = target
    h = hashlib.sha256()
    for part in (
        "gpubw-kernel-cache-v1",
        source_text,
        kind,
        arch,
        str(driver_version),
        f"{nvrtc[0]}.{nvrtc[1]}",
        repr(tuple(options)),
    ):
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


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
