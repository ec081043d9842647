"""``gpubw.argtypes``, the old path of :mod:`gpubw.model.argtypes`."""

import sys

from gpubw.model import argtypes as _module

sys.modules[__name__] = _module
