"""Pass a file descriptor from one rank to the other ranks of its host: SCM_RIGHTS over a
Unix socket, as NCCL passes the POSIX-fd handles of cuMem allocations.

The rank that holds the descriptor serves it (:class:`FdServer`: a thread accepting
connections on an abstract Unix socket with a random name); the ranks that need it connect
and receive a duplicate (:func:`receive_fd`). The socket's name is the rendezvous: the
caller sends :attr:`FdServer.address` to the others through the world's collectives, with
the handle. Neither side needs ptrace rights over the other (``pidfd_getfd`` did: every rank
had to let any process of the user ptrace it, and seccomp profiles often block that call).

An abstract socket has no file: nothing is left behind however a process ends (a rank
SIGKILLed while it serves, as MPI launchers end the others when one dies, would leave a
socket file and its folder). Anyone on the host may connect to it, so each side checks the
other with ``SO_PEERCRED``: a peer that is not of this user or not one of the given process
ids (the world's ranks on this host, :attr:`gpubw.world.World.host_pids`) is refused: the
server closes the connection without sending anything, the receiver raises.

Every wait is bounded: connecting and receiving by the caller's timeout (the world's), the
server by its owner, who closes it once the ranks agreed (a bounded collective). Every
descriptor and socket made here is closed on every path.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import socket
import struct
import threading
import time
from collections.abc import Iterable

from gpubw.model.errors import GpubwError

#: The start of every server's name (in the abstract namespace: a leading NUL).
PREFIX = "\0gpubw-fd-"
#: Names tried before giving up (one taken already is 2**-128 likely).
_BIND_TRIES = 3
#: The one byte sent with the descriptor.
_TAG = b"F"
#: Bound of one answer of the server (a send on a fresh connection never waits in practice)
#: and of the wait for its thread at close.
_SEND_S = 2.0
_JOIN_S = 5.0


class FdPassingError(GpubwError):
    """A descriptor could not be served or received (the message says which and why)."""


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a connected Unix socket."""
    size = struct.calcsize("3i")
    return struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, size))


def _refusal(sock: socket.socket, allowed: frozenset[int]) -> str:
    """Why the peer of ``sock`` is refused ("" if it is one of ``allowed`` of this user)."""
    pid, uid, _ = peer_credentials(sock)
    if uid != os.getuid():
        return f"process {pid} of user {uid}, not {os.getuid()}"
    if pid not in allowed:
        return f"process {pid} is not a rank of this run on this host"
    return ""


def shown(address: str) -> str:
    """``address`` as ``ss`` and /proc/net/unix show it: an abstract name with ``@``."""
    return "@" + address[1:] if address.startswith("\0") else address


def _bound_listener() -> tuple[socket.socket, str]:
    """A listening socket on a new random abstract name, and that name."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        for attempt in range(_BIND_TRIES):
            address = PREFIX + secrets.token_hex(16)
            try:
                sock.bind(address)
            except OSError:
                if attempt + 1 == _BIND_TRIES:
                    raise
                continue
            sock.listen()
            sock.setblocking(False)  # accept only what poll saw; never wait there
            return sock, address
    except BaseException:
        sock.close()
        raise
    raise AssertionError("unreachable")


class FdServer:
    """Serves a duplicate of ``fd`` to every process of ``allowed_pids`` (and this user) that
    connects to :attr:`address` (an abstract socket name: it starts with NUL; :func:`shown`
    prints it), from a thread, until :meth:`close`. The server holds its own
    duplicate of ``fd``, so the caller may close ``fd`` whenever it likes. Raises
    :class:`FdPassingError` if the socket cannot be made. Use as a context manager, or call
    :meth:`close` on every path."""

    def __init__(self, fd: int, allowed_pids: Iterable[int]) -> None:
        self._allowed = frozenset(allowed_pids)
        #: (pid, why) of every connection refused
        self.refused: list[tuple[int, str]] = []
        #: how many connections were given the descriptor
        self.served = 0
        self._closed = False
        self._fds: list[int] = []  # this server's descriptors, closed at close()
        self._listener: socket.socket | None = None
        try:
            self._fd = self._own(os.dup(fd))
            self._wake_r, self._wake_w = (self._own(x) for x in os.pipe())
            self._listener, self.address = _bound_listener()
            self._thread = threading.Thread(target=self._serve, name="gpubw-fd-server", daemon=True)
            self._thread.start()
        except BaseException as exc:
            self._release()
            if isinstance(exc, (OSError, RuntimeError)):  # RuntimeError: no thread to be had
                raise FdPassingError(f"cannot serve descriptor {fd}: {exc}") from None
            raise

    def _own(self, fd: int) -> int:
        self._fds.append(fd)
        return fd

    def _serve(self) -> None:
        listener = self._listener
        assert listener is not None
        poller = select.poll()  # not select(): descriptors past 1023 are common beside CUDA
        poller.register(listener, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while True:
            ready = {fd for fd, _ in poller.poll()}
            if self._wake_r in ready:
                return
            try:
                conn, _ = listener.accept()
            except OSError:  # BlockingIOError: the connection went away meanwhile
                continue
            with conn:
                self._answer(conn)

    def _answer(self, conn: socket.socket) -> None:
        """Send the descriptor to an allowed peer; close any other at once."""
        try:
            why = _refusal(conn, self._allowed)
            if why:
                self.refused.append((peer_credentials(conn)[0], why))
                return
            conn.settimeout(_SEND_S)
            socket.send_fds(conn, [_TAG], [self._fd], socket.MSG_NOSIGNAL)
            self.served += 1
        except OSError:
            pass  # the peer left; it finds out on its side

    def close(self) -> None:
        """Stop serving and close everything (the name is free again). Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        self._thread.join(_JOIN_S)
        self._release()

    def _release(self) -> None:
        self._closed = True
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()

    def __enter__(self) -> FdServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def receive_fd(address: str, allowed_pids: Iterable[int], timeout_s: float) -> int:
    """A duplicate, in this process, of the descriptor that the :class:`FdServer` at
    ``address`` serves; the caller closes it. The server must be one of ``allowed_pids`` (and
    of this user). Raises :class:`FdPassingError` on a refusal, a server gone, or no answer
    within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(address)
            why = _refusal(sock, frozenset(allowed_pids))
            if why:
                raise FdPassingError(f"the descriptor at {shown(address)} is served by {why}")
            sock.settimeout(max(deadline - time.monotonic(), 1e-3))
            data, fds, flags, _ = socket.recv_fds(sock, 1, 1, socket.MSG_CMSG_CLOEXEC)
    except TimeoutError:
        raise FdPassingError(
            f"no descriptor from {shown(address)} within {timeout_s:g} s (its server hangs)"
        ) from None
    except OSError as exc:
        raise FdPassingError(
            f"cannot receive the descriptor from {shown(address)}: {exc.strerror or exc}"
        ) from None
    if data == _TAG and len(fds) == 1 and not flags & socket.MSG_CTRUNC:
        return fds[0]
    for fd in fds:
        os.close(fd)
    raise FdPassingError(
        f"the server at {shown(address)} closed the connection without sending the descriptor"
        " (it refused this process, or it is closing)"
    )
