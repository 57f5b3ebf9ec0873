"""`python -m harness.cli`: the same command as `stampede`."""

import sys

from harness.cli.main import main

sys.exit(main())
