"""gpubw.cli.parsing: one parser class; a unique prefix of a long option is that option, its
aliases counted once; the usage line names the sub-commands."""

from __future__ import annotations

from typing import Any

import pytest

from gpubw.cli import command as cli
from gpubw.cli.args import SUBCOMMANDS, build_parser
from gpubw.model.errors import UsageError


@pytest.mark.parametrize(
    ("argv", "dest", "value"),
    [
        (["--buf", "64"], "buffer_size", "64"),
        (["--bufferS", "64"], "buffer_size", "64"),
        (["--loop", "4"], "loops", 4),
        (["--loopC", "4"], "loops", 4),
        (["--testcase-p", "host"], "prefixes", ["host"]),
        (["--testcaseP", "host"], "prefixes", ["host"]),
        (["--skip", "-t", "0"], "skip_verification", True),
        (["--disable"], "disable_affinity", True),
        (["--use"], "use_mean", True),
        (["--testS", "5"], "samples", 5),
    ],
)
def test_a_unique_prefix_is_its_option_whatever_its_aliases(
    argv: list[str], dest: str, value: Any
) -> None:
    """--buf is --buffer-size (also spelt --bufferSize), --loop is --loop-count."""
    ns = build_parser().parse_args(argv)
    assert getattr(ns, dest) == value


def test_a_prefix_of_two_options_is_still_ambiguous() -> None:
    """--s could be --samples, --skip-verification, --simulate, --seed, ...: refused, naming
    each option once."""
    with pytest.raises(UsageError, match="ambiguous option: --s could match") as info:
        build_parser().parse_args(["--s", "1"])
    assert str(info.value).count("--samples") == 1


def test_the_command_takes_a_prefix(capsys: Any) -> None:
    """gpubw --buf 64 runs (it was 'ambiguous'); a sub-command's options take prefixes too."""
    argv = ["--simulate", "h200x1", "-t", "0", "--buf", "8", "--loop", "2", "-i", "2", "-q"]
    assert cli.main([*argv, "-j"]) == 0
    assert '"buffer_sizes": [\n      8388608\n    ]' in capsys.readouterr().out
    assert cli.main(["info", "--sim", "h200x1", "--j"]) == 0
    assert '"schema_version": "1"' in capsys.readouterr().out


def test_the_usage_line_names_the_subcommands(capsys: Any) -> None:
    """gpubw -h shows the sub-commands in its usage line and a commands section."""
    assert cli.main(["-h"]) == 0
    out = capsys.readouterr().out
    usage = out.split("\n\n")[0]
    assert f"gpubw {{{','.join(SUBCOMMANDS)}}} ..." in usage
    assert "commands (gpubw COMMAND -h for each):" in out
