"""``gpubw.gate``, the old path of :mod:`gpubw.memory.gate`."""

import sys

from gpubw.memory import gate as _module

sys.modules[__name__] = _module
