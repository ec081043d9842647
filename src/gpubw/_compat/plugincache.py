"""``gpubw.plugincache``, the old path of :mod:`gpubw.runner.plugincache`."""

import sys

from gpubw.runner import plugincache as _module

sys.modules[__name__] = _module
