"""``-o`` naming standard output (``/dev/stdout``, ``/proc/self/fd/1``, ``/dev/fd/1``, ``-``)
writes what ``-o FILE`` writes, into a pipe, a regular file or a FIFO, for every installed
writer (issue 33, item 1: it wrote nothing and exited 0 while gpubw held descriptor 1).

Each case runs a real ``python -m gpubw`` with its standard output set up before it starts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

from gpubw.model.errors import UsageError
from gpubw.model.outfile import OutputTarget, descriptor_of

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="needs Linux /proc and /dev/fd")

RUN = ["--simulate", "h200x1", "-t", "0", "-b", "1", "-i", "1", "--loop-count", "1", "-q"]
WRITERS = sorted({ep.name for ep in entry_points(group="gpubw.writers")})
#: what differs between two runs of the same command: times, and the -o path itself
_VOLATILE = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00"), "TIME"),
    (re.compile(r'("duration_s": )[0-9.e+-]+'), r"\1D"),
    (re.compile(r"(gpubw_run_(?:timestamp|duration)_seconds) \S+"), r"\1 X"),
]
STDOUT_NAMES = ["/dev/stdout", "/proc/self/fd/1", "/dev/fd/1", "-"]


def gpubw(*argv: str, stdout: Any = subprocess.PIPE, close_stdout: bool = False) -> Any:
    """``python -m gpubw argv`` (descriptor 1 closed as it starts with ``close_stdout``)."""
    return subprocess.run(
        [sys.executable, "-m", "gpubw", *argv],
        stdout=stdout,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        preexec_fn=(lambda: os.close(1)) if close_stdout else None,
        timeout=300,
        check=False,
    )


def same_run(text: bytes, path: str) -> str:
    """``text`` with what differs from run to run masked, and ``path`` (the -o value as the
    report records it) written as OUT."""
    out = text.decode()
    for pattern, repl in _VOLATILE:
        out = pattern.sub(repl, out)
    return out.replace(f'"{path}"', '"OUT"').replace(f",{path},", ",OUT,")


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], str]:
    """What ``-o FILE`` writes with each writer (made once per writer)."""
    folder, made = tmp_path_factory.mktemp("reference"), {}

    def get(fmt: str) -> str:
        if fmt not in made:
            path = folder / f"report.{fmt}"
            proc = gpubw(*RUN, "--format", fmt, "-o", str(path))
            assert proc.returncode == 0, proc.stderr
            made[fmt] = same_run(path.read_bytes(), str(path))
        return made[fmt]

    return get


def into_pipe(argv: list[str], _tmp: Path) -> bytes:
    proc = gpubw(*argv)
    assert (proc.returncode, proc.stderr) == (0, b""), proc.stderr
    return bytes(proc.stdout)


def into_file(argv: list[str], tmp: Path) -> bytes:
    target = tmp / "stdout.txt"
    with target.open("wb") as f:
        proc = gpubw(*argv, stdout=f)
    assert (proc.returncode, proc.stderr) == (0, b""), proc.stderr
    return target.read_bytes()


def into_fifo(argv: list[str], tmp: Path) -> bytes:
    fifo = tmp / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    with fifo.open("wb") as f:  # opens once the reader has
        proc = gpubw(*argv, stdout=f)
    reader.join(60)
    assert (proc.returncode, proc.stderr) == (0, b""), proc.stderr
    return got[0]


KINDS = {"pipe": into_pipe, "file": into_file, "fifo": into_fifo}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("name", STDOUT_NAMES)
@pytest.mark.parametrize("fmt", WRITERS)
def test_every_name_of_stdout_gets_what_o_file_gets(
    fmt: str, name: str, kind: str, tmp_path: Path, reference: Callable[[str], str]
) -> None:
    """Every writer, every name of standard output, stdout a pipe, a file or a FIFO: the
    bytes of ``-o FILE`` (times and the path aside)."""
    got = KINDS[kind]([*RUN, "--format", fmt, "-o", name], tmp_path)
    assert got, "nothing was written"
    assert same_run(got, name) == reference(fmt)


@pytest.mark.parametrize("name", STDOUT_NAMES)
def test_a_closed_stdout_named_by_o_is_refused_before_the_run(name: str) -> None:
    """``>&-``: descriptor 1 leads to /dev/null, so the report would be lost with exit 0;
    one line naming the value, exit 2."""
    proc = gpubw(*RUN, "-j", "-o", name, close_stdout=True)
    assert proc.returncode == 2
    line = proc.stderr.decode()
    assert line.count("\n") == 1
    assert f"-o/--output {name!r}: standard output (descriptor 1) was closed" in line


def test_a_closed_stdout_without_o_is_as_before() -> None:
    """No ``-o``: the run goes on as documented (docs/failures.md I3), exit 0."""
    assert gpubw(*RUN, "-j", close_stdout=True).returncode == 0


def test_another_descriptor_is_written_through_not_truncated(tmp_path: Path) -> None:
    """``-o /dev/fd/N`` with ``N>>FILE`` appends, run after run (opening the name would
    truncate FILE)."""
    target = tmp_path / "log.txt"
    target.write_text("kept\n")
    fd = os.open(target, os.O_WRONLY | os.O_APPEND)
    try:
        for _ in range(2):
            proc = subprocess.run(
                [sys.executable, "-m", "gpubw", *RUN, "-j", "-o", f"/dev/fd/{fd}"],
                pass_fds=(fd,),
                capture_output=True,
                timeout=300,
                check=False,
            )
            assert (proc.returncode, proc.stdout) == (0, b""), proc.stderr
    finally:
        os.close(fd)
    text = target.read_text()
    assert text.startswith("kept\n{")
    assert text.count('"schema_version"') == 2


@pytest.mark.parametrize("name", ["/dev/stderr", "/proc/self/fd/2"])
def test_stderr_names_write_the_report_to_stderr(name: str) -> None:
    """``-o /dev/stderr``: the report on standard error, nothing on standard output."""
    proc = gpubw(*RUN, "--format", "nvbandwidth", "-o", name)
    assert (proc.returncode, proc.stdout) == (0, b"")
    assert b"host_to_device_memcpy_ce" in proc.stderr


def test_a_descriptor_that_is_not_open_is_refused() -> None:
    """``-o /proc/self/fd/9`` with no descriptor 9: exit 2, one line, before the run."""
    proc = gpubw(*RUN, "-j", "-o", "/proc/self/fd/9")
    assert (proc.returncode, proc.stdout) == (2, b"")
    assert b"names descriptor 9 of gpubw's process, which is not open" in proc.stderr


def test_only_a_regular_file_is_rewritten_as_the_run_goes(tmp_path: Path) -> None:
    """An MPI run's partial reports go only into a regular ``-o FILE``: standard output by
    any name, a device or a descriptor would get each rewrite after the last."""
    from gpubw.cli.live import Output

    assert Output(str(tmp_path / "r.json")).rewritable
    for name in ("-", "/dev/stdout", "/dev/stderr", "/dev/null"):
        assert not Output(name).rewritable, name
    assert not Output(None).rewritable


# -- descriptor_of ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "fd"),
    [
        ("/dev/stdout", 1),
        ("/dev/stderr", 2),
        ("/dev/stdin", 0),
        ("/dev/fd/1", 1),
        ("/dev/fd/7", 7),
        ("/proc/self/fd/1", 1),
        ("/proc/thread-self/fd/2", 2),
        ("/proc/PID/fd/1", 1),  # this process's own id
        ("/dev/./stdout", 1),
        ("/dev/null", None),
        ("/proc/1/fd/1", None),  # another process's descriptor is a path like any other
        ("report.json", None),
        ("/no/such/folder/x", None),
    ],
)
def test_descriptor_of_names(path: str, fd: int | None) -> None:
    """The process's own descriptors, by every name; anything else is None."""
    assert descriptor_of(path.replace("PID", str(os.getpid()))) == fd


def test_descriptor_of_follows_links_to_a_descriptor(tmp_path: Path) -> None:
    """A link to /dev/stdout, a chain of links, a folder link to /proc/self/fd."""
    (tmp_path / "a").symlink_to("/dev/stdout")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "fds").symlink_to("/proc/self/fd")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    assert descriptor_of(str(tmp_path / "b")) == 1
    assert descriptor_of(str(tmp_path / "fds" / "2")) == 2
    assert descriptor_of(str(tmp_path / "loop")) is None
    assert OutputTarget(str(tmp_path / "b")).is_stdout


def test_a_read_only_descriptor_is_refused() -> None:
    """A descriptor open for reading only cannot take a report: UsageError, not a late
    failure."""
    read, write = os.pipe()
    try:
        with pytest.raises(UsageError, match=f"descriptor {read} .* open for reading only"):
            OutputTarget(f"/proc/self/fd/{read}").check()
        assert OutputTarget(f"/dev/fd/{write}").check().descriptor == write
    finally:
        os.close(read)
        os.close(write)
