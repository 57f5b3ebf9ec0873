"""summary.json and the printed stage table: what a CI script and a reader rely on (vendor seconds, said so;
small samples marked; a document that validates against its schema, and a broken one that does not)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.results.export.summary_json import validate_summary
from harness.results.figures.run_figures import load_aggregate
from harness.results.render.summary import SMALL_SAMPLE_MARK, SMALL_SAMPLE_NOTE, format_stage_table
from tests.support.commands import stampede
from tests.support.stage_stats import make_stage
from tests.support.synthetic_run import SyntheticRun, SyntheticStage, write_synthetic_run

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def scaled_run(tmp_path_factory) -> Path:
    """A run at time scale 0.1: vendor seconds are ten times its wall seconds."""
    stages = (SyntheticStage(20, 174, init_failure_p=0.05), SyntheticStage(40, 1200, init_failure_p=0.05))
    spec = SyntheticRun(run_id="scaled", time_scale=0.1, stages=stages, seed=3)
    return write_synthetic_run(tmp_path_factory.mktemp("runs"), spec)


def test_summary_prints_vendor_seconds_says_so_and_switches_to_wall(scaled_run):
    vendor = stampede("summary", str(scaled_run))
    wall = stampede("summary", str(scaled_run), "--seconds", "wall")
    assert vendor.returncode == 0 and wall.returncode == 0, vendor.stderr + wall.stderr
    assert "TTI p50 (vendor s)" in vendor.stdout and "TTI p50 (wall s)" in wall.stdout
    _, aggregate = load_aggregate(scaled_run, "vendor")
    _, wall_aggregate = load_aggregate(scaled_run, "wall")
    first, first_wall = aggregate.stats.stages[0], wall_aggregate.stats.stages[0]
    assert first.phases["tti"]["p50"] == pytest.approx(first_wall.phases["tti"]["p50"] / 0.1)
    assert f"{first.phases['tti']['p50']:.3f}"[:4] in vendor.stdout  # the vendor figure is the one printed


def test_a_quantile_with_too_few_samples_beyond_it_is_marked():
    table = format_stage_table([make_stage("01-s", n=174, tti_s=2.0), make_stage("02-s", n=20_000, tti_s=2.0)])
    small, large = (line for line in table.splitlines() if line.startswith(("01-s", "02-s")))
    # 174 samples: p90 has 17.4 beyond it (unmarked), p99 1.74 and p99.9 0.174 (marked); 20,000: p99.9 has 20
    assert small.split()[7:11] == ["2.000", "2.000", f"2.000{SMALL_SAMPLE_MARK}", f"2.000{SMALL_SAMPLE_MARK}"]
    assert SMALL_SAMPLE_MARK not in large and SMALL_SAMPLE_NOTE in table


def test_summary_writes_a_summary_json_that_validates_and_a_broken_one_does_not(scaled_run):
    assert stampede("summary", str(scaled_run), "--threshold", "stage[*].init_failure_rate<50%").returncode == 0
    document = json.loads((scaled_run / "summary.json").read_text())
    validate_summary(document)
    assert document["unit"] == "vendor_seconds" and document["time_scale"] == 0.1 and document["version"] == 1
    first = document["stages"][0]
    assert first["counts"]["rollouts"] == 174 and first["quantiles"]["tti"]["p99"]["small_sample"] is True
    assert first["quantiles"]["tti"]["p50"]["small_sample"] is False
    run = document["run"]
    assert run["counts"]["rollouts"] == 174 + 1200 and set(run["quantiles"]) >= {"tti", "create"}
    assert [t["scope"] for t in document["thresholds"]] == [s["stage"] for s in document["stages"]]
    broken = [
        ("unit", "wall_seconds"),
        ("stages", [{**first, "counts": {**first["counts"], "ok": -1}}]),
        ("run", {**run, "failure_rate": 1.5}),
        ("thresholds", [{**document["thresholds"][0], "verdict": "maybe"}]),
    ]
    for key, value in broken:
        bad = copy.deepcopy(document)
        bad[key] = value
        with pytest.raises(UsageError, match="summary v1 at"):
            validate_summary(bad)
    missing = copy.deepcopy(document)
    del missing["stages"][0]["quantiles"]["tti"]["p99"]
    with pytest.raises(UsageError, match="stages/0/quantiles/tti"):
        validate_summary(missing)


@pytest.mark.slow
def test_a_real_runs_summary_json_validates(tmp_path):
    result = stampede(
        "run",
        "--scenario",
        "ramp",
        "--stages",
        "5,10",
        "--hold",
        "3",
        "--profile",
        "ideal",
        "--out",
        str(tmp_path),
        "--run-id",
        "real",
        "--progress-interval",
        "0",
    )
    assert result.returncode == 0, result.stderr
    document = json.loads((tmp_path / "real" / "summary.json").read_text())
    validate_summary(document)
    assert [s["stage"] for s in document["stages"]] == ["01-ramp5", "02-ramp10"]
    assert document["status"] == "completed" and document["exit_code"] == 0 and document["thresholds"] == []
    assert "TTI p50 (vendor s)" in result.stdout


def test_starts_per_second_are_over_each_stages_submit_span_not_diluted_by_the_drain(tmp_path):
    # a submit every 0.5 s, 21 per stage (10 s of submits), each rollout running a minute after its last submit
    stages = tuple(SyntheticStage(21, 21, init_failure_p=0.0, stagger_s=0.5) for _ in range(2))
    run_dir = write_synthetic_run(tmp_path, SyntheticRun(run_id="staggered", stages=stages, exec_s=60.0, seed=4))
    _, aggregate = load_aggregate(run_dir, "vendor")
    assert [stage.start_rate for stage in aggregate.stats.stages] == [pytest.approx(21 / 10.0)] * 2


def test_a_summary_json_that_fails_its_schema_is_not_written_and_the_run_exits_3(tmp_path, monkeypatch):
    """A bug of ours (a document that does not match its own schema) ends the run with exit 3 and one line that
    says summary.json was not written: the rows stay, the table is still printed, and the exit is not 0."""
    import pandas as pd

    from harness.results.export import summary_json
    from harness.results.export.json_schemas import SchemaMismatch
    from harness.results.render import run_summary

    def mismatched(run_dir: Path, document: dict) -> Path:
        raise SchemaMismatch("summary.json does not match summary v1 at stages/0/stage: '' should be non-empty")

    assert summary_json.write_summary is run_summary.write_summary  # the one the conclusion writes with
    monkeypatch.setattr(run_summary, "write_summary", mismatched)
    run_dir = write_synthetic_run(tmp_path, SyntheticRun(run_id="mismatch", stages=(SyntheticStage(20, 50),), seed=2))
    manifest = json.loads((run_dir / "run.json").read_text())
    rollouts = pd.read_parquet(next(run_dir.glob("rollouts-*.parquet")))
    conclusion = run_summary.conclude_run(run_dir, manifest, rollouts, [])
    assert (conclusion.exit_code, conclusion.summary_path, manifest["exit_code"]) == (3, None, 3)
    assert conclusion.text.splitlines()[-1].startswith("exit 3: summary.json not written: summary.json does not")
    assert "TTI p50" in conclusion.text and not (run_dir / "summary.json").exists()
