"""The ``approxcv`` command (the console script ``approxcv = approxcv.cli:main``):
:mod:`~approxcv.cli.command` builds the parser and runs ``approxcv demo`` and ``approxcv
report``, :mod:`~approxcv.cli.args` checks every option before anything is fitted.

Importing it imports neither JAX nor the numerics of approxcv: ``approxcv --help`` and
``approxcv --version`` answer at once, and a command imports what it needs when it runs.
"""
from .command import build_parser, main

__all__ = ["main", "build_parser"]
