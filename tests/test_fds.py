"""Passing a file descriptor between the processes of a run (gpubw.world.fds): SCM_RIGHTS over
an abstract Unix socket, peers checked with SO_PEERCRED, every wait bounded, every descriptor
closed. Other processes here are real ones (subprocesses)."""

from __future__ import annotations

import ast
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpubw.world.fds import PREFIX, FdPassingError, FdServer, peer_credentials, receive_fd, shown

SRC = Path(__file__).resolve().parents[1] / "src"


def open_fds() -> set[int]:
    """This process's open file descriptors (not the one that lists them)."""
    found = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            os.fstat(int(name))
        except OSError:
            continue  # the listing's own, closed by now
        found.add(int(name))
    return found


def listening(address: str) -> bool:
    """Whether a socket of this host is bound to ``address`` (/proc/net/unix's last column)."""
    with open("/proc/net/unix", encoding="utf-8", errors="replace") as table:
        rows = [line.split() for line in table][1:]
    return any(len(row) > 7 and row[-1] == shown(address) for row in rows)


@pytest.fixture
def memfd() -> Iterator[int]:
    fd = os.memfd_create("gpubw-test")
    os.write(fd, b"the exported allocation")
    yield fd
    os.close(fd)


def _child(code: str, *args: str) -> subprocess.Popen[str]:
    """A Python process running ``code`` (with ``args``), reading lines from its stdin."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        encoding="utf-8",
    )


#: a process that receives the descriptor at the address it reads from stdin, from a server
#: that must be process argv[1], and prints what the descriptor holds (or the refusal)
RECEIVER = """
    import os, sys
    from gpubw.world.fds import FdPassingError, receive_fd
    address = sys.stdin.readline().strip()
    try:
        fd = receive_fd(address, {int(sys.argv[1])}, 10.0)
    except FdPassingError as exc:
        print("refused:", exc)
    else:
        print("received:", os.pread(fd, 100, 0).decode())
"""


def _code_words(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, word) of every name, attribute, string and number in the code of ``tree``, its
    docstrings left out (they may tell the story)."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            yield node.lineno, node.id
        elif isinstance(node, ast.Attribute):
            yield node.lineno, node.attr
        elif isinstance(node, ast.Constant) and id(node) not in docstrings:
            yield node.lineno, str(node.value)


def test_no_ptrace_rights_are_asked_for() -> None:
    """No code of gpubw calls prctl (PR_SET_PTRACER let any process of the user ptrace every
    rank) or pidfd_getfd/pidfd_open (they need ptrace rights; seccomp profiles block them)."""
    # names, and Yama's PR_SET_PTRACER (0x59616D61) as a number
    banned = re.compile(r"prctl|PR_SET_PTRACER|pidfd|ptrace|^1499557217$")
    found = [
        f"{path.relative_to(SRC)}:{line}: {word}"
        for path in sorted(SRC.rglob("*.py"))
        for line, word in _code_words(ast.parse(path.read_text(encoding="utf-8")))
        if banned.search(word)
    ]
    assert found == []


def test_a_rank_of_the_host_receives_a_duplicate(memfd: int) -> None:
    """Another process whose pid the server allows gets its own descriptor of the same
    file (it reads what the exporter wrote). The socket is abstract (no file) with a random
    name, gone at close; the server leaves no descriptor behind."""
    before = open_fds()
    child = _child(RECEIVER, str(os.getpid()))
    with FdServer(memfd, {child.pid}) as server, FdServer(memfd, {child.pid}) as other:
        assert server.address.startswith(PREFIX) and len(server.address) == len(PREFIX) + 32
        assert server.address != other.address
        assert listening(server.address)
        out, err = child.communicate(server.address + "\n", timeout=30)
    assert out == "received: the exported allocation\n", err
    assert server.served == 1 and server.refused == []
    assert not listening(server.address)
    assert open_fds() == before


def test_a_foreign_process_is_refused(memfd: int) -> None:
    """A process of this user that is not one of the run's ranks (SO_PEERCRED) connects: the
    server closes the connection without a descriptor and records it; that process's
    receive_fd says so."""
    child = _child(RECEIVER, str(os.getpid()))
    with FdServer(memfd, {os.getpid()}) as server:
        out, err = child.communicate(server.address + "\n", timeout=30)
    assert out.startswith("refused: the server at ") and "without sending" in out, err
    assert server.served == 0
    assert server.refused == [
        (child.pid, f"process {child.pid} is not a rank of this run on this host")
    ]


#: a process of user nobody (an abstract socket lets any user connect) asking for the
#: descriptor with plain socket calls; prints how many descriptors and bytes it got
OTHER_USER = """
    import os, socket, sys
    os.setgid(65534)
    os.setuid(65534)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sys.stdin.readline().rstrip("\\n").replace("@", "\\0", 1))
    data, fds, _, _ = socket.recv_fds(s, 1, 1)
    print(len(fds), len(data))
"""


@pytest.mark.skipif(os.getuid() != 0, reason="switching to another user needs root")
def test_a_process_of_another_user_is_refused(memfd: int) -> None:
    """Even with a pid the server allows, another user's process gets nothing."""
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(OTHER_USER)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        encoding="utf-8",
        cwd="/",
    )
    with FdServer(memfd, {os.getpid(), child.pid}) as server:
        out, err = child.communicate(shown(server.address) + "\n", timeout=30)
    assert out == "0 0\n", err
    assert server.refused == [(child.pid, f"process {child.pid} of user 65534, not 0")]


def test_the_receiver_refuses_a_server_that_is_not_a_rank(memfd: int) -> None:
    """The check goes both ways: a socket served by a process that is not a rank is left
    before anything is received."""
    before = open_fds()
    with (
        FdServer(memfd, {os.getpid()}) as server,
        pytest.raises(FdPassingError, match=rf"served by process {os.getpid()} is not a"),
    ):
        receive_fd(server.address, {os.getpid() + 1}, 5.0)
    assert open_fds() == before


def test_peer_credentials_name_the_process(tmp_path: Path) -> None:
    a, b = socket.socketpair(socket.AF_UNIX)
    with a, b:
        assert peer_credentials(a) == (os.getpid(), os.getuid(), os.getgid())


def test_a_server_gone_or_silent_is_an_error_within_the_bound(memfd: int, tmp_path: Path) -> None:
    """A server already closed: an error at once. A socket nobody answers on (its owner
    hangs): an error after the bound, not a hang. Nothing is left open either way."""
    before = open_fds()
    server = FdServer(memfd, {os.getpid()})
    server.close()
    server.close()  # twice is fine
    with pytest.raises(
        FdPassingError, match=r"cannot receive .* @gpubw-fd-\w+: Connection refused"
    ):
        receive_fd(server.address, {os.getpid()}, 5.0)
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with silent:
        silent.bind(str(tmp_path / "s"))
        silent.listen()
        start = time.monotonic()
        with pytest.raises(FdPassingError, match=r"no descriptor from .* within 0\.5 s"):
            receive_fd(str(tmp_path / "s"), {os.getpid()}, 0.5)
        assert 0.4 < time.monotonic() - start < 30  # bounded (room for a loaded machine)
    assert open_fds() == before


#: a server that accepts one connection and is SIGKILLed before it sends anything
DYING_SERVER = """
    import os, signal, socket, sys
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(sys.argv[1]); s.listen()
    print("ready", flush=True)
    conn, _ = s.accept()
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_an_owner_dying_mid_handshake_ends_the_wait_at_once(tmp_path: Path) -> None:
    """The serving rank dies after accepting: the receiver learns it at once (end of
    stream), well before its bound, and keeps no descriptor."""
    before = open_fds()
    address = str(tmp_path / "s")
    child = _child(DYING_SERVER, address)
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    start = time.monotonic()
    with pytest.raises(FdPassingError, match="without sending the descriptor"):
        receive_fd(address, {child.pid}, 30.0)
    assert time.monotonic() - start < 10.0
    child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL
    assert open_fds() == before


#: a rank that connects to the server and is SIGKILLed before it reads anything
DYING_RECEIVER = """
    import os, signal, socket, sys
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sys.stdin.readline().strip())
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_rank_dying_mid_handshake_leaves_the_server_serving(memfd: int) -> None:
    """A rank killed between connecting and receiving costs the server nothing: it goes on
    serving the others, closes at once, and nothing stays open."""
    before = open_fds()
    dying = _child(DYING_RECEIVER)
    with FdServer(memfd, {os.getpid(), dying.pid}) as server:
        dying.communicate(server.address + "\n", timeout=30)
        assert dying.returncode == -signal.SIGKILL
        fd = receive_fd(server.address, {os.getpid()}, 5.0)
        os.close(fd)
        start = time.monotonic()
    assert time.monotonic() - start < 4.5  # at once: not the 5-s bound of joining the server
    assert open_fds() == before
