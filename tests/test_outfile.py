"""Output files: atomic for regular files, in place for devices and FIFOs, never replacing
what gpubw does not own. No test here points at a real /dev node: special files are made
in a temporary folder."""

from __future__ import annotations

import json
import os
import stat
import sys
import threading
from pathlib import Path

import pytest

from gpubw.cli.command import main
from gpubw.model.errors import UsageError
from gpubw.model.outfile import OutputTarget, atomic_file, replace_regular_file

RUN = ["--simulate", "h200x1", "-t", "0", "-b", "1MiB", "-i", "1", "-j"]


def _null_device(tmp_path: Path) -> Path:
    """A character device with /dev/null's numbers, made in tmp_path (skip without rights)."""
    node = tmp_path / "null"
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot make a character device here: {exc}")
    return node


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_regular_file_is_replaced_atomically_keeping_its_mode(tmp_path: Path) -> None:
    """An existing regular file gets the new content and keeps its mode; no .tmp is left."""
    target = tmp_path / "r.json"
    target.write_text("old")
    target.chmod(0o640)
    with OutputTarget(str(target)).check().open() as f:
        f.write("new")
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert _leftovers(tmp_path) == []


def test_failed_write_keeps_old_content_and_leaves_no_tmp(tmp_path: Path) -> None:
    """An exception inside the block leaves the old file as it was and no temporary file."""
    target = tmp_path / "r.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), OutputTarget(str(target)).open() as f:
        f.write("half")
        raise RuntimeError("writer broke")
    assert target.read_text() == "old"
    assert _leftovers(tmp_path) == []


def test_long_target_name_gets_a_short_temporary_name(tmp_path: Path) -> None:
    """A 255-byte file name (the limit) can still be written: the temporary name is short."""
    target = tmp_path / ("x" * 250 + ".json")
    with OutputTarget(str(target)).check().open() as f:
        f.write("ok")
    assert target.read_text() == "ok"


def test_symlink_is_written_through_and_stays_a_link(tmp_path: Path) -> None:
    """A symlink's target gets the content; the link itself is not replaced."""
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    with OutputTarget(str(link)).check().open() as f:
        f.write("new")
    assert link.is_symlink()
    assert real.read_text() == "new"


def test_dangling_symlink_creates_its_target(tmp_path: Path) -> None:
    """A link to a file not yet there creates that file; the link stays."""
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "later.json")
    with OutputTarget(str(link)).check().open() as f:
        f.write("new")
    assert link.is_symlink()
    assert (tmp_path / "later.json").read_text() == "new"


def test_character_device_is_written_in_place_not_replaced(tmp_path: Path) -> None:
    """A character device stays a character device (the /dev/null bug)."""
    node = _null_device(tmp_path)
    before = node.stat()
    with OutputTarget(str(node)).check().open() as f:
        f.write("discarded")
    after = node.stat()
    assert stat.S_ISCHR(after.st_mode)
    assert (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)
    assert _leftovers(tmp_path) == []


def test_fifo_is_written_in_place(tmp_path: Path) -> None:
    """A named pipe is opened and written, and a reader gets the content."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    with OutputTarget(str(fifo)).check().open() as f:
        f.write("through the pipe")
    reader.join(timeout=10)
    assert got == ["through the pipe"]
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_symlink_to_a_device_writes_the_device(tmp_path: Path) -> None:
    """A link to a device (like /dev/stdout) is followed to the device, written in place."""
    node = _null_device(tmp_path)
    link = tmp_path / "out"
    link.symlink_to(node)
    with OutputTarget(str(link)).check().open() as f:
        f.write("x")
    assert link.is_symlink() and stat.S_ISCHR(node.stat().st_mode)


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("folder", "is a directory"),
        ("folder/", "ends with"),
        ("missing/r.json", "does not exist"),
        ("", "empty file name"),
    ],
)
def test_unusable_paths_are_usage_errors(tmp_path: Path, name: str, words: str) -> None:
    """A folder, a trailing slash, a missing parent and an empty name are refused up front."""
    (tmp_path / "folder").mkdir()
    path = str(tmp_path / name) if name else ""
    if name.endswith("/"):
        path += "/"
    with pytest.raises(UsageError, match=words):
        OutputTarget(path).check()


def test_dash_means_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    """``-`` writes to standard output."""
    with OutputTarget("-").check().open() as f:
        f.write("to stdout")
    assert capsys.readouterr().out == "to stdout"


def test_atomic_file_refuses_a_non_regular_target(tmp_path: Path) -> None:
    """The low-level atomic writer never renames over a FIFO."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="not a regular file"), atomic_file(str(fifo)) as f:
        f.write("x")
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_kernel_cache_store_leaves_special_files_alone(tmp_path: Path) -> None:
    """replace_regular_file (the kernel cache's store) skips a FIFO or a link in its place."""
    fifo = tmp_path / "entry"
    os.mkfifo(fifo)
    assert replace_regular_file(str(fifo), b"x") is False
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    plain = tmp_path / "plain"
    assert replace_regular_file(str(plain), b"abc") is True
    assert plain.read_bytes() == b"abc"


def test_cli_o_on_a_character_device_keeps_the_device(tmp_path: Path) -> None:
    """``gpubw -j -o <char device>`` writes into the device and leaves it a device."""
    node = _null_device(tmp_path)
    assert main([*RUN, "-o", str(node)]) == 0
    assert stat.S_ISCHR(node.stat().st_mode)
    assert _leftovers(tmp_path) == []


def test_cli_o_dash_writes_json_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    """``-o -`` is standard output: the JSON report parses."""
    assert main([*RUN, "-o", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["simulated"] is True


def test_cli_o_missing_parent_is_exit_2(tmp_path: Path) -> None:
    """A missing parent folder is a usage error before anything runs."""
    assert main([*RUN, "-o", str(tmp_path / "no" / "r.json")]) == 2


@pytest.mark.skipif(sys.platform != "linux", reason="needs Linux /proc")
def test_cli_o_through_proc_fd_symlink_writes_in_place(tmp_path: Path) -> None:
    """A link into /proc/self/fd (what /dev/stdout is) is written through, not replaced."""
    out = tmp_path / "captured.json"
    fd = os.open(out, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        link = tmp_path / "stdout"
        link.symlink_to(f"/proc/self/fd/{fd}")
        assert main([*RUN, "-o", str(link)]) == 0
        assert link.is_symlink()
    finally:
        os.close(fd)
    assert json.loads(out.read_text())["simulated"] is True


needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="making a link owned by another user needs root (os.lchown)"
)


@needs_root
@pytest.mark.parametrize("via", ["report", "device"])
def test_another_users_link_in_a_sticky_folder_is_not_followed(tmp_path, via):
    """Root writing -o LINK in a world-writable sticky folder, LINK planted there by another
    user (uid 65534) and pointing at root's own 0600 file (or a device): a usage error
    naming the link, the file untouched, as the kernel's fs.protected_symlinks would refuse
    (gpubw once replaced root's file through it)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    secret = tmp_path / "root-only.txt"
    secret.write_text("root's data\n")
    secret.chmod(0o600)
    link = shared / "report.json"
    os.symlink(secret if via == "report" else "/dev/null", link)
    os.lchown(link, 65534, 65534)
    with pytest.raises(UsageError, match=r"symbolic link of uid 65534 in the world-writable"):
        OutputTarget(str(link)).check()
    assert secret.read_text() == "root's data\n" and oct(secret.stat().st_mode)[-3:] == "600"


@needs_root
def test_a_link_of_the_user_or_the_folder_owner_is_still_followed(tmp_path):
    """The documented behaviour for a user's own links stays: in the same sticky folder a
    link owned by the user running gpubw is followed and its target written atomically."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    target = tmp_path / "mine.txt"
    target.write_text("old\n")
    link = shared / "out.txt"
    os.symlink(target, link)
    with OutputTarget(str(link)).check().open() as f:
        f.write("new\n")
    assert target.read_text() == "new\n" and link.is_symlink()


# -- targets that could never be written, refused before the run (issue 33 item 10) ---------
def test_a_socket_is_refused_before_the_run(tmp_path: Path) -> None:
    """-o naming a Unix socket: one usage error before the run (before: the run went
    through and the write failed after it, the results lost)."""
    import socket

    path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))
        with pytest.raises(UsageError, match=r"'.*sock' is a socket"):
            OutputTarget(str(path)).check()


def test_dev_tty_without_a_terminal_is_refused_before_the_run() -> None:
    """-o /dev/tty in a process without a controlling terminal (a cron job, a batch job):
    one usage error saying so (before: ENXIO after the whole run)."""
    import subprocess

    code = (
        "from gpubw.model.outfile import OutputTarget\n"
        "from gpubw.model.errors import UsageError\n"
        "try:\n    OutputTarget('/dev/tty').check()\nexcept UsageError as exc:\n    print(exc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        encoding="utf-8",
        start_new_session=True,  # no controlling terminal
        timeout=120,
    )
    assert proc.stdout.strip() == (
        "-o/--output '/dev/tty' cannot be opened for writing: this process has no terminal"
    ), proc.stderr


@pytest.mark.parametrize("path", ["/sys/kernel/report.json", "/proc/report.json", "/proc/version"])
def test_kernel_files_are_refused_before_the_run(path: str) -> None:
    """-o into /sys or /proc (a new name, or a kernel file): refused before the run."""
    with pytest.raises(UsageError, match=r"is in /(sys|proc), the kernel's own files"):
        OutputTarget(path).check()


def test_a_process_own_descriptor_in_proc_is_still_a_target() -> None:
    """/proc/self/fd/1 names gpubw's standard output: still allowed."""
    assert OutputTarget("/proc/self/fd/1").check().is_stdout


@needs_root
def test_another_users_file_in_a_sticky_folder_is_not_replaced(tmp_path: Path) -> None:
    """Root writing -o FILE over another user's (uid 65534) world-writable file in a
    world-writable sticky folder: a usage error, the file untouched, as the kernel's
    fs.protected_regular would refuse to open it (before: replaced, and handed back to that
    user with root's report in it, still world-writable)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    planted = shared / "report.json"
    planted.write_text("theirs\n")
    planted.chmod(0o666)
    os.chown(planted, 65534, 65534)
    with pytest.raises(UsageError, match=r"file of uid 65534 in the world-writable sticky"):
        OutputTarget(str(planted)).check()
    assert planted.read_text() == "theirs\n"


@needs_root
def test_own_file_in_a_sticky_folder_is_still_replaced(tmp_path: Path) -> None:
    """The user's own file in the same sticky folder is still written atomically."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    mine = shared / "report.json"
    mine.write_text("old\n")
    with OutputTarget(str(mine)).check().open() as f:
        f.write("new\n")
    assert mine.read_text() == "new\n"
