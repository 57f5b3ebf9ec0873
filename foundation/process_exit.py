"""Ending a process that holds a large interpreter (Locust, gevent, pandas, pyarrow, aiohttp) without its teardown.

Python frees every module and object one by one at exit: 0.5-2 s for `stampede run`'s process and its engine
(bench/bench_startup.py), after everything they write is closed. `exit_now` keeps what an exit must do (the exit
handlers, logging's flush among them; the standard streams flushed) and skips the rest. Only for a process's own
entry point, once its work is done: never inside a caller's interpreter (a test running a command in process).
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
from typing import NoReturn


def exit_now(code: int) -> NoReturn:
    """Run the exit handlers, flush stdout and stderr, and end the process with `code`."""
    try:
        atexit._run_exitfuncs()
        logging.shutdown()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
