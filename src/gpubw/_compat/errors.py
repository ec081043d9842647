"""``gpubw.errors``, the old path of :mod:`gpubw.model.errors`."""

import sys

from gpubw.model import errors as _module

sys.modules[__name__] = _module
