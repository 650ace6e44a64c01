"""``python -m kvsim.cli``."""

import sys

from kvsim.cli.commands import main

sys.exit(main())
