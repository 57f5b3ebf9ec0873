"""The engine's own CPU a lifecycle, with no vendor in it: its whole socket path on a provider that answers at once.

`bench_harness_share.py` measures the engine and Locust on the stub, whose lean client is still most of the
engine's CPU and whose rate swings with the CPU share the simulated vendor gets. Here the engine (`Engine.handle`
on a Unix socket, leases, rows to the client, the write-ahead of submits, parquet shards, the loop-lag probe) runs
in this process against `NullProvider`, whose create, wait, command and terminate each answer after one loop turn
(`--ready-s` holds each sandbox that long before it is ready: 64 in flight at 0.2 s is about an SDK's 300/s); a
plain asyncio client in the same process takes the rows (and asks for the stats twice a second, as Locust does).
Process CPU time per row over a window after a warm-up (past the first shard at 2 s: its writer imports pandas
through pyarrow's `pa.array`, 0.2-0.5 s of CPU once a run).

`--against DIR` runs another checkout (e.g. `git archive REV | tar -x -C DIR`) in turn with this one, each a fresh
interpreter, order flipped each round; medians and the paired differences are printed.

    python bench/bench_engine_alone.py --against /tmp/stampede-before --rounds 6
    python bench/bench_engine_alone.py --ready-s 0.2 --inflight 64

Bounded: each side runs `--seconds` after `--warmup`, then exits; only a Unix socket in a temporary folder.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
_CHILD = "--child"


def null_provider_class() -> type:
    """The provider, made on demand so that this module imports the checkout under test only in the child."""
    from providers.base import ExecResult, Provider, ReadyObservation, SandboxRef, SandboxSpec, classify_common

    ready_s = float(os.environ.get("BENCH_READY_S", "0"))
    ids = itertools.count(1)

    class NullProvider(Provider):
        name = "null"

        def __init__(self, options: Mapping[str, Any] | None = None) -> None:
            self.options = options

        @classmethod
        def from_options(cls, options: Mapping[str, Any]) -> NullProvider:
            return cls(options)

        async def create(self, spec: SandboxSpec) -> SandboxRef:
            await asyncio.sleep(0)
            return SandboxRef(
                sandbox_id=f"sb-{next(ids)}", provider="null", run_id=spec.run_id, rollout_id=spec.rollout_id
            )

        async def wait_ready(self, ref: SandboxRef, timeout: float) -> ReadyObservation:
            await asyncio.sleep(ready_s)
            return ReadyObservation(poll_window_s=0.001, polls=1)

        async def exec(self, ref: SandboxRef, argv: Sequence[str], timeout: float) -> ExecResult:
            await asyncio.sleep(0)
            return ExecResult(0, "", "")

        async def terminate(self, ref: SandboxRef) -> None:
            await asyncio.sleep(0)

        async def list_owned(self, run_id: str, engine: str | None = None) -> list[SandboxRef]:
            return []

        async def cleanup(self, run_id: str, engine: str | None = None) -> int:
            return 0

        def classify(self, exc: BaseException, phase: Any = None) -> Any:
            return classify_common(exc, phase)

    return NullProvider


async def child(inflight: int, warmup_s: float, seconds: float) -> None:
    """One side: the engine and its client in this process; prints `rows seconds cpu_s`."""
    import __main__
    from harness.engine.server import Engine
    from harness.wire.protocol import MAX_LINE_BYTES, encode

    __main__.NullProvider = null_provider_class()  # type: ignore[attr-defined]  # named "__main__:NullProvider"
    engine = Engine("bench")
    engine.health.start()
    folder = tempfile.mkdtemp(prefix="bench-engine-alone-")
    path = os.path.join(folder, "engine.sock")
    await asyncio.start_unix_server(engine.handle, path=path, limit=MAX_LINE_BYTES)
    reader, writer = await asyncio.open_unix_connection(path, limit=MAX_LINE_BYTES)
    config = {
        "run_id": "bench",
        "out_dir": folder,
        "provider": "__main__:NullProvider",
        "plan": {"commands": [["true"]]},
    }
    writer.write(encode({"op": "configure", "id": 0, "config": config}))
    answer = await reader.readline()
    if b'"configured"' not in answer:
        raise SystemExit(f"engine refused the run: {answer[:300]!r}")
    for lease in range(1, inflight + 1):
        writer.write(encode({"op": "lease", "id": lease, "stage": "bench", "target_users": inflight}))
    rows = 0

    async def read_rows() -> None:
        nonlocal rows
        while line := await reader.readline():
            rows += line.startswith(b'{"op":"result"')

    async def ask_stats() -> None:
        for ask in itertools.count(10_000):
            await asyncio.sleep(0.5)
            writer.write(encode({"op": "stats", "id": ask}))

    tasks = [asyncio.create_task(read_rows()), asyncio.create_task(ask_stats())]
    await asyncio.sleep(warmup_s)
    rows0, cpu0, t0 = rows, time.process_time(), time.monotonic()
    await asyncio.sleep(seconds)
    print(rows - rows0, time.monotonic() - t0, time.process_time() - cpu0, flush=True)
    del tasks
    os._exit(0)  # no drain: the window is all that is measured


def run_side(checkout: Path, args: argparse.Namespace) -> tuple[float, float]:
    """(us of CPU per lifecycle, lifecycles/s) of one fresh interpreter on `checkout`."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "BENCH_READY_S": str(args.ready_s)}
    argv = [sys.executable, __file__, _CHILD, str(args.inflight), str(args.warmup), str(args.seconds)]
    result = subprocess.run(
        argv,
        cwd=tempfile.gettempdir(),
        env=env,
        capture_output=True,
        text=True,
        timeout=args.warmup + args.seconds + 60,
    )
    if result.returncode != 0:
        raise SystemExit(f"error: {checkout}: {result.stderr.strip().splitlines()[-1:] or result.returncode}")
    rows, seconds, cpu_s = (float(word) for word in result.stdout.split())
    return 1e6 * cpu_s / max(rows, 1), rows / seconds


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == _CHILD:
        asyncio.run(child(int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])))
        return 0
    from bench_overhead import checkouts, in_turn  # a sibling script; the measured child never imports it

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", type=Path, help="another checkout, run in turn as 'before'")
    parser.add_argument("--inflight", type=int, default=64, help="leases (lifecycles in flight)")
    parser.add_argument("--ready-s", type=float, default=0.0, help="how long each sandbox takes to be ready")
    parser.add_argument("--seconds", type=float, default=5.0, help="measured window per side")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before the window (past the first shard)")
    parser.add_argument("--rounds", type=int, default=6, help="rounds (medians are printed)")
    args = parser.parse_args()
    sides = checkouts(args.against, "harness/engine")
    got: dict[str, list[tuple[float, float]]] = {side: [] for side, _ in sides}
    for round_, side, checkout in in_turn(sides, args.rounds):
        us, rate = run_side(checkout, args)
        got[side].append((us, rate))
        print(f"  round {round_ + 1} {side:<6}: {us:6.1f} us a lifecycle, {rate:7.0f}/s", file=sys.stderr, flush=True)
    print(
        f"engine alone, {args.inflight} leases, ready after {args.ready_s:g} s, {args.rounds} rounds of {args.seconds:g} s"
    )
    for side, _ in sides:
        print(
            f"{side:<7} {statistics.median(us for us, _ in got[side]):7.1f} us a lifecycle "
            f"{statistics.median(rate for _, rate in got[side]):8.0f}/s"
        )
    if args.against is not None:
        paired = [after[0] - before[0] for after, before in zip(got["after"], got["before"], strict=True)]
        print(
            f"paired after - before: median {statistics.median(paired):+.1f} us ({', '.join(f'{d:+.1f}' for d in paired)})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
