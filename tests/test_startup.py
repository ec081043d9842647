"""Tests of gpubw.cli._startup: the command's early CUDA-start guess and its quick exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _plugin_fixtures import GOOD, copy_fixtures
from gpubw.cli import _startup
from gpubw.cli import command as cli
from gpubw.cli.args import build_parser
from gpubw.model.errors import UsageError
from gpubw.model.report_io import load_report


@pytest.mark.parametrize(
    "args",
    [[], ["-t", "0", "-b", "64", "-j"], ["-p", "host"], ["-o", "out.json", "-v"], ["-b", "-1"]],
)
def test_a_run_on_the_gpus_is_guessed(args: list[str]) -> None:
    """A plain run, whatever its run options, starts CUDA before its parse."""
    assert _startup.looks_like_gpu_run(args)


@pytest.mark.parametrize(
    "args",
    [
        ["--simulate", "h200x2"],
        ["-t", "0", "--simulate=h200x2"],
        ["--sim", "h200x2"],
        ["-l"],
        ["-jl"],
        ["--list"],
        ["--li"],
        ["-h"],
        ["--help"],
        ["--version"],
        ["plot", "r.json"],
        ["compare", "a.json", "b.json"],
        ["check", "r.json"],
        ["expect-from", "r.json"],
        ["info"],
    ],
)
def test_what_is_not_a_gpu_run_is_not_guessed(args: list[str]) -> None:
    """--simulate, -l, -h, --version (or argparse's abbreviations of them) and every
    subcommand start no CUDA before the parse."""
    assert not _startup.looks_like_gpu_run(args)


def test_the_subcommands_are_all_known() -> None:
    """Every subcommand the command dispatches on is one the guess leaves alone."""
    assert set(_startup._SUBCOMMANDS) == set(cli.COMMANDS)


@pytest.mark.parametrize("short", ["--s", "--l", "--h", "--v"])
def test_shorter_abbreviations_are_ambiguous(short: str) -> None:
    """An abbreviation shorter than the guess looks at is refused by the parser: it cannot
    select --simulate, --list, --help or --version behind the guess's back."""
    with pytest.raises(UsageError, match="ambiguous"):
        build_parser().parse_args([short, "x"])


#: a sitecustomize for a real ``python -m gpubw ARGV``: it says on stderr whether the atexit
#: handlers ran and whether the process left through os._exit (with which code);
#: GPUBW_TEST_THREAD=1 keeps another thread alive for 2 s
_PROBE = """
import atexit, os, threading, time
real_exit = os._exit
def noted(code):
    os.write(2, f"FAST {code}\\n".encode())
    real_exit(code)
os._exit = noted
atexit.register(lambda: os.write(2, b"ATEXIT\\n"))
if os.environ.get("GPUBW_TEST_MPI"):  # stands for a loaded mpi4py (its MPI_Finalize at exit)
    import sys, types
    sys.modules["mpi4py.MPI"] = types.ModuleType("mpi4py.MPI")
if os.environ.get("GPUBW_TEST_THREAD"):  # a daemon: alive at the end, never waited for
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
"""


def _probe(
    tmp_path: Path,
    *argv: str,
    thread: bool = False,
    mpi: bool = False,
    site: tuple[Path, ...] = (),
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "sitecustomize.py").write_text(_PROBE)
    env = {**os.environ, "GPUBW_TEST_THREAD": "1" if thread else "", "GPUBW_TEST_MPI": ""}
    if mpi:
        env["GPUBW_TEST_MPI"] = "1"
    paths = [str(tmp_path), *map(str, site), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return subprocess.run(
        [sys.executable, "-m", "gpubw", *argv],
        capture_output=True,
        encoding="utf-8",
        env=env,
        timeout=120,
    )


def test_the_command_leaves_quickly_with_its_output_and_code(tmp_path: Path) -> None:
    """The command ends by os._exit with its exit code, after the atexit handlers, its
    report on stdout complete."""
    proc = _probe(
        tmp_path, "--simulate", "h200x2", "-t", "device_local_copy", "-b", "64", "-q", "-j"
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["testcases"][0]["status"] == "Passed"
    assert proc.stderr.splitlines()[-2:] == ["ATEXIT", "FAST 0"]
    bad = _probe(tmp_path, "--simulate", "h200x2", "-b", "-1")
    assert bad.returncode == 2
    assert "-1" in bad.stderr and bad.stderr.splitlines()[-2:] == ["ATEXIT", "FAST 2"]


def test_another_thread_alive_means_the_usual_exit(tmp_path: Path) -> None:
    """With another thread still running, the command returns and Python ends as usual
    (it waits for the thread): same code, no os._exit."""
    proc = _probe(tmp_path, "--simulate", "h200x2", "-b", "-1", thread=True)
    assert proc.returncode == 2
    assert "FAST" not in proc.stderr and "ATEXIT" in proc.stderr


def test_with_mpi_loaded_the_usual_exit(tmp_path: Path) -> None:
    """With mpi4py's MPI loaded the command returns and Python ends as usual, so that
    mpi4py's MPI_Finalize (registered at the interpreter's C-level exit) still runs."""
    proc = _probe(tmp_path, "--simulate", "h200x2", "-b", "-1", mpi=True)
    assert proc.returncode == 2
    assert "FAST" not in proc.stderr and "ATEXIT" in proc.stderr


def test_plugin_code_means_the_usual_exit(tmp_path: Path) -> None:
    """A run that imported a third-party plugin's code leaves Python the usual way (the
    plugin may count on it); with the plugin installed but not selected, the quick exit."""
    site = tuple(copy_fixtures(tmp_path / "site", GOOD))
    sim = ("--simulate", "h200x2", "-b", "64", "-q", "-j")
    plugin = _probe(tmp_path, *sim, "-t", "fixture_good", site=site)
    assert plugin.returncode == 0, plugin.stderr
    assert json.loads(plugin.stdout)["testcases"][0]["status"] == "Passed"
    assert "FAST" not in plugin.stderr and "ATEXIT" in plugin.stderr
    builtin = _probe(tmp_path, *sim, "-t", "device_local_copy", site=site)
    assert builtin.returncode == 0 and builtin.stderr.splitlines()[-1] == "FAST 0"


def test_called_in_process_main_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    """cli.main(argv) from Python returns its code; nothing exits the caller's process, even
    in a process that looks like the command."""

    def no_exit(code: int) -> None:
        raise AssertionError(f"os._exit({code}) from cli.main(argv)")

    monkeypatch.setattr(_startup, "is_command", lambda: True)
    monkeypatch.setattr(os, "_exit", no_exit)
    assert cli.main(["--simulate", "h200x2", "-b", "-1"]) == 2


def test_the_quiet_start_handlers_come_and_go(monkeypatch: pytest.MonkeyPatch) -> None:
    """In the command, install() makes SIGINT/SIGTERM end the process quietly with 128 + n
    (nothing imported yet can be lost) and restore() puts the previous handlers back; a
    signal set to be ignored stays ignored; imported as a library nothing is touched."""
    import signal

    calls: list[int] = []
    monkeypatch.setattr(os, "_exit", calls.append)
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    monkeypatch.setattr(_startup, "is_command", lambda: False)
    _startup.install()
    assert {sig: signal.getsignal(sig) for sig in before} == before
    monkeypatch.setattr(_startup, "is_command", lambda: True)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        _startup.install()
        assert signal.getsignal(signal.SIGINT) is _startup.exit_quietly
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        _startup.exit_quietly(signal.SIGINT, None)
        assert calls == [130]
        _startup.restore()
        assert signal.getsignal(signal.SIGINT) is before[signal.SIGINT]
    finally:
        _startup.restore()
        signal.signal(signal.SIGTERM, before[signal.SIGTERM])


def test_deferred_signals_raise_once_then_are_absorbed(monkeypatch: pytest.MonkeyPatch) -> None:
    """In the command, defer() makes the first SIGINT/SIGTERM raise InterruptedRun where the
    command is and absorbs every later one (a burst cannot tear the clean-up or the error
    report); ignore() absorbs them all; restore() puts the caller's handlers back."""
    import signal

    from gpubw.model.errors import InterruptedRun

    monkeypatch.setattr(_startup, "is_command", lambda: True)
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        _startup.install()
        _startup.defer()
        assert _startup.deferring()
        with pytest.raises(InterruptedRun) as caught:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(100):  # the handler runs between two bytecodes of this thread
                pass
        assert caught.value.signum == signal.SIGTERM
        os.kill(os.getpid(), signal.SIGINT)  # absorbed: no second raise
        os.kill(os.getpid(), signal.SIGTERM)
        _startup.ignore()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGINT)
    finally:
        _startup.restore()
    assert {sig: signal.getsignal(sig) for sig in before} == before
    assert not _startup.deferring()


def test_defer_touches_nothing_in_a_library(monkeypatch: pytest.MonkeyPatch) -> None:
    """Imported as a library (no install() took the signals), defer() and ignore() leave the
    host program's handlers alone."""
    import signal

    monkeypatch.setattr(_startup, "is_command", lambda: False)
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    _startup.install()
    _startup.defer()
    _startup.ignore()
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_importing_gpubw_has_no_side_effects() -> None:
    """``import gpubw`` and every public name leave the signal handlers as they were and
    start no thread, even in a process whose argv looks like the command."""
    code = (
        "import signal, sys, threading; sys.argv[0] = 'gpubw';"
        "before = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)];"
        "import gpubw; [getattr(gpubw, name) for name in gpubw.__all__];"
        "assert [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)] == before;"
        "assert threading.active_count() == 1, threading.enumerate(); print('ok')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, encoding="utf-8", timeout=60
    )
    assert done.stdout == "ok\n", done.stderr


#: a sitecustomize that sends this process a burst of signals ($BURST: SIGINT or SIGTERM)
#: the moment gpubw imports the module $AT_IMPORT, and one more at each of the next two
#: imports (signals sent at once would reach Python as one): a deterministic stand-in for
#: a user's Ctrl-C burst landing at that point of the start
_BURST = """
import os, signal, sys
class _Burst:
    left = 0
    def find_spec(self, name, path=None, target=None):
        if name == os.environ["AT_IMPORT"]:
            self.left = 3
        if self.left:
            self.left -= 1
            os.kill(os.getpid(), getattr(signal, os.environ["BURST"]))
        return None
sys.meta_path.insert(0, _Burst())
"""


@pytest.mark.parametrize(
    ("at_import", "burst", "code"),
    [
        ("gpubw.model.errors", "SIGINT", 130),  # the quiet start handler: nothing imported yet
        ("gpubw.model.options", "SIGINT", 130),  # in the run's start, deferred: raised once
        ("gpubw.runner.interrupts", "SIGTERM", 143),
        ("gpubw.runner.registry", "SIGINT", 130),
        ("gpubw.runner.core", "SIGINT", 130),
    ],
)
def test_a_signal_burst_during_the_start_leaves_no_traceback(
    tmp_path: Path, at_import: str, burst: str, code: int
) -> None:
    """A burst of three signals the moment the command imports one of its modules: exit
    128 + n, no traceback, no temporary file, and the -o file either untouched (before the
    run's SignalGuard) or the valid report of the interrupted run (a second SIGINT while the
    first one's KeyboardInterrupt was being handled once printed a traceback)."""
    (tmp_path / "sitecustomize.py").write_text(_BURST)
    target = tmp_path / "report.json"
    target.write_text("previous")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "AT_IMPORT": at_import, "BURST": burst}
    argv = ["--simulate", "h200x2", "-b", "1MiB", "-i", "1", "-j", "-o", str(target)]
    done = subprocess.run(
        [sys.executable, "-m", "gpubw", *argv],
        capture_output=True,
        encoding="utf-8",
        env=env,
        timeout=120,
        cwd=tmp_path,
    )
    assert (done.returncode, done.stdout) == (code, ""), done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    if target.read_text() != "previous":
        doc = load_report(target)
        assert (doc["exit_code"], doc["options"]["signal"]) == (code, burst)
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] == []
