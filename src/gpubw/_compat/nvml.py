"""``gpubw.nvml``, the old path of :mod:`gpubw.hw.nvml`."""

import sys

from gpubw.hw import nvml as _module

sys.modules[__name__] = _module
