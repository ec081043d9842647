"""The example writer: a run as Markdown, written as it goes (a streaming writer)."""

from __future__ import annotations

from typing import TextIO

from gpubw import Report, TestcaseResult
from gpubw.writers import WriterOption

#: the display unit and the factor from a matrix's base unit (bytes/s, s)
DISPLAY = {"bytes/s": ("GB/s", 1e-9), "s": ("us", 1e6)}


class MarkdownWriter:
    """A heading for the run, a Markdown table per matrix as each testcase finishes, the exit
    code at the end (gpubw --format example_markdown)."""

    #: its own option: gpubw --format example_markdown --markdown-digits 2
    options = (
        WriterOption(
            "--markdown-digits",
            "decimal places of the figures (default 1)",
            metavar="N",
            default="1",
        ),
    )

    def __init__(self) -> None:
        self.verbose = False  # gpubw -v (gpubw sets it after constructing the writer)
        self.markdown_digits = "1"  # --markdown-digits (set by gpubw)

    def begin(self, header: Report, stream: TextIO) -> None:
        """The run has started: ``header`` is the Report without testcases."""
        where = header.system_name or header.host
        stream.write(f"# gpubw {header.tool_version} on {where}\n\n")
        if header.simulated:
            stream.write("*Simulated system: the figures are modelled, not measured.*\n\n")

    def testcase(self, result: TestcaseResult, stream: TextIO) -> None:
        """One testcase at one size has finished."""
        stream.write(f"## {result.key}: {result.status.value}\n\n")
        if result.message:
            stream.write(f"{result.message}\n\n")
        digits = int(self.markdown_digits)
        for m in result.matrices:
            unit, scale = DISPLAY.get(m.unit, (m.unit, 1.0))
            stream.write(f"{m.description} [{unit}]\n\n")
            stream.write("| | " + " | ".join(m.column_labels) + " |\n")
            stream.write("|---" * (len(m.column_labels) + 1) + "|\n")
            for label, row in zip(m.row_labels, m.values, strict=True):
                cells = ["N/A" if v is None else f"{v * scale:.{digits}f}" for v in row]
                stream.write(f"| {label} | " + " | ".join(cells) + " |\n")
            if self.verbose and m.samples:
                stream.write(f"\n{len(m.samples[0][0] or ())} samples per cell\n")
            stream.write("\n")

    def end(self, report: Report, stream: TextIO) -> None:
        """The run is over: ``report`` is complete."""
        stream.write(f"exit code {report.exit_code}\n")
