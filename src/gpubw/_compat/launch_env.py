"""``gpubw.launch_env``, the old path of :mod:`gpubw.world.launch_env`."""

import sys

from gpubw.world import launch_env as _module

sys.modules[__name__] = _module
