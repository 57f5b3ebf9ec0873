"""The knee: the last stage before the first that breaks a threshold, in concurrency order."""

from __future__ import annotations

from harness.results.knee import KneeThresholds, find_knee
from harness.results.stage_aggregate import StageStats


def stage(level: int, failure: float, p99: float) -> StageStats:
    tti = {
        "p50": p99 / 4,
        "p90": p99 / 2,
        "p95": p99 / 1.5,
        "p99": p99,
        "p99.9": p99,
        "max": p99,
        "mean": 1.0,
        "n": 100,
    }
    return StageStats(
        run_id="r", provider="stub", profile="x", stage=f"s{level}", concurrency=level, measured_concurrency=level,
        rollouts=100, ok=int(100 * (1 - failure)), failed=int(100 * failure), cancelled=0, cancelled_before_tti=0, retries=0, gave_up=0,
        failure_rate=failure, success_rate=1 - failure, failures_by_kind={}, failures_by_phase={},
        phases={"tti": tti}, tti_p99_censored_upper=p99, start_rate=1.0, time_scale=1.0, basis="vendor",
    )  # fmt: skip


def test_failure_rate_breaks_the_ramp():
    knee = find_knee([stage(60, 0.01, 10), stage(120, 0.02, 11), stage(240, 0.2, 12), stage(480, 0.01, 10)])
    assert (knee.stage, knee.concurrency, knee.broken_stage) == ("s120", 120, "s240")
    assert "failure rate 20.0%" in knee.reason  # a recovery above the break does not count


def test_tail_latency_breaks_relative_to_the_lowest_stage():
    knee = find_knee([stage(240, 0.0, 31), stage(60, 0.0, 10), stage(120, 0.0, 29)])  # unordered input
    assert knee.stage == "s120" and knee.broken_stage == "s240" and "3.1×" in knee.reason


def test_thresholds_are_settable():
    stages = [stage(60, 0.01, 10), stage(120, 0.04, 25)]
    assert find_knee(stages).stage == "s120"
    assert find_knee(stages, KneeThresholds(max_failure_rate=0.03)).stage == "s60"
    assert find_knee(stages, KneeThresholds(max_p99_ratio=2.0)).stage == "s60"
    assert find_knee(stages, KneeThresholds(max_p99_ratio=None, max_p99_s=20)).stage == "s60"


def test_no_break_and_immediate_break():
    assert find_knee([stage(60, 0.0, 1), stage(120, 0.0, 1)]).describe().startswith("holds up to 120")
    knee = find_knee([stage(960, 0.18, 300)])
    assert knee.stage is None and knee.describe().startswith("no knee")
