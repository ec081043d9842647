"""nvbandwidth's command line as Boost.Program_options parses it (gpubw.cli.nvbandwidth_args)."""

from __future__ import annotations

import pytest

from gpubw.cli.nvbandwidth_args import OPTIONS, ArgError, help_text, parse


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["-t", "0", "4", "bogus"], {"testcase": ["0", "4", "bogus"]}),
        (["-t", "0", "--testcase", "1", "-t2"], {"testcase": ["0", "1", "2"]}),
        (["-b64", "-vs"], {"bufferSize": 64, "verbose": True, "skipVerification": True}),
        (["--bufferSize=64"], {"bufferSize": 64}),
        (["--buf", "7", "--testS", "5"], {"bufferSize": 7, "testSamples": 5}),
        (["-vb", "9"], {"verbose": True, "bufferSize": 9}),
        (["-p", "host", "device", "-j"], {"testcasePrefixes": ["host", "device"], "json": True}),
        (["-P", "-1", "-H"], {"targetNumPairs": -1, "useHugePages": True}),
        (["--targetNumPairs", "8"], {"targetNumPairs": 8}),
        (["--pair", "GPU-a", "GPU-b"], {"pair": ("GPU-a", "GPU-b")}),
        (["-F", "perf", "--version"], {"format": "perf", "version": True}),
        (["--loopCount", "4", "--perfFormatter"], {"loopCount": 4, "perfFormatter": True}),
        ([], {}),
    ],
)
def test_accepted_command_lines(argv: list[str], expected: dict[str, object]) -> None:
    """Attached and separate values, grouped switches, unique prefixes, lists that grow."""
    assert parse(argv) == expected


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["-b", "1", "-b", "2"], "cannot be specified more than once"),
        (["-v", "--verbose"], "cannot be specified more than once"),
        (["--test", "x"], "ambiguous"),
        (["--ver"], "ambiguous"),
        (["--nope"], "unrecognised option '--nope'"),
        (["-x"], "unrecognised option '-x'"),
        (["stray"], "unexpected word 'stray'"),
        (["-b"], "required argument for option '--bufferSize' is missing"),
        (["-b", "-v"], "required argument for option '--bufferSize' is missing"),
        (["-b", "1.5"], "('1.5') for option '--bufferSize' is invalid"),
        (["-i", "-3"], "('-3') for option '--testSamples' is invalid"),
        (["-i", "4294967296"], "out of range"),
        (["--verbose=1"], "does not take any arguments"),
        (["--pair", "GPU-a"], "requires two arguments"),
        (["-F", "xml"], "allowed: text, json, perf"),
    ],
)
def test_refused_command_lines(argv: list[str], words: str) -> None:
    """What nvbandwidth answers with "Invalid Arguments", with the reason in words."""
    with pytest.raises(ArgError, match=words.replace("(", r"\(").replace(")", r"\)")):
        parse(argv)


def test_help_is_boosts_layout() -> None:
    """-h: visible options in order, one description column within 80 characters, (=default)."""
    lines = help_text().splitlines()
    assert lines[0] == "nvbandwidth CLI:"
    assert lines[2].startswith("  -b [ --bufferSize ] arg (=512)")
    column = lines[1].index("Produce help message")
    assert all(len(line) <= 80 for line in lines)
    assert all(line[column - 1] == " " for line in lines[1:])
    text = help_text()
    assert "loopCount" not in text and "perfFormatter" not in text
    visible = [o.long for o in OPTIONS if not o.hidden]
    assert [v for v in visible if f"--{v} ]" in text or f"--{v} " in text] == visible
