"""`python -m harness.engine`: the engine process the Locust side starts (a fresh interpreter, no gevent)."""

import sys

from harness.engine.server import main

sys.exit(main())
