"""``python -m gpubw``."""

import sys

from gpubw.cli import main  # first: gpubw.cli installs the quiet start-up signal handler

sys.exit(main())
