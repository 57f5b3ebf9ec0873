"""Every scenario's shape, checked from the parquet it leaves: real `stampede run` processes, the embedded stub."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.results.read.concurrency import concurrency_at_submit
from harness.results.read.dataset import load_rollouts, load_truth

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def run(tmp_path: Path, *args: str, timeout: float = 300) -> tuple[Path, pd.DataFrame, dict]:
    result = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--out", str(tmp_path), "--progress-interval", "0", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir() and not p.is_symlink()]
    frame = load_rollouts(run_dir)  # t_submit as float epoch seconds: the arithmetic below
    return run_dir, frame, json.loads((run_dir / "run.json").read_text())


def test_burst_steps_release_together_and_in_flight_drops_to_zero_between_steps(tmp_path):
    _, frame, manifest = run(
        tmp_path,
        "--scenario",
        "burst",
        "--batch",
        "10",
        "--group",
        "4",
        "--burst-steps",
        "3",
        "--profile",
        "ideal",
        "--commands",
        "true; sleep 0.5",
    )
    assert manifest["shape"]["size"] == 40 and sorted(frame["stage"].unique()) == [
        "01-burst40",
        "02-burst40",
        "03-burst40",
    ]
    steps = frame.groupby("stage")
    assert (steps.size() == 40).all()
    ends = steps.apply(lambda g: (g["t_submit"] + g["total_s"]).max())
    starts = steps["t_submit"].min()
    spreads = steps["t_submit"].agg(lambda s: s.max() - s.min())
    assert (spreads < 0.5).all()  # each step's 40 creates land together, not as a spawn ramp
    for previous, following in zip(ends.iloc[:-1], starts.iloc[1:], strict=True):
        assert previous <= following  # the last rollout of a step ended before the next step began
    assert concurrency_at_submit(frame).max() == 40


def time_in_flight(frame: pd.DataFrame, t0: float, t1: float) -> tuple[np.ndarray, np.ndarray]:
    """The in-flight count as a step function over [t0, t1]: (levels, durations)."""
    starts = frame["t_submit"].to_numpy()
    ends = starts + frame["total_s"].to_numpy()
    times = np.concatenate([starts, ends])
    deltas = np.concatenate([np.ones(len(starts)), -np.ones(len(ends))])
    order = np.argsort(times, kind="stable")
    times, levels = times[order], np.cumsum(deltas[order])
    clipped = np.clip(times, t0, t1)
    return levels[:-1], np.diff(clipped)


def test_steady_holds_n_in_flight_within_two_percent(tmp_path):
    _, frame, _ = run(
        tmp_path,
        "--scenario",
        "steady",
        "--users",
        "50",
        "--hold",
        "10",
        "--profile",
        "ideal",
        "--commands",
        "true; sleep 1",
    )
    t0, t1 = frame["t_submit"].min() + 2, frame["t_submit"].max() - 1  # spawn ramp and final drain excluded
    levels, durations = time_in_flight(frame, t0, t1)
    mean = float((levels * durations).sum() / durations.sum())
    assert 0.98 * 50 <= mean <= 50, mean
    assert levels.max() <= 50


def test_knee_stops_at_the_first_dirty_level_and_records_the_knee(tmp_path):
    _, frame, manifest = run(
        tmp_path,
        "--scenario",
        "knee",
        "--stages",
        "10..80",
        "--hold",
        "3",
        "--profile",
        "ideal",
        "--profile-set",
        "quota.max_active=50",
        "--commands",
        "true; sleep 0.5",
    )
    outcome = manifest["shape_outcome"]
    assert outcome["knee"] == 40 and outcome["crossed_at"] == 80 and "failure rate" in outcome["reason"]
    assert set(frame["target_users"]) == {10, 20, 40, 80}  # it stopped: no 160
    dirty = frame[frame["target_users"] == 80]
    assert (dirty["failure_kind"] == "quota_exhausted").sum() > 0.05 * len(dirty)


def test_staggered_starts_follow_the_schedule(tmp_path):
    _, frame, manifest = run(
        tmp_path,
        "--scenario",
        "staggered",
        "--users",
        "30",
        "--stagger-ms",
        "100",
        "--profile",
        "ideal",
        "--commands",
        "sleep 0.5",
    )
    assert len(frame) == 30 and frame["t_intended"].notna().all()
    intended = np.sort(frame["t_intended"].to_numpy())
    assert np.allclose(np.diff(intended), 0.1, atol=1e-6)
    lateness = frame["t_submit"] - frame["t_intended"]
    # started when intended, not when the previous one ended: each rollout outlives the 100 ms gap by 0.4 s, so
    # waiting for it would put the last start 29 x 0.4 = 11.6 s late (a busy machine's second is far from that)
    assert lateness.max() < 2.0
    assert manifest["shape"]["stagger_ms"] == 100


def test_arrival_counts_starts_dropped_at_the_in_flight_cap(tmp_path):
    _run_dir, frame, manifest = run(
        tmp_path,
        "--scenario",
        "arrival",
        "--rates",
        "20",
        "--hold",
        "4",
        "--poisson",
        "--max-inflight",
        "5",
        "--profile",
        "ideal",
        "--commands",
        "true; sleep 1",
    )
    dropped = manifest["dropped_starts"]["01-arrival20ps"]
    assert dropped > 0 and len(frame) > 0
    # a Poisson schedule of 20/s for 4 s: about 80 intended starts, every one either started or dropped
    assert 50 <= len(frame) + dropped <= 115
    assert concurrency_at_submit(frame).max() <= 5


def test_agentic_rollouts_hold_the_sandbox_through_turns(tmp_path):
    _, frame, _ = run(
        tmp_path,
        "--scenario",
        "steady",
        "--users",
        "5",
        "--hold",
        "3",
        "--profile",
        "ideal",
        "--commands",
        "true",
        "--turns",
        "3",
        "--gen-time",
        "const:0.2",
        "--reward-command",
        "echo reward",
    )
    done = frame[frame["outcome"] == "ok"]
    assert len(done) > 0 and (done["turns"] == 3).all() and (done["exec_count"] == 5).all()
    assert np.allclose(done["gen_s"], 0.6) and (done["total_s"] >= 0.6).all()


def test_distributed_run_is_one_dataset_with_no_rollout_lost_or_doubled(tmp_path):
    run_dir, frame, manifest = run(tmp_path, "--workers", "2", "--stages", "10,20", "--hold", "4", "--profile", "ideal")
    engines = manifest["engines"]
    assert len(engines) == 2 and manifest["role"] == "master"
    assert sum(engine["rows"]["rollouts"] for engine in engines) == len(frame)
    assert frame["rollout_id"].is_unique
    for engine in engines:  # each engine numbers its rollouts 1..n: every one of them arrived, once
        ids = frame.loc[frame["worker"] == engine["worker"], "rollout_id"]
        seqs = sorted(int(re.search(r"(\d+)$", rid).group(1)) for rid in ids)
        assert seqs == list(range(1, engine["rows"]["rollouts"] + 1))
    assert set(frame["worker"]) == {engine["worker"] for engine in engines}
    assert (run_dir / "locust_stats.csv").exists() and (run_dir / "locust.html").exists()
    truth = load_truth(run_dir)
    assert set(truth["status"]) == {"TERMINATED"}  # nothing leaked by any worker
