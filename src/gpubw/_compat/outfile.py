"""``gpubw.outfile``, the old path of :mod:`gpubw.model.outfile`."""

import sys

from gpubw.model import outfile as _module

sys.modules[__name__] = _module
