"""``python -m depl_fl``: the ``depl-fl`` command line."""

import sys

from depl_fl.cli import main

sys.exit(main())
