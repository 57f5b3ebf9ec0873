"""Docker lifecycles per second: stampede's provider on one asyncio loop vs the docker CLI through xargs -P.

One lifecycle = create + start (until running), exec `true`, exec `echo hi`, force-remove; same image,
same limits and isolation, same count, same concurrency on both sides, measured one after the other in
one run (the order alternates between concurrency levels). Prints both rates and stampede / CLI.

    python bench/bench_docker_lifecycles.py                 # 8 and 20 in flight, 120 lifecycles each
    python bench/bench_docker_lifecycles.py -c 8 20 40 -n 200

Side (a) is `drive_provider`; any coroutine with the `Driver` signature can replace it (the harness engine
will), and `main` measures whatever `make_driver` returns. Needs a daemon (scripts/ensure-docker).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from providers import create_provider
from providers.base import Phase, Provider, SandboxSpec
from providers.docker import DEFAULT_CAP_DROP, DockerProvider

COMMANDS: tuple[tuple[str, ...], ...] = (("true",), ("echo", "hi"))
SPEC_DEFAULTS = {"cpu": 1.0, "memory_mb": 256, "pids_limit": 256, "lifetime_s": 600.0}


@dataclass
class LifecycleTiming:
    """One lifecycle, timed inside the loop (monotonic): phases, TTI, and the first failure if any."""

    t_submit: float
    create_s: float = 0.0
    ready_s: float = 0.0
    exec_s: float = 0.0
    terminate_s: float = 0.0
    tti_s: float | None = None  # create submitted -> first command returned
    failure: str = ""  # "kind/phase"
    t_end: float = 0.0  # when the lifecycle (terminate included) finished


@dataclass
class DriveResult:
    side: str
    count: int
    concurrency: int
    wall_s: float
    failures: Counter[str] = field(default_factory=Counter)
    timings: list[LifecycleTiming] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return (self.count - sum(self.failures.values())) / self.wall_s if self.wall_s else 0.0


Driver = Callable[[str, int, int], Awaitable[DriveResult]]
"""(run_id, count, concurrency) -> result: drives `count` lifecycles with `concurrency` in flight."""


async def timed_lifecycle(
    provider: Provider,
    spec: SandboxSpec,
    commands: Sequence[Sequence[str]] = COMMANDS,
    ready_timeout: float = 300.0,
    exec_timeout: float = 120.0,
) -> LifecycleTiming:
    """create -> wait_ready -> each command -> terminate, timed per phase; failures classified, not raised."""
    clock = time.monotonic
    timing = LifecycleTiming(t_submit=clock())
    phase, ref = Phase.CREATE, None
    try:
        ref = await provider.create(spec)
        timing.create_s = clock() - timing.t_submit
        phase, started = Phase.READY, clock()
        await provider.wait_ready(ref, ready_timeout)
        timing.ready_s = clock() - started
        phase, started = Phase.EXEC, clock()
        for argv in commands:
            await provider.exec(ref, argv, exec_timeout)
            if timing.tti_s is None:
                timing.tti_s = clock() - timing.t_submit
        timing.exec_s = clock() - started
    except Exception as exc:  # noqa: BLE001 - every failure is classified and counted
        timing.failure = f"{provider.classify(exc, phase)}/{phase}"
    finally:
        if ref is not None:
            started = clock()
            try:
                await provider.terminate(ref)
            except Exception as exc:  # noqa: BLE001
                timing.failure = timing.failure or f"{provider.classify(exc, Phase.TERMINATE)}/terminate"
            timing.terminate_s = clock() - started
        timing.t_end = clock()
    return timing


def make_driver(provider: Provider) -> Driver:
    """Side (a): the provider driven directly by an asyncio loop (swap in the harness engine here)."""

    async def drive_provider(run_id: str, count: int, concurrency: int) -> DriveResult:
        queue = iter(range(count))
        timings: list[LifecycleTiming] = []

        async def worker() -> None:
            for index in queue:
                spec = SandboxSpec(run_id=run_id, rollout_id=f"p{index}", **SPEC_DEFAULTS)  # type: ignore[arg-type]
                timings.append(await timed_lifecycle(provider, spec))

        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.monotonic() - started
        failures = Counter(t.failure for t in timings if t.failure)
        return DriveResult("stampede", count, concurrency, wall, failures, timings)

    return drive_provider


def cli_lifecycle_script(docker: str, image: str, run_id: str) -> str:
    """The same lifecycle with the docker CLI: run -d (create+start), exec x2, rm -f. `$1` is the index."""
    caps = " ".join(f"--cap-drop {cap}" for cap in DEFAULT_CAP_DROP)
    memory = f"{SPEC_DEFAULTS['memory_mb']}m"
    run = (
        f"{docker} run -d --name stampede-{run_id}-c$1 "
        f"--label stampede-run={run_id} --label stampede-rollout=c$1 "
        f"--network none {caps} --security-opt no-new-privileges --init --log-driver none "
        f"--cpus {SPEC_DEFAULTS['cpu']} --memory {memory} --memory-swap {memory} "
        f"--pids-limit {SPEC_DEFAULTS['pids_limit']} --entrypoint sleep {image} 600"
    )
    return (
        f"cid=$({run}) || exit 11; "
        f"{docker} exec $cid true >/dev/null || {{ {docker} rm -f $cid >/dev/null; exit 12; }}; "
        f"{docker} exec $cid echo hi >/dev/null || {{ {docker} rm -f $cid >/dev/null; exit 12; }}; "
        f"{docker} rm -f $cid >/dev/null || exit 13"
    )


async def drive_cli(run_id: str, count: int, concurrency: int, image: str, max_seconds: float) -> DriveResult:
    """Side (b): `seq N | xargs -P C sh -c '<lifecycle>'`; a lifecycle's failure is its exit status."""
    docker = shutil.which("docker")
    if docker is None:
        raise SystemExit("bench: the docker command line is not installed (apt-get install docker.io)")
    script = cli_lifecycle_script(docker, image, run_id)
    # each lifecycle appends its status to the log, so failures are counted without parsing output
    log = Path(f"/tmp/stampede-bench-cli-{run_id}.log")
    log.unlink(missing_ok=True)
    wrapped = f"{{ {script}; }} >/dev/null 2>&1; echo $? >> {shlex.quote(str(log))}"
    command = f"seq 0 {count - 1} | xargs -P {concurrency} -I{{}} sh -c {shlex.quote(wrapped)} _ {{}}"
    started = time.monotonic()
    process = await asyncio.create_subprocess_shell(command, start_new_session=True)
    try:
        await asyncio.wait_for(process.wait(), timeout=max_seconds)
    except TimeoutError:
        os.killpg(process.pid, 9)
        await process.wait()
    wall = time.monotonic() - started
    statuses = log.read_text().split() if log.exists() else []
    log.unlink(missing_ok=True)
    names = {"11": "run", "12": "exec", "13": "rm"}
    failures = Counter(f"cli_{names.get(status, status)}" for status in statuses if status != "0")
    if len(statuses) < count:
        failures["cli_not_run (time bound)"] += count - len(statuses)
    return DriveResult("docker CLI", count, concurrency, wall, failures)


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def describe(result: DriveResult) -> str:
    line = f"{result.side:>10}: {result.rate:6.2f} lifecycles/s  ({result.count} in {result.wall_s:.1f}s"
    ttis = [t.tti_s for t in result.timings if t.tti_s is not None]
    if ttis:
        line += f"; TTI p50 {percentile(ttis, 50) * 1000:.0f} ms p99 {percentile(ttis, 99) * 1000:.0f} ms"
    if result.failures:
        line += f"; failures {dict(result.failures)}"
    return line + ")"


async def reap(provider: DockerProvider, run_id: str) -> None:
    await provider.cleanup(run_id)


async def run(args: argparse.Namespace) -> int:
    provider = create_provider("docker", {"image": args.image} if args.image else {})
    assert isinstance(provider, DockerProvider)
    try:
        await provider.preflight()
    except Exception as exc:  # noqa: BLE001 - one clear line
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    image = provider.options.image
    versions = provider.versions()
    docker_cli = shutil.which("docker") or "docker"
    cli_version = await asyncio.to_thread(
        lambda: subprocess.run(
            [docker_cli, "--version"], capture_output=True, text=True, check=False
        ).stdout.strip()
    )
    print(
        f"daemon {versions.get('docker-daemon')} ({versions.get('docker-runtime')}, "
        f"{versions.get('docker-storage')}), aiodocker {versions['aiodocker']}, "
        f"CLI {cli_version} ({docker_cli}), image {image}, {os.cpu_count()} cpus"
    )
    driver = make_driver(provider)
    bench_id = f"bench-{uuid.uuid4().hex[:8]}"
    try:
        # warm-up both paths (image cache, CLI binary in page cache, daemon goroutines)
        await driver(f"{bench_id}-warm", 4, 2)
        await drive_cli(f"{bench_id}-warmc", 4, 2, image, args.max_seconds)
        await reap(provider, f"{bench_id}-warm")
        await reap(provider, f"{bench_id}-warmc")
        rows = []
        for position, concurrency in enumerate(args.concurrency):
            pair: dict[str, DriveResult] = {}
            order = ("cli", "stampede") if position % 2 == 0 else ("stampede", "cli")
            for side in order:
                run_id = f"{bench_id}-{side}{concurrency}"
                if side == "cli":
                    pair[side] = await drive_cli(run_id, args.count, concurrency, image, args.max_seconds)
                else:
                    pair[side] = await asyncio.wait_for(
                        driver(run_id, args.count, concurrency), args.max_seconds
                    )
                await reap(provider, run_id)
            ratio = pair["stampede"].rate / pair["cli"].rate if pair["cli"].rate else float("inf")
            rows.append((concurrency, pair["cli"].rate, pair["stampede"].rate, ratio))
            print(f"concurrency {concurrency}:")
            print("  " + describe(pair["cli"]))
            print("  " + describe(pair["stampede"]))
            print(f"  ratio stampede/CLI = {ratio:.2f}x")
        print("\nconcurrency  CLI lc/s  stampede lc/s  ratio")
        for concurrency, cli_rate, ours, ratio in rows:
            print(f"{concurrency:>11}  {cli_rate:8.2f}  {ours:13.2f}  {ratio:5.2f}x")
        print(f"geometric mean ratio {statistics.geometric_mean([r[3] for r in rows]):.2f}x (target >= 2x)")
    finally:
        for suffix in ("warm", "warmc", *(f"{s}{c}" for s in ("cli", "stampede") for c in args.concurrency)):
            await reap(provider, f"{bench_id}-{suffix}")
        await provider.aclose()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "-c", "--concurrency", type=int, nargs="+", default=[8, 20], help="lifecycles in flight"
    )
    parser.add_argument("-n", "--count", type=int, default=120, help="lifecycles per side and concurrency")
    parser.add_argument("--image", default="", help="image (default: the offline stampede busybox image)")
    parser.add_argument("--max-seconds", type=float, default=300.0, help="bound on each measurement")
    args = parser.parse_args(argv)
    if args.count < 1 or min(args.concurrency) < 1:
        parser.error("count and concurrency must be positive")
    return asyncio.run(run(args))


if __name__ == "__main__":
    raise SystemExit(main())
