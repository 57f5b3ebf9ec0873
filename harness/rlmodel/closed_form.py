"""The generator-side model in closed form (SemiAnalysis' throughput formulas, made exact where they can be).

Async (steady state):
  effective concurrency C = min(target, vendor cap, inference cap)
  dispatch rate λ_d = C / E[slot time], bounded by create_rate / E[attempts per rollout]
  production λ_gen = λ_d · P(start within retries) · (1 − p_exec)
  effective production λ_eff = acceptance · λ_gen · (1 − p_stale)
  trainer idle = max(0, 1 − λ_eff / μ); when λ_eff > μ the generator is throttled (async_level steps of
  finished samples at most), so the trainer runs at μ and the generator at μ / acceptance.
prime-rl (its Scheduler @02b49f9; `_solve_prime_rl`): groups circulate, replaced only when consumed, so
  production is groups·G successes per group cycle (dispatch → its slowest member ended) while the trainer keeps
  up, and the trainer's rate otherwise; staleness from the version gate (see the function).
slime (generate_rollout_async @0044b40; `_solve_slime`): the step ends at the B-th kept group among
  ceil(oversampling·B) dispatched at once (kept: done, not filtered, an accepted sample), exact by the binomial
  order statistic on the lattice; a refill round (too few kept) is flagged.
verl fully-async and PipelineRL (`_solve_group_pool`): a pool of concurrency / G groups, each replaced when it
  ends; weight updates pause in-flight generation (generation stretched by 1 / (1 − pause share)); verl's
  trainer takes B groups a step and syncs every T steps, PipelineRL's takes B·G accepted samples and broadcasts
  every step. Where verl's staleness budget or drain, or PipelineRL's ring buffer or max_lag budget, shape the
  flow, `holds` is False and the note says which.
Sync (one step at a time):
  generation time = E[time until k of the N dispatched rollouts succeeded] (k = N without oversampling: the
  expected maximum of the step's rollout latencies) ; step time = generation time + training time;
  trainer idle = generation time / step time.

A rollout's latency is a random sum: (failed starts + backoff) × retries + startup + turns × (generation + tool)
+ reward. Its distribution is computed exactly on a fine lattice (characteristic functions by FFT), so the
expected maximum and order statistics use the whole distribution, not a normal or lognormal guess.
The closed forms assume a steady state with one wave per sync step; `holds` is False (with the reason in
`notes`) when inputs break that: waves (N > concurrency), a binding create rate in sync, staleness drops
above 1% (the drop rate is then itself an approximation), or a step that may not reach its k successes.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from scipy import special

from harness.rlmodel.duration_dists import ConstantDist, Dist
from harness.rlmodel.inputs import Plan
from harness.rlmodel.result import ModelResult

BINS = 1 << 16


def _sum_upper(dist: Dist, count: int) -> float:
    """A bound on the sum of `count` draws: one extreme draw plus (count − 1) ordinary ones."""
    if count <= 0:
        return 0.0
    return dist.upper(1e-10) + (count - 1) * dist.upper(1e-4)


@dataclass(frozen=True, slots=True)
class Lattice:
    """Distributions as probability masses on 0, dt, 2dt, … (bin i holds the mass of [(i−½)dt, (i+½)dt))."""

    dt: float
    bins: int

    @property
    def n_fft(self) -> int:
        return 2 * self.bins

    def pmf(self, dist: Dist) -> np.ndarray:
        edges = (np.arange(self.bins) + 0.5) * self.dt
        cdf = np.clip(dist.cdf(edges), 0.0, 1.0)
        pmf = np.diff(np.concatenate(([0.0], cdf)))
        pmf[-1] += 1.0 - cdf[-1]
        return np.maximum(pmf, 0.0)

    def spectrum(self, dist: Dist) -> np.ndarray:
        return np.fft.rfft(self.pmf(dist), n=self.n_fft)

    def inverse(self, spectrum: np.ndarray) -> np.ndarray:
        full = np.fft.irfft(spectrum, n=self.n_fft)
        pmf = np.maximum(full[: self.bins], 0.0)
        pmf[-1] += max(0.0, float(np.maximum(full[self.bins :], 0.0).sum()))
        total = pmf.sum()
        return pmf / total if total > 0 else pmf

    def expected(self, survival: np.ndarray) -> float:
        """E[X] = Σ P(X > i·dt)·dt for a variable on the lattice."""
        return float(np.sum(survival) * self.dt)


@dataclass(frozen=True, slots=True)
class RolloutLaws:
    """CDFs on the lattice of one dispatched rollout: delivery (success), loss (start never succeeded), end."""

    lattice: Lattice
    p_success: float
    delivery_cdf: np.ndarray  # given success: dispatch -> sample ready
    lost_cdf: np.ndarray  # given every attempt failed: dispatch -> given up
    mean_delivery: float
    mean_lost: float
    mean_attempts: float

    def end_cdf(self) -> np.ndarray:
        return self.p_success * self.delivery_cdf + (1 - self.p_success) * self.lost_cdf

    def mean_sandbox(self, teardown: float) -> float:
        """Mean seconds a dispatched rollout keeps a sandbox: its delivery and teardown, or its failed starts."""
        return self.p_success * (self.mean_delivery + teardown) + (1 - self.p_success) * self.mean_lost

    def mean_slot(self, teardown: float, teardown_holds_slot: bool) -> float:
        """Mean seconds it holds a concurrency slot: the same, teardown included only when the slot waits for it."""
        return self.mean_sandbox(teardown if teardown_holds_slot else 0.0)


def rollout_laws(plan: Plan) -> RolloutLaws:
    cfg = plan.config
    retries, backoff = cfg.max_retries, cfg.backoff_s
    p = plan.p_init
    tool_count = plan.turns if plan.tool_per_turn else 1
    work_upper = _sum_upper(plan.generation, plan.turns) + _sum_upper(plan.tool, tool_count) + plan.reward.upper()
    fail_upper = _sum_upper(plan.init_failure_time, retries + 1) + retries * backoff
    upper = max(plan.startup.upper() + fail_upper + work_upper, fail_upper) + plan.teardown.upper()
    lattice = Lattice(dt=max(upper, 1e-6) * 1.02 / BINS, bins=BINS)

    start = lattice.spectrum(plan.startup)
    work = lattice.spectrum(plan.generation) ** plan.turns * lattice.spectrum(plan.tool) ** tool_count
    work = work * lattice.spectrum(plan.reward)
    fail_and_wait = lattice.spectrum(plan.init_failure_time) * lattice.spectrum(ConstantDist(backoff))
    weights = np.array([p**j * (1 - p) for j in range(retries + 1)])
    p_success = float(weights.sum())
    mixture = np.zeros_like(start)
    power = np.ones_like(start)
    for weight in weights:  # at most max_retries + 1 terms
        mixture = mixture + (weight / p_success) * power
        power = power * fail_and_wait
    delivery = lattice.inverse(start * work * mixture)
    lost = lattice.inverse(lattice.spectrum(plan.init_failure_time) ** (retries + 1)
                           * lattice.spectrum(ConstantDist(backoff)) ** retries)  # fmt: skip
    failed_before = float(np.sum(np.arange(retries + 1) * weights) / p_success)
    mean_delivery = plan.startup.mean() + plan.mean_work() + failed_before * (plan.init_failure_time.mean() + backoff)
    mean_lost = (retries + 1) * plan.init_failure_time.mean() + retries * backoff
    attempts = float(np.sum((np.arange(retries + 1) + 1) * weights) + (1 - p_success) * (retries + 1))
    return RolloutLaws(lattice, p_success, np.cumsum(delivery), np.cumsum(lost), mean_delivery, mean_lost, attempts)


def _cdf_at(lattice: Lattice, cdf: np.ndarray, t: float) -> float:
    index = int(min(max(math.floor(t / lattice.dt), 0), lattice.bins - 1))
    return float(cdf[index])


def _mean_min(lattice: Lattice, cdf: np.ndarray, t: float) -> float:
    """E[min(X, t)] = ∫₀ᵗ P(X > u) du."""
    index = int(min(max(math.floor(t / lattice.dt), 0), lattice.bins))
    return float(np.sum(1.0 - cdf[:index]) * lattice.dt)


def solve(plan: Plan) -> ModelResult:
    laws = rollout_laws(plan)
    if plan.mode == "prime-rl":
        return _solve_prime_rl(plan, laws)
    if plan.mode == "slime":
        return _solve_slime(plan, laws)
    if plan.mode in ("verl", "pipelinerl"):
        return _solve_group_pool(plan, laws)
    return _solve_async(plan, laws) if plan.mode == "async" else _solve_sync(plan, laws)


def _solve_prime_rl(plan: Plan, laws: RolloutLaws) -> ModelResult:
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
    p_cancel = 1.0 - _cdf_at(lattice, end_cdf**size, (cfg.max_off_policy_steps + 1) * step)
    if p_cancel > 0.01:
        holds = False
        notes.append(f"{100 * p_cancel:.1f}% of groups outlive max_off_policy_steps updates and are cancelled")
    mean_slot = laws.mean_slot(teardown, cfg.teardown_holds_slot)
    mean_sandbox = laws.mean_sandbox(teardown)
    return ModelResult(
        engine="closed form",
        mode="prime-rl",
        concurrency=plan.concurrency,
        generator_samples_per_s=generator,
        generator_capacity_samples_per_s=gen_cap,
        effective_samples_per_s=trainer,
        trainer_samples_per_s=trainer,
        trainer_capacity_samples_per_s=capacity,
        trainer_idle_ratio=idle,
        step_time_s=step,
        generation_time_s=laws.mean_delivery,
        lost_to_init_failures=1 - ps,
        lost_to_exec_failures=ps * p_exec,
        lost_to_staleness=p_cancel,
        killed_by_oversampling=0.0,
        filtered_by_acceptance=1 - accept,
        sandbox_seconds_per_step=dispatch * mean_sandbox * step,
        sandbox_seconds_per_trained_sample=dispatch * mean_sandbox / trainer if trainer > 0 else math.inf,
        mean_staleness_steps=lag,
        concurrency_used=dispatch * mean_slot,
        creates_per_step=dispatch * laws.mean_attempts * step if math.isfinite(step) else math.inf,
        holds=holds,
        notes=notes,
    )


def _order_statistic_time(lattice: Lattice, cdf: np.ndarray, k: int, n: int) -> float:
    """E[time of the k-th of n independent ends with this CDF]."""
    if k <= 0:
        return 0.0
    return lattice.expected(1.0 - special.betainc(k, n - k + 1, np.clip(cdf, 0.0, 1.0)))


def _solve_group_pool(plan: Plan, laws: RolloutLaws) -> ModelResult:
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
                notes.append(f"verl's staleness budget binds ({ahead:.3g} groups may be ahead at a sync, {groups} run "
                             f"at once): each sync period waits ~{bubble:.3g} s for fresh groups (approximate)")  # fmt: skip
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
                notes.append(f"trainer-bound without max_lag: the ring buffer drops {100 * dropped:.1f}% of ready "
                             "samples, oldest first (staleness approximate)")  # fmt: skip
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
                notes.append(f"max_lag's budget grows by B = {prompts} groups per update but a step needs "
                             f"{samples / per_group:.3g} (lost and filtered groups): the actor runs out after "
                             f"~{steps_left:.0f} steps and the trainer stalls")  # fmt: skip
                trainer, idle, step, lag = 0.0, 1.0, math.inf, math.nan
                dispatch_groups = 0.0
        trained_per_step = samples
    dispatch = dispatch_groups * size  # rollouts per second
    generator = dispatch * ps * (1 - p_exec)
    gen_cap = supply * size * ps * (1 - p_exec)
    mean_slot = laws.mean_slot(teardown, cfg.teardown_holds_slot) + delay
    # a retry queues for the create rate too, with its sandbox already billed: (attempts − 1) of the waits
    mean_sandbox = laws.mean_sandbox(teardown) + delay + create_wait * (laws.mean_attempts - 1) / laws.mean_attempts
    finite = math.isfinite(step) and trainer > 0
    return ModelResult(
        engine="closed form",
        mode=plan.mode,
        concurrency=plan.concurrency,
        generator_samples_per_s=generator,
        generator_capacity_samples_per_s=gen_cap,
        effective_samples_per_s=trainer,
        trainer_samples_per_s=trainer,
        trainer_capacity_samples_per_s=samples / train_time,
        trainer_idle_ratio=idle,
        step_time_s=step,
        generation_time_s=laws.mean_delivery + delay + create_wait,
        lost_to_init_failures=1 - ps,
        lost_to_exec_failures=ps * p_exec,
        lost_to_staleness=dropped,
        killed_by_oversampling=0.0,
        filtered_by_acceptance=1 - accept,
        sandbox_seconds_per_step=dispatch * mean_sandbox * step if finite else math.inf,
        sandbox_seconds_per_trained_sample=dispatch * mean_sandbox / trainer if finite else math.inf,
        mean_staleness_steps=lag,
        concurrency_used=dispatch * (mean_slot + create_wait),
        creates_per_step=dispatch * laws.mean_attempts * step if finite else math.inf,
        holds=holds,
        notes=notes,
    )


def _verl_period(plan: Plan, laws: RolloutLaws, group_cdf: np.ndarray, ahead: float, groups: int,
                 cycle: float) -> float:  # fmt: skip
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
            ready = _order_statistic_time(laws.lattice, group_cdf, min(need, fresh), fresh)
            ready += max(need - fresh, 0) * cycle / max(groups, 1) + need * per_group_create
        finish = max(finish, ready) + train
    return finish + cfg.weight_sync_s


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
        new = 1.0 - _cdf_at(lattice, end_cdf**cfg.group_size, threshold) if threshold > 0 else 1.0
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
    # retries queue for the create rate too, with a sandbox already billed: (attempts − 1) of the waits
    sandbox_time = mean_sandbox + create_wait * (laws.mean_attempts - 1) / laws.mean_attempts
    if p_stale > 0.01:
        holds = False
        notes.append(f"staleness drops {100 * p_stale:.1f}%: the closed form's drop rate is approximate")
    return ModelResult(
        engine="closed form",
        mode="async",
        concurrency=plan.concurrency,
        generator_samples_per_s=generator,
        generator_capacity_samples_per_s=gen_cap,
        effective_samples_per_s=trainer,
        trainer_samples_per_s=trainer,
        trainer_capacity_samples_per_s=capacity,
        trainer_idle_ratio=idle,
        step_time_s=step,
        generation_time_s=laws.mean_delivery + create_wait,
        lost_to_init_failures=1 - ps,
        lost_to_exec_failures=ps * p_exec,
        lost_to_staleness=p_stale,
        killed_by_oversampling=0.0,
        filtered_by_acceptance=1 - accept,
        sandbox_seconds_per_step=dispatch * sandbox_time * step,
        sandbox_seconds_per_trained_sample=dispatch * sandbox_time / trainer if trainer > 0 else math.inf,
        mean_staleness_steps=mean_lag,
        concurrency_used=dispatch * (mean_slot + create_wait),
        creates_per_step=dispatch * laws.mean_attempts * step if math.isfinite(step) else math.inf,
        holds=holds,
        notes=notes,
    )


def _solve_slime(plan: Plan, laws: RolloutLaws) -> ModelResult:
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
    ended = _cdf_at(lattice, end_cdf, generation)
    killed = max(0.0, 1.0 - ended)
    teardown = plan.teardown.mean()
    sandbox_cdf = ps * laws.delivery_cdf + (1 - ps) * laws.lost_cdf
    sandbox = n * _mean_min(lattice, sandbox_cdf, generation) + n * teardown * ended
    successes = n * ps * (1 - p_exec) * _cdf_at(lattice, laws.delivery_cdf, generation)
    trained = target * size * p_sample / p_any  # B kept groups, each with its accepted samples
    generation, one_wave = _one_wave(plan, laws, n, generation, notes)
    staleness = 0.0
    if cfg.partial_rollout:
        # the unfinished groups resume next step instead of being aborted: nothing is killed, every dispatched
        # rollout runs to its end (holding its sandbox through the training between), and a carried group, ahead
        # of the fresh ones, is likely kept next step with its samples a policy behind. The head start shortens the
        # next step's generation; this form does not model it (an upper bound), so it does not claim to hold.
        carried = groups * (1.0 - _cdf_at(lattice, end_cdf**size, generation))
        staleness = min(carried * p_kept, target) / target
        busy = trained / plan.trainer_rate + cfg.weight_sync_s
        sandbox = n * laws.mean_sandbox(teardown) * (1.0 - killed) + carried * size * busy
        successes, killed = n * ps * (1 - p_exec) * (1.0 - killed), 0.0
        holds = False
        notes.append(f"partial rollout: ~{carried:.3g} groups a step resume in the next (a policy behind, holding "
                     "their sandboxes); their head start is not modelled here (approximate)")  # fmt: skip
    result = _stepped_result(
        plan, "slime", generation, successes, trained, sandbox,
        lost_init=(1 - ps) * _cdf_at(lattice, laws.lost_cdf, generation),
        lost_exec=ps * p_exec * _cdf_at(lattice, laws.delivery_cdf, generation),
        killed=killed, creates=n * laws.mean_attempts * (1.0 - killed), holds=holds and one_wave, notes=notes,
    )  # fmt: skip
    if staleness:
        result = dataclasses.replace(result, mean_staleness_steps=staleness,
                                     staleness_distribution={0: 1.0 - staleness, 1: staleness})  # fmt: skip
    return result


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
        ended = _cdf_at(lattice, end_cdf, generation)
        killed = max(0.0, 1.0 - ended)
        lost_init = (1 - ps) * _cdf_at(lattice, laws.lost_cdf, generation)
        # sandboxes run until they end or the step's end (then torn down)
        sandbox_cdf = ps * laws.delivery_cdf + (1 - ps) * laws.lost_cdf
        sandbox = n * _mean_min(lattice, sandbox_cdf, generation) + n * teardown * (ps * ended + killed)
    generation, one_wave = _one_wave(plan, laws, n, generation, notes)
    return _stepped_result(
        plan, "sync", generation, successes, accept * successes, sandbox, lost_init=lost_init,
        lost_exec=ps * p_exec if k >= n else ps * p_exec * _cdf_at(lattice, laws.delivery_cdf, generation),
        killed=killed, creates=n * laws.mean_attempts if k >= n else n * laws.mean_attempts * (1.0 - killed),
        holds=holds and one_wave, notes=notes,
    )  # fmt: skip


def _one_wave(plan: Plan, laws: RolloutLaws, n: int, generation: float, notes: list[str]) -> tuple[float, bool]:
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


def _stepped_result(
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
