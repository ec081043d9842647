"""Compile gpubw's kernels into the kernel cache in a process of its own.

``python -m gpubw.kernels.precompile DRIVER_VERSION MAJOR.MINOR [MAJOR.MINOR ...]``
(``DRIVER_VERSION`` an integer as ``cuDriverGetVersion`` gives it, or ``none``) compiles
gpubw's own kernel module for each compute capability, exactly as the run would
(:func:`gpubw.kernels.cache.load_or_compile`: same source, options, key and cache directory,
from the same environment), and stores the binaries. Exit status 0 when every one is in the
cache; a failure is left for the run's own compile to report (it prints a traceback).

Why a process: the gpubw command compiles beside its start on a cache miss
(:mod:`gpubw.backend.cuda_start`), and importing ``cuda.core`` (~0.16 s of Python, numpy
included; more on the GPU machines' image) on a thread of the command holds the interpreter
lock that the command's own start needs. In a process of its own it runs on another core.
"""

from __future__ import annotations

import sys

from gpubw.kernels.cache import SOURCE_NAME, load_or_compile
from gpubw.kernels.modules import GPUBW


def main(argv: list[str]) -> int:
    """Compile for every ``MAJOR.MINOR`` of ``argv[1:]`` with the driver version ``argv[0]``."""
    if len(argv) < 2:
        print(
            "usage: python -m gpubw.kernels.precompile DRIVER_VERSION|none MAJOR.MINOR ...",
            file=sys.stderr,
        )
        return 2
    driver = None if argv[0] == "none" else int(argv[0])
    for text in argv[1:]:
        major, _, minor = text.partition(".")
        load_or_compile(
            (int(major), int(minor)), driver, source_text=GPUBW.source, name=SOURCE_NAME
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
