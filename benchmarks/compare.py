#!/usr/bin/env python3
"""Compare two bandwidth reports: the same as ``gpubw compare CANDIDATE BASELINE``.

Each may be a gpubw JSON report, nvbandwidth's ``-j`` output or a reference-figures file such
as ``reference/h200x2-nvbandwidth-v0.8.json``; see :mod:`gpubw.tools.compare`.
"""

import sys

from gpubw.cli.command import main

if __name__ == "__main__":
    sys.exit(main(["compare", *sys.argv[1:]]))
