"""Locust's warnings speak of settings the user made, never of what a stampede shape chose for them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SPAWN_RATE_WARNING = "spawn rate is very high"
STAMPEDE_RUN = (sys.executable, "-m", "harness.cli", "run", "--progress-interval", "0")


def burst(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*STAMPEDE_RUN, "--scenario", "burst", "--users", "150", "--profile", "ideal", "--out", str(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, "STAMPEDE_LOCUST_LOG": "WARNING"},
    )


def test_a_burst_with_no_spawn_rate_given_prints_no_spawn_rate_warning(tmp_path):
    result = burst(tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert SPAWN_RATE_WARNING not in result.stderr


def test_a_spawn_rate_the_user_gave_still_gets_locusts_warning(tmp_path):
    result = burst(tmp_path, "--spawn-rate", "500")
    assert result.returncode == 0, result.stderr[-2000:]
    assert SPAWN_RATE_WARNING in result.stderr
