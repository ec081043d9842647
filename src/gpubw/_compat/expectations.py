"""``gpubw.expectations``, the old path of :mod:`gpubw.acceptance.expectations`."""

import sys

from gpubw.acceptance import expectations as _module

sys.modules[__name__] = _module
