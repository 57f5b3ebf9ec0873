"""`--threshold`: the grammar a user writes, what each verdict means, the exit status, and the live abort."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.locust.live.live_view import LiveView
from harness.locust.live.threshold_watch import crossed_for_good, unwatched_note
from harness.results.export.summary_json import validate_summary
from harness.results.figures.stage_aggregate import PHASES
from harness.results.figures.thresholds import RunFigures, evaluate, failure_kinds, parse, parse_all
from harness.wire.messages import EngineStats
from harness.wire.run_endings import (
    ABORTED,
    COMPLETED,
    EXIT_THRESHOLDS_CROSSED,
    INTERRUPTED,
    STOPPED_BY_THRESHOLD,
    exit_code_for,
)
from harness.wire.stage_counters import StageStats as LiveStageStats
from providers.base import FailureKind
from tests.support.commands import stampede

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("text", "metric", "op", "bound", "stage"),
    [
        ("tti.p99<30", "tti.p99", "<", 30.0, None),
        (" create.p50 <= 2s ", "create.p50", "<=", 2.0, None),
        ("tti.p99.9<1500ms", "tti.p99.9", "<", 1.5, None),
        ("init_failure_rate<2%", "init_failure_rate", "<", 0.02, None),
        ("success_rate>=0.99", "success_rate", ">=", 0.99, None),
        ("failures.rate_limited<5", "failures.rate_limited", "<", 5.0, None),
        ("stage[02-ramp40].tti.p99<30", "tti.p99", "<", 30.0, "02-ramp40"),
        ("stage[*].start_rate>1", "start_rate", ">", 1.0, "*"),
    ],
)
def test_expressions_a_user_writes_parse_to_vendor_seconds_fractions_and_counts(text, metric, op, bound, stage):
    threshold = parse(text)
    assert (threshold.metric, threshold.op, threshold.bound, threshold.stage) == (
        metric,
        op,
        pytest.approx(bound),
        stage,
    )


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("tti.p99", "not METRIC OP NUMBER"),
        ("tti.p99<abc", "'abc' is not a number"),
        ("tti<3", "tti has no statistic"),
        ("tti.p999<3", "'p999'"),
        ("latency.p99<3", "unknown metric 'latency.p99' (phases: tti, create"),
        ("failures.throttled<1", "unknown failure kind 'throttled'"),
        ("failure_rate<50", "a rate is between 0 and 1"),
        ("tti.p99<3%", "unit '%' does not fit a duration"),
        ("tti.p99==3", "operator '=='"),
        ("stage[].tti.p99<3", "empty stage name"),
    ],
)
def test_a_bad_expression_is_one_usage_error_naming_the_bad_part(text, names):
    with pytest.raises(UsageError) as caught:
        parse(text)
    message = str(caught.value)
    assert names in message and text.strip() in message and "\n" not in message


def test_every_phase_of_the_aggregation_and_every_failure_kind_is_accepted():
    for phase, _ in PHASES:  # read from the aggregation: a phase added there is a metric here
        assert parse(f"{phase}.p95<1").metric == f"{phase}.p95"
    assert set(failure_kinds()) == {kind.value for kind in FailureKind}


def test_an_environment_variable_holds_several_separated_by_semicolons():
    assert [t.metric for t in parse_all(["tti.p99<30; failure_rate<0.02", "failures<3"])] == [
        "tti.p99",
        "failure_rate",
        "failures",
    ]


FIGURES = RunFigures(
    run={"tti.p99": 12.0, "failure_rate": 0.01, "failures": 3.0, "failures.capacity": 3.0},
    stages={
        "01-ramp10": {"tti.p99": 4.0, "failure_rate": 0.0, "failures": 0.0, "tti.p50": float("nan")},
        "02-ramp20": {"tti.p99": 20.0, "failure_rate": 0.02, "failures": 3.0, "failures.capacity": 3.0},
    },
)


def test_verdicts_say_what_must_hold_per_scope_and_count_missing_data_as_crossed():
    texts = [
        "tti.p99<15",
        "stage[*].tti.p99<10",
        "failures.rate_limited<1",
        "stage[09-typo].tti.p99<99",
        "stage[01-ramp10].tti.p50<1",
        "failure_rate<=1%",
    ]
    verdicts = evaluate(parse_all(texts), FIGURES)
    got = [(v.threshold.text, v.scope, v.observed, v.verdict) for v in verdicts]
    assert got == [
        ("tti.p99<15", "run", 12.0, "ok"),
        ("stage[*].tti.p99<10", "01-ramp10", 4.0, "ok"),
        ("stage[*].tti.p99<10", "02-ramp20", 20.0, "crossed"),
        ("failures.rate_limited<1", "run", 0.0, "ok"),  # a kind never seen counts 0
        ("stage[09-typo].tti.p99<99", "09-typo", None, "no_data"),  # a misspelt stage must not pass a CI gate
        ("stage[01-ramp10].tti.p50<1", "01-ramp10", None, "no_data"),  # no samples
        ("failure_rate<=1%", "run", 0.01, "ok"),
    ]
    assert [v.crossed for v in verdicts] == [False, False, True, False, True, True, False]


def test_a_crossed_threshold_turns_a_completed_run_into_99_but_a_signal_wins():
    assert exit_code_for(COMPLETED, thresholds_crossed=True) == EXIT_THRESHOLDS_CROSSED == 99
    assert exit_code_for(COMPLETED) == 0
    assert exit_code_for(STOPPED_BY_THRESHOLD) == 99
    assert exit_code_for(INTERRUPTED, thresholds_crossed=True) == 130
    assert exit_code_for(ABORTED, thresholds_crossed=True) == 131


def _live(stages: dict[str, LiveStageStats]) -> LiveView:
    live = LiveView()
    live.update("local", EngineStats(stages={name: stats.to_wire() for name, stats in stages.items()}))
    return live


def test_the_live_abort_acts_only_on_counts_crossed_for_good():
    live = _live({"01-ramp10": LiveStageStats(ok=5, failed=2, failures=Counter({"capacity": 2}))})
    thresholds = parse_all(
        [
            "failures.capacity<2",
            "failures<5",
            "failure_rate<0.01",
            "tti.p99<0.001",
            "stage[02-ramp20].failures<1",
            "failures>100",
        ]
    )
    crossed = crossed_for_good(thresholds, live)
    # rates and quantiles can come back, a stage not yet run has no verdict, a lower bound on a count can be met
    assert [(v.threshold.text, v.scope, v.observed) for v in crossed] == [("failures.capacity<2", "run", 2.0)]
    # and the user is told which of theirs wait for the end
    note = unwatched_note(thresholds)
    assert note is not None and "failure_rate<0.01, tti.p99<0.001, failures>100" in note
    assert unwatched_note(parse_all(["failures<1"])) is None


@pytest.mark.slow
def test_a_run_whose_threshold_is_crossed_finishes_exits_99_and_says_why(tmp_path):
    result = stampede(
        "run",
        "--profile",
        "ideal",
        "--scenario",
        "burst",
        "--users",
        "20",
        "--out",
        str(tmp_path),
        "--run-id",
        "crossed",
        "--progress-interval",
        "0",
        "--threshold",
        "tti.p99<0.001",
        "--threshold",
        "failures<1000",
    )
    assert result.returncode == 99, result.stderr
    run_dir = tmp_path / "crossed"
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["status"] == "completed" and manifest["exit_code"] == 99
    assert [(t["expression"], t["verdict"]) for t in manifest["thresholds"]] == [
        ("tti.p99<0.001", "crossed"),
        ("failures<1000", "ok"),
    ]
    summary = json.loads((run_dir / "summary.json").read_text())
    validate_summary(summary)
    assert summary["thresholds_crossed"] and summary["exit_code"] == 99 and summary["unit"] == "vendor_seconds"
    assert summary["thresholds"][0]["observed"] == summary["run"]["quantiles"]["tti"]["p99"]["value"] > 0.001
    assert "tti.p99<0.001: " in result.stdout and "CROSSED" in result.stdout and "TTI p50 (vendor s)" in result.stdout
    # the same verdict from the folder afterwards, with the exit status a CI gate reads
    again = stampede("summary", str(run_dir), "--threshold", "tti.p99<0.001")
    assert again.returncode == 99 and "CROSSED" in again.stdout
    assert stampede("summary", str(run_dir), "--threshold", "tti.p99<1000").returncode == 0


@pytest.mark.slow
def test_abort_on_threshold_stops_a_long_run_drained_with_exit_99(tmp_path):
    # every first command times out: exec_timeout failures from the first seconds of a stage meant to hold 120 s
    result = stampede(
        "run",
        "--profile",
        "ideal",
        "--stages",
        "5",
        "--hold",
        "120",
        "--exec-timeout",
        "0.001",
        "--out",
        str(tmp_path),
        "--run-id",
        "stopped",
        "--progress-interval",
        "0",
        "--threshold",
        "failures.exec_timeout<3",
        "--abort-on-threshold",
        timeout=100,
    )
    assert result.returncode == 99, result.stderr
    assert "stopping — failures.exec_timeout<3" in result.stderr
    manifest = json.loads((tmp_path / "stopped" / "run.json").read_text())
    assert manifest["status"] == STOPPED_BY_THRESHOLD and manifest["exit_code"] == 99
    assert manifest["wall_s"] < 100  # long before the stage's hold ended
    assert manifest["stopped_by_thresholds"][0]["expression"] == "failures.exec_timeout<3"
    assert all(engine.get("reaped_by_label") is not None for engine in manifest["engines"])
    validate_summary(json.loads((tmp_path / "stopped" / "summary.json").read_text()))


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory) -> Path:
    from tests.support.synthetic_run import SyntheticRun, SyntheticStage, write_synthetic_run

    spec = SyntheticRun(run_id="gate", time_scale=0.1, stages=(SyntheticStage(20, 300, init_failure_p=0.1),), seed=5)
    return write_synthetic_run(tmp_path_factory.mktemp("runs"), spec)


def test_report_and_summary_gate_a_finished_run_in_vendor_seconds(synthetic_run, tmp_path):
    from harness.results.figures.run_figures import load_aggregate

    _, aggregate = load_aggregate(synthetic_run, "vendor")
    p50 = aggregate.run.phases["tti"]["p50"]  # vendor seconds: ten times the wall figure at time scale 0.1
    above, below = f"tti.p50<{p50 * 1.01:.6f}", f"tti.p50<{p50 * 0.99:.6f}"
    for command in (
        ["summary", str(synthetic_run)],
        ["report", str(synthetic_run), "--no-figures", "-o", str(tmp_path)],
    ):
        assert stampede(*command, "--threshold", above, "--seconds", "wall").returncode == 0
        crossed = stampede(*command, "--threshold", below, "--threshold", "init_failure_rate<0.5")
        assert crossed.returncode == 99 and f"{below}: " in crossed.stdout and "CROSSED" in crossed.stdout
        bad = stampede(*command, "--threshold", "tti.p99<<1")
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "'<1' is not a number" in bad.stderr


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--threshold", "tti.p99<<1"], "'<1' is not a number"),
        (["--threshold", "failures.throttled<1"], "unknown failure kind 'throttled'"),
        (["--abort-on-threshold"], "--abort-on-threshold needs a --threshold"),
    ],
)
def test_a_run_with_a_bad_threshold_never_starts(tmp_path, args, names):
    result = stampede("run", "--profile", "ideal", "--scenario", "burst", "--users", "2", "--out", str(tmp_path), *args)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and names in result.stderr
    assert not any(tmp_path.iterdir())  # no run folder: nothing ran
