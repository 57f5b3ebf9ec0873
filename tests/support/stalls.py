"""Stopping a run's embedded simulated vendor for a while (SIGSTOP), as a starved machine would: the stall a run
must say it saw (providers/sim/core/loop_watch.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path


def stopped_for(pid: int, seconds: float) -> None:
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)


def vendor_pid(out: Path, run: subprocess.Popen[str], timeout_s: float = 120.0) -> int:
    """The embedded vendor's pid, once the run's run.json under `out` names it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and run.poll() is None:
        for manifest in out.glob("*/run.json"):
            try:
                processes = json.loads(manifest.read_text()).get("processes") or {}
            except ValueError:
                continue  # written as we read it
            pid = (processes.get("vendor") or {}).get("pid")
            if pid:
                return int(pid)
        time.sleep(0.2)
    raise AssertionError("run.json never named the embedded vendor's process")
