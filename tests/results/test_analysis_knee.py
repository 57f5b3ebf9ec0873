"""The knee: the last stage before the first that breaks a threshold, in concurrency order."""

from __future__ import annotations

from harness.results.figures.knee import (
    DEFAULT_MAX_FAILURE_RATE,
    DEFAULT_P99_FACTOR,
    KneeThresholds,
    find_knee,
    stage_verdicts,
)
from harness.results.figures.stage_aggregate import StageStats


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
        run_id="r",
        provider="stub",
        profile="x",
        stage=f"s{level}",
        concurrency=level,
        measured_concurrency=level,
        rollouts=100,
        ok=int(100 * (1 - failure)),
        failed=int(100 * failure),
        cancelled=0,
        cancelled_before_tti=0,
        retries=0,
        gave_up=0,
        failure_rate=failure,
        success_rate=1 - failure,
        failures_by_kind={},
        failures_by_phase={},
        phases={"tti": tti},
        tti_p99_censored_upper=p99,
        start_rate=1.0,
        time_scale=1.0,
        basis="vendor",
    )


def test_failure_rate_breaks_the_ramp():
    knee = find_knee([stage(60, 0.01, 10), stage(120, 0.02, 11), stage(240, 0.2, 12), stage(480, 0.01, 10)])
    assert (knee.stage, knee.concurrency, knee.broken_stage) == ("s120", 120, "s240")
    assert "failure rate 20.0%" in knee.reason  # a recovery above the break does not count


def test_tail_latency_breaks_relative_to_the_lowest_stage():
    knee = find_knee([stage(240, 0.0, 51), stage(60, 0.0, 10), stage(120, 0.0, 49)])  # unordered input
    assert knee.stage == "s120" and knee.broken_stage == "s240" and "5.1×" in knee.reason


def test_the_shared_rule_is_the_live_search_rule():
    """One rule for the live knee search and the report: 5% failures, TTI p99 5x the first (lowest) stage's."""
    assert (DEFAULT_MAX_FAILURE_RATE, DEFAULT_P99_FACTOR) == (0.05, 5.0)
    assert stage_verdicts(0.0, 100, 4.0, 1.0, KneeThresholds()) == []  # 4x the reference: clean
    (verdict,) = stage_verdicts(0.0, 100, 6.0, 1.0, KneeThresholds())  # 6x: past the knee
    assert "6.0×" in verdict
    assert stage_verdicts(0.05, 100, 1.0, 1.0, KneeThresholds()) == []  # at the limit is still clean
    assert "failure rate 6.0%" in stage_verdicts(0.06, 100, 1.0, 1.0, KneeThresholds())[0]
    assert stage_verdicts(0.0, 0, None, 1.0, KneeThresholds()) == ["no rollout finished during the stage"]
    assert stage_verdicts(0.0, 100, 9.0, None, KneeThresholds()) == []  # no reference yet: no relative limit
    both = stage_verdicts(0.5, 100, 60.0, 10.0, KneeThresholds())
    assert len(both) == 2 and "failure rate" in both[0] and "TTI p99" in both[1]


def test_an_explicit_p99_limit_replaces_the_factor():
    thresholds = KneeThresholds(max_p99_s=3.0)
    assert thresholds.p99_limit(1.0) == 3.0 and KneeThresholds().p99_limit(2.0) == 10.0
    assert KneeThresholds(max_p99_ratio=None).p99_limit(2.0) is None and KneeThresholds().p99_limit(None) is None
    assert stage_verdicts(0.0, 100, 4.0, 1.0, thresholds) == ["TTI p99 4 s > 3 s"]
    assert stage_verdicts(0.0, 100, 2.9, 0.1, thresholds) == []  # 29x the reference, but under the explicit limit


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
