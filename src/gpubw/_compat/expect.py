"""``gpubw.expect``, the old path of :mod:`gpubw.acceptance.expect`."""

import sys

from gpubw.acceptance import expect as _module

sys.modules[__name__] = _module
