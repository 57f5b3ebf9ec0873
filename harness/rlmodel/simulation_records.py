"""The simulation's records: buffered random draws, time integrals, and what a rollout, a group and a slime step
carry while they run (harness.rlmodel.simulation and its framework modes share them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy

from harness.rlmodel.duration_dists import Dist

BLOCK = 4096


class Draws:
    """Buffered inverse-transform draws from one distribution (numpy in blocks, not one call per value)."""

    def __init__(self, dist: Dist, rng: np.random.Generator, columns: int = 1) -> None:
        self.dist, self.rng, self.columns = dist, rng, columns
        self.buffer: np.ndarray = np.empty(0)
        self.index = 0

    def __call__(self) -> float:
        if self.index >= self.buffer.size:
            draws = np.maximum(self.dist.ppf(self.rng.random((BLOCK, self.columns))), 0.0)
            self.buffer = draws.sum(axis=1)
            self.index = 0
        value = float(self.buffer[self.index])
        self.index += 1
        return value


class Area:
    """Time integral of a counter (sandboxes alive, slots held)."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env, self.value, self.area, self.t = env, 0, 0.0, 0.0

    def add(self, delta: int) -> None:
        now = self.env.now
        self.area += self.value * (now - self.t)
        self.t, self.value = now, self.value + delta

    def at_now(self) -> float:
        return self.area + self.value * (self.env.now - self.t)


@dataclass(slots=True)
class Handle:
    cancellable: bool = True  # False once its sample is delivered (or lost): an oversampling kill skips it
    sandbox: bool = False  # a create has been sent (sandbox-seconds count from here)


@dataclass(slots=True)
class Group:
    size: int
    accepted: bool
    ended: int = 0
    samples: list[int] = field(default_factory=list)  # policy version at dispatch, per accepted sample
    on_end: Any = None  # sync: told every outcome of its members
    version: int | None = None  # prime-rl: the policy loaded when the group was dispatched
    off_policy: int = 0  # prime-rl: weight updates survived in flight
    members: list[tuple[Any, Handle]] = field(default_factory=list)  # prime-rl: to cancel an over-age group
    cancelled: bool = False


@dataclass(slots=True)
class Counts:
    dispatched_ended: int = 0
    lost_init: int = 0
    lost_exec: int = 0
    successes: int = 0
    produced_accepted: int = 0
    delivery_sum: float = 0.0
    killed: int = 0
    dispatched: int = 0
    creates: int = 0


MAX_SLIME_ROUNDS = 1000  # a step whose groups are all filtered would refill forever: the time limit ends it


@dataclass(slots=True)
class SlimeStep:
    finished: simpy.Event
    kept: int = 0
    submitted: int = 0
    filtered: int = 0
    trained: int = 0
    rounds: int = 0
    processes: list[tuple[Any, Handle]] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)  # the kept groups' samples' policy versions
    open: bool = False  # generation started (a partial rollout's carried group may end before)


@dataclass(frozen=True, slots=True)
class Uniform:
    label: str = "uniform"

    def ppf(self, u: np.ndarray) -> np.ndarray:
        return u

    def mean(self) -> float:
        return 0.5

    def cdf(self, t: np.ndarray) -> np.ndarray:
        return np.clip(t, 0, 1)

    def upper(self, eps: float = 0.0) -> float:
        return 1.0


def noop(group: Group, version: int, accepted: bool) -> None:
    return None
