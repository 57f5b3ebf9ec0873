"""A run with a plan: its steps in the summary's table, in summary.json, and as figures a plain pandas call
reproduces; `step:` thresholds, and a step the run never ran named as an error (steps tables built with pyarrow in
the documented schema: tests/support/step_rows.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.errors import UsageError
from harness.results.export.summary_json import validate_summary
from harness.results.figures.run_figures import load_aggregate, run_figures
from harness.results.figures.step_figures import load_step_view, worker_hours
from harness.results.figures.thresholds import check_steps, evaluate, parse, parse_all
from harness.results.read.dataset import read_run_info
from tests.support.commands import stampede
from tests.support.step_rows import plan_rollout, write_plan_run


def _rollouts() -> list:
    """30 rollouts: the first 5 pull their image cold (2 s inside a 2.5 s ready); one fails its upload."""
    rollouts = [
        plan_rollout(i, pull_s=2.0 if i < 5 else 0.0, ready_s=2.5 if i < 5 else 0.3, overhead_s=0.004 + 0.001 * (i % 3))
        for i in range(30)
    ]
    rollouts.append(plan_rollout(30, failed_at="upload"))
    return rollouts


@pytest.fixture(scope="module")
def scaled_plan_run(tmp_path_factory) -> Path:
    """At time scale 0.5 (vendor seconds twice the wall seconds), compacted (with the vendor-seconds twins)."""
    return write_plan_run(tmp_path_factory.mktemp("runs"), _rollouts(), run_id="scaled", time_scale=0.5)


@pytest.fixture(scope="module")
def shard_run(tmp_path_factory) -> Path:
    """The same run as shards (a run going or crashed): no twins, wall / time scale."""
    return write_plan_run(
        tmp_path_factory.mktemp("runs"), _rollouts(), run_id="shards", time_scale=0.5, compacted=False
    )


def test_summary_prints_each_steps_quantiles_and_failures_after_the_stage_table(scaled_plan_run):
    result = stampede("summary", str(scaled_plan_run))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.index("TTI p50") < out.index("failures by phase")  # the stage table first, then the steps
    rows: dict[str, list[str]] = {}
    for line in out.splitlines():
        if line.split():
            rows.setdefault(line.split()[0], line.split())  # the step table's row, not the tax's below it
    assert rows["upload"][1:4] == ["31", "1.00", "1"] and rows["upload"][-2:] == ["upload", "1"]
    assert rows["exec"][1] == "90" and rows["exec.overhead"][4] == "0.010"  # 5 ms wall at time scale 0.5
    assert rows["pull"][7] == "4.000"  # the cold pull, vendor seconds
    assert "exec[pytest]" in out and "exec[bash]" in out  # a kind with several named steps lists them


def test_summary_json_steps_section_validates_and_plain_pandas_reproduces_it(scaled_plan_run):
    assert stampede("summary", str(scaled_plan_run)).returncode == 0
    document = json.loads((scaled_plan_run / "summary.json").read_text())
    validate_summary(document)
    steps = {entry["step"]: entry for entry in document["steps"]["run"]}
    assert steps["upload"]["failures_by_phase"] == {"upload": 1}
    assert steps["upload"]["failures_by_kind"] == {"transfer_error": 1}
    frame = pd.read_parquet(scaled_plan_run / "steps")  # what the docs promise: one pandas call
    for kind in ("upload", "exec", "pull", "ready"):
        ok = frame[(frame.kind == kind) & frame.ok].duration_vendor_s
        for name, level in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            expected = float(np.quantile(ok, level, method="inverted_cdf"))
            assert steps[kind]["quantiles"][name]["value"] == pytest.approx(expected)
    overhead = frame[(frame.kind == "exec") & frame.ok].overhead_vendor_s
    assert steps["exec.overhead"]["quantiles"]["p50"]["value"] == pytest.approx(
        float(np.quantile(overhead, 0.5, method="inverted_cdf"))
    )
    assert set(document["steps"]["stages"]) == {"01-ramp"}


def test_shards_without_vendor_twins_read_as_wall_over_time_scale(scaled_plan_run, shard_run):
    compacted = load_step_view(read_run_info(scaled_plan_run))
    shards = load_step_view(read_run_info(shard_run))
    assert compacted is not None and shards is not None
    assert [e.durations for e in compacted.run] == pytest.approx([e.durations for e in shards.run])  # type: ignore[misc]


def test_a_run_without_steps_prints_and_writes_what_it_did_before(tmp_path):
    from tests.support.synthetic_run import SyntheticRun, SyntheticStage, write_synthetic_run

    run = write_synthetic_run(tmp_path, SyntheticRun(run_id="plain", stages=(SyntheticStage(10, 50),)))
    result = stampede("summary", str(run))
    assert (
        result.returncode == 0
        and "failures by phase" not in result.stdout
        and "infrastructure tax" not in result.stdout
    )
    assert "steps" not in json.loads((run / "summary.json").read_text())


def test_step_thresholds_gate_and_an_unknown_step_is_one_clear_error(scaled_plan_run):
    held = stampede("summary", str(scaled_plan_run), "--threshold", "step:upload p99 < 5s")
    crossed = stampede("summary", str(scaled_plan_run), "--threshold", "step:exec.overhead.p50<5ms")
    assert held.returncode == 0 and "step:upload p99 < 5s: 1 s -> ok" in held.stdout
    assert crossed.returncode == 99 and "CROSSED" in crossed.stdout  # 10 ms vendor overhead
    unknown = stampede("summary", str(scaled_plan_run), "--threshold", "step:uplod.p99<5s")
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr
    assert "has no step 'uplod'" in unknown.stderr and "upload" in unknown.stderr


def test_step_threshold_grammar():
    assert parse("step:upload p99 < 5s").metric == "step:upload.p99"
    assert parse("step:exec.overhead p50 < 10ms").bound == pytest.approx(0.01)
    assert parse("stage[*].step:exec[pytest].failures<1").stage == "*"
    assert parse("step:fork.failure_rate<5%").bound == pytest.approx(0.05)
    for bad, says in (("step:upload.p77<5", "no statistic 'p77'"), ("step:upload<5", "step:STEP.STAT")):
        with pytest.raises(UsageError, match=says):
            parse(bad)


def test_a_run_without_steps_refuses_step_thresholds(tmp_path):
    from tests.support.synthetic_run import SyntheticRun, SyntheticStage, write_synthetic_run

    run = write_synthetic_run(tmp_path, SyntheticRun(run_id="plain", stages=(SyntheticStage(10, 50),)))
    info, aggregate = load_aggregate(run)
    figures = run_figures(aggregate, load_step_view(info))
    with pytest.raises(UsageError, match="has no steps"):
        check_steps(parse_all(["step:upload.p99<5"]), figures)


def test_stage_scoped_step_thresholds_read_that_stages_steps(scaled_plan_run):
    info, aggregate = load_aggregate(scaled_plan_run)
    figures = run_figures(aggregate, load_step_view(info))
    (verdict,) = evaluate(parse_all(["stage[01-ramp].step:upload.failures<=1"]), figures)
    assert verdict.verdict == "ok" and verdict.observed == 1


def test_infrastructure_tax_prices_per_trajectory_overhead_as_the_paper_does(scaled_plan_run):
    assert worker_hours(0.010 * 150) == pytest.approx(416.67, abs=0.01)  # arXiv 2607.01415's 10 ms x 150 actions
    view = load_step_view(read_run_info(scaled_plan_run))
    assert view is not None and view.tax is not None
    parts = {p.part: p for p in view.tax.parts}
    assert view.tax.trajectories == 30  # the rollout that failed its upload ran no tool call
    # pull: 5 cold pulls of 4 vendor s over 30 trajectories; create/ready excludes the pull inside ready
    assert parts["pull"].per_trajectory_s == pytest.approx(5 * 4.0 / 30)
    ready_total = 2 * (5 * 2.5 + 25 * 0.3 + 0.2) + 2 * 0.1 * 31  # the failed rollout readied in 0.2 s
    assert parts["create/ready"].per_trajectory_s == pytest.approx((ready_total - 5 * 4.0) / 30)
    overhead = 2 * sum(0.004 + 0.001 * (i % 3) for i in range(30)) * 3
    assert parts["exec overhead"].per_trajectory_s == pytest.approx(overhead / 30)
    assert parts["exec overhead"].worker_hours_per_million == pytest.approx(overhead / 30 * 1e6 / 3600)
    assert view.tax.worker_hours_per_million == pytest.approx(sum(p.worker_hours_per_million for p in view.tax.parts))
