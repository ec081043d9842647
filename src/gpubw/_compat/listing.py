"""``gpubw.listing``, the old path of :mod:`gpubw.cli.listing`."""

import sys

from gpubw.cli import listing as _module

sys.modules[__name__] = _module
