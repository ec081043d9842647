"""``gpubw.accept_cli``, the old path of :mod:`gpubw.cli.accept`."""

import sys

from gpubw.cli import accept as _module

sys.modules[__name__] = _module
