"""Find the local Docker daemon's knee: a closed-model ramp of lifecycles in flight through the provider.

Each stage holds N lifecycles in flight (every finished lifecycle is replaced at once, as an RL generator
does) for a fixed time; lifecycles are attributed to the stage they were submitted in. Per stage: the
rate, TTI (create submitted -> first command returned) p50/p90/p99/max, per-phase medians and failures
by kind/phase. `--burst N` instead fires N lifecycles at once (the research notes' "100 at once").

    python bench/bench_docker_ramp.py                          # 20, 40, 80, 160 in flight, 20 s each
    python bench/bench_docker_ramp.py --stages 10 20 40 --hold 30 --json /tmp/ramp.json
    python bench/bench_docker_ramp.py --burst 100
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_docker_lifecycles import SPEC_DEFAULTS, LifecycleTiming, percentile, timed_lifecycle

from providers import create_provider
from providers.base import Provider, SandboxSpec


@dataclass
class StageReport:
    stage: str
    target: int
    hold_s: float
    submitted: int = 0
    ok: int = 0
    rate_ok_per_s: float = 0.0
    tti_p50_s: float = float("nan")
    tti_p90_s: float = float("nan")
    tti_p99_s: float = float("nan")
    tti_max_s: float = float("nan")
    create_p50_s: float = float("nan")
    ready_p50_s: float = float("nan")
    exec_p50_s: float = float("nan")
    terminate_p50_s: float = float("nan")
    failures: dict[str, int] = field(default_factory=dict)


def summarize(
    stage: str,
    target: int,
    hold_s: float,
    timings: list[LifecycleTiming],
    window: tuple[float, float],
    everything: list[LifecycleTiming],
) -> StageReport:
    """Latencies of the lifecycles submitted in the stage; the rate of those that finished ok within it."""
    ok = [t for t in timings if not t.failure]
    ttis = [t.tti_s for t in timings if t.tti_s is not None]
    report = StageReport(stage, target, hold_s, submitted=len(timings), ok=len(ok))
    start, end = window
    finished = sum(1 for t in everything if not t.failure and start <= t.t_end < end)
    report.rate_ok_per_s = finished / (end - start) if end > start else 0.0
    if ttis:
        report.tti_p50_s, report.tti_p90_s = percentile(ttis, 50), percentile(ttis, 90)
        report.tti_p99_s, report.tti_max_s = percentile(ttis, 99), max(ttis)
    if ok:
        report.create_p50_s = percentile([t.create_s for t in ok], 50)
        report.ready_p50_s = percentile([t.ready_s for t in ok], 50)
        report.exec_p50_s = percentile([t.exec_s for t in ok], 50)
        report.terminate_p50_s = percentile([t.terminate_s for t in ok], 50)
    report.failures = dict(Counter(t.failure for t in timings if t.failure))
    return report


def print_table(reports: list[StageReport]) -> None:
    print(
        f"{'stage':>8} {'in flight':>9} {'subm':>5} {'ok/s':>6} {'TTI p50':>8}"
        f" {'p90':>7} {'p99':>7} {'max':>7}"
        f" {'create':>7} {'ready':>7} {'exec2':>7} {'rm':>7}  failures (kind/phase)"
    )
    for r in reports:
        print(
            f"{r.stage:>8} {r.target:>9} {r.submitted:>5} {r.rate_ok_per_s:6.2f} {r.tti_p50_s:7.2f}s"
            f" {r.tti_p90_s:6.2f}s {r.tti_p99_s:6.2f}s {r.tti_max_s:6.2f}s {r.create_p50_s:6.2f}s"
            f" {r.ready_p50_s:6.2f}s {r.exec_p50_s:6.2f}s {r.terminate_p50_s:6.2f}s  {r.failures or '-'}"
        )


async def ramp(
    provider: Provider, run_id: str, stages: list[int], hold_s: float, ready_timeout: float
) -> list[StageReport]:
    """Closed model: grow the worker pool at each stage boundary; each worker loops lifecycles."""
    current = {"stage": 0}
    per_stage: list[list[LifecycleTiming]] = [[] for _ in stages]
    counter = iter(range(10**9))
    stop = asyncio.Event()

    async def worker() -> None:
        while not stop.is_set():
            stage = current["stage"]
            spec = SandboxSpec(run_id=run_id, rollout_id=f"r{next(counter)}", **SPEC_DEFAULTS)  # type: ignore[arg-type]
            per_stage[stage].append(await timed_lifecycle(provider, spec, ready_timeout=ready_timeout))

    workers: list[asyncio.Task[None]] = []
    windows = []
    for index, target in enumerate(stages):
        current["stage"] = index
        workers += [asyncio.create_task(worker()) for _ in range(target - len(workers))]
        started = time.monotonic()
        await asyncio.sleep(hold_s)
        windows.append((started, time.monotonic()))
        print(
            f"  stage {index + 1}/{len(stages)} ({target} in flight): {len(per_stage[index])} submitted",
            flush=True,
        )
    stop.set()
    await asyncio.gather(*workers)  # drain: the last lifecycles finish (bounded by the phase timeouts)
    everything = [timing for timings in per_stage for timing in timings]
    return [
        summarize(f"{i + 1}", t, hold_s, per_stage[i], windows[i], everything) for i, t in enumerate(stages)
    ]


async def burst(provider: Provider, run_id: str, count: int, ready_timeout: float) -> list[StageReport]:
    started = time.monotonic()
    timings = await asyncio.gather(
        *(  # every lifecycle of the burst is in the window
            timed_lifecycle(
                provider,
                SandboxSpec(run_id=run_id, rollout_id=f"b{i}", **SPEC_DEFAULTS),  # type: ignore[arg-type]
                ready_timeout=ready_timeout,
            )
            for i in range(count)
        )
    )
    window = (started, time.monotonic() + 1e-9)
    return [summarize("burst", count, 0.0, list(timings), window, list(timings))]


async def run(args: argparse.Namespace) -> int:
    options = {"image": args.image} if args.image else {}
    provider = create_provider("docker", options)
    try:
        await provider.preflight()
    except Exception as exc:  # noqa: BLE001 - one clear line
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    run_id = f"ramp-{uuid.uuid4().hex[:8]}"
    print(f"docker ramp {run_id}: {provider.versions()}")
    try:
        if args.burst:
            reports = await burst(provider, run_id, args.burst, args.ready_timeout)
        else:
            reports = await ramp(provider, run_id, args.stages, args.hold, args.ready_timeout)
    finally:
        await provider.cleanup(run_id)
        await provider.aclose()
    print_table(reports)
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in reports], indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--stages", type=int, nargs="+", default=[20, 40, 80, 160], help="lifecycles in flight"
    )
    parser.add_argument("--hold", type=float, default=20.0, help="seconds per stage")
    parser.add_argument("--burst", type=int, default=0, help="fire this many at once instead of a ramp")
    parser.add_argument("--ready-timeout", type=float, default=120.0, help="wait_ready deadline (s)")
    parser.add_argument("--image", default="", help="image (default: the offline stampede busybox image)")
    parser.add_argument("--json", default="", help="also write the stage reports here")
    args = parser.parse_args(argv)
    if args.burst < 0 or min(args.stages) < 1 or args.stages != sorted(args.stages) or args.hold <= 0:
        parser.error("stages must be positive and non-decreasing; hold positive; burst >= 0")
    return asyncio.run(run(args))


if __name__ == "__main__":
    raise SystemExit(main())
