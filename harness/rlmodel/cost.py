"""Dollars from the model's answer: what the sandboxes cost per step and per 1,000 accepted samples, and what the
trainer's idle caused by the sandboxes cost.

Sandbox dollars follow from sandbox-seconds, which both engines compute the same way (a sandbox is billed from
its first create to the end of its teardown): sandbox-seconds per step × (cpu × cpu rate + GiB × GiB rate), plus
creates per step × the per-creation charge where a vendor has one. Accepted samples per step are what the
trainer consumed (after acceptance filters and staleness drops).

Idle caused by the sandboxes (the counterfactual method): the same engine is run again on the same plan with
the sandbox made ideal — startup, time to an init failure and teardown zero, no init failures — keeping the
work (generation, tool calls, reward, exec failures) and the vendor's limits. Trainer idle seconds per step
measured minus idle seconds per step with the ideal sandbox is the idle the sandbox latency and init failures
caused; × the trainer's GPUs × dollars per GPU-hour / 3600 is what that idle cost. Nothing is guessed: an
unknown price or GPU cost leaves its dollars None and the reason in `notes`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.rlmodel.config import RLConfig
from harness.rlmodel.duration_dists import ConstantDist
from harness.rlmodel.inputs import Plan
from harness.rlmodel.prices import Price, price_from_table, published_prices, vendor_key
from harness.rlmodel.result import ModelResult


@dataclass(frozen=True, slots=True)
class Pricing:
    """What a sandbox-second and a trainer-second cost for this config and vendor (None: unknown, with why)."""

    price: Price | None
    basis: str  # why this vendor's price
    sandbox_per_s: float | None  # one sandbox of the configured size
    per_create: float
    gpu_per_s: float | None  # the whole trainer
    notes: tuple[str, ...]

    def lines(self) -> list[str]:
        out = []
        if self.price is not None:
            out.append(f"price {self.price.describe()} [{self.basis}]")
        if self.sandbox_per_s is not None:
            out.append(f"one sandbox costs ${self.sandbox_per_s:.6g} per second")
        if self.gpu_per_s is not None:
            out.append(f"trainer GPUs cost ${3600 * self.gpu_per_s:.4g} per hour")
        return out + list(self.notes)


def pricing(config: RLConfig, provider: str, profile: str) -> Pricing:
    notes: list[str] = []
    price: Price | None
    if isinstance(config.price, dict):
        price = price_from_table("config", config.price, f"{config.name}: [sandbox] price")
        basis = f"config {config.name} [sandbox] price"
    else:
        key = config.price
        basis = f"config {config.name} [sandbox] price = {key!r}"
        if key is None:
            key, basis = vendor_key(provider, profile)
        prices = published_prices()
        if key is not None and key not in prices:
            raise_unknown(config, key, prices)
        price = prices.get(key) if key is not None else None
        if price is None:
            notes.append(f"sandbox dollars unknown: {basis}; set [sandbox] price")
    sandbox_per_s = None
    if price is not None and not price.known:
        notes.append(f"sandbox dollars unknown: {price.vendor} has no published rate recorded; set [sandbox] price")
    elif price is not None:
        if config.sandbox_cpu is None or config.sandbox_memory_gib is None:
            notes.append("sandbox dollars unknown: set [sandbox] cpu and memory_gib (the allocation the vendor bills)")
        else:
            sandbox_per_s = price.per_sandbox_second(config.sandbox_cpu, config.sandbox_memory_gib)
    gpu_per_s = None
    if config.gpus is not None and config.gpu_hour_usd is not None:
        gpu_per_s = config.gpus * config.gpu_hour_usd / 3600.0
    else:
        notes.append("trainer idle dollars unknown: set [trainer] gpus and gpu_hour_usd")
    return Pricing(price, basis, sandbox_per_s, (price.per_create or 0.0) if price else 0.0, gpu_per_s, tuple(notes))


def raise_unknown(config: RLConfig, key: str, prices: dict[str, Price]) -> None:
    from harness.errors import UsageError

    raise UsageError(f"{config.name}: [sandbox] price {key!r} is not in prices.toml (known: {', '.join(prices)})")


@dataclass(slots=True)
class Dollars:
    """The dollar figures of one engine's answer (None: unknown; `notes` say why)."""

    engine: str
    accepted_per_step: float
    sandbox_per_step: float | None
    sandbox_per_1000_accepted: float | None
    trainer_per_1000_accepted: float | None  # the trainer's GPUs over the time 1,000 accepted samples take
    idle_s_per_step: float
    ideal_idle_s_per_step: float | None
    sandbox_idle_s_per_step: float | None  # idle the sandbox latency and init failures caused
    sandbox_idle_per_step: float | None
    sandbox_idle_per_1000_accepted: float | None

    @property
    def total_per_1000_accepted(self) -> float | None:
        """Sandboxes plus the trainer's GPUs per 1,000 accepted samples (what a sweep compares)."""
        if self.sandbox_per_1000_accepted is None:
            return None
        return self.sandbox_per_1000_accepted + (self.trainer_per_1000_accepted or 0.0)

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["currency"] = "USD"
        data["total_per_1000_accepted"] = self.total_per_1000_accepted
        return data


def ideal_sandbox(plan: Plan) -> Plan:
    """The same plan with a sandbox that starts, fails and tears down in no time and never fails to start."""
    zero = ConstantDist(0.0, "ideal sandbox")
    return dataclasses.replace(plan, startup=zero, init_failure_time=zero, teardown=zero, p_init=0.0)


def dollars(result: ModelResult, pricing_: Pricing, ideal: ModelResult | None = None) -> Dollars:
    accepted = result.trainer_samples_per_s * result.step_time_s if math.isfinite(result.step_time_s) else 0.0
    sandbox = None
    per_1000 = None
    if pricing_.sandbox_per_s is not None:
        sandbox = (
            result.sandbox_seconds_per_step * pricing_.sandbox_per_s + result.creates_per_step * pricing_.per_create
        )
        per_1000 = 1000.0 * sandbox / accepted if accepted > 0 else math.inf
    trainer_1000 = None
    if pricing_.gpu_per_s is not None and result.trainer_samples_per_s > 0:
        trainer_1000 = 1000.0 * pricing_.gpu_per_s / result.trainer_samples_per_s
    idle_s = result.trainer_idle_ratio * result.step_time_s if math.isfinite(result.step_time_s) else math.inf
    ideal_idle = caused = caused_usd = caused_1000 = None
    if ideal is not None:
        ideal_idle = ideal.trainer_idle_ratio * ideal.step_time_s
        caused = max(idle_s - ideal_idle, 0.0)
        if pricing_.gpu_per_s is not None:
            caused_usd = caused * pricing_.gpu_per_s
            caused_1000 = 1000.0 * caused_usd / accepted if accepted > 0 else math.inf
    return Dollars(
        result.engine, accepted, sandbox, per_1000, trainer_1000, idle_s, ideal_idle, caused, caused_usd, caused_1000
    )


def priced(plan: Plan, result: ModelResult, pricing_: Pricing, engine: Callable[[Plan], ModelResult] | None) -> Dollars:
    """`dollars` with the ideal-sandbox run of the same engine (None: no idle attribution)."""
    ideal = engine(ideal_sandbox(plan)) if engine is not None else None
    return dollars(result, pricing_, ideal)


DOLLAR_ROWS: tuple[tuple[str, str], ...] = (
    ("sandbox_per_step", "sandbox $ per step"),
    ("sandbox_per_1000_accepted", "sandbox $ per 1,000 accepted samples"),
    ("trainer_per_1000_accepted", "trainer GPU $ per 1,000 accepted samples"),
    ("sandbox_idle_s_per_step", "trainer idle caused by sandboxes (s per step)"),
    ("sandbox_idle_per_step", "$ of that idle per step"),
    ("sandbox_idle_per_1000_accepted", "$ of that idle per 1,000 accepted samples"),
)

__all__ = ["DOLLAR_ROWS", "Dollars", "Pricing", "dollars", "ideal_sandbox", "priced", "pricing"]
