"""The RL configuration `stampede model` reads (TOML): what one training step needs and how the generator runs.

Every key, its unit and default is documented in examples/rl-*.toml. Errors name the file, the table and the
key in one line.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from harness.errors import UsageError
from harness.rlmodel.duration_dists import ConstantDist, Dist, from_spec

Mode = Literal["sync", "async", "prime-rl", "slime", "verl", "pipelinerl"]
MODES: tuple[str, ...] = ("sync", "async", "prime-rl", "slime", "verl", "pipelinerl")
STEPPED_MODES = ("sync", "slime")  # generate a step, kill what is left, train, repeat
TOOL_FROM_LATENCY_MODEL = "latency_model"


@dataclass(frozen=True, slots=True)
class RLConfig:
    name: str
    # [step]
    prompts: int  # B
    group_size: int  # G
    # [rollout]
    turns: int
    generation: Dist  # per turn
    tool: Dist | None  # per turn; None: the latency model's exec distribution, once per rollout
    reward: Dist
    # [trainer]
    trainer_samples_per_s: float  # capacity: samples per second while training
    weight_sync_s: float
    gpus: int | None  # the trainer's GPUs (what its idle costs)
    gpu_hour_usd: float | None  # dollars per GPU-hour
    gpu_price_source: str | None
    # [generator]
    mode: Mode
    oversampling: float
    kill_unfinished: bool
    concurrency: int | None  # target in flight (None: B·G·oversampling)
    max_concurrent_sequences: int | None  # inference-side bound (KV cache)
    async_level: int
    max_off_policy_steps: int
    max_async_level: int  # prime-rl: batch n is built only once the policy of step n - k is loaded
    strict_async_level: bool  # prime-rl: load exactly step n - k (else the newest, never older than n - k)
    staleness_threshold: float  # verl: the dispatch budget per sync period, (1 + this) x T x B groups
    trigger_parameter_sync_step: int  # verl: T, trainer steps between weight syncs to the rollouter
    partial_rollout: bool  # verl (default on): a sync pauses in-flight generation, else drains it; slime (default
    # off): a step's unfinished rollouts resume in the next one, holding their sandboxes, instead of being aborted
    max_lag: int | None  # pipelinerl: samples the actor may run ahead of the trainer (None: unbounded)
    ring_buffer_size: int  # pipelinerl without max_lag: ready samples kept; the oldest is dropped beyond
    # [sandbox]
    vendor: str | None
    concurrency_cap: int | None
    create_rate: float | None
    teardown_holds_slot: bool
    sandbox_cpu: float | None  # allocated CPU per sandbox, in the vendor's own unit (what prices.toml bills)
    sandbox_memory_gib: float | None
    price: str | dict[str, Any] | None  # a prices.toml vendor, or an inline price with its source
    latency_source: Literal["empirical", "fitted"]
    startup_metric: Literal["startup", "tti"]
    start_from: Literal["auto", "fresh", "fork"]  # a v2 export: a group's copies from one fork, or each created
    # [retry]
    max_retries: int
    backoff_s: float
    # [acceptance]
    zero_advantage_groups: float
    filtered_samples: float
    # [simulation]
    steps: int
    warmup_steps: int
    seed: int

    @property
    def samples_per_step(self) -> int:
        return self.prompts * self.group_size

    @property
    def prime_rl_groups(self) -> int:
        """prime-rl's groups in flight: int(oversampling_factor x batch_size // rollouts_per_example)."""
        return max(int(self.oversampling * self.samples_per_step // self.group_size), 1)

    @property
    def verl_budget_groups(self) -> int:
        """verl's max_required_samples: int(required_samples x (staleness_threshold + 1) x trigger_parameter_sync_step),
        in groups (its rollouter queues one sample per prompt, each holding rollout.n responses)."""
        return max(int(self.prompts * (self.staleness_threshold + 1) * self.trigger_parameter_sync_step), 1)

    def pipelinerl_budget_groups(self, updates: int) -> float:
        """PipelineRL's can_submit_before_update after `updates` weight updates: ceil(max_lag / attempts) + one
        update's groups per update and one more (actor.py schedule_rollouts); unbounded without max_lag."""
        if self.max_lag is None:
            return math.inf
        return math.ceil(self.max_lag / self.group_size) + (updates + 1) * self.prompts

    @property
    def slime_round_groups(self) -> int:
        """slime's groups per over-sampling round: ceil(oversampling x B), at least B."""
        return max(math.ceil(self.oversampling * self.prompts), self.prompts)

    def with_(self, **changes: Any) -> RLConfig:
        return replace(self, **changes)


_TABLES: dict[str, set[str]] = {
    "step": {"prompts", "group_size"},
    "rollout": {"turns", "generation_s", "tool_s", "reward_s"},
    "trainer": {"samples_per_second", "step_time_s", "weight_sync_s", "gpus", "gpu_hour_usd", "gpu_price_source"},
    "generator": {
        "mode",
        "oversampling",
        "kill_unfinished",
        "concurrency",
        "max_concurrent_sequences",
        "async_level",
        "max_off_policy_steps",
        "max_async_level",
        "strict_async_level",
        "staleness_threshold",
        "trigger_parameter_sync_step",
        "partial_rollout",
        "max_lag",
        "ring_buffer_size",
    },
    "sandbox": {
        "vendor",
        "concurrency_cap",
        "create_rate",
        "teardown_holds_slot",
        "latency",
        "startup_metric",
        "start",
        "cpu",
        "memory_gib",
        "price",
    },
    "retry": {"max_retries", "backoff_s"},
    "acceptance": {"zero_advantage_groups", "filtered_samples"},
    "simulation": {"steps", "warmup_steps", "seed"},
}


class _Reader:
    def __init__(self, source: str, data: dict[str, Any]) -> None:
        self.source = source
        self.data = data

    def fail(self, table: str, key: str, message: str) -> UsageError:
        return UsageError(f"{self.source}: [{table}] {key}: {message}")

    def get(self, table: str, key: str, default: Any = None) -> Any:
        return self.data.get(table, {}).get(key, default)

    def integer(self, table: str, key: str, default: int | None, minimum: int = 0) -> int | None:
        value = self.get(table, key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(table, key, f"expected a whole number, got {value!r}")
        if value < minimum:
            raise self.fail(table, key, f"must be at least {minimum}")
        return value

    def number(
        self,
        table: str,
        key: str,
        default: float | None,
        minimum: float = 0.0,
        positive: bool = False,
        maximum: float | None = None,
    ) -> float | None:
        value = self.get(table, key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise self.fail(table, key, f"expected a number, got {value!r}")
        if positive and value <= 0:
            raise self.fail(table, key, "must be positive")
        if value < minimum:
            raise self.fail(table, key, f"must be at least {minimum:g}")
        if maximum is not None and value > maximum:
            raise self.fail(table, key, f"must be at most {maximum:g}")
        return float(value)

    def boolean(self, table: str, key: str, default: bool) -> bool:
        value = self.get(table, key, default)
        if not isinstance(value, bool):
            raise self.fail(table, key, f"expected true or false, got {value!r}")
        return value

    def choice(self, table: str, key: str, default: str | None, choices: tuple[str, ...]) -> str | None:
        value = self.get(table, key, default)
        if value is None:
            return None
        if value not in choices:
            raise self.fail(table, key, f"expected one of {', '.join(choices)}, got {value!r}")
        return str(value)

    def dist(self, table: str, key: str, default: Any) -> Dist:
        try:
            return from_spec(self.get(table, key, default), f"{self.source}: [{table}] {key}")
        except ValueError as exc:
            raise UsageError(str(exc)) from None


def parse_config(data: dict[str, Any], source: str = "config") -> RLConfig:
    for table, value in data.items():
        if table not in _TABLES:
            raise UsageError(f"{source}: unknown table [{table}] (known: {', '.join(_TABLES)})")
        if not isinstance(value, dict):
            raise UsageError(f"{source}: {table} must be a table")
        unknown = set(value) - _TABLES[table]
        if unknown:
            raise UsageError(
                f"{source}: [{table}] unknown key {sorted(unknown)[0]!r} (known: {', '.join(sorted(_TABLES[table]))})"
            )
    r = _Reader(source, data)
    if "step" not in data or "prompts" not in data["step"]:
        raise UsageError(f"{source}: [step] prompts is required (B, prompts per step)")
    prompts = r.integer("step", "prompts", None, minimum=1)
    group = r.integer("step", "group_size", 1, minimum=1)
    assert prompts is not None and group is not None
    samples_per_step = prompts * group

    rate = r.number("trainer", "samples_per_second", None, positive=True)
    step_time = r.number("trainer", "step_time_s", None, positive=True)
    if (rate is None) == (step_time is None):
        raise UsageError(f"{source}: [trainer] needs exactly one of samples_per_second or step_time_s")
    trainer_rate = rate if rate is not None else samples_per_step / float(step_time)  # type: ignore[arg-type]

    tool_spec = r.get("rollout", "tool_s", TOOL_FROM_LATENCY_MODEL)
    tool = None if tool_spec == TOOL_FROM_LATENCY_MODEL else r.dist("rollout", "tool_s", 0.0)
    if "generation_s" not in data.get("rollout", {}):
        raise UsageError(f"{source}: [rollout] generation_s is required (generation time per turn)")
    mode = r.choice("generator", "mode", "async", MODES)
    oversampling = r.number("generator", "oversampling", 1.0, minimum=1.0)
    concurrency = r.integer("generator", "concurrency", None, minimum=1)
    return RLConfig(
        name=Path(source).stem,
        prompts=prompts,
        group_size=group,
        turns=r.integer("rollout", "turns", 1, minimum=1) or 1,
        generation=r.dist("rollout", "generation_s", 0.0),
        tool=tool,
        reward=r.dist("rollout", "reward_s", 0.0),
        trainer_samples_per_s=float(trainer_rate),
        weight_sync_s=r.number("trainer", "weight_sync_s", 0.0) or 0.0,
        gpus=r.integer("trainer", "gpus", None, minimum=1),
        gpu_hour_usd=r.number("trainer", "gpu_hour_usd", None),
        gpu_price_source=_text(r, "trainer", "gpu_price_source"),
        mode=mode,  # type: ignore[arg-type]
        oversampling=oversampling or 1.0,
        kill_unfinished=r.boolean("generator", "kill_unfinished", True),
        concurrency=concurrency,
        max_concurrent_sequences=r.integer("generator", "max_concurrent_sequences", None, minimum=1),
        async_level=r.integer("generator", "async_level", 1, minimum=1) or 1,
        max_off_policy_steps=r.integer("generator", "max_off_policy_steps", 8, minimum=0) or 0,
        max_async_level=r.integer("generator", "max_async_level", 1, minimum=0) or 0,
        strict_async_level=r.boolean("generator", "strict_async_level", False),
        staleness_threshold=r.number("generator", "staleness_threshold", 0.1) or 0.0,
        trigger_parameter_sync_step=r.integer("generator", "trigger_parameter_sync_step", 4, minimum=1) or 4,
        partial_rollout=r.boolean("generator", "partial_rollout", mode == "verl"),  # each framework's own default
        max_lag=r.integer("generator", "max_lag", None, minimum=0),
        ring_buffer_size=r.integer("generator", "ring_buffer_size", 128, minimum=1) or 128,
        vendor=r.get("sandbox", "vendor"),
        concurrency_cap=r.integer("sandbox", "concurrency_cap", None, minimum=1),
        create_rate=r.number("sandbox", "create_rate", None, positive=True),
        teardown_holds_slot=r.boolean("sandbox", "teardown_holds_slot", True),
        sandbox_cpu=r.number("sandbox", "cpu", None, positive=True),
        sandbox_memory_gib=r.number("sandbox", "memory_gib", None, positive=True),
        price=_price(r),
        latency_source=r.choice("sandbox", "latency", "empirical", ("empirical", "fitted")),  # type: ignore[arg-type]
        startup_metric=r.choice("sandbox", "startup_metric", "startup", ("startup", "tti")),  # type: ignore[arg-type]
        start_from=r.choice("sandbox", "start", "auto", ("auto", "fresh", "fork")),  # type: ignore[arg-type]
        max_retries=r.integer("retry", "max_retries", 0, minimum=0) or 0,
        backoff_s=r.number("retry", "backoff_s", 0.0) or 0.0,
        zero_advantage_groups=r.number("acceptance", "zero_advantage_groups", 0.0, maximum=0.999) or 0.0,
        filtered_samples=r.number("acceptance", "filtered_samples", 0.0, maximum=0.999) or 0.0,
        steps=r.integer("simulation", "steps", 40, minimum=1) or 40,
        warmup_steps=r.integer("simulation", "warmup_steps", 5, minimum=0) or 0,
        seed=r.integer("simulation", "seed", 0, minimum=0) or 0,
    )


def _text(r: _Reader, table: str, key: str) -> str | None:
    value = r.get(table, key)
    if value is not None and not isinstance(value, str):
        raise r.fail(table, key, f"expected text, got {value!r}")
    return value


def _price(r: _Reader) -> str | dict[str, Any] | None:
    value = r.get("sandbox", "price")
    if value is None or isinstance(value, str | dict):
        return value
    raise r.fail("sandbox", "price", "expected a prices.toml vendor name or a table {cpu_s, gib_s, source, seen}")


def load_config(path: str | Path) -> RLConfig:
    source = str(path)
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise UsageError(f"config {source} not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"config {source} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise UsageError(f"config {source}: {exc}") from None
    return parse_config(data, source)


__all__ = [
    "MODES",
    "STEPPED_MODES",
    "TOOL_FROM_LATENCY_MODEL",
    "ConstantDist",
    "RLConfig",
    "load_config",
    "parse_config",
]
