"""Prices in `stampede model`: every vendor price is a published figure with its source and date (or absent, and
the output says the dollars are unknown); sandbox dollars are sandbox-seconds × the price in both engines; the
trainer idle the sandboxes caused is priced at the GPUs' rate; `--sweep` picks the cheaper of two settings
within 2% of the best throughput, in dollars."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.errors import UsageError
from harness.results.export.latency_export import build_latency_model
from harness.rlmodel.closed_form import solve
from harness.rlmodel.config import parse_config
from harness.rlmodel.cost import dollars, priced, pricing
from harness.rlmodel.inputs import build_plan
from harness.rlmodel.latency_input import load_latency_model
from harness.rlmodel.prices import published_prices, vendor_key
from harness.rlmodel.result import ModelResult
from harness.rlmodel.simulation import simulate
from harness.rlmodel.sweep import SweepPoint, recommend
from tests.support.commands import stampede
from tests.support.synthetic_run import SyntheticRun, SyntheticStage, write_synthetic_run

TINY: dict[str, Any] = {
    "step": {"prompts": 4, "group_size": 2},
    "rollout": {"turns": 1, "generation_s": 2.0},
    "trainer": {"samples_per_second": 4.0, "gpus": 2, "gpu_hour_usd": 3.6},
    "generator": {"mode": "sync"},
    "sandbox": {
        "cpu": 2.0,
        "memory_gib": 4.0,
        "price": {"cpu_s": 0.001, "gib_s": 0.0005, "source": "test figure", "seen": "2026-12-04"},
    },
    "simulation": {"steps": 60, "warmup_steps": 2},
}


@pytest.fixture(scope="module")
def flaky_model(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("prices")
    stages = (SyntheticStage(8, 1500, ready_median_s=1.5, ready_sigma=0.5, init_failure_p=0.1),)
    run = write_synthetic_run(root, SyntheticRun(run_id="flaky", profile="flaky", stages=stages))
    path = root / "flaky.json"
    path.write_text(json.dumps(build_latency_model([run], fit=False)))
    return path


def test_every_published_price_names_its_source_and_the_date_it_was_seen():
    prices = published_prices()
    assert {"e2b", "daytona", "modal", "prime"} <= set(prices)
    for price in prices.values():
        assert price.source.strip() and re.fullmatch(r"\d{4}-\d{2}-\d{2}", price.seen), price
        for rate in (price.cpu_s, price.gib_s, price.per_create):
            assert rate is None or rate > 0, price
    assert prices["e2b"].cpu_s == pytest.approx(0.000014) and prices["e2b"].gib_s == pytest.approx(0.0000045)


def test_modal_and_prime_are_priced_at_their_published_rates():
    """Modal's sandbox rates (per physical core) and Prime's launch rates (per vCPU-hour / 3600) are read from
    prices.toml, and a modal-like or prime-like profile is priced at them."""
    prices = published_prices()
    modal, prime = prices["modal"], prices["prime"]
    assert (modal.cpu_s, modal.gib_s) == (pytest.approx(0.00003942), pytest.approx(0.00000672))
    assert (prime.cpu_s, prime.gib_s) == (pytest.approx(0.02 / 3600, rel=1e-4), pytest.approx(0.0125 / 3600, rel=1e-4))
    assert "modal.com/pricing" in modal.source and "docs.primeintellect.ai/sandboxes" in prime.source
    config = parse_config({**TINY, "sandbox": {"cpu": 2.0, "memory_gib": 4.0}}, "tiny.toml")
    for profile, price in (("modal-like", modal), ("prime-like", prime)):
        assert pricing(config, "stub", profile).sandbox_per_s == pytest.approx(2.0 * price.cpu_s + 4.0 * price.gib_s)


def test_a_simulated_vendor_is_priced_as_the_vendor_its_profile_imitates():
    assert vendor_key("stub", "e2b-like[quota.max_active=50]")[0] == "e2b"
    assert vendor_key("e2b", "")[0] == "e2b"
    assert vendor_key("stub", "ideal")[0] is None


def test_sandbox_dollars_per_step_are_sandbox_seconds_times_the_price_in_both_engines(flaky_model):
    config = parse_config(TINY, "tiny.toml")
    plan = build_plan(config, load_latency_model(flaky_model).choose(None))
    price = pricing(config, "stub", "flaky")
    per_sandbox_second = 2.0 * 0.001 + 4.0 * 0.0005  # by hand: cpu × cpu rate + GiB × GiB rate
    assert price.sandbox_per_s == pytest.approx(per_sandbox_second)
    closed, simulated = solve(plan), simulate(plan)
    for result in (closed, simulated):
        cost = dollars(result, price)
        assert cost.sandbox_per_step == pytest.approx(result.sandbox_seconds_per_step * per_sandbox_second)
        accepted = result.trainer_samples_per_s * result.step_time_s
        assert cost.sandbox_per_1000_accepted == pytest.approx(1000 * cost.sandbox_per_step / accepted)
    a, b = (dollars(r, price).sandbox_per_step for r in (closed, simulated))
    assert abs(a - b) / a < 0.05  # the engines agree on dollars because they agree on sandbox-seconds


def test_idle_caused_by_sandboxes_is_priced_at_the_trainer_gpus_rate(flaky_model):
    config = parse_config(TINY, "tiny.toml")
    plan = build_plan(config, load_latency_model(flaky_model).choose(None))
    price = pricing(config, "stub", "flaky")
    assert price.gpu_per_s == pytest.approx(2 * 3.6 / 3600)
    cost = priced(plan, solve(plan), price, solve)
    assert cost.ideal_idle_s_per_step is not None and cost.sandbox_idle_s_per_step is not None
    # a 1.5 s startup with 10% init failures: the sync step waits on sandboxes an ideal vendor would not cost
    assert cost.sandbox_idle_s_per_step > 0.5
    assert cost.sandbox_idle_s_per_step == pytest.approx(cost.idle_s_per_step - cost.ideal_idle_s_per_step)
    assert cost.sandbox_idle_per_step == pytest.approx(cost.sandbox_idle_s_per_step * 2 * 3.6 / 3600)


def test_an_unknown_price_leaves_the_dollars_unknown_and_says_so(flaky_model, tmp_path):
    data = json.loads(json.dumps(TINY))
    data["sandbox"]["price"] = {"source": "a vendor page with no rate on it", "seen": "2026-12-04"}
    del data["trainer"]["gpus"]
    config_path = tmp_path / "unpriced.toml"
    config_path.write_text(_toml(data))
    out = stampede(
        "model",
        "--latency",
        str(flaky_model),
        "--config",
        str(config_path),
        "--engine",
        "closed",
        "-o",
        str(tmp_path / "out"),
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "sandbox dollars unknown: config has no published rate" in out.stdout
    assert "trainer idle dollars unknown: set [trainer] gpus and gpu_hour_usd" in out.stdout
    assert re.search(r"sandbox \$ per step\s+unknown", out.stdout)
    document = json.loads((tmp_path / "out" / "model.json").read_text())
    assert document["dollars"][0]["sandbox_per_step"] is None
    data["sandbox"]["price"] = "nosuchvendor"
    with pytest.raises(UsageError, match=r"not in prices\.toml"):
        pricing(parse_config(data, "bad.toml"), "stub", "x")


def _result(trainer: float, sandbox_s_per_sample: float, creates_per_step: float) -> ModelResult:
    step = 8 / trainer
    return ModelResult(
        engine="simulation",
        mode="async",
        concurrency=8,
        generator_samples_per_s=trainer,
        generator_capacity_samples_per_s=trainer,
        effective_samples_per_s=trainer,
        trainer_samples_per_s=trainer,
        trainer_capacity_samples_per_s=trainer,
        trainer_idle_ratio=0.0,
        step_time_s=step,
        generation_time_s=1.0,
        lost_to_init_failures=0.0,
        lost_to_exec_failures=0.0,
        lost_to_staleness=0.0,
        killed_by_oversampling=0.0,
        filtered_by_acceptance=0.0,
        sandbox_seconds_per_step=8 * sandbox_s_per_sample,
        sandbox_seconds_per_trained_sample=sandbox_s_per_sample,
        mean_staleness_steps=0.0,
        creates_per_step=creates_per_step,
    )


def test_the_sweep_picks_the_cheaper_setting_in_dollars_among_two_within_2_percent():
    data = json.loads(json.dumps(TINY))
    data["sandbox"]["price"]["per_create"] = 0.01
    config = parse_config(data, "tiny.toml")
    price = pricing(config, "stub", "x")
    plan = SimpleNamespace(sandbox=SimpleNamespace(extrapolated=False))
    # 64: the best throughput, fewer sandbox-seconds, but 3 creates per sample (retries) at $0.01 each;
    # 128: 1% slower, more sandbox-seconds, one create per sample: cheaper in dollars
    fast = SweepPoint(64.0, plan, None, _result(10.0, 2.0, creates_per_step=24.0))  # type: ignore[arg-type]
    cheap = SweepPoint(128.0, plan, None, _result(9.9, 2.5, creates_per_step=8.0))  # type: ignore[arg-type]
    slow = SweepPoint(16.0, plan, None, _result(9.0, 0.1, creates_per_step=0.0))  # type: ignore[arg-type]
    text = recommend("concurrency", config, [slow, fast, cheap], 0.02, price)
    assert text.startswith("recommend concurrency 128"), text
    assert "per 1,000 accepted samples" in text
    # without a price the same points are compared in sandbox-seconds, and the output says so
    text = recommend("concurrency", config, [slow, fast, cheap], 0.02, None)
    assert text.startswith("recommend concurrency 64") and "no sandbox price" in text


def _toml(data: dict[str, Any]) -> str:
    lines = []
    for table, values in data.items():
        lines.append(f"[{table}]")
        for key, value in values.items():
            if isinstance(value, dict):
                inner = ", ".join(f"{k} = {json.dumps(v)}" for k, v in value.items())
                lines.append(f"{key} = {{ {inner} }}")
            else:
                lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines) + "\n"


def test_dollars_are_finite_numbers_in_the_json(flaky_model):
    config = parse_config(TINY, "tiny.toml")
    plan = build_plan(config, load_latency_model(flaky_model).choose(None))
    data = dollars(solve(plan), pricing(config, "stub", "flaky")).to_json()
    assert data["currency"] == "USD"
    assert all(
        math.isfinite(data[k]) for k in ("sandbox_per_step", "sandbox_per_1000_accepted", "total_per_1000_accepted")
    )
