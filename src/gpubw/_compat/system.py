"""``gpubw.system``, the old path of :mod:`gpubw.memory.system`."""

import sys

from gpubw.memory import system as _module

sys.modules[__name__] = _module
