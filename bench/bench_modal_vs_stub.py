"""Per-rollout CPU and TTI of the real `modal` SDK path vs the lean `stub` client, same vendor behaviour.

Side (a): `stampede run --provider modal --local` (the real SDK against the local Modal control plane).
Side (b): `stampede run` with the embedded Prime-like stub and the lean aiohttp client. Both run the
`modal-like` profile with the same seed, the same burst size and the same commands, back to back, as
real `python -m harness.cli run` subprocesses. Per-rollout CPU = the engine's CPU seconds
(`engine-local.json`, `health.cpu_seconds`, which includes the engine's start and preflight) / rollouts;
the marginal figure divides the CPU difference between two burst sizes by the rollout difference, which
takes the fixed start-up cost (importing the SDK, building the image) out.

    python bench/bench_modal_vs_stub.py                 # bursts of 100 and 960 (about 3 minutes)
    python bench/bench_modal_vs_stub.py -n 200 --seed 3

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

SIDES = {
    "modal": ["--provider", "modal", "--local"],
    "stub": ["--provider", "stub"],
}


@dataclass
class RunResult:
    side: str
    users: int
    wall_s: float
    rollouts: int
    cpu_s: float
    tti_p50: float
    tti_p99: float
    error_p50_ms: float  # harness TTI minus the vendor's own accept -> first command done
    error_p99_ms: float
    failures: dict[str, int] = field(default_factory=dict)

    @property
    def cpu_per_rollout_ms(self) -> float:
        return 1000.0 * self.cpu_s / self.rollouts if self.rollouts else float("nan")


def run_side(side: str, users: int, profile: str, seed: int, timeout: float, out: Path) -> RunResult:
    argv = [
        sys.executable,
        "-m",
        "harness.cli",
        "run",
        *SIDES[side],
        "--profile",
        profile,
        "--seed",
        str(seed),
        "--scenario",
        "burst",
        "--users",
        str(users),
        "--out",
        str(out),
        "--progress-interval",
        "0",
        "--run-id",
        f"bench-{side}-{users}",
    ]
    started = time.monotonic()
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    wall = time.monotonic() - started
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise SystemExit(f"{side} burst of {users} failed ({done.returncode}): {' | '.join(tail)}")
    run_dir = out / f"bench-{side}-{users}"
    engine = json.loads((run_dir / "engine-local.json").read_text())
    frame = load_rollouts(run_dir)
    ttis = frame.loc[frame["outcome"] == "ok", "tti_s"].dropna().to_numpy(dtype=float)

    def q(p: float) -> float:
        return nearest_rank(np.sort(ttis), p)

    failures = frame["failure_kind"].dropna().value_counts().to_dict()
    error = measurement_error(frame, load_truth(run_dir)) or {}
    first = error.get("vs_first_command_ms", {})
    return RunResult(
        side,
        users,
        wall,
        len(frame),
        float(engine["health"]["cpu_seconds"]),
        q(0.5),
        q(0.99),
        float(first.get("p50", "nan")),
        float(first.get("p99", "nan")),
        {str(k): int(v) for k, v in failures.items()},
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--users", type=int, nargs="+", default=[100, 960], help="burst sizes (100 960)")
    parser.add_argument("--profile", default="modal-like")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per run (300)")
    args = parser.parse_args(argv)
    if any(n <= 0 for n in args.users):
        parser.error("burst sizes must be positive")
    results: list[RunResult] = []
    with tempfile.TemporaryDirectory(prefix="bench-modal-") as tmp:
        for users in args.users:
            for side in ("modal", "stub"):
                print(f"running {side} burst of {users} ...", file=sys.stderr, flush=True)
                results.append(run_side(side, users, args.profile, args.seed, args.timeout, Path(tmp)))
    print(f"profile {args.profile}, seed {args.seed}; TTI in wall seconds; CPU = engine CPU / rollouts;")
    print("timing error = harness TTI - the vendor's own accept->first command done (what the client side adds)")
    print(
        f"{'side':<6} {'users':>5} {'wall s':>7} {'cpu s':>6} {'cpu/rollout ms':>14} {'TTI p50':>8} {'p99':>7} "
        f"{'err p50 ms':>10} {'p99':>6}  failures"
    )
    for r in results:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(r.failures.items(), key=lambda kv: -kv[1])) or "-"
        print(
            f"{r.side:<6} {r.users:>5} {r.wall_s:>7.1f} {r.cpu_s:>6.1f} {r.cpu_per_rollout_ms:>14.1f} "
            f"{r.tti_p50:>8.3f} {r.tti_p99:>7.3f} {r.error_p50_ms:>10.0f} {r.error_p99_ms:>6.0f}  {kinds}"
        )
    by = {(r.side, r.users): r for r in results}
    for users in args.users:
        modal, stub = by[("modal", users)], by[("stub", users)]
        print(
            f"burst {users}: modal/stub CPU per rollout {modal.cpu_per_rollout_ms / stub.cpu_per_rollout_ms:.1f}x, "
            f"TTI p50 {modal.tti_p50 / stub.tti_p50:.2f}x, p99 {modal.tti_p99 / stub.tti_p99:.2f}x"
        )
    sizes = sorted(set(args.users))
    if len(sizes) >= 2:
        lo, hi = sizes[0], sizes[-1]
        marginal = {
            side: 1000.0
            * (by[(side, hi)].cpu_s - by[(side, lo)].cpu_s)
            / (by[(side, hi)].rollouts - by[(side, lo)].rollouts)
            for side in ("modal", "stub")
        }
        print(
            f"marginal CPU per rollout ({lo}->{hi}): modal {marginal['modal']:.1f} ms, stub {marginal['stub']:.1f} ms, "
            f"ratio {marginal['modal'] / marginal['stub']:.1f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
