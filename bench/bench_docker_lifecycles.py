"""Docker lifecycles per second: stampede's engine vs the docker command line through `xargs -P`.

One lifecycle = create + start (until running), exec `true`, exec `echo hi`, force-remove; same image, same
limits and isolation, same count, same concurrency on both sides, measured one after the other in one run
(the order alternates between concurrency levels). Side (a) is the real harness path: a rollout engine
process (`python -m harness.engine`) running the `docker` provider, fed by `concurrency` greenlets over its
Unix socket, exactly as Locust users feed it. Side (b) is `seq N | xargs -P C sh -c 'docker run -d …;
docker exec …; docker exec …; docker rm -f …'`. Prints both rates and stampede / CLI (target: >= 2x).

    python bench/bench_docker_lifecycles.py                 # 8 and 20 in flight, 120 lifecycles each
    python bench/bench_docker_lifecycles.py -c 8 20 40 -n 200

Needs a daemon (scripts/ensure-docker).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import gevent

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.locust.engine_client import EngineClient
from harness.results.render.summary import quantiles
from harness.wire.messages import EngineConfig, RolloutRequest
from providers import create_provider
from providers.vendors.docker.image import SCRATCH_DIR
from providers.vendors.docker.options import DEFAULT_CAP_DROP, DEFAULT_SCRATCH_MB

COMMANDS = [["true"], ["echo", "hi"]]
CPU, MEMORY_MB, PIDS, LIFETIME_S = 1.0, 256, 256, 600


@dataclass
class DriveResult:
    side: str
    count: int
    concurrency: int
    wall_s: float
    failures: Counter[str] = field(default_factory=Counter)
    ttis: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return (self.count - sum(self.failures.values())) / self.wall_s if self.wall_s else 0.0


def drive_engine(engine: EngineClient, out_dir: str, run_id: str, count: int, concurrency: int) -> DriveResult:
    """Side (a): `count` rollouts through the engine with `concurrency` in flight (closed loop)."""
    engine.configure(
        EngineConfig(
            run_id=run_id,
            worker="bench",
            out_dir=out_dir,
            provider="docker",
            scenario="bench",
            plan={"commands": COMMANDS, "cpu": CPU, "memory_mb": MEMORY_MB, "lifetime_s": LIFETIME_S},
        )
    )
    tickets = itertools.count()
    records: list[dict] = []

    def user() -> None:
        while next(tickets) < count:
            records.append(engine.run_rollout(RolloutRequest(stage="bench", target_users=concurrency)))

    started = time.monotonic()
    gevent.joinall([gevent.spawn(user) for _ in range(concurrency)], raise_error=True)
    wall = time.monotonic() - started
    engine.drain()
    failures = Counter(f"{r['failure_kind']}/{r['failure_phase']}" for r in records if r["outcome"] != "ok")
    return DriveResult("stampede", count, concurrency, wall, failures, [r["tti_s"] for r in records if r["tti_s"]])


def cli_lifecycle_script(docker: str, image: str, run_id: str) -> str:
    """The same lifecycle with the docker CLI: run -d (create+start), exec x2, rm -f. `$1` is the index."""
    caps = " ".join(f"--cap-drop {cap}" for cap in DEFAULT_CAP_DROP)
    memory = f"{MEMORY_MB}m"
    run = (
        f"{docker} run -d --name stampede-{run_id}-c$1 "
        f"--label stampede-run={run_id} --label stampede-rollout=c$1 "
        f"--network none {caps} --security-opt no-new-privileges --init --log-driver none --read-only "
        f"--tmpfs {SCRATCH_DIR}:rw,nosuid,nodev,size={DEFAULT_SCRATCH_MB}m,mode=1777 "
        f"--cpus {CPU} --memory {memory} --memory-swap {memory} "
        f"--pids-limit {PIDS} --entrypoint sleep {image} {LIFETIME_S}"
    )
    return (
        f"cid=$({run}) || exit 11; "
        f"{docker} exec $cid true >/dev/null || {{ {docker} rm -f $cid >/dev/null; exit 12; }}; "
        f"{docker} exec $cid echo hi >/dev/null || {{ {docker} rm -f $cid >/dev/null; exit 12; }}; "
        f"{docker} rm -f $cid >/dev/null || exit 13"
    )


def drive_cli(docker: str, run_id: str, count: int, concurrency: int, image: str, max_seconds: float) -> DriveResult:
    """Side (b): `seq N | xargs -P C sh -c '<lifecycle>'`; a lifecycle's failure is its exit status."""
    script = cli_lifecycle_script(docker, image, run_id)
    log = Path(tempfile.gettempdir()) / f"stampede-bench-cli-{run_id}.log"
    log.unlink(missing_ok=True)
    wrapped = f"{{ {script}; }} >/dev/null 2>&1; echo $? >> {shlex.quote(str(log))}"
    command = f"seq 0 {count - 1} | xargs -P {concurrency} -I{{}} sh -c {shlex.quote(wrapped)} _ {{}}"
    started = time.monotonic()
    process = subprocess.Popen(command, shell=True, start_new_session=True)
    try:
        process.wait(timeout=max_seconds)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        process.wait()
    wall = time.monotonic() - started
    statuses = log.read_text().split() if log.exists() else []
    log.unlink(missing_ok=True)
    names = {"11": "run", "12": "exec", "13": "rm"}
    failures = Counter(f"cli_{names.get(status, status)}" for status in statuses if status != "0")
    if len(statuses) < count:
        failures["cli_not_run (time bound)"] += count - len(statuses)
    return DriveResult("docker CLI", count, concurrency, wall, failures)


def describe(result: DriveResult) -> str:
    line = f"{result.side:>10}: {result.rate:6.2f} lifecycles/s  ({result.count} in {result.wall_s:.1f}s"
    if result.ttis:
        q = quantiles(result.ttis)
        line += f"; TTI p50 {q['p50'] * 1000:.0f} ms p99 {q['p99'] * 1000:.0f} ms"
    if result.failures:
        line += f"; failures {dict(result.failures)}"
    return line + ")"


def reap(run_id: str) -> None:
    """Whatever either side left behind (nothing, normally), by run label."""

    async def main() -> None:
        provider = create_provider("docker", {})
        try:
            await provider.cleanup(run_id)
        finally:
            await provider.aclose()

    asyncio.run(main())


def daemon_facts() -> tuple[str, dict[str, str]]:
    async def main() -> tuple[str, dict[str, str]]:
        provider = create_provider("docker", {})
        try:
            await provider.preflight()
            return provider.options.image, dict(provider.versions())  # type: ignore[attr-defined]
        finally:
            await provider.aclose()

    return asyncio.run(main())


def run(args: argparse.Namespace) -> int:
    docker = shutil.which("docker")
    if docker is None:
        print("bench: the docker command line is not installed (apt-get install docker.io)", file=sys.stderr)
        return 2
    try:
        image, versions = daemon_facts()
    except Exception as exc:  # one clear line: no daemon, no image
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    cli_version = subprocess.run([docker, "--version"], capture_output=True, text=True, check=False).stdout.strip()
    print(
        f"daemon {versions.get('docker-daemon')} ({versions.get('docker-runtime')}, {versions.get('docker-storage')}),"
        f" aiodocker {versions.get('aiodocker')}, CLI {cli_version}, image {image}, {os.cpu_count()} cpus"
    )
    bench_id = f"bench-{uuid.uuid4().hex[:8]}"
    out_dir = tempfile.mkdtemp(prefix="stampede-bench-")
    engine = EngineClient.spawn("bench")
    run_ids: list[str] = []
    try:
        # warm-up both paths (image cache, CLI binary in the page cache, the engine's imports, daemon state)
        run_ids += [f"{bench_id}-warm", f"{bench_id}-warmc"]
        drive_engine(engine, out_dir, run_ids[-2], 4, 2)
        drive_cli(docker, run_ids[-1], 4, 2, image, args.max_seconds)
        rows = []
        for position, concurrency in enumerate(args.concurrency):
            pair: dict[str, DriveResult] = {}
            for side in ("cli", "stampede") if position % 2 == 0 else ("stampede", "cli"):
                run_id = f"{bench_id}-{side}{concurrency}"
                run_ids.append(run_id)
                if side == "cli":
                    pair[side] = drive_cli(docker, run_id, args.count, concurrency, image, args.max_seconds)
                else:
                    with gevent.Timeout(args.max_seconds):
                        pair[side] = drive_engine(engine, out_dir, run_id, args.count, concurrency)
                reap(run_id)
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
        engine.shutdown()
        for run_id in run_ids:
            reap(run_id)
        shutil.rmtree(out_dir, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-c", "--concurrency", type=int, nargs="+", default=[8, 20], help="lifecycles in flight")
    parser.add_argument("-n", "--count", type=int, default=120, help="lifecycles per side and concurrency")
    parser.add_argument("--max-seconds", type=float, default=300.0, help="bound on each measurement")
    args = parser.parse_args(argv)
    if args.count < 1 or min(args.concurrency) < 1:
        parser.error("count and concurrency must be positive")
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
