"""`stampede model` on a latency model v2 (runs with a plan): a GRPO group starts when its one fork does, the image
cache warms as the run goes, the infrastructure tax of the user's shape is printed; a v1 export behaves as before.
The runs behind the exports are steps tables built with pyarrow (tests/support/step_rows.py), so the truth is known."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.results.export.latency_export import build_latency_model, write_latency_model
from harness.rlmodel.config import load_config
from harness.rlmodel.inputs import build_plan
from harness.rlmodel.latency_input import load_latency_model
from harness.rlmodel.simulation import simulate
from tests.support.commands import stampede
from tests.support.step_rows import fork_group, plan_rollout, write_plan_run
from tests.support.synthetic_run import SyntheticRun, SyntheticStage, write_synthetic_run

CONFIG = """
[step]
prompts = 4
group_size = 8
[rollout]
turns = 3
generation_s = 1.0
tool_s = 0.1
[trainer]
samples_per_second = 1000.0
[generator]
mode = "sync"
[sandbox]
start = "{start}"
[simulation]
steps = 6
warmup_steps = 0
"""


def _config(tmp: Path, start: str = "auto") -> Path:
    path = tmp / f"rl-{start}.toml"
    path.write_text(CONFIG.replace("{start}", start))
    return path


def _export(tmp: Path, run: Path, name: str) -> Path:
    path = tmp / f"{name}.json"
    write_latency_model(build_latency_model([run], fit=False), path)
    return path


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("model")
    # cold cache: 6 of 60 creates pull a 40 s image inside their ready, the rest start warm in 0.4 s
    cold = [plan_rollout(i, pull_s=40.0 if i < 6 else 0.0, ready_s=40.3 if i < 6 else 0.3) for i in range(60)]
    # forks: 40 groups of 8 copies, each fork call 2-6 s
    forks = [r for g in range(40) for r in fork_group(g, copies=8, fork_s=2.0 + (g % 5))]
    plain = write_synthetic_run(tmp, SyntheticRun(run_id="plain", stages=(SyntheticStage(10, 200),)))
    return {
        "cold": _export(tmp, write_plan_run(tmp, cold, run_id="cold"), "cold"),
        "fork": _export(tmp, write_plan_run(tmp, forks, run_id="fork"), "fork"),
        "plain": _export(tmp, plain, "plain"),
        "tmp": tmp,
    }


def test_a_group_of_forked_rollouts_starts_when_its_fork_does(exports):
    config = load_config(_config(exports["tmp"]))
    vendor = load_latency_model(exports["fork"]).choose(None)
    plan = build_plan(config, vendor)
    assert plan.group_fork and plan.startup.mean() == pytest.approx(4.0, abs=0.3)  # the fork calls' 2..6 s
    assert any("one fork call" in note for note in plan.start_notes)
    shared = simulate(plan, seed=1)
    independent = simulate(dataclasses.replace(plan, group_fork=False), seed=1)
    # a sync step waits for its slowest start: 4 draws (one per group) rather than 32 (one per rollout)
    assert shared.generation_time_s < independent.generation_time_s


def test_the_image_cache_warms_as_the_run_goes(exports):
    config = load_config(_config(exports["tmp"], "fresh"))
    vendor = load_latency_model(exports["cold"]).choose(None)
    plan = build_plan(config, vendor)
    assert plan.image is not None and plan.image.cold_per_run == 6
    assert plan.startup.mean() == pytest.approx(0.4, abs=0.01)  # steady state: a warm start, no pull in it
    warming = simulate(plan, seed=2, steps=1, warmup=0)
    warm = simulate(dataclasses.replace(plan, image=None), seed=2, steps=1, warmup=0)
    # the first step's first 6 creates pay the 40 s pull; a cache that was already warm does not
    assert warming.step_time_s > warm.step_time_s + 30
    later = simulate(plan, seed=2, steps=6, warmup=3)  # the cold creates are behind the measured steps
    assert later.step_time_s < warming.step_time_s


def test_model_prints_the_infrastructure_tax_of_the_users_shape(exports):
    result = stampede(
        "model", "--config", str(_config(exports["tmp"], "fresh")), "--latency", str(exports["cold"]), "--steps", "4"
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "image cache warms over the run: the first 6 creates pull cold" in out
    assert "infrastructure tax of this shape (3 tool calls per trajectory)" in out
    overhead = next(line for line in out.splitlines() if line.strip().startswith("exec overhead"))
    # 3 tool calls x 10 ms overhead = 0.03 s per trajectory = 8.3 worker-hours per million
    assert overhead.split()[-2] == "8.3" and "3.00/traj" in overhead
    assert "x 1,000,000 / 3,600" in out


def test_a_v1_export_keeps_todays_behaviour(exports):
    document = json.loads(exports["plain"].read_text())
    document["version"] = 1  # an export written before v2: same fields, no steps
    old = exports["tmp"] / "v1.json"
    old.write_text(json.dumps(document))
    vendor = load_latency_model(old).choose(None)
    plan = build_plan(load_config(_config(exports["tmp"])), vendor)
    assert not plan.group_fork and plan.image is None and plan.tax is None
    assert plan.startup is plan.sandbox.startup
    with pytest.raises(UsageError, match="has no fork starts"):
        build_plan(load_config(_config(exports["tmp"], "fork")), vendor)
