"""Does anything grow while rollouts churn for a long time? RSS slope, open files and loop lag of every process.

`stampede run --scenario steady` holds `--users` rollouts in flight (960 by default) for `--minutes` (10 by
default) against the embedded stub (the simulated Prime vendor, ideal profile), each rollout a short command so
sandboxes are created and ended all the time. Every 5 s the RSS and open file descriptors of each process are
sampled: Locust (the `stampede run` process), the rollout engine, and the simulated vendor (the stub); the
engine's event-loop lag p99 is read from the progress line. Printed per process: RSS at the end of the warm-up
and at the end, the least-squares RSS slope after the warm-up (MB/min; a leak is a steady positive slope), and
the same slope over the last half of those samples (a leak keeps its slope; a heap still settling flattens),
the fd count range; then the loop lag p99 (median and max of the samples taken while the level was held).

    python bench/bench_soak.py                 # 960 in flight for 10 minutes (about 11 minutes in all)
    python bench/bench_soak.py --minutes 1     # a quick look

Bounded in time (minutes <= 180, users <= 5000); targets 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from steady_runs import finish, slope_mb_per_min, start_run, steady_argv

SAMPLE_EVERY_S = 5.0
MAX_MINUTES = 180.0
MAX_USERS = 5000
ROLES = ("locust", "engine", "stub")


@dataclass
class Series:
    """One process's samples: (seconds since the level was reached, RSS MB, open fds)."""

    points: list[tuple[float, float, int]] = field(default_factory=list)

    def after(self, warmup_s: float) -> list[tuple[float, float, int]]:
        return [p for p in self.points if p[0] >= warmup_s]

    def slope_mb_per_min(self, warmup_s: float) -> float:
        return slope_mb_per_min([(t, mb) for t, mb, _fds in self.after(warmup_s)])


def role_of(process: psutil.Process, root_pid: int) -> str | None:
    if process.pid == root_pid:
        return "locust"
    try:
        line = " ".join(process.cmdline())
    except psutil.Error:
        return None
    if "harness.engine" in line:
        return "engine"
    if "providers.sim" in line:
        return "stub"
    if "harness.cli" in line:
        return "locust"  # a local Locust worker
    return None


def sample(root: psutil.Process) -> dict[str, tuple[float, int]]:
    """RSS (MB) and open fds summed per role over the run's processes."""
    totals: dict[str, tuple[float, int]] = {}
    try:
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return totals
    for process in processes:
        role = role_of(process, root.pid)
        if role is None:
            continue
        try:
            rss = process.memory_info().rss / 2**20
            fds = process.num_fds()
        except psutil.Error:
            continue
        mb, n = totals.get(role, (0.0, 0))
        totals[role] = (mb + rss, n + fds)
    return totals


def rollouts_in(folder: str) -> int:
    """Rows in the run's rollout shards (each a finished rollout)."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(path).metadata.num_rows for path in Path(folder).rglob("rollouts*.parquet"))


def soak(
    users: int, minutes: float, spawn_rate: float, command: str
) -> tuple[dict[str, Series], list[float], int, int]:
    hold_s = minutes * 60
    out = tempfile.mkdtemp(prefix="bench-soak-")
    argv = steady_argv(users, spawn_rate, hold_s, command, out, 5)
    series = {role: Series() for role in ROLES}
    lags: list[float] = []
    held: list[float] = []
    peak = [0]

    def progress(inflight: int, lag: float) -> None:
        peak[0] = max(peak[0], inflight)
        if inflight >= 0.95 * users:
            if not held:
                held.append(time.monotonic())
            elif time.monotonic() - held[0] >= 20:  # the lag probe's window now covers the held level only
                lags.append(lag)

    process, reader = start_run(argv, progress)
    root = psutil.Process(process.pid)
    deadline = time.monotonic() + hold_s + users / spawn_rate + 120
    while not held and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    start = held[0] if held else time.monotonic()
    while process.poll() is None and time.monotonic() < min(deadline, start + hold_s - 5):
        now = time.monotonic() - start
        for role, (mb, fds) in sample(root).items():
            series[role].points.append((now, mb, fds))
        time.sleep(SAMPLE_EVERY_S)
    finish(process, reader, deadline)
    return series, lags, peak[0], rollouts_in(out)


def bounded(kind: type, low: float, high: float):  # type: ignore[no-untyped-def]
    def parse(text: str) -> float:
        value = kind(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low:g} and {high:g}")
        return value

    return parse


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=bounded(float, 0.5, MAX_MINUTES), default=10.0, help="how long to hold")
    parser.add_argument("--users", type=bounded(int, 1, MAX_USERS), default=960, help="rollouts in flight")
    parser.add_argument("--spawn-rate", type=bounded(float, 1, 5000), default=500.0, help="users started per second")
    parser.add_argument("--command", default="true; sleep 1", help="each rollout's commands (short: churn)")
    parser.add_argument(
        "--warmup", type=bounded(float, 0, 3600), default=None, help="seconds left out of the slope (default: 1/5)"
    )
    args = parser.parse_args()
    warmup_s = args.warmup if args.warmup is not None else min(120.0, args.minutes * 60 / 5)
    series, lags, peak, rollouts = soak(args.users, args.minutes, args.spawn_rate, args.command)
    rate = rollouts / (args.minutes * 60)
    print(
        f"{args.users} rollouts in flight (peak seen {peak}) for {args.minutes:g} min: {rollouts} rollouts "
        f"(~{rate:.0f}/s); slope after {warmup_s:.0f} s"
    )
    print(
        f"{'process':>8} | {'RSS at warm-up':>14} {'at end':>8} | {'RSS slope':>14} {'last half':>14} | "
        f"{'open fds min-max':>16}"
    )
    for role in ROLES:
        points = series[role].after(warmup_s)
        if not points:
            print(f"{role:>8} | (no samples)")
            continue
        fds = [p[2] for p in points]
        half_s = (points[0][0] + points[-1][0]) / 2
        print(
            f"{role:>8} | {points[0][1]:>11.0f} MB {points[-1][1]:>5.0f} MB | "
            f"{series[role].slope_mb_per_min(warmup_s):>+8.2f} MB/min {series[role].slope_mb_per_min(half_s):>+8.2f} MB/min"
            f" | {min(fds):>7} - {max(fds):<7}"
        )
    if lags:
        print(
            f"engine loop lag p99: median {statistics.median(lags):.0f} ms, max {max(lags):.0f} ms ({len(lags)} samples)"
        )
    else:
        print("engine loop lag p99: no samples (the level was never held 20 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
