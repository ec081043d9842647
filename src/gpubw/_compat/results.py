"""``gpubw.results``, the old path of :mod:`gpubw.model.results`."""

import sys

from gpubw.model import results as _module

sys.modules[__name__] = _module
