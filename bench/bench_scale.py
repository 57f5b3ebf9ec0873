"""How many rollouts can one engine hold, and what does holding them cost? Loop lag and memory at N in flight.

Each rollout holds its sandbox with one long command (`sleep`), so N rollouts stay in flight at once against
the ideal stub, through the whole harness (`python -m harness.cli run --scenario steady`). Printed per level:
the engine's event-loop lag p99 once the level is held (its own probe, over the last 10-20 s, read from the
progress line), the engine's RSS before the ramp and while holding (psutil on the engine process), and the
memory per held rollout (summed over engines when `--workers auto` spreads the level), and the slope of
the engines' RSS over the rest of the hold (sampled every 5 s). The Locust processes'
RSS is printed beside it.

    python bench/bench_scale.py                             # 960 and 5000: about 3 minutes
    python bench/bench_scale.py --levels 20000 --hold 40    # the 20,000 target (about 3 minutes more)
    python bench/bench_scale.py --levels 960 --hold 600 --churn   # ten minutes of rollouts: RSS slope = leak?

Bounded in time; targets 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass

import psutil
from steady_runs import REPO, finish, slope_mb_per_min, start_run, steady_argv

sys.path.insert(0, str(REPO))


@dataclass
class Level:
    users: int
    held: int = 0
    lag_p99_ms: list[float] | None = None
    engine_rss_idle_mb: float = float("nan")
    engine_rss_held_mb: float = float("nan")
    locust_rss_held_mb: float = float("nan")
    engines: int = 0
    rss_samples: list[tuple[float, float]] | None = None  # (seconds into the hold, engines' RSS MB)

    @property
    def slope_mb_per_min(self) -> float:
        """Least-squares growth of the engines' RSS while holding: a leak shows as a steady positive slope."""
        return slope_mb_per_min(self.rss_samples or [])

    @property
    def kb_per_rollout(self) -> float:
        return 1024 * (self.engine_rss_held_mb - self.engine_rss_idle_mb) / self.users if self.users else float("nan")


def processes_running(root: psutil.Process, module: str) -> list[psutil.Process]:
    """Descendants of the run whose command line runs `module` (its engines, or its local workers)."""
    found: list[psutil.Process] = []
    try:
        children = root.children(recursive=True)
    except psutil.Error:
        return found
    for child in children:
        try:
            if module in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found


def engines_of(root: psutil.Process) -> list[psutil.Process]:
    """Every engine of the run (one, or one per local worker under --workers auto)."""
    return processes_running(root, "harness.engine")


def rss_mb(processes: list[psutil.Process]) -> float:
    total = 0.0
    for process in processes:
        try:
            total += process.memory_info().rss / 2**20
        except psutil.Error:
            return float("nan")
    return total if processes else float("nan")


def expected_engines(users: int) -> int:
    from harness.cli.capacity import engines_needed  # no Locust here: it would patch this process with gevent

    return max(1, engines_needed(users))


def measure(users: int, hold_s: float, spawn_rate: float, churn: bool = False) -> Level:
    level = Level(users, lag_p99_ms=[])
    out = tempfile.mkdtemp(prefix="bench-scale-")
    sleep_s = int(hold_s + users / spawn_rate + 60)
    commands = "true; sleep 2" if churn else f"true; sleep {sleep_s}"
    argv = steady_argv(users, spawn_rate, hold_s, commands, out, 2, "--exec-timeout", str(sleep_s + 60))
    held_since: list[float] = []

    def progress(inflight: int, lag: float) -> None:
        level.held = max(level.held, inflight)
        if inflight >= users:
            held_since.append(time.monotonic())
            if time.monotonic() - held_since[0] >= 20:  # the probe's window now covers only the hold
                assert level.lag_p99_ms is not None
                level.lag_p99_ms.append(lag)

    process, reader = start_run(argv, progress)
    root = psutil.Process(process.pid)
    deadline = time.monotonic() + hold_s + users / spawn_rate + 120
    engines: list[psutil.Process] = []
    while time.monotonic() < deadline and process.poll() is None:
        engines = engines_of(root)
        if engines and len(engines) >= expected_engines(users):
            break
        time.sleep(0.2)
    time.sleep(1.0)
    level.engines = len(engines)
    level.engine_rss_idle_mb = rss_mb(engines)
    while not held_since and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.5)
    time.sleep(min(10.0, hold_s / 2))
    level.engine_rss_held_mb = rss_mb(engines)
    level.rss_samples = []
    held_at = time.monotonic()
    while process.poll() is None and time.monotonic() - held_at < hold_s - 15:  # sample the rest of the hold
        level.rss_samples.append((time.monotonic() - held_at, rss_mb(engines)))
        time.sleep(5.0)
    level.locust_rss_held_mb = rss_mb([root, *processes_running(root, "harness.cli")])
    finish(process, reader, deadline)
    return level


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default="960,5000", help="comma-separated rollouts held in flight")
    parser.add_argument("--hold", type=float, default=40.0, help="seconds each level is held once reached")
    parser.add_argument("--spawn-rate", type=float, default=500.0, help="users started per second")
    parser.add_argument(
        "--churn",
        action="store_true",
        help="rollouts end every ~2 s and new ones start (the leak check), instead of being held",
    )
    args = parser.parse_args()
    print(
        f"{'held':>7} {'engines':>7} | {'loop lag p99 (held)':>19} | {'engine RSS idle':>15} {'held':>7} "
        f"{'KB/rollout':>10} | {'Locust RSS':>10} | {'RSS slope':>14}"
    )
    for users in (int(level) for level in args.levels.split(",") if level):
        level = measure(users, args.hold, args.spawn_rate, churn=args.churn)
        lags = level.lag_p99_ms or []
        lag = f"{max(lags):.0f} ms (max of {len(lags)})" if lags else "-"
        print(
            f"{level.held:>7} {level.engines:>7} | {lag:>19} | {level.engine_rss_idle_mb:>12.0f} MB {level.engine_rss_held_mb:>4.0f} MB "
            f"{level.kb_per_rollout:>10.1f} | {level.locust_rss_held_mb:>7.0f} MB | "
            f"{level.slope_mb_per_min:>+8.2f} MB/min",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
