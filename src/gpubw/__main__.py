"""``python -m gpubw``."""

import sys

from gpubw.cli import main

sys.exit(main())
