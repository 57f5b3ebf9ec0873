"""`python -m harness.engine`: the engine process the Locust side starts (a fresh interpreter, no gevent)."""

from foundation.phase_marks import mark
from foundation.process_exit import exit_now

mark("engine process: interpreter up")
from harness.engine.server import main  # noqa: E402  (after the mark: the imports are what it times)

# main returns once the engine drained: its shards written and closed, its executor threads joined; the
# interpreter's teardown (pyarrow, aiohttp, the provider's SDK) would keep the Locust side waiting for nothing
exit_now(main())
