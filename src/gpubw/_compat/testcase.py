"""``gpubw.testcase``, the old path of :mod:`gpubw.testcases.base`."""

import sys

from gpubw.testcases import base as _module

sys.modules[__name__] = _module
