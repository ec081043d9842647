"""Compare two nvbandwidth texts line by line with the numbers masked (issue 35's check of the
v0.8 flavour against NVIDIA's binary): ``python benchmarks/nvbw_textdiff.py A.txt B.txt``.

Every number becomes ``#`` and runs of spaces one space (a matrix cell's width follows its
figure), and the lines that name a build are left out: ``nvbandwidth Version``, ``Built from
Git version``, ``CUDA Runtime Version``, ``CUDA Driver Version`` and ``Driver Version``. What
remains must be equal; the differences are printed as a unified diff. Exit 0 equal, 1 not.
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path

_BUILD = re.compile(
    r"^(nvbandwidth Version|Built from Git version|CUDA Runtime Version|"
    r"CUDA Driver Version|Driver Version)"
)
_NUMBER = re.compile(r"[-+]?\d+(\.\d+)?([eE][-+]?\d+)?")


def masked(path: Path) -> list[str]:
    """The text's lines, numbers masked, build lines left out."""
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if _BUILD.match(line.strip()):
            continue
        out.append(" ".join(_NUMBER.sub("#", line).split()))
    return out


def main(argv: list[str]) -> int:
    """Print the masked diff of two texts; 0 when they are equal."""
    a, b = (Path(p) for p in argv[:2])
    diff = list(difflib.unified_diff(masked(a), masked(b), str(a), str(b), lineterm="", n=1))
    print("\n".join(diff) if diff else f"equal with numbers masked: {len(masked(a))} lines")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
