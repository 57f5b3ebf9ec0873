"""A `stampede run` master whose every worker went missing ends its process, not only its test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _silent_worker_master(mode: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.silent_worker_master", mode],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_master_whose_workers_all_went_missing_still_quits() -> None:
    """The CI hang of 2026-12-07: the run printed its summary and its master never exited."""
    assert _silent_worker_master("quits") == "ended"


def test_without_the_listener_locust_leaves_that_master_running() -> None:
    """What `quit_when_stopped` is for: Locust alone stops the test and leaves the runner's greenlets alive."""
    assert _silent_worker_master("stays") == "still running"
