"""``gpubw.interrupts``, the old path of :mod:`gpubw.runner.interrupts`."""

import sys

from gpubw.runner import interrupts as _module

sys.modules[__name__] = _module
