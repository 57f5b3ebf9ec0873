"""Load shapes: how many rollouts are in flight over time (closed model: one rollout per Locust user).

A shape also tells each user which stage it is in (recorded with every rollout) and may hold users at a gate
(a burst releases B x G rollouts at once, as a synchronous RL step does).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import gevent.event
from locust import LoadTestShape

from harness.options import RunSettings

DEFAULT_SPAWN_RATE = 100.0
DEFAULT_BURST_SIZE = 100


@dataclass(frozen=True, slots=True)
class Stage:
    index: int
    name: str
    target_users: int


IDLE_STAGE = Stage(0, "", 0)


class StampedeShape(LoadTestShape):
    """Base of stampede's shapes: stage bookkeeping and the per-rollout gate hooks (no gate by default)."""

    abstract = True
    use_common_options = True

    def __init__(self) -> None:
        super().__init__()
        self.stage: Stage = IDLE_STAGE
        self.t_stage_started = time.monotonic()

    def settings(self) -> RunSettings:
        assert self.runner is not None
        session = getattr(self.runner.environment, "stampede", None)
        if session is None:
            return RunSettings.from_options(self.runner.environment.parsed_options)
        settings: RunSettings = session.settings
        return settings

    def spawn_rate(self, default: float = DEFAULT_SPAWN_RATE) -> float:
        rate = self.settings().spawn_rate
        return float(rate) if rate else default

    def enter(self, stage: Stage) -> None:
        if stage != self.stage:
            self.stage = stage
            self.t_stage_started = time.monotonic()

    def describe(self) -> dict[str, Any]:
        """Shape parameters for run.json."""
        return {"shape": type(self).__name__}

    # Hooks called by RolloutUser around each rollout (in the user's greenlet).
    def before_rollout(self, user: Any) -> Stage | None:
        """Block until this user may start a rollout; return the stage it runs in (None: no more rollouts)."""
        return self.stage

    def after_rollout(self, user: Any, stage: Stage, record: dict[str, Any]) -> None:
        """A rollout of `stage` ended (any outcome)."""


class RampShape(StampedeShape):
    """Doubling stages (60, 120, 240, 480, 960 by default): reach each level, hold it, move on.

    Holds start once Locust reports the level reached, so a slow spawn never shortens a hold. `-u N` caps the
    ramp: stages above N are dropped and N becomes the last stage.
    """

    abstract = True

    def __init__(self) -> None:
        super().__init__()
        self._levels: tuple[int, ...] | None = None
        self._index = 0
        self._reached_at: float | None = None

    def levels(self) -> tuple[int, ...]:
        if self._levels is None:
            stages = self.settings().stages
            cap = self.settings().users
            if cap:
                stages = (*tuple(level for level in stages if level < int(cap)), int(cap))
            self._levels = stages
        return self._levels

    def describe(self) -> dict[str, Any]:
        return {
            "shape": "ramp",
            "stages": list(self.levels()),
            "hold_s": self.settings().hold_s,
            "spawn_rate": self.spawn_rate(),
        }

    def tick(self) -> tuple[int, float] | None:
        levels = self.levels()
        if self._index >= len(levels):
            return None
        target = levels[self._index]
        self.enter(Stage(self._index + 1, f"{self._index + 1:02d}-ramp{target}", target))
        if self._reached_at is None and self.get_current_user_count() >= target:
            self._reached_at = time.monotonic()
        if self._reached_at is not None and time.monotonic() - self._reached_at >= self.settings().hold_s:
            self._index += 1
            self._reached_at = None
            if self._index >= len(levels):
                return None
            target = levels[self._index]
            self.enter(Stage(self._index + 1, f"{self._index + 1:02d}-ramp{target}", target))
        return target, self.spawn_rate()


class BurstShape(StampedeShape):
    """A synchronous RL step: N rollouts released at the same instant; the next step once the last one ends.

    Users are spawned first and wait at a gate; the gate opens when all N are there, so the vendor sees N
    creates within milliseconds, not a spawn ramp.
    """

    abstract = True

    def __init__(self) -> None:
        super().__init__()
        self._released_step = 0
        self._finished: dict[int, int] = {}
        self._waiting = 0
        self._gate = gevent.event.Event()
        self._done = False

    def size(self) -> int:
        return self.settings().users or DEFAULT_BURST_SIZE

    def steps(self) -> int:
        return self.settings().burst_steps

    def describe(self) -> dict[str, Any]:
        return {"shape": "burst", "size": self.size(), "steps": self.steps()}

    def tick(self) -> tuple[int, float] | None:
        size = self.size()
        if self._done:
            return None
        if self._released_step == 0:
            if self.get_current_user_count() >= size and self._waiting >= size:
                self._release(1, size)
        elif self._finished.get(self._released_step, 0) >= size:
            if self._released_step >= self.steps():
                self._done = True
                self._gate.set()  # let waiting users leave at once instead of sitting out the stop timeout
                return None
            self._release(self._released_step + 1, size)
        return size, max(self.spawn_rate(default=float(size)), 1.0)

    def _release(self, step: int, size: int) -> None:
        self.enter(Stage(step, f"{step:02d}-burst{size}", size))
        self._released_step = step
        gate, self._gate = self._gate, gevent.event.Event()
        gate.set()

    def before_rollout(self, user: Any) -> Stage | None:
        done_step = getattr(user, "_stampede_step", 0)
        while self._released_step <= done_step:
            if self._done:
                return None
            self._waiting += 1
            try:
                self._gate.wait()
            finally:
                self._waiting -= 1
        user._stampede_step = self._released_step
        return self.stage

    def after_rollout(self, user: Any, stage: Stage, record: dict[str, Any]) -> None:
        self._finished[stage.index] = self._finished.get(stage.index, 0) + 1
