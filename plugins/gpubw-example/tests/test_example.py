"""The example plugin, checked with gpubw.testing on a simulated system (no GPU needed)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from gpubw.testing import check_testcase, check_writer

from gpubw_example.testcases import LocalReadWrite
from gpubw_example.writers import MarkdownWriter


def test_the_testcase_passes_the_kit(gpubw_run_testcase: Any) -> None:
    """It runs on a simulated h200x2, and its matrix has samples, read + write counting and
    figures a device's memory can give."""
    report = gpubw_run_testcase("example_local_read_write", samples=4)
    (result,) = check_testcase(report)
    (m,) = result.matrices
    assert m.bytes_counting == "read+write" and len(m.samples[0][0]) == 4
    nominal = report.devices[0]["nominal_memory_bandwidth"]
    assert 0.5 * nominal < m.values[0][0] <= nominal  # twice a once-counted copy


def test_the_writer_writes_markdown(gpubw_example_report: Any) -> None:
    """The streaming writer writes a table per matrix and takes its own option."""
    text = check_writer("example_markdown", gpubw_example_report)
    assert text.startswith("# gpubw ") and "| 0 |" in text and text.endswith("exit code 0\n")
    wide = check_writer(MarkdownWriter, gpubw_example_report, settings={"markdown_digits": "3"})
    assert wide != text


def test_gpubw_lists_and_runs_it() -> None:
    """gpubw -l lists the testcase; a simulated run writes it with the plugin's writer."""
    gpubw = [sys.executable, "-m", "gpubw"]
    listed = subprocess.run(
        [*gpubw, "-l"], capture_output=True, encoding="utf-8", check=True
    ).stdout
    assert "example_local_read_write:" in listed and "(from gpubw-example)" in listed
    run = [*gpubw, "--simulate", "h200x2", "-t", "example_local_read_write", "-b", "4MiB", "-q"]
    out = subprocess.run(
        [*run, "--format", "example_markdown", "--markdown-digits", "0"],
        capture_output=True,
        encoding="utf-8",
        check=True,
    ).stdout
    assert "## example_local_read_write: Passed" in out
    assert LocalReadWrite.__doc__


def _readme_section() -> str:
    readme = Path(__file__).parents[3] / "README.md"
    if not (readme.parent / "src" / "gpubw").is_dir():
        pytest.skip("not in gpubw's repository (a copy of the example)")
    text = readme.read_text(encoding="utf-8")
    return text.split("## Writing a testcase plugin", 1)[1].split("\n## ", 1)[0]


def test_the_readme_shows_this_package() -> None:
    """The README's plugin example is this package's testcase module, verbatim, and its
    pyproject's entry points and build system are this package's."""
    section = _readme_section()
    (code,) = re.findall(r"```python\n# src/gpubw_example/testcases.py\n(.*?)```", section, re.S)
    package = Path(__file__).parents[1]
    assert code == (package / "src/gpubw_example/testcases.py").read_text(encoding="utf-8")
    (toml,) = re.findall(r"```toml\n(.*?)```", section, re.S)
    pyproject = (package / "pyproject.toml").read_text(encoding="utf-8")
    for line in toml.splitlines():
        if line and not line.startswith("#"):
            assert line in pyproject.splitlines(), line
