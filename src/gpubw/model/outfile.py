"""Writing a file the user named, without destroying anything gpubw does not own.

:class:`OutputTarget` is the one way gpubw writes a file a user chose (``-o``, ``plot -o``,
``compare -o``); the kernel cache uses :func:`replace_regular_file`. The rules:

* ``-`` is standard output, and so is every path that names the process's own descriptor 1
  (``/dev/stdout``, ``/dev/fd/1``, ``/proc/self/fd/1``, ``/proc/<own pid>/fd/1``, a link to
  one of them): the report goes where standard output went when gpubw started, exactly as
  for ``-``, also while gpubw holds descriptor 1 away from plugin code
  (:func:`descriptor_of`). Another of the process's own descriptors (``/dev/stderr``,
  ``/proc/self/fd/3``) is written through that descriptor as it was when the target was
  checked: in place, never truncated (``>>`` keeps appending), never reopened by name. A
  descriptor that is not open is a :class:`UsageError` before anything runs.
* A regular file, or a new name in an existing folder: written atomically (a temporary file
  in the same folder, renamed over the name once complete), keeping an existing file's mode
  (and, where the process may, its owner).
* A symbolic link: followed; its target is written by the same rules, the link stays. A
  link is followed only where the kernel's ``fs.protected_symlinks`` would follow it: in a
  world-writable sticky folder (``/tmp``) its owner must be the user running gpubw or the
  folder's owner (:func:`check_links`); otherwise :class:`UsageError`. So another user's link
  planted in ``/tmp`` cannot make root replace root's own file.
* A character device, FIFO or socket (``/dev/null``, ``/dev/stdout``, a named pipe): opened
  and written directly; nothing is ever renamed over it. So is any path under ``/dev`` or
  ``/proc`` (``/dev/stdout`` resolves into ``/proc/self/fd``).
* A folder, a name ending in ``/``, a missing parent folder: :class:`UsageError`, found by
  :meth:`OutputTarget.check` before anything runs.
* A relative name is made absolute when the target is made (before anything runs), and only
  the process that began a write completes it (:func:`atomic_file`): plugin code that
  changes the current folder or forks cannot move or write the report.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import secrets
import stat
import sys
import tempfile
from collections.abc import Iterator
from typing import IO, Any

from gpubw.model.errors import UsageError

#: a temporary name well under NAME_MAX (255) whatever the target's name
_TMP_PREFIX = ".gpubw-"
_TMP_SUFFIX = ".tmp"
_DIRECT_ROOTS = ("/dev/", "/proc/")
#: names up to this many bytes need no check of their length
_SAFE_NAME_BYTES = 64


#: how text files are written: UTF-8, and a character UTF-8 cannot encode (a lone surrogate
#: in a device name) as its backslash escape, never an error that loses the file
_TEXT = {"encoding": "utf-8", "errors": "backslashreplace"}


def _is_direct(path: str) -> bool:
    """True when ``path`` must be opened and written in place, never replaced."""
    if any(path.startswith(root) for root in _DIRECT_ROOTS):
        return True
    try:
        mode = os.stat(path).st_mode  # follows links
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


#: the paths that name one of the calling process's own descriptors (after the folders are
#: resolved: ``/proc/self`` is ``/proc/<pid>``), and the descriptor they name
_OWN_FD = re.compile(r"/proc/(?P<pid>\d+)(?:/task/\d+)?/fd/(?P<fd>\d+)")
_STD_NAMES = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}


def descriptor_of(path: str) -> int | None:
    """The descriptor of this process that ``path`` names, or None for any other path.

    ``/dev/stdout``, ``/dev/fd/N``, ``/proc/self/fd/N``, ``/proc/thread-self/fd/N``,
    ``/proc/<this pid>/fd/N`` and links to any of them (each link of a chain is read; the
    chain's own descriptor link is never followed into the file behind it). Such a path
    means "my descriptor N", whatever N leads to: opening it by name later would reach
    wherever N leads *then* (``/dev/null`` while gpubw holds standard output), and would
    truncate a file that ``>>`` opened for appending."""
    current = os.path.abspath(path)
    for _ in range(_MAX_LINKS):
        if current in _STD_NAMES:
            return _STD_NAMES[current]
        try:
            folder = os.path.realpath(os.path.dirname(current))
        except (OSError, ValueError):
            return None
        current = os.path.join(folder, os.path.basename(current))
        own = _OWN_FD.fullmatch(current)
        if own is not None:
            return int(own["fd"]) if int(own["pid"]) == os.getpid() else None
        try:
            link = os.readlink(current)
        except (OSError, ValueError):  # not a link, or not there
            return None
        current = os.path.normpath(os.path.join(folder, link))
    return None


def _shown(path: str) -> str:
    """A path for a message: quoted, a long one cut (a path from a deep folder may be longer
    than a screen)."""
    return repr(path) if len(path) <= 100 else f"{path[:60]!r}... ({len(path)} characters)"


class OutputTarget:
    """Where a report (or picture) goes; see the module docstring for the rules.

    ``label`` names the option in messages (``-o/--output``)."""

    def __init__(self, path: str, *, label: str = "-o/--output") -> None:
        self.path = path
        self.label = label
        #: the path made absolute now, before anything runs: a plugin that changes the
        #: current folder cannot move the report
        self.absolute = os.path.abspath(path) if path and path != "-" else path
        #: the process's own descriptor the path names (``/dev/stdout``: 1), found now,
        #: before anything runs and before gpubw moves any descriptor
        self.descriptor = 1 if path == "-" else descriptor_of(path) if path else None

    @property
    def is_stdout(self) -> bool:
        """True for ``-`` and for every name of this process's descriptor 1."""
        return self.descriptor == 1

    @property
    def is_direct(self) -> bool:
        """Written in place (a device, FIFO or socket, another of the process's own
        descriptors), not atomically replaced."""
        return not self.is_stdout and (self.descriptor is not None or _is_direct(self.absolute))

    def resolved(self) -> str:
        """The regular file that an atomic write replaces (links followed, each one checked
        as the kernel would: :func:`check_links`)."""
        check_links(self.absolute, self.label, self.path)
        return os.path.realpath(self.absolute)

    def check(self) -> OutputTarget:
        """Refuse, before anything runs, a path that cannot be written; returns self."""
        if self.is_stdout:
            return self
        path, label = self.path, self.label
        if not path:
            raise UsageError(f"{label}: an empty file name; give a file name or - for stdout")
        if path.endswith(os.sep):
            raise UsageError(f"{label} {path!r} ends with {os.sep!r}: give a file name")
        if os.path.isdir(self.absolute):
            raise UsageError(f"{label} {path!r} is a directory; give a file name")
        check_links(self.absolute, label, path)
        if self.descriptor is not None:
            self._check_descriptor(self.descriptor)
            return self
        _refuse_kernel_file(self.absolute, label, path)
        if self.is_direct:
            if not os.access(self.absolute, os.W_OK):
                raise UsageError(f"{label} {path!r} cannot be written: permission denied")
            _check_direct(self.absolute, label, path)
            return self
        target = self.resolved()
        if os.path.isdir(target):
            raise UsageError(f"{label} {path!r} is a directory; give a file name")
        check_protected_regular(target, label, path)
        folder = os.path.dirname(target)
        self._check_folder(folder)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise UsageError(
                f"{label} {path!r} cannot be written: the folder {folder!r} is not writable"
            )
        if os.path.exists(target):
            if not os.access(target, os.W_OK):
                raise UsageError(f"{label} {path!r} cannot be written: permission denied")
        else:
            self._check_name(folder, os.path.basename(target))
        return self

    def _check_descriptor(self, fd: int) -> None:
        """UsageError unless this process's descriptor ``fd`` is open for writing."""
        try:
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        except OSError:
            raise UsageError(
                f"{self.label} {self.path!r} names descriptor {fd} of gpubw's process, which is "
                "not open; give a file name, or open that descriptor for writing"
            ) from None
        if flags & os.O_ACCMODE == os.O_RDONLY:
            raise UsageError(
                f"{self.label} {self.path!r} names descriptor {fd} of gpubw's process, which is "
                "open for reading only; give a file name, or open that descriptor for writing"
            )

    def _check_folder(self, folder: str) -> None:
        """UsageError unless ``folder`` is an existing folder, naming why (a path too long
        for the system, from a very deep working folder, is not a missing folder)."""
        path, label = self.path, self.label
        try:
            st = os.stat(folder)
        except FileNotFoundError:
            raise UsageError(f"{label} {path!r}: the folder {folder!r} does not exist") from None
        except OSError as exc:
            why = exc.strerror or str(exc)
            if exc.errno == errno.ENAMETOOLONG:
                why += " (a longer path than the system takes; give a shorter one)"
            raise UsageError(
                f"{label} {_shown(path)} cannot be written: its folder {_shown(folder)}: {why}"
            ) from None
        if not stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{label} {path!r}: {folder!r} is not a folder")

    def _check_name(self, folder: str, name: str) -> None:
        """UsageError if a file called ``name`` cannot be made in ``folder`` (a name longer
        than its file system takes: "File name too long" only after the run otherwise).
        Tried with a new name of the same length in bytes, made and removed at once."""
        length = len(os.fsencode(name))
        if length <= _SAFE_NAME_BYTES:  # POSIX guarantees 14; every file system takes 64
            return
        probe = (_TMP_PREFIX + secrets.token_hex(length)).encode()[:length]
        probe_path = os.path.join(os.fsencode(folder), probe)
        try:
            fd = os.open(probe_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:
            if exc.errno == errno.ENAMETOOLONG:
                raise UsageError(
                    f"{self.label} {_shown(self.path)}: the file name is too long ({length} bytes) "
                    f"for its folder's file system; give a shorter name"
                ) from None
            return  # anything else is the write's to report (as before this check)
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(probe_path)

    @contextlib.contextmanager
    def open(self, mode: str = "w") -> Iterator[IO[Any]]:
        """A file object to write the whole content into. For an atomic target the content
        appears only if the block ends without an exception; otherwise nothing is left
        behind (no temporary file) and the old content stays."""
        binary = "b" in mode
        if self.is_stdout:
            stream: IO[Any] = sys.stdout.buffer if binary else sys.stdout
            yield stream
            stream.flush()
            return
        kwargs: dict[str, Any] = {} if binary else _TEXT
        if self.descriptor is not None:  # the descriptor itself, as it is: never reopened
            with open(self.descriptor, "wb" if binary else "w", closefd=False, **kwargs) as f:
                yield f
            return
        if self.is_direct:
            check_links(self.absolute, self.label, self.path)
            with open(self.absolute, "wb" if binary else "w", **kwargs) as f:
                yield f
            return
        with atomic_file(self.resolved(), binary=binary) as f:
            yield f


#: the kernel's own files: never a place for a report (a new file there fails after the run)
_KERNEL_ROOTS = ("/proc/", "/sys/")


def _refuse_kernel_file(path: str, label: str, shown: str) -> None:
    """UsageError for a path that resolves into ``/proc`` or ``/sys`` and is no device or
    FIFO there (``/proc/<pid>/fd/N`` of another process's pipe or terminal still is one)."""
    real = os.path.realpath(path)
    if not any(real.startswith(root) or real == root[:-1] for root in _KERNEL_ROOTS):
        return
    with contextlib.suppress(OSError):
        mode = os.stat(path).st_mode
        if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
            return
    raise UsageError(
        f"{label} {shown!r} is in /{real.split('/')[1]}, the kernel's own files; give a "
        "file in a folder, a device, a FIFO or - for stdout"
    )


def _check_direct(path: str, label: str, shown: str) -> None:
    """UsageError for a direct target that could never be written: a socket (open() fails
    on one), a character device that cannot be opened now (``/dev/tty`` without a
    terminal: ENXIO). A FIFO is not opened: its reader may come later."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # a new name under /dev: the write says why
    if stat.S_ISSOCK(mode):
        raise UsageError(
            f"{label} {shown!r} is a socket, which a file cannot be written to; give a file, "
            "a device, a FIFO or - for stdout"
        )
    if not stat.S_ISCHR(mode):
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as exc:
        why = exc.strerror or str(exc)
        if path == "/dev/tty" and exc.errno == errno.ENXIO:
            why = "this process has no terminal"
        raise UsageError(f"{label} {shown!r} cannot be opened for writing: {why}") from None
    os.close(fd)


def check_protected_regular(target: str, label: str = "-o/--output", shown: str = "") -> None:
    """Refuse to replace an existing regular file that the kernel's ``fs.protected_regular``
    would not let this user open for writing: one in a world-writable sticky folder
    (``/tmp``) owned by neither the user nor the folder's owner. Replacing it would hand
    another user's file back to them with root's report in it (and its mode kept)."""
    try:
        st = os.lstat(target)
        parent = os.stat(os.path.dirname(target) or ".")
    except OSError:
        return
    if not stat.S_ISREG(st.st_mode):
        return
    shared = parent.st_mode & stat.S_ISVTX and parent.st_mode & stat.S_IWOTH
    if shared and st.st_uid not in (os.geteuid(), parent.st_uid):
        raise UsageError(
            f"{label} {shown or target!r}: {target!r} is a file of uid {st.st_uid} in the "
            f"world-writable sticky folder {os.path.dirname(target)!r}; gpubw replaces such "
            "a file only where the kernel would write it (fs.protected_regular): its owner "
            "must be you or the folder's owner"
        )


#: the most links followed in a row (the kernel's limit, ELOOP past it)
_MAX_LINKS = 40


def check_links(path: str, label: str = "-o/--output", shown: str | None = None) -> None:
    """Refuse to follow a symbolic link the kernel's ``fs.protected_symlinks`` would not
    let the user follow: one in a world-writable sticky folder owned by neither the user
    nor the folder's owner (every link of a chain is checked). :class:`UsageError` naming
    the link, its owner and why."""
    current, uid = path, os.geteuid()
    for _ in range(_MAX_LINKS):
        try:
            link = os.lstat(current)
        except OSError:
            return  # a new name: nothing to follow
        if not stat.S_ISLNK(link.st_mode):
            return
        folder = os.path.dirname(current) or "."
        parent = os.stat(folder)
        shared = parent.st_mode & stat.S_ISVTX and parent.st_mode & stat.S_IWOTH
        if shared and link.st_uid not in (uid, parent.st_uid):
            raise UsageError(
                f"{label} {shown or path!r}: {current!r} is a symbolic link of uid "
                f"{link.st_uid} in the world-writable sticky folder {folder!r}; gpubw follows "
                "such a link only where the kernel would (fs.protected_symlinks): its owner "
                "must be you or the folder's owner"
            )
        current = os.path.join(folder, os.readlink(current))
    raise UsageError(f"{label} {shown or path!r}: too many levels of symbolic links")


@contextlib.contextmanager
def atomic_file(target: str, *, binary: bool = False, mode: int | None = None) -> Iterator[IO[Any]]:
    """Write ``target`` (a regular file or a new name) atomically: a temporary file beside
    it, fsynced, then renamed over it, keeping an existing file's mode and owner (``mode``:
    that mode, less the umask, whatever was there: a cache's). On an exception the
    temporary file is removed and ``target`` is untouched. Only the process that began the
    write renames it into place: a child forked meanwhile (by a plugin) that comes back here
    ends at once, with ``os._exit``, writing nothing."""
    folder = os.path.dirname(target) or "."
    pid = os.getpid()
    try:
        old: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        old = None
    if old is not None and not stat.S_ISREG(old.st_mode):
        raise UsageError(f"{target!r} is not a regular file; gpubw replaces only regular files")
    fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, suffix=_TMP_SUFFIX, dir=folder)
    _temporary.add(tmp)
    try:
        kwargs: dict[str, Any] = {} if binary else _TEXT
        with os.fdopen(fd, "wb" if binary else "w", **kwargs) as f:
            yield f
            _parent_only(pid)
            f.flush()
            os.fsync(f.fileno())
        _set_mode(tmp, old, mode)
        os.replace(tmp, target)
        tmp = ""
    finally:
        _parent_only(pid)  # a forked child ends here too when its block raised
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        _temporary.discard(tmp)


#: the temporary files of the atomic writes under way (:func:`discard_temporary_files`)
_temporary: set[str] = set()


def discard_temporary_files() -> bool:
    """Remove the temporary files of the atomic writes under way (a process about to end
    with ``os._exit`` mid-write, where no ``finally`` runs); returns whether there were
    any: then a write was cut short and its file keeps its old content (or is absent)."""
    found = bool(_temporary)
    for tmp in list(_temporary):
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        _temporary.discard(tmp)
    return found


def _parent_only(pid: int) -> None:
    """End a process forked from process ``pid`` (a plugin's child that returned into gpubw's
    code) without writing anything or running any clean-up."""
    if os.getpid() != pid:
        os._exit(1)


def _set_mode(tmp: str, old: os.stat_result | None, mode: int | None) -> None:
    """Give ``tmp`` the mode (and owner) of the file it replaces, or ``mode`` (a new file:
    0666), less the umask."""
    if old is not None and mode is None:
        os.chmod(tmp, stat.S_IMODE(old.st_mode))
        with contextlib.suppress(OSError):
            os.chown(tmp, old.st_uid, old.st_gid)
        return
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, (0o666 if mode is None else mode) & ~umask)


def replace_regular_file(target: str, payload: bytes, *, mode: int | None = None) -> bool:
    """Store ``payload`` at ``target`` atomically unless something other than a regular file
    is there (then nothing is written and False is returned); ``mode`` as
    :func:`atomic_file`'s."""
    if os.path.islink(target) or _is_direct(target):
        return False
    with atomic_file(target, binary=True, mode=mode) as f:
        f.write(payload)
    return True
