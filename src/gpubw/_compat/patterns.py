"""``gpubw.patterns``, the old path of :mod:`gpubw.kernels.patterns`."""

import sys

from gpubw.kernels import patterns as _module

sys.modules[__name__] = _module
