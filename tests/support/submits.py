"""Wait for a run's first rollout to be submitted (its write-ahead on disk), not for a fixed time.

A Ctrl-C test that sleeps a fixed number of seconds first fails on a busy CI machine, where the vendor and its SDK
can take longer than that to start: a run stopped before its first submit has nothing to cancel.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path


def wait_for_first_submit(run_dir: Path, process: subprocess.Popen, timeout_s: float = 90.0) -> bool:
    """True once any `submits-*.jsonl` in `run_dir` holds a line; False on timeout or if the process ended."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        if any(path.stat().st_size > 0 for path in Path(run_dir).glob("submits-*.jsonl")):
            return True
        time.sleep(0.2)
    return False
