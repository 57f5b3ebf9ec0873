"""Where a command's seconds go: named instants appended to the file `STAMPEDE_PHASE_LOG` names, if it names one.

Every process of a run (the command, its engine, its workers) inherits the variable, so one file holds the whole
command's timeline, one `epoch-seconds pid name` line per instant; `bench/bench_startup.py` sets it and reads it
back into a per-phase table. Unset (every ordinary run), a mark costs one environment lookup.
"""

from __future__ import annotations

import os
import time

VARIABLE = "STAMPEDE_PHASE_LOG"


def mark(name: str) -> None:
    """Record that this process reached `name` now (one short appended line: atomic under O_APPEND)."""
    path = os.environ.get(VARIABLE)
    if not path:
        return
    line = f"{time.time():.6f} {os.getpid()} {name}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
