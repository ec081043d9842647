"""``gpubw.capture``, the old path of :mod:`gpubw.runner.capture`."""

import sys

from gpubw.runner import capture as _module

sys.modules[__name__] = _module
