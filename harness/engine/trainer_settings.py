"""What the emulated trainer is told (the RL config's knobs, as the engine reads them from JSON) and what it hands a
rollout it admits."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

SLIME_GROUPS_PER_STEP = 1_000_000  # slime's group ids: step x this + the group's index within its step


@dataclass(frozen=True, slots=True)
class TrainerSettings:
    mode: str = "async"
    batch: int = 64  # samples per step: B x G
    group_size: int = 1
    samples_per_s: float | None = None  # trainer capacity while training
    step_time_s: float | None = None  # or: one step takes this long
    weight_sync_s: float = 0.0
    async_level: int = 1
    max_off_policy_steps: int = 8
    max_async_level: int = 1  # prime-rl
    strict_async_level: bool = False  # prime-rl
    staleness_threshold: float = 0.1  # verl
    trigger_parameter_sync_step: int = 4  # verl
    partial_rollout: bool = False  # verl (its default is on: the rehearsal passes the config's), slime
    max_lag: int | None = None  # pipelinerl, samples
    ring_buffer_size: int = 128  # pipelinerl, samples
    max_groups: int = 0  # verl, pipelinerl: groups in flight (the rehearsal's rollouts in flight / G)
    oversampling: float = 1.0
    kill_unfinished: bool = True
    zero_advantage_groups: float = 0.0
    filtered_samples: float = 0.0
    steps: int = 20  # measured steps
    warmup_steps: int = 3
    seed: int = 0
    time_scale: float = 1.0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainerSettings:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def train_seconds(self, samples: int) -> float:
        """Vendor seconds one step takes: the configured step time, or the samples at the trainer's rate."""
        if self.step_time_s is not None:
            base = self.step_time_s
        else:
            base = samples / (self.samples_per_s or 1.0)
        return base + self.weight_sync_s

    @property
    def per_sample_s(self) -> float:
        """Vendor seconds the trainer spends on one sample (a step's training without its weight sync, over B x G)."""
        return (self.train_seconds(self.batch) - self.weight_sync_s) / max(self.batch, 1)

    @property
    def dispatch_per_step(self) -> int:
        return max(self.batch, math.ceil(self.batch * self.oversampling))

    @property
    def prompts(self) -> int:
        """B: groups per step."""
        return max(1, self.batch // max(1, self.group_size))

    @property
    def slime_round(self) -> int:
        """slime: rollouts per over-sampling round, ceil(oversampling x B) groups of G."""
        return max(math.ceil(self.oversampling * self.prompts), self.prompts) * max(1, self.group_size)

    @property
    def verl_budget(self) -> int:
        """verl's max_required_samples, in groups: int(B x (1 + staleness_threshold) x T)."""
        return max(int(self.prompts * (self.staleness_threshold + 1) * self.trigger_parameter_sync_step), 1)

    def pipelinerl_budget(self, updates: int) -> float:
        """PipelineRL's can_submit_before_update, in groups (unbounded without max_lag)."""
        if self.max_lag is None:
            return math.inf
        return math.ceil(self.max_lag / max(1, self.group_size)) + (updates + 1) * self.prompts

    @property
    def groups_in_flight(self) -> int:
        """prime-rl: int(oversampling_factor x batch_size // rollouts_per_example)."""
        return max(int(self.oversampling * self.batch // max(1, self.group_size)), 1)


@dataclass(slots=True)
class Ticket:
    """What a rollout was dispatched with: its policy version, sync step and group."""

    seq: int
    version: int
    step: int
    group: int


def seeded_uniform(seed: int, *key: object) -> float:
    """A uniform draw fixed by its key: the same rollout is filtered alike in every run of a seed."""
    digest = hashlib.blake2b(repr((seed, *key)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64
