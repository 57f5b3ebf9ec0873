"""A `stampede run --scenario steady` against the ideal stub, driven and watched from outside, as `bench_scale.py`
and `bench_soak.py` both run it: its command line, its progress line, the least-squares RSS slope that tells a
leak from a settling heap, and ending it by its deadline. Bounded in time; targets 127.0.0.1 only."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROGRESS = re.compile(r"users (\d+)/(\d+) \| in flight (\d+).*loop lag p99 (\d+)ms")
"""The run's progress line on stderr: users started/asked (1, 2), rollouts in flight (3), engine loop lag p99 (4)."""


def steady_argv(
    users: int, spawn_rate: float, hold_s: float, commands: str, out: str, progress_s: int, *more: str
) -> list[str]:
    """`python -m harness.cli run --scenario steady` holding `users` rollouts on the ideal profile, each running
    `commands`; `more` are extra options; `--stop-timeout 0` so the run ends as soon as the hold does."""
    return [
        sys.executable,
        "-m",
        "harness.cli",
        "run",
        "--scenario",
        "steady",
        "--users",
        str(users),
        "--spawn-rate",
        str(spawn_rate),
        "--hold",
        str(hold_s),
        "--profile",
        "ideal",
        "--commands",
        commands,
        *more,
        "--progress-interval",
        str(progress_s),
        "--stop-timeout",
        "0",
        "--out",
        out,
    ]


def start_run(
    argv: list[str], on_progress: Callable[[int, float], None]
) -> tuple[subprocess.Popen[str], threading.Thread]:
    """Start the run with its stderr read on a thread: each progress line's rollouts in flight and engine loop lag
    p99 (ms) go to `on_progress`; `finish` ends both."""
    process = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def watch() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            match = PROGRESS.search(line)
            if match:
                on_progress(int(match.group(3)), float(match.group(4)))

    reader = threading.Thread(target=watch, daemon=True)
    reader.start()
    return process, reader


def slope_mb_per_min(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares growth of (seconds, RSS MB) samples, in MB a minute: a leak shows as a steady positive slope
    (NaN for fewer than three samples)."""
    if len(points) < 3:
        return float("nan")
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_r = sum(r for _, r in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    return 60 * sum((t - mean_t) * (r - mean_r) for t, r in points) / var if var else float("nan")


def finish(process: subprocess.Popen[str], reader: threading.Thread, deadline: float) -> None:
    """Wait for the run until its deadline, then terminate it; the stderr reader is joined either way."""
    try:
        process.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        process.terminate()
        process.wait(timeout=120)
    reader.join(timeout=5)
