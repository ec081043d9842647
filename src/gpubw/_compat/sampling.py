"""``gpubw.sampling``, the old path of :mod:`gpubw.measure.sampling`."""

import sys

from gpubw.measure import sampling as _module

sys.modules[__name__] = _module
