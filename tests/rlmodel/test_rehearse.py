"""`stampede rehearse`: an emulated RL loop run for real, and `stampede model` fed its own export agrees with it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from harness.results.figures.harness_bound import harness_bound_lines
from harness.results.figures.vendor_loop import vendor_loop_lines
from tests.support.stalls import run_with_vendor_stopped

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def rehearse_argv(out: Path, config: str, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "harness.cli",
        "rehearse",
        "--config",
        str(REPO / "examples" / config),
        "--profile",
        "modal-like",
        "--out",
        str(out),
        "--progress-interval",
        "0",
        *args,
    ]


def rehearse(tmp_path: Path, config: str, *args: str) -> tuple[Path, dict]:
    result = subprocess.run(
        rehearse_argv(tmp_path, config, *args), capture_output=True, text=True, timeout=600, cwd=REPO, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir() and not p.is_symlink()]
    assert "rehearsal (measured)" in result.stdout
    return run_dir, json.loads((run_dir / "rehearsal.json").read_text())


def disagreements(document: dict, keys: tuple[str, ...]) -> list[tuple[str, str, float, float]]:
    """Each engine's prediction of each figure that is not within 10% of what the rehearsal measured."""
    measured = document["measured"]
    return [
        (predicted["engine"], key, predicted[key], measured[key])
        for predicted in document["model"]
        for key in keys
        if abs(predicted[key] - measured[key]) / measured[key] >= 0.10
    ]


STALENESS_SIMULATED_STEPS = 12
"""The simulated steps behind the model's staleness: rl-rehearse-slime.toml's `[simulation] steps`."""


def staleness_disagreement(run_dir: Path, document: dict) -> list[tuple[str, str, float, float]]:
    """The simulated mean staleness, if it is further from the measured one than both means' sampling allows.

    Each step's staleness is a count of groups a policy behind (0.125 a group at 8 kept groups), so each mean, of 8
    measured and 12 simulated steps, is a small sample. The bound is three standard errors of their difference, from
    the spread the measured steps had in this very run; never under the 0.1 step it was written as. (A fixed 0.1
    failed in CI on 2026-12-07: 0.259 simulated against 0.141 measured; a quiet run here had 0.157 and 0.156.)
    """
    lags = pd.read_parquet(run_dir / "trainer").query("measured")["mean_lag"]
    spread = float(lags.std(ddof=1)) if len(lags) > 1 else 0.0
    bound = max(0.1, 3 * spread * (1 / len(lags) + 1 / STALENESS_SIMULATED_STEPS) ** 0.5)
    measured = document["measured"]["mean_staleness_steps"]
    simulated = next(p for p in document["model"] if p["engine"] == "simulation")["mean_staleness_steps"]
    return [] if abs(simulated - measured) < bound else [("simulation", "mean_staleness_steps", simulated, measured)]


def rehearse_agreeing(
    tmp_path: Path, config: str, keys: tuple[str, ...], *args: str, staleness: bool = False
) -> tuple[Path, dict]:
    """A rehearsal whose figures both engines predict within 10%, on a second run at most.

    The simulated vendor is a process of its own on a shared machine. A stall of it delays every sandbox it serves
    at once (time scale 0.1 makes 0.4 s of it 4 vendor s): a correlation the model's independent draws cannot carry,
    and one the engine's health rows cannot see. Stopping the server 0.4 s in every 3 s (SIGSTOP) moved the simulated
    trainer rate 13.8% off while the engine's loop lag stayed at 7 ms (2026-12-07). Such a run gets one more; a
    model that disagrees fails both, and the message gives both runs' misses and how late each loop ran
    (the engine's and the vendor's own, `vendor_loop.json`).
    """
    misses = []
    for attempt in (1, 2):
        out = tmp_path / f"run-{attempt}"
        out.mkdir()
        run_dir, document = rehearse(out, config, *args)
        missed = disagreements(document, keys) + (staleness_disagreement(run_dir, document) if staleness else [])
        if not missed:
            return run_dir, document
        misses.append((missed, vendor_loop_lines(run_dir, 0.1), harness_bound_lines(run_dir)))
    pytest.fail(f"(engine, figure, predicted, measured) beyond 10% in both runs, with their loops: {misses}")


def test_async_rehearsal_and_the_model_agree_within_ten_percent(tmp_path):
    # staleness too: the emulated trainer takes a group's samples together, when its last member ended, as the
    # model does (taken one by one they were 22% fresher than predicted)
    keys = ("generator_samples_per_s", "trainer_idle_ratio", "mean_staleness_steps")
    run_dir, document = rehearse_agreeing(tmp_path, "rl-rehearse-async.toml", keys, "--steps", "20")
    measured = document["measured"]
    assert measured["measured_steps"] == 20 and 0 < measured["trainer_idle_ratio"] < 1
    # the model reads the measured steps' rollouts on the loop's own clock, and says so
    assert "measured steps" in document["model_inputs"] and "loop's clock" in document["model_inputs"]
    steps = pd.read_parquet(run_dir / "trainer")
    assert len(steps) == 22 and (steps["samples"] == 32).all() and (steps["wait_s"] >= 0).all()
    assert (run_dir / "latency_model.json").exists()


def test_sync_rehearsal_gates_steps_and_kills_the_oversampled_tail(tmp_path):
    keys = ("generator_samples_per_s", "trainer_idle_ratio")
    run_dir, document = rehearse_agreeing(
        tmp_path, "rl-rehearse-sync.toml", keys, "--steps", "6", "--warmup-steps", "1"
    )
    measured = document["measured"]
    assert measured["counts"]["killed"] > 0 and measured["mean_staleness_steps"] == 0
    rollouts = pd.read_parquet(run_dir / "rollouts")
    assert rollouts["error"].fillna("").str.contains("killed").any()


def test_prime_rl_rehearsal_and_the_model_agree_within_ten_percent(tmp_path):
    """prime-rl's scheduler run for real (groups replaced only when consumed, batches gated on the loaded policy)
    and predicted by both engines from the run's own latency model."""
    keys = ("generator_samples_per_s", "trainer_idle_ratio", "mean_staleness_steps")
    run_dir, document = rehearse_agreeing(tmp_path, "rl-rehearse-prime-rl.toml", keys, "--steps", "20")
    measured = document["measured"]
    assert measured["measured_steps"] == 20 and measured["settings"]["mode"] == "prime-rl"
    assert {predicted["mode"] for predicted in document["model"]} == {"prime-rl"}
    rollouts = pd.read_parquet(run_dir / "rollouts")
    assert rollouts["outcome"].eq("ok").sum() >= 20 * 32


def test_slime_rehearsal_and_the_model_agree_within_ten_percent(tmp_path):
    """slime's synchronous step (kept groups end it, the filter's losses refilled, the rest killed) run for real."""
    keys = ("generator_samples_per_s", "trainer_samples_per_s", "trainer_idle_ratio")
    run_dir, document = rehearse_agreeing(
        tmp_path, "rl-rehearse-slime.toml", keys, "--steps", "8", "--warmup-steps", "1"
    )
    measured = document["measured"]
    assert measured["settings"]["mode"] == "slime" and measured["mean_staleness_steps"] == 0
    assert measured["counts"]["killed"] > 0 and measured["counts"]["filtered"] > 0
    assert {predicted["mode"] for predicted in document["model"]} == {"slime"}
    steps = pd.read_parquet(run_dir / "trainer")
    assert (steps["samples"] <= 32).all() and (steps["samples"] >= 24).all()  # B kept groups' samples each step


def test_verl_rehearsal_and_the_model_agree_within_ten_percent(tmp_path):
    """verl's fully-async rollouter run for real: a dispatch budget per sync period, B groups per step, a weight sync
    every 2 steps that stands in-flight generation still (the engine's generation sleeps through it)."""
    keys = ("generator_samples_per_s", "trainer_idle_ratio", "mean_staleness_steps")
    run_dir, document = rehearse_agreeing(tmp_path, "rl-rehearse-verl.toml", keys, "--steps", "20")
    measured = document["measured"]
    assert measured["settings"]["mode"] == "verl" and measured["measured_steps"] == 20
    assert measured["inference_pauses"] == 22 // 2  # one per sync, every trigger_parameter_sync_step = 2 steps
    assert {predicted["mode"] for predicted in document["model"]} == {"verl"}
    steps = pd.read_parquet(run_dir / "trainer")  # B = 8 finished groups of 4 a step: their successful samples
    assert len(steps) == 22 and (steps["samples"] <= 32).all() and steps["samples"].sum() > 0.9 * 22 * 32


def test_pipelinerl_rehearsal_and_the_model_agree_within_ten_percent(tmp_path):
    """PipelineRL run for real: a pool of groups that never waits for the trainer, a streaming trainer, and a weight
    broadcast after every step that stands in-flight generation still."""
    keys = ("generator_samples_per_s", "trainer_idle_ratio", "mean_staleness_steps")
    run_dir, document = rehearse_agreeing(tmp_path, "rl-rehearse-pipelinerl.toml", keys, "--steps", "20")
    measured = document["measured"]
    assert measured["settings"]["mode"] == "pipelinerl" and measured["measured_steps"] == 20
    assert measured["inference_pauses"] == 22  # a broadcast after every step
    assert {predicted["mode"] for predicted in document["model"]} == {"pipelinerl"}
    steps = pd.read_parquet(run_dir / "trainer")
    assert (steps["samples"] == 32).all()  # B x G per step, streamed


def test_slime_partial_rollout_rehearsal_carries_unfinished_rollouts_into_the_next_step(tmp_path):
    """slime with --partial-rollout: at B kept groups the step's unfinished rollouts are not killed but resume in the
    next step (holding their sandboxes, their generation standing still while the trainer trains), so some trained
    samples are a policy behind; measured and both engines agree."""
    config = tmp_path / "rl-rehearse-slime-partial.toml"
    source = (REPO / "examples" / "rl-rehearse-slime.toml").read_text()
    config.write_text(source.replace('mode = "slime"', 'mode = "slime"\npartial_rollout = true'))
    keys = ("generator_samples_per_s", "trainer_samples_per_s", "trainer_idle_ratio")
    run_dir, document = rehearse_agreeing(
        tmp_path, str(config), keys, "--steps", "8", "--warmup-steps", "1", staleness=True
    )
    measured = document["measured"]
    assert measured["settings"]["partial_rollout"] and measured["counts"]["killed"] == 0
    assert measured["mean_staleness_steps"] > 0 and measured["inference_pauses"] >= 8
    simulated = next(p for p in document["model"] if p["engine"] == "simulation")
    assert simulated["mean_staleness_steps"] > 0  # the model carries unfinished rollouts over as well
    rollouts = pd.read_parquet(run_dir / "rollouts")
    assert not rollouts["error"].fillna("").str.contains("killed").any()


def test_a_rehearsal_whose_vendor_stalled_says_the_model_cannot_carry_it(tmp_path):
    """A stall of the simulated vendor delays every rollout at once; the model draws each on its own. The
    rehearsal says so beside its comparison and in rehearsal.json, whatever the figures came to."""
    argv = rehearse_argv(tmp_path, "rl-rehearse-sync.toml", "--steps", "6", "--warmup-steps", "1")
    code, out, err = run_with_vendor_stopped(argv, tmp_path, REPO, after_s=2.0, stop_s=0.6)  # into the warm-up step
    assert code == 0, err[-3000:]
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir() and not p.is_symlink()]
    said = next(line for line in out.splitlines() if line.endswith("the model's independent draws do not"))
    assert said.startswith("(!) the simulated vendor's own loop stalled (lag max ")
    assert json.loads((run_dir / "rehearsal.json").read_text())["bound"] in said
