"""Tests of the -b/--buffer-size parser (gpubw.sizes)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpubw.errors import UsageError
from gpubw.sizes import format_size, format_size_short, parse_size, parse_sizes

MIB = 1 << 20


def test_plain_number_is_mib():
    """A bare number means MiB, as in nvbandwidth; decimals that give whole bytes work."""
    assert parse_sizes("512") == [512 * MIB]
    assert parse_sizes("0.5") == [MIB // 2]
    assert parse_sizes(" 64 ") == [64 * MIB]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4096B", 4096),
        ("4096 b", 4096),
        ("4KiB", 4 << 10),
        ("4kib", 4 << 10),
        ("3MiB", 3 * MIB),
        ("1GiB", 1 << 30),
        ("1gib", 1 << 30),
        ("2KB", 2000),
        ("2mb", 2_000_000),
        ("1GB", 10**9),
        ("1.5GiB", 3 << 29),
    ],
)
def test_units(text, expected):
    """Every unit, binary and decimal, case-insensitive."""
    assert parse_size(text) == expected


def test_comma_list_keeps_order_and_duplicates():
    """A comma list gives its sizes in the order written, duplicates included."""
    assert parse_sizes("64,512,1GiB,64") == [64 * MIB, 512 * MIB, 1 << 30, 64 * MIB]


def test_geometric_range_includes_stop_when_hit():
    """START:STOP:xF steps by F and includes STOP when a step lands on it."""
    assert parse_sizes("1MiB:8MiB:x2") == [MIB, 2 * MIB, 4 * MIB, 8 * MIB]
    assert parse_sizes("1MiB:10MiB:x3") == [MIB, 3 * MIB, 9 * MIB]
    assert parse_sizes("1MiB:4GiB:x2")[-1] == 4 << 30
    assert len(parse_sizes("1MiB:4GiB:x2")) == 13


def test_range_defaults_and_mixing():
    """A range without factor doubles; ranges and single sizes mix in one list."""
    assert parse_sizes("2:8") == [2 * MIB, 4 * MIB, 8 * MIB]
    assert parse_sizes("1,4:8:x2,3") == [MIB, 4 * MIB, 8 * MIB, 3 * MIB]
    assert parse_sizes("5:5") == [5 * MIB]


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("0", "zero"),
        ("0GiB", "zero"),
        ("-5", "negative"),
        ("abc", "not a number"),
        ("12XB", "unknown unit"),
        ("", "empty"),
        ("64,,128", "empty"),
        ("0.3B", "whole number of bytes"),
        ("1GiB:1MiB:x2", "empty"),
        ("1MiB:4MiB:x1", "at least x2"),
        ("1MiB:4MiB:y2", "xN"),
        ("1:2:3:4", "START:STOP:xFACTOR"),
        ("1B:1GiB:x1", "at least x2"),
    ],
)
def test_errors_name_the_value_and_what_is_allowed(value, why):
    """Bad sizes raise UsageError naming the value, the problem and the accepted forms."""
    with pytest.raises(UsageError) as err:
        parse_sizes(value)
    msg = str(err.value)
    assert repr(value) in msg
    assert why in msg
    assert "KiB" in msg and "START:STOP:xFACTOR" in msg


def test_too_many_sizes_is_an_error():
    """A range that would expand to an absurd list is refused."""
    with pytest.raises(UsageError, match="more than"):
        parse_sizes(",".join(["1"] * 1001))


@given(st.integers(min_value=1, max_value=1 << 50))
def test_bytes_round_trip(n):
    """Any positive byte count written with the B unit parses back to itself."""
    assert parse_sizes(f"{n}B") == [n]


def test_format_size():
    """format_size picks the largest exact binary unit."""
    assert format_size(512 * MIB) == "512 MiB"
    assert format_size(1 << 30) == "1 GiB"
    assert format_size(1536) == "1536 B"
    assert format_size(3000) == "3000 B"
    assert format_size(4096) == "4 KiB"


@pytest.mark.parametrize(
    ("n", "text"),
    [(512, "512 B"), (4096, "4 KiB"), (3 << 19, "1.5 MiB"), (1 << 30, "1 GiB"), (3000, "2.93 KiB")],
)
def test_format_size_short(n: int, text: str) -> None:
    """Plot labels: the largest binary unit, at most 3 significant digits."""
    assert format_size_short(n) == text


def test_errors_name_the_parameter_not_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """The library's error carries param="sizes" and no flag; the CLI puts the flag first."""
    with pytest.raises(UsageError) as info:
        parse_sizes("abc")
    assert info.value.param == "sizes" and "-b" not in str(info.value)
    from gpubw.cli import main

    assert main(["--simulate", "h200x2", "-b", "abc"]) == 2
    err = capsys.readouterr().err
    assert "error: -b/--buffer-size: invalid buffer size 'abc'" in err
