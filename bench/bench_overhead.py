"""Is the harness ever the bottleneck it measures? Stampede against two baselines making the same calls.

Three sides, each against its own fresh ideal stub (`python -m providers.sim.prime.serve --profile ideal`),
at the same number of lifecycles in flight (create -> poll until RUNNING -> one command -> delete; the calls
are listed in `bench/baselines/lifecycle_http.py`):

    stampede   `python -m harness.cli run --scenario steady` through the `stub` provider: Locust users, the
               Unix-socket bridge, the engine process, parquet shards, live stats, everything
    bare       `bench/baselines/bare_loop.py`: asyncio + aiohttp, nothing else
    locust     `bench/baselines/locust_fasthttp.py`: a plain Locust FastHttpUser

The vendor counts: lifecycles per second are the stub's own count of deleted sandboxes over a window that
starts `--warmup` seconds after the first delete, and client CPU is the CPU the side's processes (for
stampede: the Locust process and its engine; never the stub) spent in that same window, per lifecycle.

    python bench/bench_overhead.py                         # 64 and 960 in flight, 15 s windows: ~3 minutes
    python bench/bench_overhead.py --concurrency 64 --seconds 30

Every process is bounded in time and killed at the end; everything targets 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
BASELINES = REPO / "bench" / "baselines"
SIDES = ("stampede", "bare", "locust")


@dataclass(frozen=True, slots=True)
class Window:
    side: str
    concurrency: int
    lifecycles: int
    seconds: float
    cpu_s: float

    @property
    def rate(self) -> float:
        return self.lifecycles / self.seconds if self.seconds else 0.0

    @property
    def cpu_ms_per_lifecycle(self) -> float:
        return 1000.0 * self.cpu_s / self.lifecycles if self.lifecycles else float("nan")


class Stub:
    """A fresh ideal stub on a free loopback port, read through its own counters."""

    def __init__(self) -> None:
        self.token = secrets.token_urlsafe(16)
        argv = [
            sys.executable,
            "-m",
            "providers.sim.prime.serve",
            "--profile",
            "ideal",
            "--port",
            "0",
            f"--token={self.token}",
            "--exit-on-stdin-eof",
        ]
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO
        )
        assert self.process.stdout is not None
        self.url = str(json.loads(self.process.stdout.readline())["url"]).rstrip("/")

    def deleted(self) -> int:
        request = urllib.request.Request(
            f"{self.url}/api/v1/_stampede/stats", headers={"Authorization": f"Bearer {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            stats = json.loads(response.read())["stats"]
        return int(stats["ended"].get("TERMINATED", 0))

    def stop(self) -> None:
        stop_process(self.process, None, 10.0)


def side_command(side: str, stub: Stub, concurrency: int, run_s: float, work: Path) -> tuple[list[str], dict]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if side == "stampede":
        return [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            "--scenario",
            "steady",
            "--users",
            str(concurrency),
            "--spawn-rate",
            "2000",
            "--hold",
            str(run_s),
            "--provider",
            "stub",
            "--base-url",
            stub.url,
            f"--token={stub.token}",  # one word: a random token may begin with "-"
            "--commands",
            "true",
            "--progress-interval",
            "0",
            "--out",
            str(work),
            "--stop-timeout",
            "5",
        ], env
    if side == "bare":
        return [
            sys.executable,
            str(BASELINES / "bare_loop.py"),
            "--url",
            stub.url,
            f"--token={stub.token}",
            "--concurrency",
            str(concurrency),
            "--seconds",
            str(run_s),
            "--out",
            str(work / "bare.json"),
        ], env
    env.update(BENCH_URL=stub.url, BENCH_TOKEN=stub.token, BENCH_OUT=str(work / "locust.json"))
    return [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(BASELINES / "locust_fasthttp.py"),
        "--headless",
        "-u",
        str(concurrency),
        "-r",
        "2000",
        "-t",
        f"{run_s:.0f}s",
        "--stop-timeout",
        "5",
        "--only-summary",
        "--loglevel",
        "ERROR",
    ], env


def tree_cpu(root: psutil.Process) -> float:
    """CPU seconds of a process and its descendants that are alive now."""
    total = 0.0
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def stop_process(process: subprocess.Popen[bytes], sig: int | None, grace_s: float) -> None:
    """`sig` (None: its stdin closed, which a plane's `--exit-on-stdin-eof` ends on), then a kill if the process has
    not ended within `grace_s`: every side and plane ends before the next starts."""
    if sig is None:
        if process.stdin is not None:
            process.stdin.close()
    elif process.poll() is None:
        process.send_signal(sig)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def checkouts(against: Path | None, needs: str) -> list[tuple[str, Path]]:
    """The sides of a before/after bench: 'after' (this checkout) and, given `--against`, 'before' (that one),
    refused in one line with exit 2 when it has no `needs` folder."""
    if against is None:
        return [("after", REPO)]
    if not (against / needs).is_dir():
        print(f"error: --against {against}: not a stampede checkout (no {needs})", file=sys.stderr)
        raise SystemExit(2)
    return [("after", REPO), ("before", against.resolve())]


def in_turn(sides: list[tuple[str, Path]], rounds: int) -> Iterator[tuple[int, str, Path]]:
    """(round, side, checkout): every side once a round, the order flipped each round, so a busy neighbour on the
    shared cores hits both alike."""
    for round_ in range(rounds):
        for side, checkout in sides if round_ % 2 else list(reversed(sides)):
            yield round_, side, checkout


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def measure(side: str, concurrency: int, warmup_s: float, seconds: float, startup_s: float) -> Window:
    stub = Stub()
    work = Path(tempfile.mkdtemp(prefix=f"bench-overhead-{side}-"))
    run_s = startup_s + warmup_s + seconds + 5
    argv, env = side_command(side, stub, concurrency, run_s, work)
    process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        root = psutil.Process(process.pid)
        wait_until(lambda: stub.deleted() > 0, startup_s + 30, f"{side}: no lifecycle ended")
        time.sleep(warmup_s)
        count0, cpu0, t0 = stub.deleted(), tree_cpu(root), time.monotonic()
        time.sleep(seconds)
        count1, cpu1, t1 = stub.deleted(), tree_cpu(root), time.monotonic()
        if process.poll() is not None:
            said = process.stderr.read().decode() if process.stderr is not None else ""
            raise RuntimeError(f"{side} ended before its window did: {said[-500:]}")
        return Window(side, concurrency, count1 - count0, t1 - t0, cpu1 - cpu0)
    finally:
        stop_process(process, signal.SIGTERM, 60.0)
        stub.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="64,960", help="comma-separated in-flight levels")
    parser.add_argument("--seconds", type=float, default=15.0, help="measured window per side")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds after the first delete before measuring")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved repetitions (the median is printed)")
    args = parser.parse_args()
    levels = [int(level) for level in args.concurrency.split(",") if level]
    results: dict[tuple[str, int], list[Window]] = {}
    for level in levels:
        for _ in range(args.rounds):
            for side in SIDES:  # interleaved, so a noisy neighbour hits every side alike
                window = measure(side, level, args.warmup, args.seconds, startup_s=15.0)
                results.setdefault((side, level), []).append(window)
                print(
                    f"  {side:<9} {level:>5} in flight: {window.rate:8.1f} lifecycles/s, "
                    f"{window.cpu_ms_per_lifecycle:6.2f} client CPU-ms each",
                    file=sys.stderr,
                    flush=True,
                )

    def median(side: str, level: int, key: Callable[[Window], float]) -> float:
        values = sorted(key(w) for w in results[(side, level)])
        return values[len(values) // 2]

    print(
        f"{'in flight':>9} | {'stampede/s':>10} {'bare/s':>8} {'locust/s':>8} | {'vs bare':>7} {'vs locust':>9} | "
        f"{'CPU-ms stampede':>15} {'bare':>6} {'locust':>6} | {'CPU vs bare':>11}"
    )
    for level in levels:
        rate = {side: median(side, level, lambda w: w.rate) for side in SIDES}
        cpu = {side: median(side, level, lambda w: w.cpu_ms_per_lifecycle) for side in SIDES}
        print(
            f"{level:>9} | {rate['stampede']:>10.1f} {rate['bare']:>8.1f} {rate['locust']:>8.1f} | "
            f"{rate['stampede'] / rate['bare']:>6.2f}x {rate['stampede'] / rate['locust']:>8.2f}x | "
            f"{cpu['stampede']:>15.2f} {cpu['bare']:>6.2f} {cpu['locust']:>6.2f} | "
            f"{cpu['stampede'] / cpu['bare']:>10.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
