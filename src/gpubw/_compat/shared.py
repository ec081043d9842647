"""``gpubw.shared``, the old path of :mod:`gpubw.memory.shared`."""

import sys

from gpubw.memory import shared as _module

sys.modules[__name__] = _module
