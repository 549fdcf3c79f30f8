"""``python -m rlxf ...``: the same command line as the ``rlxf`` script (cli.py)."""

import sys

from rlxf.cli import main

sys.exit(main())
