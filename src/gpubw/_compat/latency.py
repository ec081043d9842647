"""``gpubw.latency``, the old path of :mod:`gpubw.measure.latency`."""

import sys

from gpubw.measure import latency as _module

sys.modules[__name__] = _module
