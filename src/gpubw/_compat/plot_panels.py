"""``gpubw.plot_panels``, the old path of :mod:`gpubw.tools.plot_panels`."""

import sys

from gpubw.tools import plot_panels as _module

sys.modules[__name__] = _module
