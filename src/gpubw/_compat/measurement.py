"""``gpubw.measurement``, the old path of :mod:`gpubw.measure.measurement`."""

import sys

from gpubw.measure import measurement as _module

sys.modules[__name__] = _module
