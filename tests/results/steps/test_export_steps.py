"""Latency model v2: per-step distributions, fork versus fresh starts and the image cache's cold/warm split from
runs with a plan (steps tables built with pyarrow: tests/support/step_rows.py); version-1 files still validate."""

from __future__ import annotations

import json

import pytest

from harness.errors import UsageError
from harness.results.export.latency_export import QUANTILE_LEVELS, build_latency_model
from harness.results.export.latency_schema import validate_latency_model
from tests.support.step_rows import fork_group, plan_rollout, write_plan_run
from tests.support.synthetic_run import SyntheticRun, SyntheticStage, write_synthetic_run

P50 = QUANTILE_LEVELS.index(0.5)


def test_export_v2_carries_each_step_and_fork_apart_from_fresh_starts(tmp_path):
    rollouts = [plan_rollout(i, pull_s=30.0 if i < 4 else 0.0, ready_s=30.3 if i < 4 else 0.3) for i in range(40)]
    rollouts += [r for g in range(10) for r in fork_group(g, copies=4, fork_s=2.0)]
    document = build_latency_model([write_plan_run(tmp_path, rollouts)], fit=False)
    assert document["version"] == 2
    model = document["models"][0]
    (bucket,) = model["buckets"]
    steps = bucket["steps"]
    assert {"create", "pull", "ready", "fork", "upload", "exec", "exec.overhead", "snapshot"} <= set(steps)
    assert steps["upload"]["quantiles"][P50] == pytest.approx(0.5) and steps["upload"]["per_rollout"] > 0
    assert steps["exec.overhead"]["quantiles"][P50] == pytest.approx(0.01)
    fork, fresh = bucket["starts"]["fork"], bucket["starts"]["fresh"]
    assert fork["n"] == 10 and fork["copies"] == 4 and fork["quantiles"][P50] == pytest.approx(2.0)
    assert fresh["n"] == 50 and fresh["quantiles"][P50] == pytest.approx(0.4)  # 40 rollouts + 10 prepared sandboxes
    pull = model["image_pull"]
    assert (pull["creates"], pull["cold"], pull["cold_per_run"]) == (50, 4, 4.0)
    assert pull["cold_pull"]["quantiles"][P50] == pytest.approx(30.0)
    assert pull["warm_start"]["quantiles"][-1] == pytest.approx(0.4)  # no cold pull in a warm start
    assert pull["pull_share_of_start"] == pytest.approx(120.0 / (4 * 30.4 + 46 * 0.4))


def test_a_fork_start_waits_for_the_slowest_copy_and_the_prepared_sandbox_is_no_trajectory(tmp_path):
    from harness.results.figures.step_figures import load_step_view
    from harness.results.read.dataset import read_run_info

    run = write_plan_run(tmp_path, [r for g in range(5) for r in fork_group(g, copies=4, fork_s=1.0, copy_ready_s=0.2)])
    (bucket,) = build_latency_model([run], fit=False)["models"][0]["buckets"]
    assert bucket["starts"]["fork"]["quantiles"][P50] == pytest.approx(1.2)  # the fork, then the slowest copy ready
    view = load_step_view(read_run_info(run))
    assert view is not None and view.tax is not None and view.tax.trajectories == 20  # 5 groups x 4 copies


def test_a_run_without_steps_exports_v2_without_step_parts_and_v1_files_still_validate(tmp_path):
    run = write_synthetic_run(tmp_path, SyntheticRun(run_id="plain", stages=(SyntheticStage(10, 100),)))
    document = build_latency_model([run], fit=False)
    assert "image_pull" not in document["models"][0] and "steps" not in document["models"][0]["buckets"][0]
    old = json.loads(json.dumps(document)) | {"version": 1}
    validate_latency_model(old)  # v1's schema: same fields
    old["models"][0]["image_pull"] = {}
    with pytest.raises(UsageError, match="latency_model v1"):
        validate_latency_model(old)  # v1 has no image_pull
