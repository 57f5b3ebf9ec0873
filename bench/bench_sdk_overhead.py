"""Through each vendor's own SDK, does stampede cost more than that SDK's bare loop? (issue #36, Deliver 1)

Two sides per vendor, each against its own fresh local plane (`python -m providers.sim.<vendor>.serve --profile
ideal`, standalone, so its CPU is never the client's), at the same number of lifecycles in flight:

    stampede   `python -m harness.cli run --provider VENDOR --base-url ... --scenario steady --commands true`:
               Locust, the engine process, the vendor's SDK inside the adapter, parquet shards, everything
    bare       `bench/baselines/sdk_<vendor>.py`: a plain asyncio loop on that SDK alone, as its docs show (one
               client; create -> wait until running, the SDK's own way -> `true` -> terminate)

What is counted, as in `bench_overhead.py` (whose window and CPU accounting this reuses): lifecycles per second
are the plane's own count of terminated sandboxes over a window that starts `--warmup` seconds after the first
one and lasts `--seconds` (each stretched, up to 45 s, to one and two times the wait for that first end: where
one lifecycle outlasts a short window, a closed loop ends in waves); client CPU is the CPU of the side's process tree (every client process: for stampede, Locust and its
engine; never the plane) in that same window, per lifecycle. TTI (submit -> the command's answer) is over the
lifecycles whose command answered inside the window; "client adds" is that TTI minus the plane's own record of the same
sandbox (accept -> first command done), per sandbox: what the client side puts on top of the vendor.

Rounds interleave the sides (their order flips each round) so a busy neighbour on the shared cores hits both
alike; the table prints each figure's median over rounds and the ratio stampede / bare, and the load average
seen around the windows.

    python bench/bench_sdk_overhead.py                                  # 8 vendors x 64,960 x 1 round, ~25 min
    python bench/bench_sdk_overhead.py --vendors e2b --concurrency 960 --rounds 3 --seconds 10

Every process is bounded in time and stopped at the end; everything targets 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_overhead import Window, stop_process, tree_cpu, wait_until  # noqa: E402

from foundation.quantiles import nearest_rank  # noqa: E402

BASELINES = REPO / "bench" / "baselines"
VENDORS = ("prime", "modal", "e2b", "daytona", "runloop", "vercel", "coreweave", "agent-sandbox")
SIDES = ("stampede", "bare")
PLANE_START_S = 60.0
STOP_S = 90.0
FIRST_END_S = 60.0  # the longest a side may take to its first terminated sandbox
MAX_WINDOW_S = 45.0  # the longest warm-up or window a slow side may stretch them to


class Plane:
    """A fresh ideal local plane of one vendor on a free loopback port, read through its own counters."""

    def __init__(self, vendor: str) -> None:
        self.vendor = vendor
        self.token = secrets.token_urlsafe(16)
        env = {**os.environ, "PYTHONPATH": str(REPO), "STAMPEDE_SERVE_TOKEN": self.token}
        argv = [sys.executable, "-m", f"providers.sim.{vendor.replace('-', '_')}.serve", "--profile", "ideal"]
        argv += ["--port", "0", "--exit-on-stdin-eof"]
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO, env=env
        )
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], PLANE_START_S)
        line = self.process.stdout.readline() if ready else b""
        if not line:
            self.stop()
            raise RuntimeError(f"the local {vendor} plane printed no ready line within {PLANE_START_S:g} s")
        self.ready: dict[str, Any] = json.loads(line)
        self.url = str(self.ready["url"]).rstrip("/")
        self.stampede_base = str(self.ready.get("truth_url") or self.url).rstrip("/") + "/api/v1/_stampede"

    def _get(self, what: str, timeout: float = 10.0) -> Any:
        request = urllib.request.Request(
            f"{self.stampede_base}/{what}", headers={"Authorization": f"Bearer {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())

    def terminated(self) -> int:
        return int(self._get("stats")["stats"]["ended"].get("TERMINATED", 0))

    def truth(self) -> dict[str, float]:
        """Sandbox id -> the plane's own accept -> first command done, seconds (only sandboxes that ran one)."""
        rows = self._get("truth", timeout=60.0)["sandboxes"]
        return {
            str(row["id"]): float(row["first_exec_done_wall"]) - float(row["created_wall"])
            for row in rows
            if row.get("first_exec_done_wall") is not None and row.get("created_wall") is not None
        }

    def stop(self) -> None:
        stop_process(self.process, None, 10.0)


def stampede_argv(plane: Plane, concurrency: int, run_s: float, work: Path) -> list[str]:
    """`stampede run` against the plane, the way a user points it at a vendor: URL, token, the vendor's options."""
    options = [w for k, v in plane.ready.get("provider_options", {}).items() for w in ("--provider-option", f"{k}={v}")]
    return [
        *(sys.executable, "-m", "harness.cli", "run", "--provider", plane.vendor, *options),
        *("--base-url", plane.url, f"--token={plane.token}", "--scenario", "steady", "--users", str(concurrency)),
        *("--spawn-rate", "2000", "--hold", str(run_s), "--commands", "true", "--progress-interval", "0"),
        *("--out", str(work), "--run-id", "bench", "--stop-timeout", "5"),
    ]


def bare_env(plane: Plane, work: Path) -> dict[str, str]:
    """The environment each SDK reads its endpoint and credentials from, as its docs tell a user to set it."""
    env = {**os.environ, **{str(k): str(v) for k, v in plane.ready.get("env", {}).items()}}
    if plane.vendor == "prime":
        env.update(PRIME_API_KEY=plane.token, PRIME_API_BASE_URL=plane.url, HOME=str(work))  # auth cache in work/
    elif plane.vendor == "modal":
        env.update(
            MODAL_SERVER_URL=plane.url,
            MODAL_TOKEN_ID=str(plane.ready["token_id"]),
            MODAL_TOKEN_SECRET=plane.token,
            MODAL_SANDBOX_V2="1",  # the backend the modal provider uses by default
        )
    elif plane.vendor == "e2b":
        env["E2B_MAX_CONNECTIONS"] = "1000"  # the SDK's own knob; its 200 queues a 960-wide loop over plain http
    elif plane.vendor == "vercel":  # the SDK reads no URL from the environment: sdk_vercel.py's own variable
        env["VERCEL_SANDBOX_API_URL"] = str(plane.ready["base_url"])
    return env


@dataclass
class Measured:
    """One side's window, and the TTIs of the lifecycles submitted inside it."""

    vendor: str
    window: Window
    tti_s: list[float]
    adds_s: list[float]  # TTI minus the plane's accept -> first command done, per sandbox
    errors: int
    load: tuple[float, float]  # 1-minute load average at the window's start and end
    notes: list[str] = field(default_factory=list)


def lifecycles_in(side: str, work: Path, since: float, until: float) -> tuple[list[tuple[str, float]], int]:
    """(sandbox id, TTI s) of the ok lifecycles whose command answered in [since, until] (epoch s), and the side's
    failures. By the answer, not the submit: a side stopped at the window's end may cancel what it had in flight."""
    if side == "bare":
        lines = [
            json.loads(line) for line in (work / "bare.json").read_text().splitlines() if line.endswith(("]", "}"))
        ]
        rows = [
            (str(sid), float(tti))
            for t, tti, sid in (x for x in lines if isinstance(x, list))
            if since <= t + tti <= until
        ]
        return rows, sum(int(x["errors"]) for x in lines if isinstance(x, dict))
    from harness.results.read.dataset import load_rollouts

    frame = load_rollouts(work / "bench")
    answered = frame["t_submit"].astype(float) + frame["tti_s"]  # the reader answers epoch seconds
    inside = frame[(answered >= since) & (answered <= until)]
    ok = inside[(inside["outcome"] == "ok") & inside["tti_s"].notna()]
    failed = int((frame["outcome"] == "failed").sum()) if "outcome" in frame else 0
    return list(zip(ok["sandbox_id"].astype(str), ok["tti_s"].astype(float), strict=True)), failed


def measure(vendor: str, side: str, concurrency: int, warmup_s: float, seconds: float) -> Measured:
    plane = Plane(vendor)
    work = Path(tempfile.mkdtemp(prefix=f"bench-sdk-{vendor}-{side}-"))
    run_s = FIRST_END_S + 2 * MAX_WINDOW_S + warmup_s + seconds  # a bound only: the window's end stops the side
    if side == "stampede":
        argv, env = stampede_argv(plane, concurrency, run_s, work), {**os.environ, "PYTHONPATH": str(REPO)}
    else:
        argv = [sys.executable, str(BASELINES / f"sdk_{vendor.replace('-', '_')}.py")]
        argv += ["--concurrency", str(concurrency), "--seconds", str(run_s), "--out", str(work / "bare.json")]
        env = bare_env(plane, work)
    started = time.monotonic()
    process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        root = psutil.Process(process.pid)
        wait_until(
            lambda: plane.terminated() > 0 or process.poll() is not None, FIRST_END_S, f"{vendor} {side}: no end"
        )
        if process.poll() is not None:
            raise RuntimeError(f"{vendor} {side} ended early: {process.stderr.read().decode()[-800:]}")  # type: ignore[union-attr]
        # One lifecycle can outlast a short window when the machine is saturated (960 in flight at 80/s: 12 s),
        # and a closed loop started all at once ends in waves: skip the first wave, and span at least two more.
        first_end_s = time.monotonic() - started
        warmup_s, seconds = (min(MAX_WINDOW_S, max(x, n * first_end_s)) for x, n in ((warmup_s, 1), (seconds, 2)))
        time.sleep(warmup_s)
        load0 = os.getloadavg()[0]
        count0, cpu0, t0, wall0 = plane.terminated(), tree_cpu(root), time.monotonic(), time.time()
        time.sleep(seconds)
        count1, cpu1, t1, wall1 = plane.terminated(), tree_cpu(root), time.monotonic(), time.time()
        load1 = os.getloadavg()[0]
        if process.poll() is not None:
            raise RuntimeError(f"{vendor} {side} ended before its window did: {process.stderr.read().decode()[-800:]}")  # type: ignore[union-attr]
        stop_process(process, signal.SIGTERM, STOP_S)  # both sides stop on it and write their records
        window = Window(side, concurrency, count1 - count0, t1 - t0, cpu1 - cpu0)
        rows, errors = lifecycles_in(side, work, wall0, wall1)
        vendor_tti = plane.truth()
        adds = [tti - vendor_tti[sid] for sid, tti in rows if sid in vendor_tti]
        notes = [] if len(adds) == len(rows) else [f"{len(rows) - len(adds)} of {len(rows)} not in the plane's truth"]
        return Measured(vendor, window, [tti for _, tti in rows], adds, errors, (load0, load1), notes)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        plane.stop()


def quantile(values: list[float], q: float) -> float:
    return nearest_rank(sorted(values), q) if values else float("nan")


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vendors", default=",".join(VENDORS), help=f"comma-separated ({','.join(VENDORS)})")
    parser.add_argument("--concurrency", default="64,960", help="comma-separated in-flight levels")
    parser.add_argument("--seconds", type=float, default=15.0, help="measured window per side")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds after the first end before measuring")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved repetitions (medians are printed)")
    args = parser.parse_args()
    vendors = [v for v in args.vendors.split(",") if v]
    unknown = [v for v in vendors if not (BASELINES / f"sdk_{v.replace('-', '_')}.py").is_file()]
    if unknown or args.rounds < 1 or args.seconds <= 0:
        parser.error(f"no baseline for {', '.join(unknown)}" if unknown else "--rounds and --seconds must be positive")
    levels = [int(level) for level in args.concurrency.split(",") if level]
    results: dict[tuple[str, int, str], list[Measured]] = {}
    for level in levels:
        for round_no in range(args.rounds):
            for vendor in vendors:
                for side in SIDES if round_no % 2 == 0 else tuple(reversed(SIDES)):
                    try:
                        m = measure(vendor, side, level, args.warmup, args.seconds)
                    except (RuntimeError, TimeoutError, OSError) as exc:  # a stalled side: said, and the run goes on
                        print(f"  {vendor:<8} {side:<9} {level:>4} in flight: no window ({exc})", file=sys.stderr)
                        continue
                    results.setdefault((vendor, level, side), []).append(m)
                    print(
                        f"  {vendor:<8} {side:<9} {level:>4} in flight, {m.window.seconds:4.1f} s: {m.window.rate:7.1f}/s, "
                        f"{m.window.cpu_ms_per_lifecycle:6.2f} CPU-ms each, TTI p50 {1000 * quantile(m.tti_s, 0.5):6.1f}"
                        f" ms, adds p50 {1000 * quantile(m.adds_s, 0.5):6.1f} p99 {1000 * quantile(m.adds_s, 0.99):6.1f}"
                        f" ms, {m.errors} failed, load {m.load[0]:.1f}->{m.load[1]:.1f} {'; '.join(m.notes)}",
                        file=sys.stderr,
                        flush=True,
                    )
    loads = [x for ms in results.values() for m in ms for x in m.load] or [float("nan")]
    print(
        f"windows of at least {args.seconds:g} s after at least {args.warmup:g} s warm-up, {args.rounds} round(s), ideal planes; "
        f"1-min load average {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores"
    )
    print("ratio = stampede / bare; adds = TTI minus the plane's own accept->first command done (ms)")
    print(
        f"{'vendor':<8} {'inflight':>8} | {'life/s st':>9} {'bare':>7} {'ratio':>6} | {'CPU-ms st':>9} {'bare':>6} "
        f"{'ratio':>6} | {'TTI p50 st':>10} {'bare':>6} | {'adds p50 st':>11} {'bare':>6} | {'adds p99 st':>11} "
        f"{'bare':>6} | failed"
    )
    for level in levels:
        for vendor in vendors:
            st, bare = results.get((vendor, level, "stampede"), []), results.get((vendor, level, "bare"), [])

            def med(ms: list[Measured], key: Any) -> float:
                return median([key(m) for m in ms])

            rate = (med(st, lambda m: m.window.rate), med(bare, lambda m: m.window.rate))
            cpu = (med(st, lambda m: m.window.cpu_ms_per_lifecycle), med(bare, lambda m: m.window.cpu_ms_per_lifecycle))
            p50 = tuple(med(ms, lambda m: 1000 * quantile(m.tti_s, 0.5)) for ms in (st, bare))
            a50 = tuple(med(ms, lambda m: 1000 * quantile(m.adds_s, 0.5)) for ms in (st, bare))
            a99 = tuple(med(ms, lambda m: 1000 * quantile(m.adds_s, 0.99)) for ms in (st, bare))
            failed = f"{sum(m.errors for m in st)}/{sum(m.errors for m in bare)}"
            print(
                f"{vendor:<8} {level:>8} | {rate[0]:>9.1f} {rate[1]:>7.1f} {ratio(*rate):>5.2f}x | {cpu[0]:>9.2f} "
                f"{cpu[1]:>6.2f} {ratio(*cpu):>5.2f}x | {p50[0]:>10.1f} {p50[1]:>6.1f} | {a50[0]:>11.1f} {a50[1]:>6.1f} "
                f"| {a99[0]:>11.1f} {a99[1]:>6.1f} | {failed}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
