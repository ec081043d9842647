"""gpubw.cli.completion: the bash, zsh and fish scripts, made from the parsers; the bash one
run by bash on made-up command lines."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpubw.cli import command as cli
from gpubw.cli.completion import commands, script

WORDS = {"keys": ("device_local_copy", "device_to_host_memcpy_ce", "stream_copy"),
         "presets": ("h200x1", "h200x2"), "formats": ("json", "openmetrics", "text")}  # fmt: skip


@pytest.fixture(scope="module")
def bash_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("completion") / "gpubw.bash"
    path.write_text(script("bash", commands(WORDS)))
    return path


def complete(bash_file: Path, line: str) -> list[str]:
    """What bash offers at the end of ``line`` (its last word the one being completed)."""
    words = line.split(" ")
    program = (
        f"source {bash_file}; COMP_WORDS=({' '.join(repr(w) for w in words)}); "
        f"COMP_CWORD={len(words) - 1}; _gpubw_complete; printf '%s\\n' \"${{COMPREPLY[@]}}\""
    )
    out = subprocess.run(["bash", "-c", program], capture_output=True, encoding="utf-8", check=True)
    return [w for w in out.stdout.splitlines() if w]


@pytest.mark.parametrize(
    ("line", "offered"),
    [
        ("gpubw ", ["check", "expect-from", "info", "compare", "plot", "fleet", "completion"]),
        ("gpubw -t dev", ["device_local_copy", "device_to_host_memcpy_ce"]),
        ("gpubw -t 0 device_l", ["device_local_copy"]),  # -t takes several
        ("gpubw --testcase-prefixes str", ["stream_copy"]),
        ("gpubw --simulate h200x", ["h200x1", "h200x2"]),
        ("gpubw --format op", ["openmetrics"]),
        ("gpubw --metrics-detail s", ["summary"]),
        ("gpubw --handle-type p", ["posix-fd"]),
        ("gpubw --buf", ["--buffer-size", "--bufferSize"]),
        ("gpubw -b ", []),  # a size: nothing to offer
        ("gpubw compare a.json b.json --fail-on b", ["both"]),
        ("gpubw compare a.json b.json --form", ["--format"]),
        ("gpubw compare a.json b.json --format j", ["json"]),
        ("gpubw plot r.json -p str", ["stream_copy"]),
        ("gpubw info --simulate h200x1", ["h200x1"]),
        ("gpubw completion z", ["zsh"]),
        ("gpubw fleet /x --format op", ["openmetrics"]),
        ("gpubw fleet /x --min", ["--min-nodes"]),
    ],
)
def test_bash_completes(bash_file: Path, line: str, offered: list[str]) -> None:
    """Sub-commands first; options by prefix; keys, presets, formats and choices as values."""
    assert complete(bash_file, line) == offered


def test_bash_offers_the_options_of_the_command_in_use(bash_file: Path) -> None:
    """check's options are check's own; the run's are not offered there."""
    offered = complete(bash_file, "gpubw check r.json --")
    assert "--expect" in offered and "--tolerance" not in offered
    assert "--buffer-size" not in offered


def test_zsh_runs_the_bash_script_and_fish_has_every_option() -> None:
    """zsh's script loads bashcompinit; fish's names each option with its aliases and the
    keys as -t's values. Each parses in its shell where that shell is installed."""
    zsh = script("zsh", commands(WORDS))
    assert "bashcompinit" in zsh and "complete -o filenames -F _gpubw_complete gpubw" in zsh
    fish = script("fish", commands(WORDS))
    assert "-s b -l buffer-size -l bufferSize -x" in fish
    assert "-s t -l testcase -x -a 'device_local_copy device_to_host_memcpy_ce stream_copy'" in fish
    assert "-l metrics-detail -x -a 'cells summary'" in fish
    assert "__fish_seen_subcommand_from compare' -l fail-on -x -a 'low high both'" in fish
    for shell, text in (("zsh", zsh), ("fish", fish)):
        if shutil.which(shell):
            subprocess.run([shell, "-n", "-c", text], check=True)


def test_the_command_prints_a_script_with_what_is_installed(capsys: Any) -> None:
    """gpubw completion bash lists the installed testcase keys (a plugin's too), presets and
    formats; a missing or unknown shell is a usage error."""
    assert cli.main(["completion", "bash"]) == 0
    text = capsys.readouterr().out
    assert "device_local_copy_sm" in text and "h200x8" in text and "openmetrics" in text
    assert "stream_triad" in text  # the gpubw-stream plugin the test command installs
    assert cli.main(["completion"]) == 2
    assert cli.main(["completion", "tcsh"]) == 2
    assert "invalid choice: 'tcsh'" in capsys.readouterr().err


def _complete_with(path: Path, fn: str, line: str) -> list[str]:
    words = line.split(" ")
    program = (
        f"source {path}; COMP_WORDS=({' '.join(repr(w) for w in words)}); "
        f"COMP_CWORD={len(words) - 1}; {fn}; printf '%s\\n' \"${{COMPREPLY[@]}}\""
    )
    out = subprocess.run(["bash", "-c", program], capture_output=True, encoding="utf-8", check=True)
    return [w for w in out.stdout.splitlines() if w]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_text_from_plugins_is_never_run(tmp_path: Path) -> None:
    """A testcase key or format holding $(...), `...` or a quote is offered as text; nothing
    of it runs when TAB is pressed (compgen -W would expand it)."""
    marker = tmp_path / "ran"
    evil = (f"k$(touch {marker})", f"k`touch {marker}`", "k'q", f"f$(touch {marker})")
    words = {**WORDS, "keys": (*WORDS["keys"], *evil[:3]), "formats": ("json", evil[3])}
    path = tmp_path / "gpubw.bash"
    path.write_text(script("bash", commands(words)))
    assert _complete_with(path, "_gpubw_complete", "gpubw -t k") == list(evil[:3])
    assert _complete_with(path, "_gpubw_complete", "gpubw --format f") == [evil[3]]
    assert not marker.exists()
    fish = script("fish", commands(words))
    assert f"\\'k$(touch {marker})\\'" in fish  # quoted again inside -a's argument


@pytest.mark.parametrize(
    ("line", "offered"),
    [
        ("gpubw-nvbandwidth -t dev", ["device_local_copy", "device_to_host_memcpy_ce"]),
        ("gpubw-nvbandwidth -t 0 str", ["stream_copy"]),
        ("nvbandwidth -F j", ["json"]),
        ("nvbandwidth --buf", ["--bufferSize"]),
        ("gpubw-nvbandwidth --test", ["--testcase", "--testcasePrefixes", "--testSamples"]),
        ("gpubw-nvbandwidth -b ", []),
    ],
)
def test_gpubw_nvbandwidth_completes_its_own_options(
    tmp_path: Path, line: str, offered: list[str]
) -> None:
    """completion --command gpubw-nvbandwidth: nvbandwidth's option table, testcase keys
    for -t/-p, -F's formats; for its link named nvbandwidth too; no hidden option."""
    from gpubw.cli.completion import NVBANDWIDTH, nvbandwidth_commands

    text = script("bash", nvbandwidth_commands(WORDS), NVBANDWIDTH)
    assert text.rstrip().endswith("_gpubw_nvbandwidth_complete gpubw-nvbandwidth nvbandwidth")
    assert "--loopCount" not in text and "--perfFormatter" not in text
    path = tmp_path / "nvbandwidth.bash"
    path.write_text(text)
    assert _complete_with(path, "_gpubw_nvbandwidth_complete", line) == offered


def test_the_command_completes_gpubw_nvbandwidth(capsys: Any) -> None:
    """gpubw completion bash|fish --command gpubw-nvbandwidth prints its script."""
    assert cli.main(["completion", "bash", "--command", "gpubw-nvbandwidth"]) == 0
    text = capsys.readouterr().out
    assert "--testcasePrefixes" in text and "--simulate" not in text
    assert cli.main(["completion", "fish", "--command", "gpubw-nvbandwidth"]) == 0
    fish = capsys.readouterr().out
    assert "complete -c nvbandwidth -n 'true' -s F -l format -x -a 'text json perf'" in fish
