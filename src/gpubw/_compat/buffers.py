"""``gpubw.buffers``, the old path of :mod:`gpubw.memory.buffers`."""

import sys

from gpubw.memory import buffers as _module

sys.modules[__name__] = _module
