"""Per-rollout CPU and TTI of Prime's SDK (the `prime` provider) vs the lean `stub` client, same vendor.

Both sides run the same ramp (default: straight to 960 in flight, held 20 s) against the embedded
Prime-like stub with the same profile (`prime-like`) and seed, back to back, as real
`python -m harness.cli run` subprocesses:

    (a) stampede run --provider prime --local ...   Prime's AsyncSandboxClient: create, wait_for_creation
                                                     (status coalescer + gateway probe), ConnectRPC exec
    (b) stampede run --provider stub ...             the lean aiohttp client: 50 ms batch polls, REST exec

CPU per rollout = the engine process's CPU seconds (`engine-local.json`, `health.cpu_seconds`, start-up
and preflight included) / rollouts. TTI quantiles are over the ok rollouts of the last stage (submit ->
first command returned). "client adds" = harness TTI minus the simulator's own accept->RUNNING for the
same sandbox: what the client side (poll cadence, probes, round trips, event-loop lag) puts on top of
the vendor.

    python bench/bench_prime_vs_stub.py                    # 960, hold 20 s: about 2 minutes
    python bench/bench_prime_vs_stub.py --stages 100,480 --hold 10 --seed 3
    python bench/bench_prime_vs_stub.py --prime-option auth_cache=file --prime-option api_keepalive=1000

Every run is bounded (`--timeout`, default 300 s) and writes to a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from foundation.quantiles import nearest_rank  # noqa: E402
from harness.results.read.dataset import load_rollouts  # noqa: E402
from harness.results.render.summary import load_truth, measurement_error  # noqa: E402

SIDES = ("prime", "stub")


@dataclass
class SideResult:
    """One side's run, reduced to the figures the comparison prints."""

    side: str
    wall_s: float
    rollouts: int
    ok: int
    cpu_s: float
    loop_lag_p99_ms: float
    peak_inflight: int
    tti_p50: float
    tti_p99: float
    client_adds_p50_ms: float
    client_adds_p99_ms: float
    failures: dict[str, int] = field(default_factory=dict)

    @property
    def cpu_per_rollout_ms(self) -> float:
        return 1000.0 * self.cpu_s / self.rollouts if self.rollouts else float("nan")


def run_side(side: str, args: argparse.Namespace, out: Path) -> SideResult:
    run_id = f"bench-{side}"
    provider = ["--provider", "prime", "--local"] if side == "prime" else ["--provider", "stub"]
    options = (
        [word for option in args.prime_option for word in ("--provider-option", option)] if side == "prime" else []
    )
    argv = [
        sys.executable,
        "-m",
        "harness.cli",
        "run",
        *provider,
        *options,
        "--profile",
        args.profile,
        "--seed",
        str(args.seed),
        "--stages",
        args.stages,
        "--hold",
        str(args.hold),
        "--out",
        str(out),
        "--progress-interval",
        "0",
        "--run-id",
        run_id,
    ]
    started = time.monotonic()
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=args.timeout)
    wall = time.monotonic() - started
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise SystemExit(f"{side} run failed ({done.returncode}): {' | '.join(tail)}")
    run_dir = out / run_id
    engine = json.loads((run_dir / "engine-local.json").read_text())
    frame = load_rollouts(run_dir)
    last_stage = frame.loc[frame["target_users"] == frame["target_users"].max()]
    ttis = last_stage.loc[last_stage["outcome"] == "ok", "tti_s"].dropna().to_numpy(dtype=float)

    def q(values: np.ndarray, p: float) -> float:
        return nearest_rank(np.sort(values), p)

    error = measurement_error(frame, load_truth(run_dir)) or {}
    adds = error.get("vs_usable_ms", {})
    return SideResult(
        side=side,
        wall_s=wall,
        rollouts=len(frame),
        ok=int((frame["outcome"] == "ok").sum()),
        cpu_s=float(engine["health"]["cpu_seconds"]),
        loop_lag_p99_ms=float(engine["health"].get("loop_lag_p99_ms", float("nan"))),
        peak_inflight=int(engine.get("peak_inflight", 0)),
        tti_p50=q(ttis, 0.5),
        tti_p99=q(ttis, 0.99),
        client_adds_p50_ms=float(adds.get("p50", "nan")),
        client_adds_p99_ms=float(adds.get("p99", "nan")),
        failures={str(k): int(v) for k, v in frame["failure_kind"].dropna().value_counts().items()},
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--stages", default="960", help="ramp stages, as `stampede run --stages` (960)")
    parser.add_argument("--hold", type=float, default=20.0, help="seconds each stage is held (20)")
    parser.add_argument("--profile", default="prime-like")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per run (300)")
    parser.add_argument(
        "--prime-option", action="append", default=[], metavar="K=V", help="a `prime` provider option (repeatable)"
    )
    args = parser.parse_args(argv)
    if args.hold <= 0 or args.timeout <= 0:
        parser.error("--hold and --timeout must be positive")
    results: dict[str, SideResult] = {}
    with tempfile.TemporaryDirectory(prefix="bench-prime-") as tmp:
        for side in SIDES:
            print(f"running {side} (stages {args.stages}, hold {args.hold:g} s) ...", file=sys.stderr, flush=True)
            results[side] = run_side(side, args, Path(tmp))
    options = f"; prime options {', '.join(args.prime_option)}" if args.prime_option else ""
    print(f"profile {args.profile}, seed {args.seed}, stages {args.stages}, hold {args.hold:g} s{options}")
    print("TTI: ok rollouts of the last stage (s); client adds: harness TTI - vendor accept->RUNNING (ms)")
    print(
        f"{'side':<6} {'rollouts':>8} {'ok':>5} {'peak':>5} {'cpu s':>6} {'cpu/rollout ms':>14} {'lag p99 ms':>10} "
        f"{'TTI p50':>8} {'p99':>7} {'adds p50':>8} {'p99':>6}  failures"
    )
    for r in results.values():
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(r.failures.items(), key=lambda kv: -kv[1])) or "-"
        print(
            f"{r.side:<6} {r.rollouts:>8} {r.ok:>5} {r.peak_inflight:>5} {r.cpu_s:>6.1f} {r.cpu_per_rollout_ms:>14.2f} "
            f"{r.loop_lag_p99_ms:>10.1f} {r.tti_p50:>8.3f} {r.tti_p99:>7.3f} {r.client_adds_p50_ms:>8.0f} "
            f"{r.client_adds_p99_ms:>6.0f}  {kinds}"
        )
    prime, stub = results["prime"], results["stub"]
    print(
        f"prime/stub: CPU per rollout {prime.cpu_per_rollout_ms / stub.cpu_per_rollout_ms:.1f}x, "
        f"TTI p50 {prime.tti_p50 / stub.tti_p50:.2f}x, TTI p99 {prime.tti_p99 / stub.tti_p99:.2f}x, "
        f"rollouts completed {prime.rollouts / stub.rollouts:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
