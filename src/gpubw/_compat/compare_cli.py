"""``gpubw.compare_cli``, the old path of :mod:`gpubw.cli.compare`."""

import sys

from gpubw.cli import compare as _module

sys.modules[__name__] = _module
