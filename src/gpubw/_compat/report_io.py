"""``gpubw.report_io``, the old path of :mod:`gpubw.model.report_io`."""

import sys

from gpubw.model import report_io as _module

sys.modules[__name__] = _module
