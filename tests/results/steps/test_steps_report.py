"""`stampede report` and `stampede compare` on runs with a plan: the steps' tables, the breakdown and survival
figures, the infrastructure tax, and `step:` thresholds gating a candidate (tables built with pyarrow in the
documented steps schema: tests/support/step_rows.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.commands import stampede
from tests.support.step_rows import plan_rollout, write_plan_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    """A baseline whose uploads take 4 s and a candidate whose uploads take 6 s (one failing); the baseline's
    downloads take 2 s longer, so both hold as many rollouts in flight (compare pairs stages by that)."""
    root = tmp_path_factory.mktemp("runs")
    base = write_plan_run(root, [plan_rollout(i, upload_s=4.0, download_s=2.05) for i in range(20)], run_id="base")
    slow = [plan_rollout(i, upload_s=6.0) for i in range(20)] + [plan_rollout(20, failed_at="upload")]
    return base, write_plan_run(root, slow, run_id="slow")


def test_report_draws_each_step_and_prices_the_tax(runs, tmp_path):
    _, slow = runs
    result = stampede("report", str(slow), "--out", str(tmp_path / "report"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "report" / "step_breakdown.png").stat().st_size > 1000
    assert (tmp_path / "report" / "step_survival.png").stat().st_size > 1000
    page = (tmp_path / "report" / "report.html").read_text()
    for heading in ("steps (vendor seconds)", "time goes, by step", "infrastructure tax"):
        assert heading in page and heading in result.stdout
    tax = [line for line in result.stdout.splitlines() if line.startswith("upload ")]
    # 20 uploads of 6 s and one failed after 0.5 s, over the 20 trajectories that ran a tool call: 6.025 s each,
    # x 1e6 / 3600 = 1,673.6 worker-hours per million trajectories
    assert tax and tax[-1].split()[-1] == "1,673.6"


def test_compare_gates_a_candidate_on_a_step_and_names_an_unknown_one(runs, tmp_path):
    base, slow = runs
    crossed = stampede(
        "compare", str(base), str(slow), "--threshold", "step:upload p99 < 5s", "-o", str(tmp_path / "compare")
    )
    assert crossed.returncode == 99, crossed.stderr
    assert "step:upload p99 < 5s: 6 s -> CROSSED" in crossed.stdout
    held = stampede("compare", str(slow), str(base), "--threshold", "step:upload.p99<5s", "-o", str(tmp_path / "c"))
    # base: 4 s uploads
    assert held.returncode == 0, held.stdout + held.stderr
    unknown = stampede(
        "compare", str(base), str(slow), "--threshold", "step:snapshot.p99<5s", "-o", str(tmp_path / "compare")
    )
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr
    assert "has no step 'snapshot'" in unknown.stderr


def test_compare_gates_a_step_against_the_baseline(runs, tmp_path):
    base, slow = runs
    worse = stampede("compare", str(base), str(slow), "--gate", "step:upload.p50", "-o", str(tmp_path / "compare"))
    assert worse.returncode == 98, worse.stdout + worse.stderr  # 4 s -> 6 s uploads, beyond the noise
    assert "step:upload.p50" in worse.stdout
    same = stampede("compare", str(base), str(slow), "--gate", "step:download.p50", "-o", str(tmp_path / "compare"))
    assert same.returncode == 0, same.stdout + same.stderr  # faster downloads: better, not a regression
    unknown = stampede("compare", str(base), str(slow), "--gate", "step:fork.p50", "-o", str(tmp_path / "compare"))
    assert unknown.returncode == 2 and "has no step 'fork'" in unknown.stderr and "Traceback" not in unknown.stderr
