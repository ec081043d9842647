"""``gpubw.compare``, the old path of :mod:`gpubw.tools.compare`."""

import sys

from gpubw.tools import compare as _module

sys.modules[__name__] = _module
