"""``gpubw.sizes``, the old path of :mod:`gpubw.model.sizes`."""

import sys

from gpubw.model import sizes as _module

sys.modules[__name__] = _module
