"""The RL frameworks' own modes in closed form: prime-rl's scheduler, verl's fully-async rollouter and PipelineRL's
actor (a pool of groups), and slime's kept-group step (docs/rl-frameworks.md: file and commit of each). Each says
where it does not hold."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy import special

from harness.rlmodel.closed_form_lattice import RolloutLaws, cdf_at, mean_min, order_statistic_time
from harness.rlmodel.closed_form_results import continuous_result, one_wave, stepped_result
from harness.rlmodel.inputs import Plan
from harness.rlmodel.result import ModelResult


def solve_prime_rl(plan: Plan, laws: RolloutLaws) -> ModelResult:
    """prime-rl's Scheduler (@02b49f9): `groups` groups in flight, each replaced when consumed into a batch, so a
    group's slots wait for its slowest member. Generator-bound with max_async_level >= 1, the version gate never
    closes and production is groups·G successes per group cycle; the staleness of a sample is the steps published
    while its group ran, plus what the loaded policy lags the newest (strict: k; else the training share of a
    step). Trainer-bound, the gate paces the generator: a group waits its turn among the `groups` circulating
    ones and carries the policy of k steps before the batch being built. When the gate closes every step
    (k = 0), the simulation answers."""
    cfg = plan.config
    notes: list[str] = []
    holds = True
    samples, size, k = plan.samples_per_step, cfg.group_size, cfg.max_async_level
    groups = cfg.prime_rl_groups
    teardown = plan.teardown.mean()
    ps, p_exec, accept = laws.p_success, plan.p_exec, plan.acceptance_filter
    lattice, end_cdf = laws.lattice, laws.end_cdf()
    group_done = lattice.expected(1.0 - end_cdf**size)  # dispatch -> its last member ended
    cycle = group_done + (teardown if cfg.teardown_holds_slot else 0.0)
    dispatch = groups * size / cycle if cycle > 0 else math.inf  # rollouts per second
    if plan.concurrency < groups * size:
        holds = False
        notes.append(f"{plan.concurrency} slots for {groups * size} rollouts in flight: groups queue for slots")
    if cfg.create_rate and dispatch * laws.mean_attempts > cfg.create_rate:
        holds = False
        notes.append(f"the create rate ({cfg.create_rate:g}/s) bounds production")
        dispatch = cfg.create_rate / laws.mean_attempts
    gen_cap = dispatch * ps * (1 - p_exec)
    train_time = samples / plan.trainer_rate + cfg.weight_sync_s
    capacity = samples / train_time
    eff_cap = gen_cap * accept
    if eff_cap <= capacity:
        trainer, idle, generator = eff_cap, 1.0 - eff_cap / capacity, gen_cap
    else:
        trainer, idle = capacity, 0.0
        generator = capacity / accept
        dispatch = generator / (ps * (1 - p_exec))
        notes.append("trainer-bound: prime-rl's version gate paces the generator")
    if k == 0:
        holds = False
        notes.append("max_async_level = 0 is synchronous: each batch waits for the previous step's weights")
    step = samples / trainer if trainer > 0 else math.inf
    if eff_cap > capacity:
        # the gate opens batch m when step m - k is published, and the groups dispatched then (policy m - k) are
        # consumed after the groups ahead of them: `groups` groups circulate, accept·G·ps·(1 - p_exec) samples each,
        # so a group spends groups / (groups consumed per step) steps from dispatch to consumption (Little's law)
        per_group = accept * size * ps * (1 - p_exec)
        lag = groups * per_group / samples + k
    else:
        lag = group_done / step + (k if cfg.strict_async_level else 1.0 - idle)
    # a group still in flight after more than max_off_policy_steps weight updates is cancelled and replaced
    p_cancel = 1.0 - cdf_at(lattice, end_cdf**size, (cfg.max_off_policy_steps + 1) * step)
    if p_cancel > 0.01:
        holds = False
        notes.append(f"{100 * p_cancel:.1f}% of groups outlive max_off_policy_steps updates and are cancelled")
    return continuous_result(
        plan,
        laws,
        generator=generator,
        gen_cap=gen_cap,
        trainer=trainer,
        capacity=capacity,
        idle=idle,
        step=step,
        generation=laws.mean_delivery,
        lost_to_staleness=p_cancel,
        staleness=lag,
        dispatch=dispatch,
        sandbox_s=laws.mean_sandbox(teardown),
        slot_s=laws.mean_slot(teardown, cfg.teardown_holds_slot),
        holds=holds,
        notes=notes,
    )


def solve_group_pool(plan: Plan, laws: RolloutLaws) -> ModelResult:
    """verl fully-async and PipelineRL in steady state: m = concurrency / G groups circulate, each replaced when its
    last member ends, so groups end at m / (group time) per second while the trainer keeps up.

    verl: the trainer takes B finished groups per step (trained on their accepted samples) and every T steps
    syncs weights; staleness counts the steps since the sync whose policy dispatched a sample (uniform over the
    T-step period: (T − 1) / 2, plus the steps its group was in flight). Trainer-bound, the rollouter stops at its
    budget, so at each sync s·T·B groups are ahead and the period's first batch waits for the rest (a bubble: the
    (B − s·T·B)-th end among the groups dispatched at the sync); FIFO consumption then gives (T − 1)/2 + T·s steps.
    PipelineRL: the trainer streams accepted samples into its step of B·G and broadcasts after each; generator-bound
    a sample is the steps published while its group ran (it is trained as it arrives, or after the broadcast). Trainer-bound without
    max_lag the generator never slows: the ring buffer drops what the trainer cannot take, and a sample waits up to
    a buffer's worth."""
    cfg = plan.config
    verl = plan.mode == "verl"
    notes: list[str] = []
    holds = True
    samples, size, prompts = plan.samples_per_step, cfg.group_size, cfg.prompts
    groups = max(plan.concurrency // size, 1)
    ps, p_exec, accept = laws.p_success, plan.p_exec, plan.acceptance_filter
    per_group = size * ps * (1 - p_exec) * accept  # accepted samples a group brings
    lattice, end_cdf = laws.lattice, laws.end_cdf()
    group_cdf = end_cdf**size
    group_done = lattice.expected(1.0 - group_cdf)
    teardown = plan.teardown.mean()
    hold = teardown if cfg.teardown_holds_slot else 0.0
    period_steps = cfg.trigger_parameter_sync_step if verl else 1
    train_time = samples / plan.trainer_rate + cfg.weight_sync_s / period_steps  # per step, syncs spread
    pausing = cfg.weight_sync_s > 0 and (not verl or cfg.partial_rollout)
    generation = plan.generation.mean() * plan.turns
    create_bound = cfg.create_rate / (size * laws.mean_attempts) if cfg.create_rate else math.inf
    trainer_groups = prompts / train_time if verl else (samples / train_time) / max(per_group, 1e-12)
    delay, rate = 0.0, 0.0
    for _ in range(100):  # fixed point: pauses stretch generation, which sets the step, which spaces pauses
        cycle = group_done + hold + delay
        supply = min(groups / cycle, create_bound)
        rate = min(supply, trainer_groups)
        step = prompts / rate if verl else samples / (rate * max(per_group, 1e-12))
        share = min(cfg.weight_sync_s / (period_steps * step), 0.9) if pausing else 0.0
        new = generation * share / (1.0 - share)
        if abs(new - delay) < 1e-9:
            break
        delay = 0.5 * (delay + new)
    if create_bound < groups / (group_done + hold + delay):
        holds = False
        notes.append(f"the create rate ({cfg.create_rate:g}/s) bounds production")
    if pausing and delay > 0:
        notes.append(f"weight updates pause generation: {delay:.3g} s added to a rollout's generation")
    supply = min(groups / (group_done + hold + delay), create_bound)
    trainer_bound = supply >= trainer_groups
    # behind a binding create rate a group holds its slots waiting for its creates too (Little's law)
    create_wait = max(groups / supply - (group_done + hold + delay), 0.0)
    flight = group_done + delay + create_wait  # dispatch -> the group's samples are ready
    bubble = 0.0
    dropped = 0.0
    if verl:
        ahead = cfg.staleness_threshold * cfg.trigger_parameter_sync_step * prompts  # groups ahead at a sync
        if trainer_bound or groups > ahead:
            # the budget binds: each period opens at a sync with `ahead` groups ready or running and the period's
            # T·B groups dispatched at once (as slots and the create rate allow); batch j waits for j·B of them
            period = _verl_period(plan, laws, group_cdf, ahead, groups, group_done + hold + delay)
            step = period / period_steps
            bubble = max(period - period_steps * train_time, 0.0)
            if bubble > 0.01 * period:
                holds = False
                notes.append(
                    f"verl's staleness budget binds ({ahead:.3g} groups may be ahead at a sync, {groups} run "
                    f"at once): each sync period waits ~{bubble:.3g} s for fresh groups (approximate)"
                )
            lag = (period_steps - 1) / 2 + period_steps * min(cfg.staleness_threshold, 1.0)
        else:
            step = prompts / rate
            lag = (period_steps - 1) / 2 + flight / step
        rate = prompts / step
        if not cfg.partial_rollout:
            # the trainer's pause() waits for every in-flight group: the longest residual of m groups in flight
            survival = 1.0 - group_cdf
            residual = np.cumsum(survival) * lattice.dt / max(group_done, 1e-12)
            drain = lattice.expected(1.0 - np.clip(residual, 0.0, 1.0) ** groups)
            step += drain / period_steps
            rate = prompts / step
            holds = False
            notes.append(f"without partial_rollout each sync drains the generator first (~{drain:.3g} s, approximate)")
        trained_per_step = prompts * per_group
        trainer = trained_per_step / step
        busy = samples / plan.trainer_rate + cfg.weight_sync_s / period_steps
        idle = max(0.0, 1.0 - busy / step)
        dispatch_groups = rate
    else:
        dispatch_groups = supply
        if trainer_bound:
            step = train_time
            trainer = samples / step
            idle = 0.0
            if cfg.max_lag is None:
                dropped = max(0.0, 1.0 - trainer / (supply * per_group))
                holds = False
                notes.append(
                    f"trainer-bound without max_lag: the ring buffer drops {100 * dropped:.1f}% of ready "
                    "samples, oldest first (staleness approximate)"
                )
                lag = flight / step + cfg.ring_buffer_size / (2 * samples)
            else:
                dispatch_groups = trainer_groups
                lag = flight / step + 0.5
        else:
            step = samples / (supply * per_group)
            trainer = samples / step
            idle = max(0.0, 1.0 - train_time / step)
            lag = (flight + cfg.weight_sync_s) / step  # one arriving during a broadcast trains a step later
        if cfg.max_lag is not None:
            short = prompts - samples / max(per_group, 1e-12)  # groups the budget gains minus groups a step needs
            if short < -1e-9:
                holds = False
                steps_left = math.ceil(cfg.max_lag / size) / -short
                notes.append(
                    f"max_lag's budget grows by B = {prompts} groups per update but a step needs "
                    f"{samples / per_group:.3g} (lost and filtered groups): the actor runs out after "
                    f"~{steps_left:.0f} steps and the trainer stalls"
                )
                trainer, idle, step, lag = 0.0, 1.0, math.inf, math.nan
                dispatch_groups = 0.0
        trained_per_step = samples
    dispatch = dispatch_groups * size  # rollouts per second
    generator = dispatch * ps * (1 - p_exec)
    gen_cap = supply * size * ps * (1 - p_exec)
    mean_slot = laws.mean_slot(teardown, cfg.teardown_holds_slot) + delay
    mean_sandbox = laws.mean_sandbox(teardown) + delay + laws.billed_create_wait(create_wait)
    return continuous_result(
        plan,
        laws,
        generator=generator,
        gen_cap=gen_cap,
        trainer=trainer,
        capacity=samples / train_time,
        idle=idle,
        step=step,
        generation=laws.mean_delivery + delay + create_wait,
        lost_to_staleness=dropped,
        staleness=lag,
        dispatch=dispatch,
        sandbox_s=mean_sandbox,
        slot_s=mean_slot + create_wait,
        holds=holds,
        notes=notes,
    )


def _verl_period(
    plan: Plan, laws: RolloutLaws, group_cdf: np.ndarray, ahead: float, groups: int, cycle: float
) -> float:
    """Seconds of one verl sync period when its budget binds: batch j starts once the `ahead` groups and j·B − ahead
    of the period's fresh ones are done (expected order statistics among those dispatched at the sync, later waves
    at the pool's rate, each group's creates queued behind the earlier ones' at the create rate), after batch j − 1."""
    cfg = plan.config
    prompts, period_steps = cfg.prompts, cfg.trigger_parameter_sync_step
    train = plan.samples_per_step / plan.trainer_rate
    fresh = min(period_steps * prompts, max(groups, 1))
    per_group_create = cfg.group_size * laws.mean_attempts / cfg.create_rate if cfg.create_rate else 0.0
    finish = 0.0
    for j in range(1, period_steps + 1):
        need = math.ceil(j * prompts - ahead)
        ready = 0.0
        if need > 0:
            ready = order_statistic_time(laws.lattice, group_cdf, min(need, fresh), fresh)
            ready += max(need - fresh, 0) * cycle / max(groups, 1) + need * per_group_create
        finish = max(finish, ready) + train
    return finish + cfg.weight_sync_s


def solve_slime(plan: Plan, laws: RolloutLaws) -> ModelResult:
    """slime's generate_rollout_async (@0044b40): M = ceil(oversampling·B) groups dispatched at once; a group is
    kept when all its members ended, it was not filtered and it holds an accepted sample; the step's generation
    ends at the B-th kept group, when the rest is killed. With q(t) = P(a group is kept and done by t), the B-th
    kept group is done by t with probability P(Binomial(M, q(t)) >= B), exact on the lattice. A step that needs
    a refill round (fewer than B kept among M, probability P(Binomial(M, q(inf)) < B)) breaks the one-wave form."""
    cfg = plan.config
    notes: list[str] = []
    holds = True
    lattice = laws.lattice
    size, target = cfg.group_size, cfg.prompts
    groups = cfg.slime_round_groups
    n = groups * size
    ps, p_exec = laws.p_success, plan.p_exec
    p_sample = ps * (1 - p_exec) * (1 - cfg.filtered_samples)  # a member ends with an accepted sample
    p_any = 1.0 - (1.0 - p_sample) ** size
    p_kept = (1 - cfg.zero_advantage_groups) * p_any
    end_cdf = laws.end_cdf()
    group_cdf = np.clip(end_cdf**size * p_kept, 0.0, 1.0)
    reach = float(special.betainc(target, groups - target + 1, p_kept))  # P(at least B of M kept)
    if reach < 0.99:
        holds = False
        notes.append(f"{100 * (1 - reach):.1f}% of steps keep fewer than {target} of {groups} groups and refill")
    by_t = special.betainc(target, groups - target + 1, group_cdf)
    generation = lattice.expected(1.0 - by_t / max(reach, 1e-12))
    ended = cdf_at(lattice, end_cdf, generation)
    killed = max(0.0, 1.0 - ended)
    teardown = plan.teardown.mean()
    sandbox_cdf = ps * laws.delivery_cdf + (1 - ps) * laws.lost_cdf
    sandbox = n * mean_min(lattice, sandbox_cdf, generation) + n * teardown * ended
    successes = n * ps * (1 - p_exec) * cdf_at(lattice, laws.delivery_cdf, generation)
    trained = target * size * p_sample / p_any  # B kept groups, each with its accepted samples
    generation, single_wave = one_wave(plan, laws, n, generation, notes)
    staleness = 0.0
    if cfg.partial_rollout:
        # the unfinished groups resume next step instead of being aborted: nothing is killed, every dispatched
        # rollout runs to its end (holding its sandbox through the training between), and a carried group, ahead
        # of the fresh ones, is likely kept next step with its samples a policy behind. The head start shortens the
        # next step's generation; this form does not model it (an upper bound), so it does not claim to hold.
        carried = groups * (1.0 - cdf_at(lattice, end_cdf**size, generation))
        staleness = min(carried * p_kept, target) / target
        busy = trained / plan.trainer_rate + cfg.weight_sync_s
        sandbox = n * laws.mean_sandbox(teardown) * (1.0 - killed) + carried * size * busy
        successes, killed = n * ps * (1 - p_exec) * (1.0 - killed), 0.0
        holds = False
        notes.append(
            f"partial rollout: ~{carried:.3g} groups a step resume in the next (a policy behind, holding "
            "their sandboxes); their head start is not modelled here (approximate)"
        )
    result = stepped_result(
        plan,
        "slime",
        generation,
        successes,
        trained,
        sandbox,
        lost_init=(1 - ps) * cdf_at(lattice, laws.lost_cdf, generation),
        lost_exec=ps * p_exec * cdf_at(lattice, laws.delivery_cdf, generation),
        killed=killed,
        creates=n * laws.mean_attempts * (1.0 - killed),
        holds=holds and single_wave,
        notes=notes,
    )
    if staleness:
        result = dataclasses.replace(
            result, mean_staleness_steps=staleness, staleness_distribution={0: 1.0 - staleness, 1: staleness}
        )
    return result
