"""`stampede export`: the latency model (v1) validates against the shipped schema and says what the runs said."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.errors import UsageError
from harness.results.export.latency_export import QUANTILE_LEVELS, build_latency_model
from harness.results.export.latency_schema import latency_model_schema, validate_latency_model
from harness.results.figures.fits import fit_sample
from harness.results.read.dataset import load_rollouts
from harness.rlmodel.latency_input import load_latency_model
from tests.support.synthetic_run import SyntheticRun, SyntheticStage, ramp_stages, write_synthetic_run

REPO = Path(__file__).resolve().parents[2]


def command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli.export", *args], capture_output=True, text=True, timeout=180, cwd=REPO
    )


@pytest.fixture(scope="module")
def ramp(tmp_path_factory) -> Path:
    return write_synthetic_run(tmp_path_factory.mktemp("runs"), SyntheticRun(run_id="ramp", stages=ramp_stages(15_000)))


def test_export_validates_and_matches_the_rows(ramp, tmp_path):
    out = tmp_path / "lm.json"
    result = command(str(ramp), "-o", str(out))
    assert result.returncode == 0, result.stderr
    document = json.loads(out.read_text())
    validate_latency_model(document)
    (model,) = document["models"]
    # labelled by what was measured in flight (random submits around each target read a little off it)
    buckets = model["buckets"]
    assert [b["target_concurrency"] for b in buckets] == [60, 120, 240, 480, 960]
    for bucket in buckets:
        assert bucket["concurrency_source"] == "measured"
        assert bucket["concurrency"] == pytest.approx(bucket["target_concurrency"], rel=0.15)
    rows = load_rollouts(ramp)
    stage = rows[rows["stage"] == "05-ramp960"]
    bucket = model["buckets"][-1]
    finished = stage["outcome"].isin(["ok", "failed"]).sum()
    assert bucket["samples"]["cancelled"] == (stage["outcome"] == "cancelled").sum() > 0
    kinds = stage.loc[stage["outcome"] == "failed", "failure_kind"].value_counts()
    assert bucket["failure_probability"]["by_kind"]["ready_timeout"] == pytest.approx(kinds["ready_timeout"] / finished)
    ok = stage[stage["outcome"] == "ok"]
    startup = np.sort((ok["create_s"] + ok["ready_s"]).to_numpy())
    grid = bucket["metrics"]["startup"]["quantiles"]
    for level, value in zip(QUANTILE_LEVELS, grid, strict=True):
        assert value == pytest.approx(np.quantile(startup, level, method="inverted_cdf"))
    fits = bucket["metrics"]["tti"]["fits"]
    assert {"lognormal", "gamma", "weibull", "loglogistic"} <= {f["family"] for f in fits}
    assert bucket["metrics"]["tti"]["selected_fit"] == fits[0]["family"]
    assert fits == sorted(fits, key=lambda f: f["ks_statistic"])
    assert document["provenance"]["runs"][0]["run_id"] == "ramp" and document["time_basis"] == "vendor"


def test_runs_at_different_time_scales_pool_in_vendor_seconds(tmp_path):
    stage = (SyntheticStage(100, 4000, ready_median_s=5.0, init_failure_p=0.0),)
    slow = write_synthetic_run(tmp_path, SyntheticRun(run_id="real-time", time_scale=1.0, stages=stage, seed=1))
    fast = write_synthetic_run(tmp_path, SyntheticRun(run_id="tenfold", time_scale=0.1, stages=stage, seed=2))
    document = build_latency_model([slow, fast], fit=False)
    (model,) = document["models"]
    assert model["run_ids"] == ["real-time", "tenfold"]
    (bucket,) = model["buckets"]
    assert bucket["samples"]["rollouts"] == 8000
    median = bucket["metrics"]["startup"]["quantiles"][QUANTILE_LEVELS.index(0.5)]
    assert median == pytest.approx(5.05, rel=0.05)  # 5 s ready + 0.05 s create, in vendor seconds
    assert {r["time_scale"] for r in document["provenance"]["runs"]} == {1.0, 0.1}


def test_profile_overrides_are_another_vendor(tmp_path):
    plain = write_synthetic_run(tmp_path, SyntheticRun(run_id="plain", stages=(SyntheticStage(100, 500),)))
    capped = write_synthetic_run(tmp_path, SyntheticRun(run_id="capped", stages=(SyntheticStage(100, 500),)))
    manifest = json.loads((capped / "run.json").read_text())
    manifest["parameters"] = {"profile_overrides": {"quota.max_active": 100}}
    (capped / "run.json").write_text(json.dumps(manifest))
    document = build_latency_model([plain, capped], fit=False)
    assert [m["profile"] for m in document["models"]] == ["synthetic", "synthetic[quota.max_active=100]"]
    with pytest.raises(UsageError, match="pick one with --vendor"):
        path = tmp_path / "lm.json"
        path.write_text(json.dumps(document))
        load_latency_model(path).choose(None)


@pytest.mark.parametrize(
    ("family", "draw"),
    [
        ("lognormal", lambda rng: rng.lognormal(1.0, 0.8, 20_000)),
        ("gamma", lambda rng: rng.gamma(3.0, 2.0, 20_000)),
        ("weibull", lambda rng: 3.0 * rng.weibull(1.5, 20_000)),
    ],
)
def test_the_goodness_of_fit_test_picks_the_true_family(family, draw):
    fits = fit_sample(draw(np.random.default_rng(0)))
    assert fits[0].family in (family, "shifted_lognormal" if family == "lognormal" else family)
    true = next(f for f in fits if f.family == family)
    assert true.ks_pvalue > 0.01 and true.ks_statistic < 0.02


def test_schema_ships_in_the_package_and_rejects_broken_models(ramp):
    assert latency_model_schema()["title"].startswith("stampede latency model")
    document = build_latency_model([ramp], fit=False)
    broken = copy.deepcopy(document)
    del broken["models"][0]["buckets"][0]["samples"]
    with pytest.raises(UsageError, match="samples"):
        validate_latency_model(broken)
    decreasing = copy.deepcopy(document)
    decreasing["models"][0]["buckets"][0]["metrics"]["tti"]["quantiles"][5] = 1e9
    with pytest.raises(UsageError, match="quantiles decrease"):
        validate_latency_model(decreasing)
    wrong_kind = copy.deepcopy(document)
    wrong_kind["models"][0]["buckets"][0]["failure_probability"]["by_kind"]["gremlins"] = 0.1
    with pytest.raises(UsageError, match="by_kind"):
        validate_latency_model(wrong_kind)


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    for args, needle in (([str(tmp_path / "nope")], "does not exist"), ([str(tmp_path)], "not a stampede run folder")):
        result = command(*args, "-o", str(tmp_path / "lm.json"))
        assert result.returncode == 2 and needle in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_buckets_are_measured_concurrency_with_the_target_beside_it(tmp_path):
    # a staggered 100 (one start every 600 ms, ~1.5 s each) keeps ~3 in flight; a burst of 100 keeps 100
    staggered = SyntheticStage(100, 100, ready_median_s=1.2, ready_sigma=0.2, init_failure_p=0.0, stagger_s=0.6)
    burst = SyntheticStage(100, 100, ready_median_s=1.2, ready_sigma=0.2, init_failure_p=0.0, burst_spread_s=0.3)
    runs = [
        write_synthetic_run(tmp_path, SyntheticRun(run_id=name, profile=name, exec_s=0.2, exec_count=1, stages=(st,)))
        for name, st in (("staggered", staggered), ("burst", burst))
    ]
    document = build_latency_model(runs, fit=False)
    validate_latency_model(document)
    by_profile = {m["profile"]: m["buckets"] for m in document["models"]}
    ((stag,), (burst_bucket,)) = by_profile["staggered"], by_profile["burst"]
    assert 1 <= stag["concurrency"] <= 4 and stag["target_concurrency"] == 100
    assert burst_bucket["concurrency"] == 100 and burst_bucket["target_concurrency"] == 100
    assert stag["concurrency_source"] == burst_bucket["concurrency_source"] == "measured"
    # the model knows it has no 100-wide data from the staggered run: asking it for 100 is an extrapolation
    path = tmp_path / "lm.json"
    path.write_text(json.dumps(document))
    (vendor,) = [v for v in load_latency_model(path).vendors if v.profile == "staggered"]
    assert vendor.at(100).extrapolated and not vendor.at(stag["concurrency"]).extrapolated


def test_a_rehearsal_reads_the_rollouts_of_its_measured_window_on_its_loop_clock(tmp_path):
    """`stampede rehearse` compares its measured steps with the model: the model must see those steps' rollouts
    (not the warm-up's), with every duration on the loop's clock, and say which clock it is on."""
    run_dir = write_synthetic_run(
        tmp_path, SyntheticRun(run_id="loop", time_scale=0.1, stages=(SyntheticStage(50, 3000, init_failure_p=0.0),))
    )
    rows = load_rollouts(run_dir)
    ends = rows["t_submit"].to_numpy(dtype=float) + rows["total_s"].to_numpy(dtype=float)
    window = (float(np.quantile(ends, 0.25)), float(np.quantile(ends, 0.75)))
    inside = rows[(ends >= window[0]) & (ends < window[1])]
    document = build_latency_model([run_dir], fit=False, clock="loop", ended_within=window)
    assert document["time_basis"] == "loop"
    validate_latency_model(document)
    (bucket,) = document["models"][0]["buckets"]
    assert bucket["samples"]["rollouts"] == len(inside) < len(rows)
    ok = inside[inside["outcome"] == "ok"]
    grid = bucket["metrics"]["tti"]["quantiles"]
    assert grid[-1] == pytest.approx(ok["tti_s"].max() * 10)  # wall / time scale, all of it
    assert build_latency_model([run_dir], fit=False)["time_basis"] == "vendor"
    with pytest.raises(ValueError):
        build_latency_model([run_dir], fit=False, clock="wall")
