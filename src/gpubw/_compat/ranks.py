"""``gpubw.ranks``, the old path of :mod:`gpubw.runner.ranks`."""

import sys

from gpubw.runner import ranks as _module

sys.modules[__name__] = _module
