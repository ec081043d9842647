"""Tests of the -b/--buffer-size parser (gpubw.model.sizes)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpubw.model.errors import UsageError
from gpubw.model.sizes import format_size, format_size_short, parse_size, parse_sizes

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
        ("1TiB", 1 << 40),
        ("1tib", 1 << 40),
        ("2TB", 2 * 10**12),
    ],
)
def test_units(text, expected):
    """Every unit, binary and decimal, case-insensitive."""
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("512K", 512 << 10),
        ("512k", 512 << 10),
        ("64M", 64 * MIB),
        ("64m", 64 * MIB),
        ("1G", 1 << 30),
        ("1.5G", 3 << 29),
        ("1T", 1 << 40),
        ("1 G", 1 << 30),
    ],
)
def test_bare_letters_are_binary_like_nccl_tests(text, expected):
    """K, M, G, T alone are powers of 1024, as nccl-tests reads them (64M = 64 MiB)."""
    assert parse_size(text) == expected


def test_bare_letters_differ_from_decimal_units():
    """M is binary but MB stays decimal, as it always was: 64M != 64MB."""
    assert parse_size("64M") == 64 * MIB
    assert parse_size("64MB") == 64 * 10**6
    assert parse_size("1G") == parse_size("1GiB") != parse_size("1GB")


def test_bare_letters_in_lists_and_ranges():
    """The nccl-tests forms work in comma lists and START:STOP:xFACTOR ranges."""
    assert parse_sizes("64M,1G") == [64 * MIB, 1 << 30]
    assert parse_sizes("512K:2M:x2") == [512 << 10, MIB, 2 * MIB]


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
        ("1P", "unknown unit"),
        ("2048T", "larger than"),
        ("64MM", "unknown unit"),
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
    assert "64M = 64 MiB" in msg


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
    from gpubw.cli.command import main

    assert main(["--simulate", "h200x2", "-b", "abc"]) == 2
    err = capsys.readouterr().err
    assert "error: -b/--buffer-size: invalid buffer size 'abc'" in err
