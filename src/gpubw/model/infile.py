"""Reading a file gpubw did not write itself, without letting it take the process over.

Two kinds of file, one rule each:

* **Input files a user named** (``--simulate FILE``, ``--expect FILE``, the reports of
  ``check``, ``compare``, ``plot`` and ``expect-from``): :func:`read_input`. The file must be a
  regular file (links followed) of at most :data:`MAX_INPUT_BYTES`; anything else (a FIFO, a
  device, a socket: reading one could block for ever, ignoring SIGINT and SIGTERM, or never
  end) is a :class:`UsageError` naming the file, found before a byte is read. It is opened
  with ``O_NONBLOCK``, so even opening a FIFO nobody writes returns at once.
* **Cache files** (the entry-point and ``-l`` caches, compiled kernels, verification
  patterns), which may sit in a folder others can write to (``$GPUBW_CACHE_DIR``):
  :func:`read_cache_file`. A cache file is used only when it is a regular file (not a link:
  ``O_NOFOLLOW``), owned by this process's user, writable by nobody else and at most
  ``limit`` bytes; otherwise it is ignored with one warning on standard error (per file and
  process) and the caller makes it again. Its content is data to check, never trusted.

:func:`refuse_input_as_output` keeps ``-o`` from overwriting the file the run reads.
"""

from __future__ import annotations

import errno
import os
import stat
import sys

from gpubw.model.errors import UsageError

#: the largest input file gpubw reads (a report of a large run is a few MiB)
MAX_INPUT_BYTES = 256 << 20

_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)
_warned: set[str] = set()


def kind_of(mode: int) -> str:
    """What a file of ``mode`` is, in words ("a FIFO (named pipe)", "a regular file")."""
    for test, words in _KINDS:
        if test(mode):
            return words
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def _read_fd(fd: int, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of ``fd`` (one more than allowed: the caller sees it grew)."""
    chunks = []
    left = limit + 1
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_input_bytes(
    path: str | os.PathLike[str], what: str, limit: int = MAX_INPUT_BYTES
) -> bytes:
    """The bytes of the input file ``path`` (``what`` names it in messages: "expectations
    file"). UsageError when it is not a regular file or is larger than ``limit``; an OSError
    (missing, unreadable) is the caller's to word."""
    name = os.fspath(path)
    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(
                f"{what} {name}: it is {kind_of(st.st_mode)}, not a regular file; gpubw "
                "reads only regular files (save the content to a file first)"
            )
        if st.st_size > limit:
            raise UsageError(f"{what} {name}: {st.st_size} bytes, larger than {limit} bytes")
        data = _read_fd(fd, limit)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise UsageError(f"{what} {name}: larger than {limit} bytes (it grew while read)")
    return data


def read_input(path: str | os.PathLike[str], what: str, limit: int = MAX_INPUT_BYTES) -> str:
    """:func:`read_input_bytes` decoded as UTF-8 (UnicodeDecodeError as ``bytes.decode``)."""
    return read_input_bytes(path, what, limit).decode("utf-8")


def warn_once(key: str, message: str) -> None:
    """``gpubw: warning: <message>`` on standard error, once per ``key`` and process."""
    if key in _warned:
        return
    _warned.add(key)
    try:
        sys.stderr.write(f"gpubw: warning: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):  # no usable stderr: nothing to tell
        pass


def cache_file_problem(st: os.stat_result, limit: int) -> str | None:
    """Why a cache file of status ``st`` must not be used (None: it may)."""
    if not stat.S_ISREG(st.st_mode):
        return f"it is {kind_of(st.st_mode)}, not a regular file"
    if st.st_uid != os.geteuid():
        return f"it is owned by user {st.st_uid}, not by this user ({os.geteuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"others may write to it (mode {stat.S_IMODE(st.st_mode):04o})"
    if st.st_size > limit:
        return f"it is {st.st_size} bytes, more than a cache file of its kind holds ({limit})"
    return None


def read_cache_file(path: str, limit: int) -> bytes | None:
    """The bytes of the cache file at ``path``, or None: absent (silently), or not one gpubw
    may trust (a link, not a regular file, another user's, writable by others, larger than
    ``limit``, unreadable: with one warning on standard error)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if os.path.islink(path):
            _ignored(path, "it is a symbolic link")
        elif exc.errno not in (errno.ENOENT, errno.ENOTDIR):  # those: no cache yet
            _ignored(path, exc.strerror or str(exc))
        return None
    data = b""
    try:
        problem = cache_file_problem(os.fstat(fd), limit)
        if problem is None:
            data = _read_fd(fd, limit)
            if len(data) > limit:
                problem = "it grew past its bound while it was read"
    except OSError as exc:
        problem = exc.strerror or str(exc)
    finally:
        os.close(fd)
    if problem is not None:
        _ignored(path, problem)
        return None
    return data


def _ignored(path: str, why: str) -> None:
    warn_once(path, f"ignoring the cache file {path}: {why}; it is made again")


def refuse_input_as_output(
    output: str | None,
    inputs: dict[str, str | None],
    label: str = "-o/--output",
    what: str = "the report",
) -> None:
    """UsageError when ``-o output`` is one of the files a command reads (``inputs``: the
    flag, e.g. ``--simulate``, and its value; a value that names no existing file is
    skipped): ``what`` it writes would replace what it was made from."""
    if output is None or output == "-":
        return
    for flag, value in inputs.items():
        if value is None or not os.path.isfile(value):
            continue
        try:
            same = os.path.exists(output) and os.path.samefile(output, value)
        except OSError:
            same = False
        if same:
            raise UsageError(
                f"{label} {output!r} is the file {flag} reads ({value!r}); {what} "
                "would replace it: give another file"
            )
