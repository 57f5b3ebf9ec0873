"""How far does a TTI stampede records stray from the vendor's own record of the same sandbox?

The simulated vendor writes its truth: when it accepted each sandbox and when its first command ended (vendor
`truth` table, wall clock). The harness records when it started the create and when the first command's answer
came back (`ops` table). The difference per rollout is the timing error: the harness's transport, its loop and its
readiness polling, plus the simulated vendor's own loop. Printed per stage, p50 and p99, beside the harness's own
estimate of the same thing (loop lag + readiness poll window, the `harness err` column) and the error's terms:

    create -> accepted   the create call's start to the vendor accepting it (connection, request, vendor's loop)
    ready -> seen        the vendor's RUNNING to the harness sending the first command (the readiness poll)
    command out / back   the first command's way to the vendor and its answer's way back
    error with readiness TTI minus the vendor's acceptance-to-RUNNING and the command's own run: the above plus
                         ready -> seen, which the vendor's record (it ends with the first command) leaves out
    poll window          the rollout's recorded `ready_poll_s`: the last look that found it not ready to the
                         look that found it RUNNING (the schedule's gap at that point plus a look's round trip)
    beyond the poll window   error with readiness minus that window: what the issue's target (20 ms plus the
                         readiness poll interval) holds to 20 ms

    python bench/bench_timing_error.py                       # steady 960 for 30 s, the default vendor (~1 minute)
    python bench/bench_timing_error.py --profile ideal --stages 3840,10000 --spawn-rate 200 --hold 10   # a ramp
    python bench/bench_timing_error.py --run results/latest             # a run already on disk (simulated vendor)

Bounded in time; targets 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TERMS = {
    "error": "TTI minus the vendor's record",
    "create_to_accepted": "create -> accepted",
    "ready_to_seen": "ready -> seen",
    "command_out": "command out",
    "command_back": "command back",
    "with_readiness": "error with readiness",
    "poll_window": "poll window",
    "beyond_window": "beyond the poll window",
    "estimate": "harness's estimate",
}


def _seconds(column: pd.Series) -> pd.Series:
    if pd.api.types.is_datetime64_any_dtype(column):
        return column.dt.tz_localize(None).astype("datetime64[ns]").astype("int64") / 1e9
    return column.astype(float)


def timing_terms(run_dir: Path) -> pd.DataFrame:
    """One row per rollout whose first command ended: the error and its terms, in wall seconds."""
    from harness.results.read.dataset import load_truth

    rollouts = pd.read_parquet(run_dir / "rollouts")
    ops = pd.read_parquet(run_dir / "ops")
    truth = load_truth(run_dir)
    if truth.empty:
        raise SystemExit(f"{run_dir}: no vendor truth (only a simulated vendor's run has one)")
    ops = ops.assign(t0=_seconds(ops["t_start"]))
    ops = ops.assign(t1=ops["t0"] + ops["dur_s"])
    create = ops[ops["op"] == "create"].drop_duplicates("rollout_id").set_index("rollout_id")[["t0", "t1"]]
    first = ops[(ops["op"] == "exec") & ops["ok"]].sort_values("t0").drop_duplicates("rollout_id")
    first = first.set_index("rollout_id")[["t0", "t1"]]
    frame = rollouts.set_index("rollout_id")[["stage", "sandbox_id", "ready_poll_s", "loop_lag_s"]]
    frame = frame.join(create.add_prefix("create_"), how="inner").join(first.add_prefix("exec_"), how="inner")
    walls = ["created_wall", "ready_wall", "first_exec_start_wall", "first_exec_done_wall"]
    vendor = truth.drop_duplicates("id").set_index("id")[walls].apply(_seconds)
    frame = frame.join(vendor, on="sandbox_id", how="inner").dropna(subset=walls)
    # TTI minus the vendor's acceptance-to-RUNNING and the first command's own run: the readiness poll included
    vendor_tti = frame["ready_wall"] - frame["created_wall"]
    command_run = frame["first_exec_done_wall"] - frame["first_exec_start_wall"]
    with_readiness = (frame["exec_t1"] - frame["create_t0"]) - vendor_tti - command_run
    return pd.DataFrame(
        {
            "stage": frame["stage"],
            "error": (frame["exec_t1"] - frame["create_t0"]) - (frame["first_exec_done_wall"] - frame["created_wall"]),
            "create_to_accepted": frame["created_wall"] - frame["create_t0"],
            "ready_to_seen": frame["exec_t0"] - frame["ready_wall"],
            "command_out": frame["first_exec_start_wall"] - frame["exec_t0"],
            "command_back": frame["exec_t1"] - frame["first_exec_done_wall"],
            "with_readiness": with_readiness,
            "poll_window": frame["ready_poll_s"],
            "beyond_window": with_readiness - frame["ready_poll_s"].fillna(0),
            "estimate": frame["ready_poll_s"].fillna(0) + frame["loop_lag_s"].fillna(0),
        }
    )


def report(terms: pd.DataFrame) -> str:
    lines = [f"{'stage':<14} {'n':>6} | " + " | ".join(f"{label:>24}" for label in TERMS.values())]
    lines.append(f"{'':<14} {'':>6} | " + " | ".join(f"{'p50 / p99 ms':>24}" for _ in TERMS))
    for stage, group in terms.groupby(terms["stage"].astype(str), sort=True):
        cells = []
        for name in TERMS:
            p50, p99 = np.nanpercentile(group[name], [50, 99]) * 1000
            cells.append(f"{p50:>11.0f} / {p99:>10.0f}")
        lines.append(f"{stage:<14} {len(group):>6} | " + " | ".join(cells))
    return "\n".join(lines)


def run(args: argparse.Namespace, out: Path) -> Path:
    if args.stages:
        shape = [
            "--scenario",
            "ramp",
            "--stages",
            args.stages,
            "--hold",
            str(args.hold),
            "--commands",
            f"true; sleep {args.hold * 10:g}",
            "--exec-timeout",
            str(args.hold * 20),
        ]
    else:
        shape = [
            "--scenario",
            "steady",
            "--users",
            str(args.users),
            "--hold",
            str(args.hold),
            "--commands",
            "true; sleep 1",
        ]
    argv = [
        sys.executable,
        "-m",
        "harness.cli",
        "run",
        *shape,
        "--spawn-rate",
        str(args.spawn_rate),
        *(("--profile", args.profile) if args.profile else ()),
        "--progress-interval",
        "0",
        "--stop-timeout",
        "0",
        "--out",
        str(out),
    ]
    subprocess.run(argv, cwd=REPO, check=True, stdout=subprocess.DEVNULL, timeout=args.hold * 10 + 600)
    return next(path for path in out.iterdir() if path.is_dir())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, help="analyse this run folder instead of running one")
    parser.add_argument("--users", type=int, default=960, help="steady: rollouts in flight")
    parser.add_argument("--stages", help="a ramp's levels instead (each rollout holds its sandbox)")
    parser.add_argument("--hold", type=float, default=30.0, help="seconds at each level")
    parser.add_argument("--spawn-rate", type=float, default=500.0)
    parser.add_argument("--profile", help="the simulated vendor's profile (default: stampede run's)")
    args = parser.parse_args()
    run_dir = args.run.resolve() if args.run else run(args, Path(tempfile.mkdtemp(prefix="bench-timing-")))
    print(f"{run_dir}\n{report(timing_terms(run_dir))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
