"""``gpubw.cli_args``, the old path of :mod:`gpubw.cli.args`."""

import sys

from gpubw.cli import args as _module

sys.modules[__name__] = _module
