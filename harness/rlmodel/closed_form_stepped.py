"""What the stepped closed forms (sync, slime) share: the one-wave assumption and its flags, and a step's result
(generation, then training; nothing stale)."""

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
    plan: Plan, mode: str, generation: float, successes: float, trained: float, sandbox: float, *,
    lost_init: float, lost_exec: float, killed: float, creates: float, holds: bool, notes: list[str],
) -> ModelResult:  # fmt: skip
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
