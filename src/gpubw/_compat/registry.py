"""``gpubw.registry``, the old path of :mod:`gpubw.runner.registry`."""

import sys

from gpubw.runner import registry as _module

sys.modules[__name__] = _module
