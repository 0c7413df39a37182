"""``python -m approxcv.cli``: the ``approxcv`` command."""
import sys

from .command import main

sys.exit(main())
