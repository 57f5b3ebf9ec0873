"""Time `stampede report` on a synthetic million-row run (parquet shards in the real results schema).

    python bench/bench_report.py [--rows 1000000] [--shard-rows 5000] [--keep DIR]

Writes the run (200 shards of 5,000 rows for a million: what a long run's collector leaves), then runs the
report command end to end in a fresh interpreter (imports, reading, statistics, four figures, report.html)
and prints the wall time; the target is under 10 s. Side by side, in the same run, it times the report's
statistics in process and a naive baseline on the same shards (read every column with pandas, ask pandas for
the per-stage quantiles of each phase: less than the report computes) — the ratio says what the vectorised
path buys.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.synthetic_run import SyntheticRun, ramp_stages, write_synthetic_run  # noqa: E402

TARGET_S = 10.0


def naive_baseline(run_dir: Path) -> float:
    import pandas as pd

    from harness.results.figures.quantiles import REPORT_QUANTILES

    start = time.perf_counter()
    frame = pd.concat([pd.read_parquet(path) for path in sorted(run_dir.glob("rollouts*.parquet"))])
    qs = [*(q for _, q in REPORT_QUANTILES), 1.0]  # the report's levels and the max
    for column in ("tti_s", "create_s", "exec_s", "terminate_s"):
        frame.groupby("stage")[column].quantile(qs)
    frame.groupby(["stage", "failure_kind"]).size()
    return time.perf_counter() - start


def statistics_only(run_dir: Path) -> float:
    """The report's own reading and statistics (quantiles of four phases, failures by kind and phase, start
    rates, sweep-line concurrency, censoring), timed in process like the baseline."""
    from harness.results.figures.stage_aggregate import compute_run_stats
    from harness.results.read.dataset import load_rollout_frame, read_run_info

    start = time.perf_counter()
    compute_run_stats(read_run_info(run_dir), load_rollout_frame(run_dir))
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--shard-rows", type=int, default=5000)
    parser.add_argument("--keep", default=None, help="write the run here and keep it")
    args = parser.parse_args()
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="stampede-bench-"))
    t0 = time.perf_counter()
    run_dir = write_synthetic_run(
        root,
        SyntheticRun(run_id="bench-1m", stages=ramp_stages(args.rows), time_scale=0.1, rows_per_shard=args.shard_rows),
    )
    shards = len(list(run_dir.glob("rollouts*.parquet")))
    print(
        f"synthetic run: {args.rows:,} rows in {shards} shards, written in {time.perf_counter() - t0:.1f} s ({run_dir})"
    )

    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "harness.cli.report", str(run_dir), "-o", str(root / "report")],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        print(result.stderr, file=sys.stderr)
        return 1
    stats = statistics_only(run_dir)
    baseline = naive_baseline(run_dir)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    verdict = "OK" if elapsed < TARGET_S else "TOO SLOW"
    print(
        f"stampede report, end to end (fresh interpreter, 4 figures, report.html): {elapsed:.2f} s [{verdict}: target < {TARGET_S:g} s]"
    )
    print(f"  of which, in process: load + every per-stage statistic {stats:.2f} s")
    print(
        f"naive pandas baseline (all columns, groupby quantiles only): {baseline:.2f} s; "
        f"statistics vs baseline {baseline / stats:.1f}x faster"
    )
    return 0 if elapsed < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
