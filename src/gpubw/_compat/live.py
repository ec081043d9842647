"""``gpubw.live``, the old path of :mod:`gpubw.cli.live`."""

import sys

from gpubw.cli import live as _module

sys.modules[__name__] = _module
