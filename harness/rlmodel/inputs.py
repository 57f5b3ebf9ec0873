"""Config + latency model -> the resolved inputs both engines use (one place decides every number).

Vendor limits: the config's `[sandbox] concurrency_cap` / `create_rate` when set, else the latency model's `limits`
(a simulated profile's figure or one measured under pushback), else none; `Plan.limits` says which and why.
Effective concurrency = min(target, vendor cap, inference cap). The latency model is read at the number of
sandboxes the generator actually asks for at once: the effective concurrency (async), or min(dispatched per
step, effective concurrency) (sync).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from harness.errors import UsageError
from harness.results.figures.step_figures import InfraTax
from harness.rlmodel.config import STEPPED_MODES, RLConfig
from harness.rlmodel.duration_dists import ConstantDist, Dist
from harness.rlmodel.latency_input import SandboxLatency, VendorModel
from harness.rlmodel.step_input import ImageCache, shape_tax


@dataclass(frozen=True, slots=True)
class AppliedLimit:
    """One vendor limit as the model applies it: its value (None: none) and where it came from."""

    name: str
    value: float | None
    source: str  # "config <path>" | "latency model (profile)" | "latency model (measured)" | "none"
    detail: str = ""

    def describe(self) -> str:
        shown = "none" if self.value is None else f"{self.value:g}"
        return f"{self.name} {shown} from {self.source}" + (f": {self.detail}" if self.detail else "")


def resolve_limits(config: RLConfig, vendor: VendorModel) -> tuple[AppliedLimit, AppliedLimit]:
    """The concurrency cap and create rate to apply: the config's (an override), else the export's, else none."""
    exported = vendor.limits or {}

    def pick(name: str, configured: float | None, key: str) -> AppliedLimit:
        if configured is not None:
            note = ""
            entry = exported.get(key) or {}
            if entry.get("value") is not None and float(entry["value"]) != float(configured):
                note = f"overrides the latency model's {entry['value']:g} ({entry.get('source')})"
            return AppliedLimit(name, float(configured), f"config {config.name} [sandbox]", note)
        entry = exported.get(key)
        if entry is None:
            return AppliedLimit(name, None, "none", "neither the config nor the latency model gives one")
        if entry.get("value") is None:
            return AppliedLimit(name, None, f"latency model ({entry.get('source')})", str(entry.get("detail", "")))
        return AppliedLimit(
            name, float(entry["value"]), f"latency model ({entry.get('source')})", str(entry.get("detail", ""))
        )

    return (
        pick("concurrency cap", config.concurrency_cap, "concurrency_cap"),
        pick("create rate (/s)", config.create_rate, "create_rate_per_s"),
    )


@dataclass(frozen=True, slots=True)
class Plan:
    config: RLConfig
    vendor: str
    samples_per_step: int  # S = B·G
    trainer_rate: float  # μ, samples/s while training
    concurrency_target: int
    concurrency: int  # effective: min(target, vendor cap, inference cap)
    concurrency_limited_by: str
    dispatched_per_step: int  # sync: N = ceil(S · oversampling)
    finish_target: int  # sync: the step's generation ends when this many rollouts succeeded (k)
    sandbox: SandboxLatency
    startup: Dist
    init_failure_time: Dist
    teardown: Dist
    generation: Dist  # per turn
    tool: Dist  # per turn (turns × ...) or the exec distribution (once per rollout): see tool_per_turn
    tool_per_turn: bool
    reward: Dist
    p_init: float  # per attempt
    p_exec: float
    acceptance_filter: float  # (1 − zero-advantage groups) · (1 − filtered samples)
    limits: tuple[AppliedLimit, ...] = field(default_factory=tuple)
    group_fork: bool = False  # v2: a group's members start together when its one fork call returns (`startup`)
    image: ImageCache | None = None  # v2: the first creates of a run pull cold on top of a warm `startup`
    tax: InfraTax | None = None  # v2: the infrastructure tax of this shape (worker-hours per 1M trajectories)
    start_notes: tuple[str, ...] = ()  # which starts the plan uses and why (printed by `stampede model`)

    @property
    def mode(self) -> str:
        return self.config.mode

    @property
    def turns(self) -> int:
        return self.config.turns

    def mean_work(self) -> float:
        """Generation, tool calls and reward of one rollout, once it has a usable sandbox."""
        tool = self.tool.mean() * (self.turns if self.tool_per_turn else 1)
        return self.turns * self.generation.mean() + tool + self.reward.mean()

    def p_success(self) -> float:
        """A dispatched rollout gets a sandbox within its retries."""
        return 1.0 - self.p_init ** (self.config.max_retries + 1)


def build_plan(config: RLConfig, vendor: VendorModel) -> Plan:
    cap, rate = resolve_limits(config, vendor)
    config = config.with_(
        concurrency_cap=None if cap.value is None else max(int(cap.value), 1),
        create_rate=rate.value,
    )
    samples = config.samples_per_step
    target = config.concurrency or math.ceil(samples * config.oversampling)
    if config.mode == "prime-rl":
        # prime-rl keeps int(oversampling_factor x batch_size // rollouts_per_example) groups in flight (Scheduler
        # @02b49f9, docs/rl-frameworks.md); `concurrency` is its max_concurrent, a cap below that
        in_flight = config.prime_rl_groups * config.group_size
        target = min(in_flight, config.concurrency or in_flight)
    if config.mode == "slime":  # one round of over_sampling_batch_size groups in flight
        target = config.concurrency or config.slime_round_groups * config.group_size
    limits = {"target": target}
    if config.concurrency_cap:
        limits["vendor concurrency cap"] = config.concurrency_cap
    if config.max_concurrent_sequences:
        limits["inference (max_concurrent_sequences)"] = config.max_concurrent_sequences
    limited_by = min(limits, key=lambda k: (limits[k], k != "target"))
    concurrency = limits[limited_by]
    dispatched = math.ceil(samples * config.oversampling)
    if config.mode == "slime":  # over_sampling_batch_size groups per round (refills add rounds)
        dispatched = config.slime_round_groups * config.group_size
    kill = config.kill_unfinished and config.oversampling > 1.0
    level = concurrency if config.mode not in STEPPED_MODES else min(dispatched, concurrency)
    sandbox = vendor.at(level, config.latency_source, config.startup_metric)
    startup, group_fork, cache, notes = _starts(config, vendor, sandbox)
    if config.tool is None:
        tool: Dist = sandbox.exec or ConstantDist(0.0, "no exec measured")
        per_turn = False
    else:
        tool, per_turn = config.tool, True
    return Plan(
        config=config,
        vendor=vendor.name,
        samples_per_step=samples,
        trainer_rate=config.trainer_samples_per_s,
        concurrency_target=target,
        concurrency=concurrency,
        concurrency_limited_by=limited_by,
        dispatched_per_step=dispatched,
        finish_target=samples if kill else dispatched,
        sandbox=sandbox,
        startup=startup,
        init_failure_time=sandbox.init_failure_time,
        teardown=sandbox.teardown,
        generation=config.generation,
        tool=tool,
        tool_per_turn=per_turn,
        reward=config.reward,
        p_init=min(max(sandbox.p_init_failure, 0.0), 0.999),
        p_exec=min(max(sandbox.p_exec_failure, 0.0), 0.999),
        acceptance_filter=(1 - config.zero_advantage_groups) * (1 - config.filtered_samples),
        limits=(cap, rate),
        group_fork=group_fork,
        image=cache,
        tax=_tax(config, sandbox, samples, cache, group_fork),
        start_notes=notes,
    )


def _starts(
    config: RLConfig, vendor: VendorModel, sandbox: SandboxLatency
) -> tuple[Dist, bool, ImageCache | None, tuple[str, ...]]:
    """(startup, group_fork, image cache, notes): a v1 export (or a v2 without steps) keeps today's startup."""
    steps = sandbox.steps
    if steps is None:
        if config.start_from == "fork":
            raise UsageError(
                f"[sandbox] start = 'fork' in {config.name}: the latency model {vendor.name} has no fork starts "
                "(export a run of a plan that forks, e.g. --plan grpo-fork)"
            )
        return sandbox.startup, False, None, ()
    fork = config.start_from == "fork" or (config.start_from == "auto" and steps.fork_start is not None)
    if fork:
        if steps.fork_start is None:
            raise UsageError(
                f"[sandbox] start = 'fork' in {config.name}: the latency model {vendor.name} has no fork starts "
                f"near {sandbox.concurrency:g} in flight (bucket {steps.bucket})"
            )
        note = (
            f"starts: forks (bucket {steps.bucket}): a group of {config.group_size} starts when its one fork call "
            f"returns (mean {steps.fork_start.mean():.3g} s; the export's forks made {steps.fork_copies:.3g} copies)"
        )
        return steps.fork_start, True, None, (note,)
    cache = vendor.image_cache()
    if cache is not None:
        return cache.warm_start, False, cache, (cache.describe(),)
    if steps.fresh_start is not None:
        return steps.fresh_start, False, None, (f"starts: fresh creates (bucket {steps.bucket})",)
    return sandbox.startup, False, None, ()


def _tax(
    config: RLConfig, sandbox: SandboxLatency, samples: int, cache: ImageCache | None, forked: bool
) -> InfraTax | None:
    if sandbox.steps is None:
        return None
    tool_calls = float(config.turns) if config.tool is not None else None
    return shape_tax(sandbox.steps, tool_calls, max(config.steps * samples, 1), cache, forked)
