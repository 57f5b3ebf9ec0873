"""The closed forms' results, built one way: a stepped mode's (sync, slime: the one-wave assumption and its flags,
then a step of generation and training, nothing stale) and a steady stream's (async, prime-rl, verl, PipelineRL:
sandbox-seconds, slots and creates from the dispatch rate)."""

from __future__ import annotations

import math

from harness.rlmodel.closed_form_lattice import RolloutLaws
from harness.rlmodel.inputs import Plan
from harness.rlmodel.result import ModelResult


def one_wave(plan: Plan, laws: RolloutLaws, n: int, generation: float, notes: list[str]) -> tuple[float, bool]:
    """A stepped mode's closed form assumes the step's n rollouts start at once: more rollouts than slots (waves)
    or a create rate that spreads their creates make it approximate, and the generation time takes the bound."""
    cfg = plan.config
    holds = True
    waves = math.ceil(n / plan.concurrency)
    if waves > 1:
        holds = False
        notes.append(f"{n} rollouts per step over {plan.concurrency} slots: {waves} waves (closed form approximates)")
        generation = max(generation, n * laws.mean_sandbox(plan.teardown.mean()) / plan.concurrency)
    if cfg.create_rate:
        spread = n * laws.mean_attempts / cfg.create_rate
        if spread > 0.01 * generation:
            holds = False
            notes.append(f"creating {n} sandboxes at {cfg.create_rate:g}/s takes ~{spread:.3g} s of the step")
            generation = max(generation, spread)
    return generation, holds


def stepped_result(
    plan: Plan,
    mode: str,
    generation: float,
    successes: float,
    trained: float,
    sandbox: float,
    *,
    lost_init: float,
    lost_exec: float,
    killed: float,
    creates: float,
    holds: bool,
    notes: list[str],
) -> ModelResult:
    """A step of generation (the trainer idle), then training on `trained` samples; nothing is stale."""
    busy = trained / plan.trainer_rate + plan.config.weight_sync_s
    step = generation + busy
    trainer = trained / step
    return ModelResult(
        engine="closed form",
        mode=mode,
        concurrency=plan.concurrency,
        generator_samples_per_s=successes / step,
        generator_capacity_samples_per_s=successes / generation if generation > 0 else math.inf,
        effective_samples_per_s=trainer,
        trainer_samples_per_s=trainer,
        trainer_capacity_samples_per_s=trained / busy if busy > 0 else math.inf,
        trainer_idle_ratio=generation / step,
        step_time_s=step,
        generation_time_s=generation,
        lost_to_init_failures=lost_init,
        lost_to_exec_failures=lost_exec,
        lost_to_staleness=0.0,
        killed_by_oversampling=killed,
        filtered_by_acceptance=1 - plan.acceptance_filter,
        sandbox_seconds_per_step=sandbox,
        sandbox_seconds_per_trained_sample=sandbox / trained if trained > 0 else math.inf,
        mean_staleness_steps=0.0,
        staleness_distribution={0: 1.0},
        concurrency_used=sandbox / step,
        creates_per_step=creates,
        holds=holds,
        notes=notes,
    )


def continuous_result(
    plan: Plan,
    laws: RolloutLaws,
    *,
    generator: float,
    gen_cap: float,
    trainer: float,
    capacity: float,
    idle: float,
    step: float,
    generation: float,
    lost_to_staleness: float,
    staleness: float,
    dispatch: float,
    sandbox_s: float,
    slot_s: float,
    holds: bool,
    notes: list[str],
) -> ModelResult:
    """A steady stream of rollouts dispatched at `dispatch` per second, each billing `sandbox_s` and holding its
    slot `slot_s`: what that costs per step and per trained sample (infinite when nothing trains)."""
    ps, p_exec = laws.p_success, plan.p_exec
    finite = math.isfinite(step) and trainer > 0
    return ModelResult(
        engine="closed form",
        mode=plan.mode,
        concurrency=plan.concurrency,
        generator_samples_per_s=generator,
        generator_capacity_samples_per_s=gen_cap,
        effective_samples_per_s=trainer,
        trainer_samples_per_s=trainer,
        trainer_capacity_samples_per_s=capacity,
        trainer_idle_ratio=idle,
        step_time_s=step,
        generation_time_s=generation,
        lost_to_init_failures=1 - ps,
        lost_to_exec_failures=ps * p_exec,
        lost_to_staleness=lost_to_staleness,
        killed_by_oversampling=0.0,
        filtered_by_acceptance=1 - plan.acceptance_filter,
        sandbox_seconds_per_step=dispatch * sandbox_s * step if finite else math.inf,
        sandbox_seconds_per_trained_sample=dispatch * sandbox_s / trainer if finite else math.inf,
        mean_staleness_steps=staleness,
        concurrency_used=dispatch * slot_s,
        creates_per_step=dispatch * laws.mean_attempts * step if finite else math.inf,
        holds=holds,
        notes=notes,
    )
