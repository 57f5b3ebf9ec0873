"""What the harness itself costs a lifecycle, per process, before and after a change (issue #36).

Through a vendor's SDK stampede's client CPU is the SDK's plus the harness's own share: the Locust user, the engine's
hop, the rows. That share is measured here on the `stub` provider against a fresh standalone ideal stub (`python -m
providers.sim.prime.serve --profile ideal`), whose lean client is the cheapest vendor path there is, so what is left
is mostly ours. Each side runs `stampede run --scenario steady` for a window mid-run; CPU is read from /proc for the
engine process and for the rest of the command's process tree (the Locust process, which is `stampede run` itself)
over the same window, and divided by the lifecycles the stub ended in it.

`--against DIR` runs a second checkout (e.g. `git archive REV | tar -x -C DIR`) as "before", interleaved with this
one ("after") round by round, their order flipped each round, each against its own fresh stub (this checkout's), so a
busy neighbour on the shared cores hits both alike; medians over the rounds are printed side by side.

    python bench/bench_harness_share.py --against /tmp/stampede-before --rounds 3       # ~3 minutes
    python bench/bench_harness_share.py --concurrency 960 --seconds 15

Every process is bounded in time and stopped at the end; everything targets 127.0.0.1.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_overhead import (  # a sibling script, not a package
    Stub,
    checkouts,
    in_turn,
    side_command,
    stop_process,
    wait_until,
)

REPO = Path(__file__).resolve().parents[1]
STARTUP_S = 15.0


@dataclass(frozen=True, slots=True)
class ShareWindow:
    """One side's measured window: lifecycles the stub ended, and the CPU each process spent meanwhile."""

    side: str
    lifecycles: int
    seconds: float
    engine_cpu_s: float
    locust_cpu_s: float
    load: float

    @property
    def rate(self) -> float:
        return self.lifecycles / self.seconds if self.seconds else 0.0

    def us_per_lifecycle(self, cpu_s: float) -> float:
        return 1e6 * cpu_s / self.lifecycles if self.lifecycles else float("nan")

    @property
    def engine_us(self) -> float:
        return self.us_per_lifecycle(self.engine_cpu_s)

    @property
    def locust_us(self) -> float:
        return self.us_per_lifecycle(self.locust_cpu_s)

    @property
    def total_us(self) -> float:
        return self.us_per_lifecycle(self.engine_cpu_s + self.locust_cpu_s)


def cpu_of(process: psutil.Process) -> float:
    try:
        times = process.cpu_times()
    except psutil.Error:
        return 0.0
    return times.user + times.system


def split_cpu(root: psutil.Process) -> tuple[float, float]:
    """(the engine's CPU seconds, the rest of the tree's): the engine is the child running `harness.engine`."""
    engine = rest = 0.0
    for process in [root, *root.children(recursive=True)]:
        try:
            is_engine = "harness.engine" in process.cmdline()
        except psutil.Error:
            continue
        if is_engine:
            engine += cpu_of(process)
        else:
            rest += cpu_of(process)
    return engine, rest


def measure(side: str, checkout: Path, concurrency: int, warmup_s: float, seconds: float) -> ShareWindow:
    stub = Stub()
    out = Path(tempfile.mkdtemp(prefix=f"bench-share-{side}-"))
    run_s = STARTUP_S + warmup_s + seconds + 5
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    argv, _ = side_command("stampede", stub, concurrency, run_s, out)  # the same run as bench_overhead's
    stderr_path = out / "stderr.txt"  # a file, not a pipe nobody reads while the run goes (a full pipe would stall it)
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(argv, cwd=checkout, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        root = psutil.Process(process.pid)
        try:
            wait_until(lambda: stub.deleted() > 0, STARTUP_S + 30, f"{side}: no lifecycle ended")
        except TimeoutError as exc:
            raise RuntimeError(f"{exc}: {stderr_path.read_text(errors='replace')[-500:]}") from None
        time.sleep(warmup_s)
        (engine0, rest0), count0, t0 = split_cpu(root), stub.deleted(), time.monotonic()
        time.sleep(seconds)
        (engine1, rest1), count1, t1 = split_cpu(root), stub.deleted(), time.monotonic()
        load = os.getloadavg()[0]
        if process.poll() is not None:
            raise RuntimeError(f"{side} ended before its window did: {stderr_path.read_text(errors='replace')[-500:]}")
        return ShareWindow(side, count1 - count0, t1 - t0, engine1 - engine0, rest1 - rest0, load)
    finally:
        stop_process(process, signal.SIGTERM, 60.0)
        stub.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", type=Path, help="another checkout, run interleaved as 'before'")
    parser.add_argument("--concurrency", type=int, default=64, help="lifecycles in flight")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured window per side")
    parser.add_argument("--warmup", type=float, default=4.0, help="seconds after the first delete before measuring")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repetitions (medians are printed)")
    args = parser.parse_args()
    sides = checkouts(args.against, "harness/cli")
    windows: dict[str, list[ShareWindow]] = {side: [] for side, _ in sides}
    for round_, side, checkout in in_turn(sides, args.rounds):
        try:
            window = measure(side, checkout, args.concurrency, args.warmup, args.seconds)
        except RuntimeError as exc:  # one lost window (a run that did not start) is reported, not the whole bench
            print(f"  round {round_ + 1} {side:<6}: no window ({exc})", file=sys.stderr, flush=True)
            continue
        windows[side].append(window)
        print(
            f"  round {round_ + 1} {side:<6}: {window.rate:7.1f} lifecycles/s, engine {window.engine_us:6.1f} us, "
            f"locust {window.locust_us:6.1f} us, total {window.total_us:6.1f} us (load {window.load:.1f})",
            file=sys.stderr,
            flush=True,
        )
    print(f"{args.concurrency} in flight, stub --profile ideal, {args.rounds} round(s) of {args.seconds:g} s, medians")
    print(f"{'side':<7} | {'engine us':>9} {'locust us':>9} {'total us':>9} | {'life/s':>8} | load")
    for side, _ in sides:
        got = windows[side]
        if not got:
            print(f"{side:<7} | no window")
            continue
        loads = [w.load for w in got]
        print(
            f"{side:<7} | {statistics.median(w.engine_us for w in got):>9.1f} "
            f"{statistics.median(w.locust_us for w in got):>9.1f} {statistics.median(w.total_us for w in got):>9.1f} | "
            f"{statistics.median(w.rate for w in got):>8.1f} | {min(loads):.1f}-{max(loads):.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
