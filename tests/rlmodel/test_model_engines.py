"""`stampede model`: the closed forms and the SimPy simulation agree where the closed forms hold, and the model
reproduces the published regimes (SemiAnalysis: 2.75 samples/s fed at 1.95 -> ~30% idle; a trainer draining
4-5x faster than supply -> 74-80% idle)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.errors import UsageError
from harness.results.export.latency_export import build_latency_model
from harness.rlmodel.closed_form import solve
from harness.rlmodel.config import load_config, parse_config
from harness.rlmodel.inputs import build_plan
from harness.rlmodel.latency_input import VendorModel, load_latency_model
from harness.rlmodel.simulation import simulate
from harness.rlmodel.sweep import run_sweep
from tests.support.synthetic_run import SyntheticRun, SyntheticStage, write_synthetic_run

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def latency_model(root: Path, name: str, stages: tuple[SyntheticStage, ...]) -> Path:
    run = write_synthetic_run(root, SyntheticRun(run_id=name, profile=name, stages=stages, ready_timeout_s=60.0))
    path = root / f"{name}.json"
    path.write_text(json.dumps(build_latency_model([run], fit=False)))
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("latency")
    clean = tuple(
        SyntheticStage(level, 2000, ready_median_s=0.3, ready_sigma=0.3, init_failure_p=0.0)
        for level in (64, 512, 4096)
    )
    flaky = tuple(
        SyntheticStage(
            level, 3000, ready_median_s=2.0 + level / 200, ready_sigma=0.6, init_failure_p=p, exec_failure_p=0.01
        )
        for level, p in ((64, 0.02), (256, 0.08), (1024, 0.2))
    )
    return {"clean": latency_model(root, "clean", clean), "flaky": latency_model(root, "flaky", flaky)}


def vendor(path: Path) -> VendorModel:
    return load_latency_model(path).choose(None)


BASE: dict[str, Any] = {
    "step": {"prompts": 16, "group_size": 8},
    "rollout": {"turns": 4, "generation_s": {"dist": "lognormal", "median": 5.0, "sigma": 0.5}},
    "trainer": {"samples_per_second": 20.0},
    "generator": {"mode": "async", "concurrency": 64},
    "retry": {"max_retries": 2, "backoff_s": 1.0},
    "acceptance": {"zero_advantage_groups": 0.3},
    "simulation": {"steps": 200, "warmup_steps": 5},
}


def config(**tables: dict[str, Any]) -> Any:
    data = json.loads(json.dumps(BASE))
    for table, values in tables.items():
        data.setdefault(table, {}).update(values)
        data[table] = {k: v for k, v in data[table].items() if v is not None}  # None: leave the key out
    return parse_config(data, "test.toml")


AGREEMENT = {
    "async, generator-bound, init failures retried": config(),
    "async, trainer-bound (throttled generator)": config(trainer={"samples_per_second": 1.0}),
    "async, create rate binds": config(generator={"concurrency": 256}, sandbox={"create_rate": 4.0}),
    "async, tool time per turn, teardown off the slot": config(
        rollout={"tool_s": {"dist": "gamma", "mean": 1.0, "cv": 0.5}, "reward_s": 2.0},
        sandbox={"teardown_holds_slot": False},
    ),
    "sync, expected maximum of the step": config(
        step={"prompts": 8, "group_size": 8},
        generator={"mode": "sync", "concurrency": None},
        trainer={"samples_per_second": 10.0},
        acceptance={"zero_advantage_groups": 0.0},
        simulation={"steps": 1000},
    ),
    "sync, oversampling kills the tail": config(
        step={"prompts": 8, "group_size": 8},
        generator={"mode": "sync", "oversampling": 2.0, "concurrency": None},
        trainer={"samples_per_second": 10.0},
        simulation={"steps": 500},
    ),
    "sync, weight sync and filtered samples": config(
        step={"prompts": 8, "group_size": 8},
        trainer={"samples_per_second": None, "step_time_s": 30.0, "weight_sync_s": 5.0},
        acceptance={"filtered_samples": 0.1},
        generator={"mode": "sync", "concurrency": None},
        retry={"max_retries": 1},
        simulation={"steps": 1000},
    ),
    # prime-rl's Scheduler (docs/rl-frameworks.md): groups circulate, each replaced when consumed into a batch
    "prime-rl, generator-bound (a group's slots wait for its slowest member)": config(
        generator={"mode": "prime-rl", "concurrency": None},
        simulation={"steps": 150},
    ),
    "prime-rl, strict async level 2": config(
        generator={"mode": "prime-rl", "concurrency": None, "max_async_level": 2, "strict_async_level": True},
        simulation={"steps": 150},
    ),
    "prime-rl, trainer-bound (the version gate paces the generator)": config(
        generator={"mode": "prime-rl", "concurrency": None, "oversampling": 2.0},
        trainer={"samples_per_second": 2.0},
        simulation={"steps": 150},
    ),
    # verl's fully-async rollouter: a pool of groups, a dispatch budget per sync period, syncs every T steps
    "verl, generator-bound, budget never binds": config(
        generator={"mode": "verl", "staleness_threshold": 1.0},
        simulation={"steps": 150},
    ),
    "verl, trainer-bound (the budget paces the rollouter, s·T ≥ 1)": config(
        generator={"mode": "verl", "staleness_threshold": 0.5},
        trainer={"samples_per_second": 1.0},
        simulation={"steps": 150},
    ),
    "verl, partial rollout (a sync stands generation still)": config(
        generator={"mode": "verl", "staleness_threshold": 1.0},
        trainer={"weight_sync_s": 5.0},
        simulation={"steps": 150},
    ),
    # PipelineRL: a pool of groups, in-flight weight broadcasts every step, no max_lag
    "pipelinerl, generator-bound": config(generator={"mode": "pipelinerl"}, simulation={"steps": 150}),
    "pipelinerl, broadcasts stand generation still": config(
        generator={"mode": "pipelinerl"},
        trainer={"weight_sync_s": 5.0},
        simulation={"steps": 150},
    ),
    # slime's generate_rollout_async: the step ends at the B-th kept group of ceil(oversampling·B) dispatched
    "slime, kept groups end the step and the rest is killed": config(
        step={"prompts": 8, "group_size": 8},
        generator={"mode": "slime", "oversampling": 1.25, "concurrency": None},
        trainer={"samples_per_second": 10.0},
        acceptance={"zero_advantage_groups": 0.0},
        simulation={"steps": 500},
    ),
}


def close(a: float, b: float, rel: float = 0.05, abs_: float = 0.0) -> bool:
    return abs(a - b) <= max(rel * abs(a), abs_)


@pytest.mark.parametrize("name", list(AGREEMENT))
def test_closed_forms_and_simulation_agree_within_5_percent(models, name):
    plan = build_plan(AGREEMENT[name], vendor(models["flaky"]))
    closed, simulated = solve(plan), simulate(plan)
    assert closed.holds, closed.notes
    for key in ("generator_samples_per_s", "trainer_samples_per_s", "step_time_s"):
        assert close(getattr(closed, key), getattr(simulated, key)), (key, closed, simulated)
    assert close(closed.trainer_idle_ratio, simulated.trainer_idle_ratio, abs_=0.02), (closed, simulated)
    assert close(closed.lost_to_init_failures, simulated.lost_to_init_failures, rel=0.5, abs_=0.005)
    assert close(closed.sandbox_seconds_per_step, simulated.sandbox_seconds_per_step, rel=0.08)
    if plan.mode in ("prime-rl", "verl", "pipelinerl"):  # staleness from each one's gates: held to 5% or 0.1 steps
        assert close(closed.concurrency_used, simulated.concurrency_used)
        assert close(closed.mean_staleness_steps, simulated.mean_staleness_steps, abs_=0.1), (closed, simulated)
    elif plan.mode == "async":
        assert close(closed.concurrency_used, simulated.concurrency_used)
        if (
            not plan.config.create_rate
        ):  # the closed form's staleness is an approximation, rougher behind a create queue
            assert abs(closed.mean_staleness_steps - simulated.mean_staleness_steps) < 0.3
    else:
        assert close(closed.killed_by_oversampling, simulated.killed_by_oversampling, abs_=0.02)


def test_closed_forms_say_when_they_do_not_hold(models):
    waves = build_plan(
        config(step={"prompts": 8, "group_size": 8}, generator={"mode": "sync", "concurrency": 16}),
        vendor(models["flaky"]),
    )
    result = solve(waves)
    assert not result.holds and "waves" in result.notes[0]
    # prime-rl: a gate closed every step (max_async_level 0), and fewer slots than rollouts in flight
    lockstep = solve(
        build_plan(
            config(generator={"mode": "prime-rl", "concurrency": None, "max_async_level": 0}), vendor(models["flaky"])
        )
    )
    assert not lockstep.holds and "synchronous" in " ".join(lockstep.notes)
    queued = solve(build_plan(config(generator={"mode": "prime-rl", "concurrency": 64}), vendor(models["flaky"])))
    assert not queued.holds and "64 slots for 128 rollouts" in " ".join(queued.notes)
    # slime: with no spare groups and 30% filtered, most steps need a refill round
    refills = config(step={"prompts": 8, "group_size": 8}, generator={"mode": "slime", "concurrency": None})
    refilled = solve(build_plan(refills, vendor(models["flaky"])))
    assert not refilled.holds and "refill" in " ".join(refilled.notes)
    # verl: only 6.4 groups may be ahead at a sync, fewer than B: a trainer-bound period waits for fresh groups;
    # without partial_rollout each sync drains the generator
    for generator, trainer, needle in (
        ({}, {"samples_per_second": 1.0}, "waits ~77"),
        ({"partial_rollout": False}, {}, "drains"),
    ):
        verl = solve(
            build_plan(config(generator={"mode": "verl", **generator}, trainer=trainer), vendor(models["flaky"]))
        )
        assert not verl.holds and needle in " ".join(verl.notes), needle
    # PipelineRL trainer-bound without max_lag: the ring buffer drops the oldest ready samples
    dropping = solve(
        build_plan(
            config(generator={"mode": "pipelinerl"}, trainer={"samples_per_second": 0.5}), vendor(models["flaky"])
        )
    )
    assert not dropping.holds and dropping.lost_to_staleness > 0.3 and "ring buffer" in " ".join(dropping.notes)


def test_slime_partial_rollout_resumes_instead_of_killing(models):
    """--partial-rollout: the step's unfinished rollouts resume next step instead of being aborted: nothing killed,
    fewer sandbox-seconds wasted, some samples a policy behind; the closed form says it does not model the carry."""
    tables = {
        "step": {"prompts": 8, "group_size": 8},
        "trainer": {"samples_per_second": 10.0},
        "acceptance": {"zero_advantage_groups": 0.0},
        "simulation": {"steps": 300},
    }
    aborted = simulate(
        build_plan(
            config(generator={"mode": "slime", "oversampling": 1.25, "concurrency": None}, **tables),
            vendor(models["flaky"]),
        )
    )
    plan = build_plan(
        config(
            generator={"mode": "slime", "oversampling": 1.25, "concurrency": None, "partial_rollout": True}, **tables
        ),
        vendor(models["flaky"]),
    )
    resumed, closed = simulate(plan), solve(plan)
    assert aborted.killed_by_oversampling > 0.02 and resumed.killed_by_oversampling == 0
    assert resumed.sandbox_seconds_per_trained_sample < 0.9 * aborted.sandbox_seconds_per_trained_sample
    assert 0.1 < resumed.mean_staleness_steps < 1 and aborted.mean_staleness_steps == 0
    assert not closed.holds and "partial rollout" in " ".join(closed.notes)
    assert closed.trainer_samples_per_s == pytest.approx(resumed.trainer_samples_per_s, rel=0.1)


def test_pipelinerl_max_lag_budget_stalls_when_groups_are_filtered(models):
    """PipelineRL's max_lag budget grows by B groups per weight update (actor.py), counted in groups, while a step
    needs B·G accepted samples: with 30% of groups filtered the actor runs out of budget and the trainer waits for
    good. Both engines say so, rather than printing a rate; without the filter the same budget runs."""
    lagged = config(
        generator={"mode": "pipelinerl", "max_lag": 128}, retry={"max_retries": 50}, simulation={"steps": 40}
    )
    closed, simulated = (
        solve(build_plan(lagged, vendor(models["clean"]))),
        simulate(build_plan(lagged, vendor(models["clean"]))),
    )
    assert closed.trainer_samples_per_s == 0 and "stalls" in " ".join(closed.notes)
    assert "max_lag budget ran out" in " ".join(simulated.notes)
    clean = config(
        generator={"mode": "pipelinerl", "max_lag": 128},
        acceptance={"zero_advantage_groups": 0.0},
        retry={"max_retries": 50},
        simulation={"steps": 40},
    )
    running = simulate(build_plan(clean, vendor(models["clean"])))
    assert running.trainer_samples_per_s > 0 and not running.notes
    assert running.mean_staleness_steps <= 128 / 128 + 1  # max_lag of one step's samples: about a step behind


def test_slime_refills_rounds_when_the_filter_leaves_too_few_groups(models):
    """A filtered group no longer counts toward B: the simulation dispatches another round rather than training
    on a short batch, so every step still trains B kept groups (here ~B·G·0.99 samples), at a longer step."""
    tables = {
        "step": {"prompts": 8, "group_size": 8},
        "trainer": {"samples_per_second": 10.0},
        "simulation": {"steps": 300},
    }
    refilled = simulate(
        build_plan(config(generator={"mode": "slime", "concurrency": None}, **tables), vendor(models["flaky"]))
    )
    plain = simulate(
        build_plan(
            config(
                generator={"mode": "slime", "concurrency": None}, acceptance={"zero_advantage_groups": 0.0}, **tables
            ),
            vendor(models["flaky"]),
        )
    )
    per_step = refilled.trainer_samples_per_s * refilled.step_time_s
    assert per_step == pytest.approx(plain.trainer_samples_per_s * plain.step_time_s, rel=0.02)
    assert per_step > 0.95 * 64 and refilled.step_time_s > 1.05 * plain.step_time_s


def test_published_regime_qwen3_trainer_idle_30_percent(models):
    """Trainer able to take 2.75 samples/s, fed at 1.95 samples/s: idle ~30% (1 − 1.95/2.75 = 29%), in prime-rl's
    own mode at the published 960 in flight (the generation time is fitted to the 1.95; the example says so)."""
    plan = build_plan(load_config(EXAMPLES / "rl-qwen3-235b-prime-rl.toml"), vendor(models["clean"]))
    assert plan.trainer_rate == 2.75 and plan.mode == "prime-rl" and plan.concurrency == 960
    for result in (solve(plan), simulate(plan, steps=15, warmup=2)):
        assert result.trainer_samples_per_s == pytest.approx(1.95, rel=0.03), result.engine
        assert 0.27 <= result.trainer_idle_ratio <= 0.32, result.engine
        assert result.killed_by_oversampling == 0.0  # prime-rl keeps unfinished groups in flight


def test_published_regime_glm5_trainer_idle_74_to_80_percent(models):
    """55% of groups have zero advantage; the trainer drains valid samples 4-5x faster: idle 74-80%, in slime's own
    mode (the filter's losses refilled; the trainer's rate is fitted, as the example says)."""
    plan = build_plan(load_config(EXAMPLES / "rl-glm5-slime.toml"), vendor(models["clean"]))
    assert plan.mode == "slime"
    for result in (solve(plan), simulate(plan)):
        drain = result.trainer_capacity_samples_per_s / result.effective_samples_per_s
        assert 4.0 <= drain <= 5.0, result.engine
        assert 0.74 <= result.trainer_idle_ratio <= 0.80, result.engine
        assert result.filtered_by_acceptance == pytest.approx(0.55, abs=0.03)


def test_published_regime_verl_staleness_sweep_fitted_on_two_points_predicts_the_other_two(models):
    """verl's fully-async docs: staleness_threshold 0 -> 0.1 -> 0.3 -> 0.5 took 400 steps in 25.9 -> 20.0 -> 17.3 ->
    17.4 h. The example fits two inputs on two of them (step time to 0.5, generation median to 0; sigma assumed, as
    it says); 0.1 and 0.3 are predictions, each within 3% of the published figure (1.8% and 0.5% as shipped). That
    the gain stops by 0.3 (s x T >= 1: a whole batch is ahead at each sync) is the model's, not fitted."""
    config = load_config(EXAMPLES / "rl-verl-fully-async.toml")
    assert config.mode == "verl" and config.trigger_parameter_sync_step == 4 and config.partial_rollout
    published = {0.0: 25.9, 0.1: 20.0, 0.3: 17.3, 0.5: 17.4}  # hours for 400 steps
    fitted = (0.0, 0.5)
    rows, errors = [], {}
    for threshold, hours in published.items():
        plan = build_plan(config.with_(staleness_threshold=threshold), vendor(models["clean"]))
        assert plan.concurrency == 1024 and plan.config.create_rate == 10.0  # within Daytona's 10 creates/s
        simulated = simulate(plan)
        want, got = hours * 3600 / 400, simulated.step_time_s
        errors[threshold] = got / want - 1
        role = "fitted" if threshold in fitted else "predicted"
        rows.append(f"{threshold:<10g}{want:>8.1f} s{got:>8.1f} s{errors[threshold]:>+8.1%}   {role}")
        closed = solve(plan)
        assert closed.step_time_s == pytest.approx(simulated.step_time_s, rel=0.08), threshold
        assert closed.holds == (threshold >= 0.25)  # the budget's bubble is an estimate, and says so
    table = "\n".join([f"{'staleness':<10}{'published':>10}{'model':>10}{'error':>8}", *rows])
    print("\nverl staleness sweep, s per step (fitted on 0 and 0.5):\n" + table)
    for threshold, error in errors.items():
        assert abs(error) <= (0.01 if threshold in fitted else 0.03), table


def test_pipelinerl_example_is_bound_by_its_vendors_create_rate(models):
    """E2B's 5 creates/s, not the 1,024 slots, bounds the PipelineRL example's production; both engines agree on
    the trainer's rate and say the create rate binds."""
    plan = build_plan(load_config(EXAMPLES / "rl-pipelinerl-agentic.toml"), vendor(models["clean"]))
    assert plan.mode == "pipelinerl" and plan.concurrency == 1024 and plan.config.create_rate == 5.0
    closed, simulated = solve(plan), simulate(plan)
    assert "create rate (5/s) bounds production" in " ".join(closed.notes)
    assert simulated.generator_samples_per_s == pytest.approx(5.0, rel=0.03)  # a clean fleet: one create a sample
    assert closed.trainer_samples_per_s == pytest.approx(simulated.trainer_samples_per_s, rel=0.05)
    assert closed.mean_staleness_steps == pytest.approx(simulated.mean_staleness_steps, rel=0.1)


def test_published_regime_follows_the_queue_formula_for_any_supply(models):
    """idle = 1 − λ_eff / μ: the model's async answer is the article's formula when generator-bound."""
    cfg = config(trainer={"samples_per_second": 2.75}, acceptance={"zero_advantage_groups": 0.0})
    result = solve(build_plan(cfg, vendor(models["clean"])))
    assert result.trainer_idle_ratio == pytest.approx(1 - result.effective_samples_per_s / 2.75)


def test_the_sandbox_vendor_changes_the_answer(models):
    cfg = config(generator={"concurrency": 1024})
    clean, flaky = (solve(build_plan(cfg, vendor(models[name]))) for name in ("clean", "flaky"))
    assert flaky.lost_to_init_failures > 0.005 and clean.lost_to_init_failures == 0
    assert flaky.generator_samples_per_s < clean.generator_samples_per_s


def test_latency_between_buckets_is_interpolated_in_log_concurrency(models):
    model = vendor(models["flaky"])
    # buckets are labelled by measured concurrency (near the targets 64 and 256, not exactly them)
    lo, hi = (int(b["concurrency"]) for b in model.buckets[:2])
    assert lo == pytest.approx(64, rel=0.15) and hi == pytest.approx(256, rel=0.15)
    low, mid, high = (model.at(c) for c in (lo, (lo * hi) ** 0.5, hi))
    assert low.startup.mean() < mid.startup.mean() < high.startup.mean()
    assert mid.p_init_failure == pytest.approx((low.p_init_failure + high.p_init_failure) / 2)
    assert mid.buckets_used == (lo, hi) and not mid.extrapolated and model.at(5000).extrapolated


def test_sweep_over_concurrency_recommends_a_setting(models):
    sweep = run_sweep("concurrency", config(), vendor(models["flaky"]), [16, 64, 256], engine="both", steps=20)
    assert len(sweep.points) == 3 and all(p.closed and p.simulated for p in sweep.points)
    assert sweep.recommendation.startswith("recommend concurrency")


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"rollout": {"generation_s": 1.0}, "trainer": {"samples_per_second": 1.0}}, "[step] prompts is required"),
        ({**BASE, "trainer": {"samples_per_second": 1.0, "step_time_s": 3.0}}, "exactly one of"),
        ({**BASE, "generator": {"mode": "sometimes"}}, "expected one of sync, async"),
        ({**BASE, "rollout": {"generation_s": {"dist": "zipf", "a": 2}}}, "unknown dist 'zipf'"),
        ({**BASE, "rollout": {"generation_s": {"dist": "lognormal", "median": 5}}}, "takes median, sigma"),
        ({**BASE, "acceptance": {"zero_advantage_groups": 1.5}}, "at most 0.999"),
        ({**BASE, "generator": {"concurency": 5}}, "unknown key 'concurency'"),
        ({**BASE, "extra": {}}, "unknown table [extra]"),
    ],
)
def test_config_errors_name_the_table_and_key(data, needle):
    with pytest.raises(UsageError) as error:
        parse_config(data, "rl.toml")
    assert needle in str(error.value) and "\n" not in str(error.value)


def model_command(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli.model", *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def test_model_command_prints_both_engines_and_writes_a_sweep(models, tmp_path):
    single = model_command(
        "--latency", str(models["flaky"]), "--config", str(EXAMPLES / "rl-glm5-slime.toml"), "--steps", "10"
    )
    assert single.returncode == 0, single.stderr
    assert "closed form" in single.stdout and "simulation" in single.stdout and "trainer idle ratio" in single.stdout
    swept = model_command(
        "--latency",
        str(models["flaky"]),
        "--config",
        str(EXAMPLES / "rl-glm5-slime.toml"),
        "--sweep",
        "concurrency",
        "--values",
        "128,512",
        "--steps",
        "8",
        "-o",
        str(tmp_path),
    )
    assert swept.returncode == 0, swept.stderr
    assert "recommend concurrency" in swept.stdout
    assert (tmp_path / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    assert len(json.loads((tmp_path / "model.json").read_text())["sweep"]["points"]) == 2


def test_model_command_bad_input_is_one_line_and_exit_2(models, tmp_path):
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text("[step\nprompts = 3")
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": "stampede.latency_model", "version": 1}')
    good = str(EXAMPLES / "rl-glm5-slime.toml")
    cases = [
        (["--latency", str(models["clean"]), "--config", str(tmp_path / "none.toml")], "not found"),
        (["--latency", str(models["clean"]), "--config", str(bad_toml)], "is not valid TOML"),
        (["--latency", str(tmp_path / "none.json"), "--config", good], "not found"),
        (["--latency", str(broken), "--config", good], "does not match latency_model v1"),
        (["--latency", str(models["clean"]), "--config", good, "--vendor", "acme/x"], "has no vendor 'acme/x'"),
        (["--latency", str(models["clean"]), "--config", good, "--values", "1,2"], "--values needs --sweep"),
        (["--config", good], "required: --latency"),
    ]
    for args, needle in cases:
        result = model_command(*args)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 2 and len(lines) == 1 and needle in lines[0], (args, result.stderr)


def test_generation_time_takes_the_run_commands_spec_too():
    """`stampede run --gen-time lognormal:20,0.8` and the model's config can share one spec (for rehearsals)."""
    text = parse_config({**BASE, "rollout": {"generation_s": "lognormal:20,0.8"}}, "rl.toml").generation
    table = parse_config(
        {**BASE, "rollout": {"generation_s": {"dist": "lognormal", "median": 20, "sigma": 0.8}}}, "rl.toml"
    ).generation
    assert (
        text.mean() == pytest.approx(table.mean())
        and parse_config({**BASE, "rollout": {"generation_s": "exp:4"}}, "rl.toml").generation.mean() == 4
    )
    with pytest.raises(UsageError, match="unknown distribution"):
        parse_config({**BASE, "rollout": {"generation_s": "pareto:1"}}, "rl.toml")


def test_rehearsal_plans_the_engine_draws_with_the_run_parser(tmp_path):
    """A rehearsal's config durations reach the engine in the run's own `kind:params` syntax, checked by its parser."""
    from harness.rlmodel.duration_dists import table_from_wire, to_wire
    from harness.rlmodel.rehearsal import comparison_text, plan_rehearsal
    from harness.wire.durations import Distribution

    assert str(to_wire({"dist": "lognormal", "median": 20, "sigma": 0.8}, "x")) == "lognormal:20,0.8"
    assert str(to_wire(5, "x")) == "const:5" and str(to_wire("exp:4", "x")) == "exp:4"
    assert table_from_wire(Distribution.parse("uniform:1,3")) == {"dist": "uniform", "low": 1.0, "high": 3.0}
    with pytest.raises(UsageError, match=r"^\[rollout\] tool_s: .*gamma"):
        to_wire({"dist": "gamma", "mean": 1, "cv": 1}, "[rollout] tool_s")
    with pytest.raises(UsageError, match=r"^x: unknown distribution"):
        to_wire("pareto:1", "x")
    config = tmp_path / "rl.toml"
    config.write_text(
        '[step]\nprompts = 4\ngroup_size = 2\n[rollout]\ngeneration_s = "lognormal:2,0.5"\ntool_s = 0.5\n'
        "[trainer]\nsamples_per_second = 1.0\n"
    )
    plan = plan_rehearsal(config, steps=3)
    assert plan.gen_time == "lognormal:2,0.5" and plan.tool_time == "const:0.5" and plan.trainer["steps"] == 3
    text = comparison_text({"generator_samples_per_s": 2.0}, [])
    assert "generator samples/s" in text and "2" in text


def test_a_shifted_generation_moves_every_draw_and_never_goes_below_zero():
    """A rehearsal's generation, moved by its loop's late wake-ups: both engines read the same moved distribution."""
    from harness.rlmodel.duration_dists import ShiftedDist, sample

    base = parse_config({**BASE, "rollout": {"generation_s": "uniform:1,3"}}, "rl.toml").generation
    later = ShiftedDist(base, 0.25)
    assert later.mean() == pytest.approx(2.25) and later.upper() == pytest.approx(3.25)
    assert later.cdf(np.array([1.25, 2.25, 3.25])) == pytest.approx([0.0, 0.5, 1.0])
    earlier = ShiftedDist(base, -2.0)  # half the draws would fall below zero: they sit at zero
    draws = sample(earlier, np.random.default_rng(0), 50_000)
    assert draws.min() == 0.0 and earlier.mean() == pytest.approx(0.25, rel=1e-3)
    assert draws.mean() == pytest.approx(earlier.mean(), rel=0.02)
