"""The answer of the generator-side model, the same record from the closed forms and from the simulation."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(slots=True)
class ModelResult:
    engine: str  # "closed form" | "simulation"
    mode: str
    concurrency: int  # effective
    generator_samples_per_s: float  # successful rollouts finished per second (before acceptance filters)
    generator_capacity_samples_per_s: float  # what the generator could produce unthrottled
    effective_samples_per_s: float  # after acceptance filters and staleness drops (what reaches the trainer)
    trainer_samples_per_s: float  # consumed for training
    trainer_capacity_samples_per_s: float
    trainer_idle_ratio: float
    step_time_s: float
    generation_time_s: float  # sync: per step; async: mean delivery latency of a rollout
    lost_to_init_failures: float  # share of dispatched rollouts that never got a sandbox within their retries
    lost_to_exec_failures: float
    lost_to_staleness: float  # share of produced, accepted samples dropped as too old
    killed_by_oversampling: float  # sync: share of dispatched rollouts cancelled once the step had enough
    filtered_by_acceptance: float  # share of produced samples dropped by acceptance filters
    sandbox_seconds_per_step: float
    sandbox_seconds_per_trained_sample: float
    mean_staleness_steps: float
    staleness_distribution: dict[int, float] = field(default_factory=dict)  # lag in steps -> share
    concurrency_used: float = 0.0  # mean rollouts holding a sandbox slot
    creates_per_step: float = 0.0  # sandbox creates sent per trainer step (retries included): per-create charges
    holds: bool = True  # closed forms: whether their assumptions hold for these inputs
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["staleness_distribution"] = {str(k): v for k, v in self.staleness_distribution.items()}
        return data


HEADLINE: tuple[tuple[str, str, str], ...] = (
    ("generator_samples_per_s", "generator samples/s", "{:.4g}"),
    ("effective_samples_per_s", "effective samples/s (accepted)", "{:.4g}"),
    ("trainer_samples_per_s", "trainer samples/s", "{:.4g}"),
    ("trainer_idle_ratio", "trainer idle ratio", "{:.1%}"),
    ("step_time_s", "step time (s)", "{:.4g}"),
    ("generation_time_s", "generation time (s)", "{:.4g}"),
    ("mean_staleness_steps", "mean staleness (steps)", "{:.3g}"),
    ("lost_to_init_failures", "lost to init failures", "{:.2%}"),
    ("lost_to_exec_failures", "lost to exec failures", "{:.2%}"),
    ("lost_to_staleness", "lost to staleness", "{:.2%}"),
    ("killed_by_oversampling", "killed by oversampling", "{:.1%}"),
    ("filtered_by_acceptance", "filtered by acceptance", "{:.1%}"),
    ("sandbox_seconds_per_step", "sandbox-seconds per step", "{:.4g}"),
    ("sandbox_seconds_per_trained_sample", "sandbox-seconds per trained sample", "{:.4g}"),
    ("concurrency_used", "sandboxes in use (mean)", "{:.4g}"),
)
