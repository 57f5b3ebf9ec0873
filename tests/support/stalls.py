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


def run_with_vendor_stopped(
    argv: list[str], out: Path, cwd: Path, after_s: float, stop_s: float
) -> tuple[int, str, str]:
    """Run a stampede command whose run folder lands under `out`, stop its embedded vendor `after_s` into it for
    `stop_s`, and wait for its end: (exit status, stdout, stderr)."""
    run = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd)
    try:
        pid = vendor_pid(out, run)
        time.sleep(after_s)
        stopped_for(pid, stop_s)
        stdout, stderr = run.communicate(timeout=600)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    return run.returncode, stdout, stderr
