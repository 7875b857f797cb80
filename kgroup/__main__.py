"""``python -m kgroup``: the kgroup command line."""

import sys

from ._cli import main

sys.exit(main())
