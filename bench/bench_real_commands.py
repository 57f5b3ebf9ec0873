"""What a real command costs against a modelled one: `echo` through `VendorSimulator.exec`, side by side.

Both sides run in this process on a live clock (time scale 1) with the `ideal` profile and its 1 ms drawn
overhead set to 0, so what is measured is the command path itself: modelled (the in-process shell) against real
(`isolated_shell.py`: nsenter into the sandbox's bubblewrap holder, env, setsid, prlimit, bash). Two figures per
side, in interleaved rounds (the median is printed):

    latency      one command after another in one sandbox: p50 / p99 ms per command
    throughput   `--concurrency` commands in flight over as many sandboxes for `--seconds`: commands/s

The first real command of a sandbox also starts its holder (a bwrap namespace); that is reported on its own.

    python bench/bench_real_commands.py                 # 200 sequential, 16 in flight for 5 s, 3 rounds
    python bench/bench_real_commands.py --rounds 1 --seconds 3

Needs bubblewrap (`apt-get install bubblewrap`). Bounded: every phase has a fixed count or a fixed time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from providers.sim.core.clock import LoopClock
from providers.sim.core.execution.isolated_shell import MISSING, IsolatedShell
from providers.sim.core.profile import load_profile
from providers.sim.core.simulator import CreateRequest, SandboxStatus, VendorSimulator

COMMAND = "echo hello"


async def _running(sim: VendorSimulator, n: int) -> list[str]:
    ids = [sim.create(CreateRequest(image="bench")).id for _ in range(n)]
    deadline = time.monotonic() + 60
    while any(sim.get(i).status != SandboxStatus.RUNNING for i in ids):
        if time.monotonic() > deadline:
            raise SystemExit("sandboxes did not start within 60 s")
        await asyncio.sleep(0.005)
    return ids


async def one_side(mode: str, sequential: int, concurrency: int, seconds: float) -> dict[str, float]:
    profile = load_profile("ideal").with_overrides({"sandbox.commands": mode, "exec.overhead_median_s": 0.0})
    sim = VendorSimulator(profile, seed=0, clock=LoopClock(1.0))
    try:
        ids = await _running(sim, max(concurrency, 1))
        first = time.perf_counter()
        await sim.exec(ids[0], COMMAND, timeout_s=60)  # real: starts the sandbox's holder
        first_ms = (time.perf_counter() - first) * 1000
        latencies: list[float] = []
        for _ in range(sequential):
            began = time.perf_counter()
            out = await sim.exec(ids[0], COMMAND, timeout_s=60)
            latencies.append((time.perf_counter() - began) * 1000)
            assert out.stdout == "hello\n", out
        for sandbox_id in ids[1:]:
            await sim.exec(sandbox_id, COMMAND, timeout_s=60)  # holders up before the throughput window
        count = 0
        stop_at = time.perf_counter() + seconds

        async def worker(sandbox_id: str) -> None:
            nonlocal count
            while time.perf_counter() < stop_at:
                await sim.exec(sandbox_id, COMMAND, timeout_s=60)
                count += 1

        began = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in ids))
        elapsed = time.perf_counter() - began
        latencies.sort()
        return {
            "first_ms": first_ms,
            "p50_ms": latencies[len(latencies) // 2],
            "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
            "per_s": count / elapsed,
        }
    finally:
        sim.close()


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequential", type=int, default=200, help="commands one after another (default 200)")
    parser.add_argument("--concurrency", type=int, default=16, help="commands in flight (default 16)")
    parser.add_argument("--seconds", type=float, default=5.0, help="throughput window per side (default 5)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median is printed (default 3)")
    args = parser.parse_args()
    if not IsolatedShell.available():
        print(f"bench_real_commands: {MISSING}", file=sys.stderr)
        return 2
    results: dict[str, list[dict[str, float]]] = {"modelled": [], "real": []}
    for _ in range(args.rounds):
        for mode in ("modelled", "real"):
            results[mode].append(await one_side(mode, args.sequential, args.concurrency, args.seconds))
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs, `{COMMAND}`")
    print(
        f"{'side':>9} | {'first ms':>8} | {'p50 ms':>7} {'p99 ms':>7} | {'commands/s':>10} ({args.concurrency} in flight)"
    )
    for mode, rounds in results.items():
        med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
        print(f"{mode:>9} | {med['first_ms']:8.2f} | {med['p50_ms']:7.3f} {med['p99_ms']:7.3f} | {med['per_s']:10.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
