"""``python -m gpubw``."""

from gpubw import _startup

_startup.install()  # first: a signal while the command starts ends it quietly (130/143)

import sys

from gpubw.cli import main

sys.exit(main())
