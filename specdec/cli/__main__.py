"""`python -m specdec.cli`: the same entry point as the `specdec` console script."""

import sys

from specdec.cli.main import main

sys.exit(main())
