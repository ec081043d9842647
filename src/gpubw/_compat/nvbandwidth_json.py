"""``gpubw.nvbandwidth_json``, the old path of :mod:`gpubw.model.nvbandwidth_json`."""

import sys

from gpubw.model import nvbandwidth_json as _module

sys.modules[__name__] = _module
