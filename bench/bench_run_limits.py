"""What one rollout in flight costs this machine: resident memory per in-flight rollout in the Locust process
(its user greenlet) and in the engine, for `harness/locust/run_limits.py`; and how fast SIGTERM ends a run
caught mid-spawn.

    python bench/bench_run_limits.py                     # scripted provider (the harness's own cost)
    python bench/bench_run_limits.py --provider stub     # plus aiohttp and the simulated vendor

Runs `stampede run --scenario steady` at two user counts with every rollout held in flight (sandboxes never
become ready within the run), reads each process's RSS once the users are all spawned, and prints the slope.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
SCRIPTED = "tests.support.scripted_provider:ScriptedProvider"


def _roles(root: psutil.Process) -> dict[str, int]:
    """RSS in bytes of the Locust process, its engine and (if any) the simulated vendor; the engine's fds."""
    rss = {"locust": root.memory_info().rss, "engine": 0, "vendor": 0, "engine_fds": 0}
    for child in root.children(recursive=True):
        try:
            cmd = " ".join(child.cmdline())
            if "harness.engine" in cmd:
                rss["engine"] += child.memory_info().rss
                rss["engine_fds"] += child.num_fds()
            elif "providers.sim" in cmd or " serve" in cmd:
                rss["vendor"] += child.memory_info().rss
        except psutil.Error:
            pass
    return rss


def measure(users: int, provider: str, settle_s: float) -> tuple[dict[str, int], float]:
    """RSS by role with `users` rollouts in flight, and seconds from SIGTERM to exit."""
    options = (
        ["--provider", SCRIPTED, "--provider-option", "ready_delay_s=600"]
        if provider == "scripted"
        else [
            "--provider",
            "stub",
            "--profile",
            "ideal",
            "--time-scale",
            "1",
            "--commands",
            "sleep 600",
            "--exec-timeout",
            "900",
        ]
    )
    with tempfile.TemporaryDirectory() as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "harness.cli",
                "run",
                "--scenario",
                "steady",
                "--users",
                str(users),
                "--spawn-rate",
                str(users),
                "--hold",
                "600",
                "--workers",
                "0",
                "--out",
                out,
                "--progress-interval",
                "0",
                "--allow-oversubscribe",
                *options,
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        root = psutil.Process(process.pid)
        time.sleep(settle_s)
        rss = _roles(root)
        start = time.monotonic()
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=120)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
        return rss, time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--provider", choices=("scripted", "stub"), default="scripted")
    parser.add_argument("--low", type=int, default=500)
    parser.add_argument("--high", type=int, default=4000)
    parser.add_argument("--settle", type=float, default=20.0, help="seconds after start before reading RSS")
    args = parser.parse_args()
    low, low_stop = measure(args.low, args.provider, args.settle)
    high, high_stop = measure(args.high, args.provider, args.settle)
    for role in ("locust", "engine", "vendor"):
        per = (high[role] - low[role]) / (args.high - args.low)
        print(
            f"{role:7s} {low[role] / 2**20:8.1f} MB at {args.low}, {high[role] / 2**20:8.1f} MB at {args.high}: "
            f"{per / 1024:6.1f} KB per rollout in flight"
        )
    per_fd = (high["engine_fds"] - low["engine_fds"]) / (args.high - args.low)
    print(
        f"engine  {low['engine_fds']} fds at {args.low}, {high['engine_fds']} at {args.high}: {per_fd:.2f} per rollout"
    )
    print(f"SIGTERM to exit: {low_stop:.1f} s at {args.low}, {high_stop:.1f} s at {args.high} in flight")


if __name__ == "__main__":
    main()
