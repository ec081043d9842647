"""``gpubw.rank_gate``, the old path of :mod:`gpubw.measure.rank_gate`."""

import sys

from gpubw.measure import rank_gate as _module

sys.modules[__name__] = _module
