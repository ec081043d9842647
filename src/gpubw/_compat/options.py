"""``gpubw.options``, the old path of :mod:`gpubw.model.options`."""

import sys

from gpubw.model import options as _module

sys.modules[__name__] = _module
