"""`python -m harness.engine`: the engine process the Locust side starts (a fresh interpreter, no gevent)."""

import sys

from foundation.phase_marks import mark

mark("engine process: interpreter up")
from harness.engine.server import main  # noqa: E402  (after the mark: the imports are what it times)

sys.exit(main())
