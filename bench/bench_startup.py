"""How long from typing `stampede run` to the first rollout reaching the engine?

Measured from just before the process is started to the earliest `t_submit` in the run's rollout records (the
engine stamps it when it starts the rollout), on the embedded default (no credentials, nothing running
before). Beside it, in the same run and interleaved with it, the floor any Locust-based tool pays: a fresh
interpreter that only imports Locust. The gap between the two is stampede's own start-up: the simulated vendor
and the engine (each a fresh interpreter, started at once), the run folder, and the engine's `configure`.

    python bench/bench_startup.py              # 5 rounds: ~1 minute
    python bench/bench_startup.py --rounds 9

Everything runs on 127.0.0.1 and ends by itself (`--stages 4 --hold 1`).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def to_first_rollout() -> float:
    """Seconds from starting `stampede run` to its first rollout's submit stamp."""
    out = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    started = time.time()
    argv = [
        sys.executable,
        "-m",
        "harness.cli",
        "run",
        "--stages",
        "4",
        "--hold",
        "1",
        "--out",
        str(out),
        "--progress-interval",
        "0",
    ]
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"stampede run failed: {result.stderr[-500:]}")
    from harness.results.read.dataset import load_rollouts  # t_submit as float epoch seconds, in either layout

    first = min(load_rollouts(run_dir)["t_submit"].min() for run_dir in out.iterdir() if run_dir.is_dir())
    return float(first) - started


def locust_import() -> float:
    """Seconds for a fresh interpreter to import Locust and exit: the floor of any Locust-based tool."""
    started = time.time()
    subprocess.run([sys.executable, "-c", "import locust"], cwd=REPO, check=True, capture_output=True, timeout=60)
    return time.time() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    runs: list[float] = []
    floors: list[float] = []
    for _ in range(max(1, args.rounds)):
        floors.append(locust_import())
        runs.append(to_first_rollout())
    run_s, floor_s = statistics.median(runs), statistics.median(floors)
    print(f"stampede run -> first rollout: median {run_s:.2f} s (min {min(runs):.2f}, max {max(runs):.2f})")
    print(f"python -c 'import locust':     median {floor_s:.2f} s (min {min(floors):.2f}, max {max(floors):.2f})")
    print(f"stampede's own start-up beyond the Locust import: {run_s - floor_s:.2f} s; ratio {run_s / floor_s:.2f}x")
    print(f"target: <= 1.5 s to the first rollout: {'met' if run_s <= 1.5 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
