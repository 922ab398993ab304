"""`python -m coordinator.cli`: the command line, as the `edit-coordinator` script runs it."""

import sys

from coordinator.cli import main

sys.exit(main())
