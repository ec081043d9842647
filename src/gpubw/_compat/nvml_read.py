"""``gpubw.nvml_read``, the old path of :mod:`gpubw.hw.nvml_read`."""

import sys

from gpubw.hw import nvml_read as _module

sys.modules[__name__] = _module
