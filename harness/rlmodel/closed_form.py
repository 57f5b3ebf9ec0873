"""The generator-side model in closed form (SemiAnalysis' throughput formulas, made exact where they can be).

Async (steady state):
  effective concurrency C = min(target, vendor cap, inference cap)
  dispatch rate λ_d = C / E[slot time], bounded by create_rate / E[attempts per rollout]
  production λ_gen = λ_d · P(start within retries) · (1 − p_exec)
  effective production λ_eff = acceptance · λ_gen · (1 − p_stale)
  trainer idle = max(0, 1 − λ_eff / μ); when λ_eff > μ the generator is throttled (async_level steps of
  finished samples at most), so the trainer runs at μ and the generator at μ / acceptance.
prime-rl (its Scheduler @02b49f9; `solve_prime_rl`): groups circulate, replaced only when consumed, so
  production is groups·G successes per group cycle (dispatch → its slowest member ended) while the trainer keeps
  up, and the trainer's rate otherwise; staleness from the version gate (see the function).
slime (generate_rollout_async @0044b40; `solve_slime`): the step ends at the B-th kept group among
  ceil(oversampling·B) dispatched at once (kept: done, not filtered, an accepted sample), exact by the binomial
  order statistic on the lattice; a refill round (too few kept) is flagged.
verl fully-async and PipelineRL (`solve_group_pool`): a pool of concurrency / G groups, each replaced when it
  ends; weight updates pause in-flight generation (generation stretched by 1 / (1 − pause share)); verl's
  trainer takes B groups a step and syncs every T steps, PipelineRL's takes B·G accepted samples and broadcasts
  every step. Where verl's staleness budget or drain, or PipelineRL's ring buffer or max_lag budget, shape the
  flow, `holds` is False and the note says which.
Sync (one step at a time):
  generation time = E[time until k of the N dispatched rollouts succeeded] (k = N without oversampling: the
  expected maximum of the step's rollout latencies) ; step time = generation time + training time;
  trainer idle = generation time / step time.

A rollout's latency is a random sum: (failed starts + backoff) × retries + startup + turns × (generation + tool)
+ reward. Its distribution is computed exactly on a fine lattice (`closed_form_lattice`: characteristic functions
by FFT), so the expected maximum and order statistics use the whole distribution, not a normal or lognormal guess.
The frameworks' own modes are in `closed_form_frameworks`, the result builders in `closed_form_results`.
The closed forms assume a steady state with one wave per sync step; `holds` is False (with the reason in
`notes`) when inputs break that: waves (N > concurrency), a binding create rate in sync, staleness drops
above 1% (the drop rate is then itself an approximation), or a step that may not reach its k successes.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from harness.rlmodel.closed_form_frameworks import solve_group_pool, solve_prime_rl, solve_slime
from harness.rlmodel.closed_form_lattice import RolloutLaws, cdf_at, mean_min, rollout_laws
from harness.rlmodel.closed_form_results import continuous_result, one_wave, stepped_result
from harness.rlmodel.inputs import Plan
from harness.rlmodel.result import ModelResult


def solve(plan: Plan) -> ModelResult:
    laws = rollout_laws(plan)
    if plan.mode == "prime-rl":
        return solve_prime_rl(plan, laws)
    if plan.mode == "slime":
        return solve_slime(plan, laws)
    if plan.mode in ("verl", "pipelinerl"):
        return solve_group_pool(plan, laws)
    return _solve_async(plan, laws) if plan.mode == "async" else _solve_sync(plan, laws)


def _solve_async(plan: Plan, laws: RolloutLaws) -> ModelResult:
    cfg = plan.config
    notes: list[str] = []
    holds = True
    samples = plan.samples_per_step
    teardown = plan.teardown.mean()
    ps, p_exec, accept = laws.p_success, plan.p_exec, plan.acceptance_filter
    mean_slot = laws.mean_slot(teardown, cfg.teardown_holds_slot)
    mean_sandbox = laws.mean_sandbox(teardown)
    dispatch_cap = plan.concurrency / mean_slot if mean_slot > 0 else math.inf
    create_wait = 0.0  # time a rollout holds its slot waiting for the create rate (Little's law)
    if cfg.create_rate:
        start_bound = cfg.create_rate / laws.mean_attempts
        if start_bound < dispatch_cap:
            notes.append(f"the create rate ({cfg.create_rate:g}/s) bounds production, not concurrency")
            dispatch_cap = start_bound
            create_wait = plan.concurrency / dispatch_cap - mean_slot  # spread over every attempt's create
    gen_cap = dispatch_cap * ps * (1 - p_exec)
    train_time = samples / plan.trainer_rate + cfg.weight_sync_s
    capacity = samples / train_time

    # group completion: a group's samples reach the trainer together, when its last member ends
    end_cdf = laws.end_cdf()
    lattice = laws.lattice
    group_done = lattice.expected(1.0 - end_cdf**cfg.group_size)
    spread = (cfg.group_size - 1) / (2 * dispatch_cap) if dispatch_cap > 0 else 0.0
    p_stale = 0.0
    for _ in range(50):  # fixed point: drops lower λ_eff, which lengthens steps, which lowers drops
        eff_cap = gen_cap * accept * (1 - p_stale)
        trainer = min(eff_cap, capacity)
        step = samples / trainer if trainer > 0 else math.inf
        idle = max(0.0, 1.0 - eff_cap / capacity)
        extra = cfg.async_level if eff_cap > capacity else (1.0 - idle)
        if not math.isfinite(step):
            break
        threshold = (cfg.max_off_policy_steps + 0.5 - extra) * step - spread - create_wait
        new = 1.0 - cdf_at(lattice, end_cdf**cfg.group_size, threshold) if threshold > 0 else 1.0
        if abs(new - p_stale) < 1e-9:
            break
        p_stale = 0.5 * (p_stale + new)
    eff_cap = gen_cap * accept * (1 - p_stale)
    if eff_cap <= capacity:
        trainer, idle, generator, dispatch = eff_cap, 1.0 - eff_cap / capacity, gen_cap, dispatch_cap
    else:
        trainer, idle = capacity, 0.0
        generator = capacity / (accept * (1 - p_stale))
        dispatch = generator / (ps * (1 - p_exec))
        notes.append("trainer-bound: the generator is throttled (async_level steps of finished samples wait)")
    step = samples / trainer if trainer > 0 else math.inf
    if create_wait and dispatch < dispatch_cap:
        create_wait = 0.0  # throttled below the create rate: no queue for creates
    # staleness (approximate; the simulation gives the distribution): generator-bound, a sample ages by the
    # versions published while its group completes, plus one if it waits out a training step; trainer-bound,
    # the gate holds async_level steps of samples, consumed FIFO half a step late on average
    in_flight = (group_done + spread + create_wait) / step
    if eff_cap > capacity:
        mean_lag = max(in_flight + cfg.async_level, cfg.async_level + 0.5)
    else:
        mean_lag = in_flight + (1.0 - idle)
    sandbox_time = mean_sandbox + laws.billed_create_wait(create_wait)
    if p_stale > 0.01:
        holds = False
        notes.append(f"staleness drops {100 * p_stale:.1f}%: the closed form's drop rate is approximate")
    return continuous_result(
        plan,
        laws,
        generator=generator,
        gen_cap=gen_cap,
        trainer=trainer,
        capacity=capacity,
        idle=idle,
        step=step,
        generation=laws.mean_delivery + create_wait,
        lost_to_staleness=p_stale,
        staleness=mean_lag,
        dispatch=dispatch,
        sandbox_s=sandbox_time,
        slot_s=mean_slot + create_wait,
        holds=holds,
        notes=notes,
    )


def _solve_sync(plan: Plan, laws: RolloutLaws) -> ModelResult:
    notes: list[str] = []
    holds = True
    lattice = laws.lattice
    n, k = plan.dispatched_per_step, plan.finish_target
    ps, p_exec, accept = laws.p_success, plan.p_exec, plan.acceptance_filter
    p_good = ps * (1 - p_exec)
    delivered_cdf = p_good * laws.delivery_cdf  # P(a rollout has succeeded by t)
    end_cdf = laws.end_cdf()
    teardown = plan.teardown.mean()
    if k >= n:
        generation = lattice.expected(1.0 - end_cdf**n)
        successes = n * p_good
        killed = 0.0
        lost_init = 1 - ps
        sandbox = n * laws.mean_sandbox(teardown)
    else:
        reach = special.betainc(k, n - k + 1, p_good)  # P(at least k of n ever succeed)
        if reach < 0.999:
            holds = False
            notes.append(
                f"only {100 * reach:.1f}% of steps reach {k} successes among {n}: the step may end on the last rollout"
            )
        by_t = special.betainc(k, n - k + 1, np.clip(delivered_cdf, 0.0, 1.0))
        generation = lattice.expected(1.0 - by_t / max(reach, 1e-12))
        successes = float(k)
        ended = cdf_at(lattice, end_cdf, generation)
        killed = max(0.0, 1.0 - ended)
        lost_init = (1 - ps) * cdf_at(lattice, laws.lost_cdf, generation)
        # sandboxes run until they end or the step's end (then torn down)
        sandbox_cdf = ps * laws.delivery_cdf + (1 - ps) * laws.lost_cdf
        sandbox = n * mean_min(lattice, sandbox_cdf, generation) + n * teardown * (ps * ended + killed)
    generation, single_wave = one_wave(plan, laws, n, generation, notes)
    return stepped_result(
        plan,
        "sync",
        generation,
        successes,
        accept * successes,
        sandbox,
        lost_init=lost_init,
        lost_exec=ps * p_exec if k >= n else ps * p_exec * cdf_at(lattice, laws.delivery_cdf, generation),
        killed=killed,
        creates=n * laws.mean_attempts if k >= n else n * laws.mean_attempts * (1.0 - killed),
        holds=holds and single_wave,
        notes=notes,
    )
