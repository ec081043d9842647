"""``gpubw.initiators``, the old path of :mod:`gpubw.measure.initiators`."""

import sys

from gpubw.measure import initiators as _module

sys.modules[__name__] = _module
