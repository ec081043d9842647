"""``gpubw.plot``, the old path of :mod:`gpubw.tools.plot`."""

import sys

from gpubw.tools import plot as _module

sys.modules[__name__] = _module
