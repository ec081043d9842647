"""The gpubw command (:func:`main`, the ``gpubw`` script's entry point).

Importing this package first installs the command's quiet start-up signal handler
(:mod:`gpubw.cli._startup`; only when this process *is* the gpubw command), before any
import the interpreter has not already loaded.
"""

from gpubw.cli import _startup

_startup.install()  # first: a signal while the command starts ends it quietly (130/143)

from gpubw.cli.command import main

__all__ = ["main"]
