"""Vendor limits travel with the latency model: a real run against a simulated vendor capped at 50 exports the cap
with its source, `stampede model` applies it unless the config overrides it and says which it used; an export
written before `limits` existed still loads (the field is additive within latency model v1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.results.export.latency_export import build_latency_model
from harness.results.export.latency_schema import validate_latency_model
from harness.rlmodel.config import parse_config
from harness.rlmodel.inputs import build_plan
from harness.rlmodel.latency_input import load_latency_model
from tests.support.commands import stampede
from tests.support.synthetic_run import SyntheticRun, SyntheticStage, write_synthetic_run

REPO = Path(__file__).resolve().parents[2]

CONFIG = """
[step]
prompts = 8
group_size = 8
[rollout]
generation_s = 2.0
[trainer]
samples_per_second = 8.0
[generator]
concurrency = 64
[simulation]
steps = 10
"""


@pytest.fixture(scope="module")
def capped_export(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("capped")
    run = stampede(
        "run",
        "--profile",
        "modal-like",
        "--profile-set",
        "quota.max_active=50",
        "--scenario",
        "burst",
        "--users",
        "80",
        "--out",
        str(root),
        "--run-id",
        "cap50",
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    path = root / "latency_model.json"
    export = stampede("export", str(root / "cap50"), "-o", str(path), "--no-fits")
    assert export.returncode == 0, export.stderr
    assert "concurrency cap 50 (profile)" in export.stdout
    return path


@pytest.mark.slow
def test_a_capped_run_exports_its_cap_with_its_source(capped_export):
    limits = json.loads(capped_export.read_text())["models"][0]["limits"]
    cap = limits["concurrency_cap"]
    assert cap["value"] == 50 and cap["source"] == "profile"
    assert "quota.max_active=50" in cap["detail"]  # the run's override, named as the source
    rate = limits["create_rate_per_s"]
    assert rate["value"] == 30.0 and rate["source"] == "profile" and "uni-agent PR #47" in rate["detail"]
    seen = limits["observed"]
    assert seen["refused"]["quota_exhausted"] == 30  # 80 at once against 50: the vendor pushed back
    assert seen["max_sandboxes_alive"] == 50 and seen["max_in_flight"] == 80


@pytest.mark.slow
def test_stampede_model_applies_the_exported_cap_unless_the_config_overrides_it(capped_export, tmp_path):
    plain = tmp_path / "plain.toml"
    plain.write_text(CONFIG)
    out = stampede("model", "--latency", str(capped_export), "--config", str(plain), "--engine", "closed")
    assert out.returncode == 0, out.stderr
    assert "vendor limit: concurrency cap 50 from latency model (profile)" in out.stdout
    assert "effective concurrency 50 (limited by vendor concurrency cap)" in out.stdout
    overridden = tmp_path / "overridden.toml"
    overridden.write_text(CONFIG + "[sandbox]\nconcurrency_cap = 20\n")
    out = stampede("model", "--latency", str(capped_export), "--config", str(overridden), "--engine", "closed")
    assert out.returncode == 0, out.stderr
    assert (
        "concurrency cap 20 from config overridden [sandbox]: overrides the latency model's 50 (profile)" in out.stdout
    )
    assert "effective concurrency 20 (limited by vendor concurrency cap)" in out.stdout


def test_an_export_without_limits_still_validates_loads_and_applies_none(tmp_path):
    run = write_synthetic_run(tmp_path, SyntheticRun(run_id="old", profile="old", stages=(SyntheticStage(16, 300),)))
    document = build_latency_model([run], fit=False)
    for model in document["models"]:
        del model["limits"]  # what exports written before the field looked like
    validate_latency_model(document, "old export")
    path = tmp_path / "old.json"
    path.write_text(json.dumps(document))
    vendor = load_latency_model(path).choose(None)
    assert vendor.limits is None
    config = parse_config(
        {
            "step": {"prompts": 4, "group_size": 8},
            "rollout": {"generation_s": 1.0},
            "trainer": {"samples_per_second": 4.0},
        },
        "c.toml",
    )
    plan = build_plan(config, vendor)
    assert [(limit.value, limit.source) for limit in plan.limits] == [(None, "none"), (None, "none")]
    assert plan.concurrency == 32 and plan.concurrency_limited_by == "target"


def test_without_a_profile_a_cap_is_measured_only_when_the_vendor_refused_creates(tmp_path):
    run = write_synthetic_run(tmp_path, SyntheticRun(run_id="real", profile="", stages=(SyntheticStage(16, 300),)))
    limits = build_latency_model([run], fit=False)["models"][0]["limits"]
    assert limits["observed"]["refused"]["quota_exhausted"] == 0
    assert limits["concurrency_cap"]["value"] is None and limits["concurrency_cap"]["source"] == "unknown"
    assert "at least" in limits["concurrency_cap"]["detail"]


def test_measured_limits_come_only_from_pushback_and_are_computed_from_the_rows():
    import pandas as pd

    from harness.results.figures.vendor_limits import limits_block

    nan = float("nan")
    # vendor seconds: three sandboxes accepted at 0.1, 0.2, 0.3 and alive to 5.1, 2.2, 9.3 (three alive at once);
    # two creates refused as quota_exhausted, then rate_limited refusals at 10 s and 14 s with 4 creates accepted
    # between them (1 per second)
    rows = pd.DataFrame(
        {
            "run_id": ["r"] * 11,
            "t_vendor": [0.0, 0.0, 0.0, 0.5, 0.6, 10.0, 10.5, 11.5, 12.5, 13.5, 14.0],
            "create_s": [0.1, 0.2, 0.3, nan, nan, nan, 0.0, 0.0, 0.0, 0.0, nan],
            "total_s": [5.1, 2.2, 9.3, 0.1, 0.1, 0.0, 0.2, 0.2, 0.2, 0.2, 0.0],
            "outcome": ["ok", "ok", "ok", "failed", "failed", "failed", "ok", "ok", "ok", "ok", "failed"],
            "failure_phase": [None, None, None, "create", "create", "create", None, None, None, None, "create"],
            "failure_kind": [
                None,
                None,
                None,
                "quota_exhausted",
                "quota_exhausted",
                "rate_limited",
                None,
                None,
                None,
                None,
                "rate_limited",
            ],
            "measured": [3.0] * 11,
        }
    )
    limits = limits_block(rows, None)
    assert limits["observed"]["max_sandboxes_alive"] == 3
    assert limits["observed"]["refused"] == {"quota_exhausted": 2, "rate_limited": 2, "capacity": 0}
    assert limits["concurrency_cap"] == {**limits["concurrency_cap"], "value": 3, "source": "measured"}
    assert limits["create_rate_per_s"]["source"] == "measured"
    assert limits["create_rate_per_s"]["value"] == pytest.approx(4 / 4.0)
    calm = rows[rows["outcome"] == "ok"]
    quiet = limits_block(calm, None)
    assert quiet["concurrency_cap"]["source"] == quiet["create_rate_per_s"]["source"] == "unknown"
    assert quiet["observed"]["peak_accepted_creates_per_s"] == 3.0  # 0.1, 0.2, 0.3 within one second


@pytest.mark.slow
def test_the_exported_tti_is_in_the_same_vendor_seconds_as_the_run_summary(capped_export):
    """At time scale 0.1 only the vendor's share is stretched: harness milliseconds must not become vendor seconds."""
    document = json.loads(capped_export.read_text())
    run_dir = Path(document["provenance"]["runs"][0]["path"])
    summary = json.loads((run_dir / "summary.json").read_text())["run"]["quantiles"]["tti"]
    tti = document["models"][0]["buckets"][0]["metrics"]["tti"]
    assert tti["n"] == summary["n"] == 50
    assert tti["mean"] == pytest.approx(summary["mean"], rel=1e-6)
    p50 = tti["quantiles"][document["quantile_levels"].index(0.5)]
    assert p50 == pytest.approx(summary["p50"]["value"], rel=1e-6)
