"""The harness admits when it could be the bottleneck: per-stage timing error and its flag."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.results.figures.timing_error import FLAG_NOTE, per_rollout_error_s, stage_timing_error
from harness.results.render.summary import format_stage_table
from tests.support.stage_stats import make_stage


def frame(tti: float, lag: float | None, poll: float | None, n: int = 200, stage: str = "01-s") -> pd.DataFrame:
    return pd.DataFrame(
        {
            "stage": [stage] * n,
            "target_users": [n] * n,
            "t_submit": np.arange(n, dtype=float) * 0.01,
            "total_s": [tti + 0.1] * n,
            "tti_s": [tti] * n,
            "outcome": ["ok"] * n,
            "failure_kind": [None] * n,
            "loop_lag_s": [lag] * n,
            "ready_poll_s": [poll] * n,
        }
    )


def test_the_error_bound_adds_loop_lag_and_poll_window_and_scales_like_the_tti() -> None:
    rows = frame(1.0, 0.02, 0.03, n=3)
    assert np.allclose(per_rollout_error_s(rows), 0.05)
    assert np.allclose(per_rollout_error_s(rows, scale=0.1), 0.5)  # vendor seconds at time scale 0.1
    only_lag = frame(1.0, 0.02, None, n=2)
    assert np.allclose(per_rollout_error_s(only_lag), 0.02)
    neither = frame(1.0, None, None, n=2)
    assert np.isnan(per_rollout_error_s(neither)).all()
    assert np.isnan(per_rollout_error_s(neither.drop(columns=["loop_lag_s", "ready_poll_s"]))).all()


def test_a_stage_is_flagged_past_five_percent_of_its_p50_or_fifty_ms() -> None:
    assert not stage_timing_error(np.full(100, 0.049), tti_p50_s=0.2).flagged  # under the 50 ms floor
    assert stage_timing_error(np.full(100, 0.051), tti_p50_s=0.2).flagged
    assert not stage_timing_error(np.full(100, 0.4), tti_p50_s=10.0).flagged  # 4% of 10 s
    assert stage_timing_error(np.full(100, 0.6), tti_p50_s=10.0).flagged  # 6%
    one_bad = np.r_[np.full(98, 0.01), 0.9, 0.9]  # p99 (nearest rank) of 100 is the 99th value
    assert stage_timing_error(one_bad, tti_p50_s=1.0).flagged
    unknown = stage_timing_error(np.full(10, math.nan), tti_p50_s=1.0)
    assert math.isnan(unknown.p99_s) and not unknown.flagged and unknown.describe() == "not recorded"


def test_the_end_of_run_table_marks_a_stage_the_harness_could_have_skewed() -> None:
    def table(tti: float, lag: float, poll: float) -> str:
        rows = frame(tti, lag, poll)
        error = stage_timing_error(per_rollout_error_s(rows), tti_p50_s=tti)
        return format_stage_table([make_stage(n=len(rows), tti_s=tti, timing_error=error)])

    clean = table(2.0, 0.005, 0.01)
    assert FLAG_NOTE not in clean and "15 ms" in clean
    skewed = table(0.2, 0.12, 0.0)
    assert FLAG_NOTE in skewed and "120 ms (!)" in skewed
