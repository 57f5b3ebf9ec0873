"""Load shapes: how many rollouts are in flight, or how many start per second, over time.

Closed model (ramp, burst, steady, soak, knee): one rollout at a time per Locust user, so the user count is the
number in flight, as an RL generator keeps N rollouts going. Open model (staggered, arrival): a schedule of
intended start times that does not wait for the vendor, so a slow vendor cannot hide behind fewer requests
(coordinated omission); starts the schedule could not make are counted as dropped.

Shapes run where Locust ticks them (a local runner or the master) and talk to users only through
the run state (`harness.locust.run_state`): the stage every rollout records, and for bursts the gate.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

from locust import LoadTestShape
from locust.runners import MasterRunner

from foundation.phase_marks import mark
from harness.locust.run_state import IDLE_STAGE, RunState, Stage, run_state_of
from harness.locust.schedule_clock import schedule_now
from harness.locust.settings import DEFAULT_SPAWN_RATE, RunSettings
from harness.results.figures.knee import KneeThresholds, stage_verdicts
from harness.wire.stage_counters import StageStats

log = logging.getLogger("stampede")

DEFAULT_BURST_SIZE = 100
DEFAULT_STEADY_USERS = 100
SCHEDULER_LEAD_S = 1.0  # open-model stages start a little in the future so every dispatcher sees them first
GATE_SETTLE_S = 1.0  # a master cannot see its workers' users reach the gate: it releases this long after the spawn
TICK_WAIT_S = 0.95  # a burst's tick waits for its step's end this long, within Locust's one-second tick


class StampedeShape(LoadTestShape):
    """Base of stampede's shapes."""

    abstract = True
    use_common_options = True
    gated = False  # users wait at the run state's gate before each rollout (a synchronous step)
    open_model = False  # users are schedule dispatchers, one per engine

    def __init__(self) -> None:
        super().__init__()
        self.stage: Stage = IDLE_STAGE
        self.t_stage = time.monotonic()
        self.outcome: dict[str, Any] | None = None  # what the shape found (the knee), for run.json
        self.restart()

    def reset_time(self) -> None:
        """Locust calls this as each test starts (`start_shape`): a second test from the web UI runs the whole
        shape again, with the settings the form posted (the run state reads them in `prepare_test`)."""
        super().reset_time()
        self.stage = IDLE_STAGE
        self.t_stage = time.monotonic()
        self.outcome = None
        self.restart()
        state = self.state()
        if state is not None:
            state.prepare_test()  # the first tick waits for it (`refused`)
            if state.refusal:
                log.error("stampede: %s (the test does not start)", state.refusal)

    def restart(self) -> None:
        """Back to the shape's first stage; subclasses reset their own progress here."""

    def refused(self) -> bool:
        """The settings posted for this test were refused, or stampede could not start in this process (no run
        state: its settings were refused at `init`): the shape ends before its first stage. Waits while they are
        being prepared (Locust ticks the shape before `reset_time` has returned)."""
        state = self.state()
        return state is None or not state.ready_for_test()

    def state(self) -> RunState | None:
        return run_state_of(self.runner.environment) if self.runner else None

    def settings(self) -> RunSettings:
        """The settings in force: parsed once at `init` (and for each test the web form starts), held by the run
        state; the defaults where there is none (every tick is refused then)."""
        state = self.state()
        return state.settings if state is not None else RunSettings()

    def spawn_rate(self, default: float = DEFAULT_SPAWN_RATE) -> float:
        return self.settings().spawn_rate or default

    def hold(self, default: float) -> float:
        return self.settings().hold_s or default

    def enter(self, stage: Stage) -> None:
        if stage != self.stage:
            self.stage = stage
            self.t_stage = time.monotonic()
            state = self.state()
            if state is not None:
                state.enter_stage(stage)

    def stage_age(self) -> float:
        return time.monotonic() - self.t_stage

    def describe(self) -> dict[str, Any]:
        """Shape parameters for run.json."""
        return {"shape": type(self).__name__}

    def peak_users(self, settings: RunSettings) -> int | None:
        """The most rollouts this shape keeps in flight at once under these settings (None: open model)."""
        return None

    def form_values(self, settings: RunSettings) -> tuple[int, float] | None:
        """The users and ramp-up the web UI's form starts with: this shape's peak and spawn rate under these
        settings (what `-u` and `-r` would say); None for an open model, whose form hides both."""
        peak = self.peak_users(settings)
        return None if peak is None else (peak, settings.spawn_rate or DEFAULT_SPAWN_RATE)

    def live_stage(self, name: str) -> StageStats:
        state = self.state()
        return state.live.stage(name) if state is not None else StageStats()

    def dispatchers(self) -> int:
        """Locust processes that share the load: open model, one dispatcher user per engine (each worker's share
        of the schedule); closed model, each worker gets this share of the spawn rate."""
        runner = self.runner
        count = getattr(runner, "worker_count", None)
        return max(1, int(count)) if count is not None else 1


class _HoldingShape(StampedeShape):
    """Reach a level, hold it for `hold` seconds once Locust reports it reached, move on."""

    abstract = True

    def restart(self) -> None:
        self._index = 0
        self._reached_at: float | None = None

    def levels(self) -> tuple[int, ...]:
        raise NotImplementedError

    def label(self) -> str:
        raise NotImplementedError

    def default_hold(self) -> float:
        return 15.0

    def level_stage(self, index: int) -> Stage:
        target = self.levels()[index]
        start_rate = self.spawn_rate() / self.dispatchers()
        return Stage(index + 1, f"{index + 1:02d}-{self.label()}{target}", target, start_rate=start_rate)

    def stage_done(self, stage: Stage) -> bool:
        """Called once the hold of `stage` is over; True stops the shape (the knee uses it)."""
        return False

    def tick(self) -> tuple[int, float] | None:
        if self.refused():
            return None
        levels = self.levels()
        if self._index >= len(levels):
            return None
        self.enter(self.level_stage(self._index))
        if self._reached_at is None and self.get_current_user_count() >= self.stage.target_users:
            self._reached_at = time.monotonic()
        if self._reached_at is not None and time.monotonic() - self._reached_at >= self.hold(self.default_hold()):
            if self.stage_done(self.stage):
                return None
            self._index += 1
            self._reached_at = None
            if self._index >= len(levels):
                return None
            self.enter(self.level_stage(self._index))
        return self.stage.target_users, self.spawn_rate()


class RampShape(_HoldingShape):
    """Doubling stages (60, 120, 240, 480, 960 by default; `--stages 60..3840` doubles up to 3840), each held.

    Holds start once Locust reports the level reached, so a slow spawn never shortens a hold. `-u N` caps the
    ramp: stages above N are dropped and N becomes the last stage.
    """

    abstract = True

    def levels(self) -> tuple[int, ...]:
        return self.ramp_levels(self.settings())

    @staticmethod
    def ramp_levels(settings: RunSettings) -> tuple[int, ...]:
        stages = settings.stages
        cap = settings.users
        if cap:
            stages = (*(level for level in stages if level < cap), cap)
        return stages

    def peak_users(self, settings: RunSettings) -> int | None:
        return max(self.ramp_levels(settings))

    def label(self) -> str:
        return "ramp"

    def describe(self) -> dict[str, Any]:
        return {
            "shape": "ramp",
            "stages": list(self.levels()),
            "hold_s": self.hold(self.default_hold()),
            "spawn_rate": self.spawn_rate(),
        }


class SteadyShape(_HoldingShape):
    """An asynchronous (PipelineRL-style) generator: N rollouts in flight at all times, a new one as each ends."""

    abstract = True

    def levels(self) -> tuple[int, ...]:
        return (self.settings().users or DEFAULT_STEADY_USERS,)

    def peak_users(self, settings: RunSettings) -> int | None:
        return settings.users or DEFAULT_STEADY_USERS

    def label(self) -> str:
        return "steady"

    def default_hold(self) -> float:
        return 60.0

    def describe(self) -> dict[str, Any]:
        return {"shape": "steady", "users": self.levels()[0], "hold_s": self.hold(self.default_hold())}


class SoakShape(SteadyShape):
    """A constant level for a bounded long time (10 minutes unless `--hold` says otherwise)."""

    abstract = True

    def label(self) -> str:
        return "soak"

    def default_hold(self) -> float:
        return 600.0

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "shape": "soak"}


class KneeShape(_HoldingShape):
    """Raise concurrency stage by stage until the failure rate or TTI p99 crosses its threshold, then stop.

    The knee is the highest level that stayed clean. Thresholds: `--knee-max-failure` (default 5%) and
    `--knee-max-p99` seconds (default: 5x the first stage's TTI p99, i.e. "the tail blew up").
    """

    abstract = True

    def levels(self) -> tuple[int, ...]:
        return RampShape.ramp_levels(self.settings())

    def peak_users(self, settings: RunSettings) -> int | None:
        return max(RampShape.ramp_levels(settings))

    def label(self) -> str:
        return "knee"

    def thresholds(self) -> KneeThresholds:
        settings = self.settings()
        return KneeThresholds(max_failure_rate=settings.knee_max_failure, max_p99_s=settings.knee_max_p99_s)

    def stage_done(self, stage: Stage) -> bool:
        stats = self.live_stage(stage.name)
        first_p99 = self.live_stage(self.level_stage(0).name).tti_quantile(0.99)
        thresholds = self.thresholds()
        p99 = stats.tti_quantile(0.99)
        verdicts = stage_verdicts(stats.failure_rate, stats.finished, p99, first_p99, thresholds)
        clean = not verdicts
        history = [
            *(self.outcome or {}).get("stages", []),
            {
                "stage": stage.name,
                "level": stage.target_users,
                "finished": stats.finished,
                "failure_rate": stats.failure_rate,
                "tti_p99_s": p99,
                "clean": clean,
            },
        ]
        clean_levels = [entry["level"] for entry in history if entry["clean"]]
        last = stage.index == len(self.levels())
        self.outcome = {
            "knee": clean_levels[-1] if clean_levels else None,  # the highest level that stayed clean
            "crossed_at": None if clean else stage.target_users,
            "reason": "; ".join(verdicts)
            if verdicts
            else ("every level stayed clean: the knee is at or above the highest level tried" if last else None),
            "max_failure_rate": thresholds.max_failure_rate,
            "max_tti_p99_s": thresholds.p99_limit(first_p99),
            "stages": history,
        }
        return not clean

    def describe(self) -> dict[str, Any]:
        return {
            "shape": "knee",
            "stages": list(self.levels()),
            "hold_s": self.hold(self.default_hold()),
            "max_failure_rate": self.settings().knee_max_failure,
            "max_tti_p99_s": self.settings().knee_max_p99_s,
        }


class BurstShape(StampedeShape):
    """A synchronous RL step: B x G rollouts released at the same instant; the next step once the last one ends.

    Users are spawned first and wait at the run state's gate; the gate opens when all are there, so the vendor
    sees every create of a step within milliseconds, not a spawn ramp. `--batch B --group G` (or `-u N`).
    """

    abstract = True
    gated = True

    def restart(self) -> None:
        self._step = 0
        self._all_spawned_at: float | None = None
        self._done = False
        watch, self._gate_watch = getattr(self, "_gate_watch", None), None  # a web-UI test's last, if it still waits
        if watch is not None:
            watch.kill(block=False)

    def size(self) -> int:
        return self.burst_size(self.settings())

    def steps(self) -> int:
        return self.settings().burst_steps

    @staticmethod
    def burst_size(settings: RunSettings) -> int:
        if settings.batch and settings.group:
            return settings.batch * settings.group
        return settings.users or DEFAULT_BURST_SIZE

    def peak_users(self, settings: RunSettings) -> int | None:
        return self.burst_size(settings)

    def form_values(self, settings: RunSettings) -> tuple[int, float] | None:
        size = self.burst_size(settings)
        return size, settings.spawn_rate or float(size)  # a step's users all at once

    def describe(self) -> dict[str, Any]:
        settings = self.settings()
        return {
            "shape": "burst",
            "size": self.size(),
            "steps": settings.burst_steps,
            "batch": settings.batch,
            "group": settings.group,
        }

    def tick(self) -> tuple[int, float] | None:
        """Locust ticks a shape once a second; a burst's steps move on events instead (every user at the gate, a
        step's last row), so a tick waits for them (up to `TICK_WAIT_S`) rather than leaving them to the next."""
        if self.refused():
            return None
        size = self.size()
        state = self.state()
        if self._done or state is None:
            return None
        users = (size, max(self.spawn_rate(default=float(size)), 1.0))
        if self._step == 0:
            if isinstance(self.runner, MasterRunner):  # its workers' users reach the gate out of its sight
                if self.get_current_user_count() >= size:
                    self._all_spawned_at = self._all_spawned_at or time.monotonic()
                    if time.monotonic() - self._all_spawned_at >= GATE_SETTLE_S:
                        self._release(1, size)
            elif self._gate_watch is None and self.runner is not None:  # released when the last user reaches the gate
                self._gate_watch = self.runner.greenlet.spawn(self._release_when_all_at_gate, state, size)
            return users
        deadline = time.monotonic() + TICK_WAIT_S
        while self._ended(state) < size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return users
            state.wait_for_change(remaining)
        if self._step >= self.steps():
            mark("shape: last step ended")
            self._done = True
            state.close_gate()  # waiting users leave at once instead of sitting out the stop timeout
            return None
        self._release(self._step + 1, size)
        return users

    def _ended(self, state: RunState) -> int:
        """Rollouts of the current step that ended: the engines' count, or this process's users' rows (sooner)."""
        name = self.stage.name
        return max(self.live_stage(name).ended, state.rows_seen[name])

    def _release_when_all_at_gate(self, state: RunState, size: int) -> None:
        """A local runner's first step: open the gate when its last user reaches it (its users are all here)."""
        while self._step == 0 and not self._done:
            if state.at_gate >= size:
                self._release(1, size)
                return
            state.wait_for_change(TICK_WAIT_S)

    def _release(self, step: int, size: int) -> None:
        mark(f"shape: step {step} released")
        self._step = step
        self.enter(Stage(step, f"{step:02d}-burst{size}", size))
        state = self.state()
        if state is not None:
            state.release(step)


class BurstHoldShape(BurstShape):
    """Issue #32's protocol: N sandboxes fired at t=0 over every worker (one burst step, `-u N`), each held until
    `--hold` seconds after its submit (the engine holds it: `RolloutPlan.hold_s`), then all terminated. The run
    ends when the last rollout does; harness.results.figures.burst_hold reads the four states and figures."""

    abstract = True

    def steps(self) -> int:
        return 1

    def describe(self) -> dict[str, Any]:
        settings = self.settings()
        return {"shape": "burst-hold", "size": self.size(), "hold_s": settings.plan.hold_s or self.hold(0.0)}


class _OpenShape(StampedeShape):
    """Open model: one dispatcher user per engine; the stage carries the schedule they share."""

    abstract = True
    open_model = True

    def restart(self) -> None:
        self._index = 0
        self._done = False

    def stages(self) -> list[Stage]:
        raise NotImplementedError

    def stage_over(self, stage: Stage) -> bool:
        raise NotImplementedError

    def tick(self) -> tuple[int, float] | None:
        if self._done or self.refused():
            return None
        stages = self.stages()
        if self.stage.index == 0 or self.stage_over(self.stage):
            if self.stage.index >= len(stages):
                self._done = True
                return None
            stage = stages[self.stage.index]
            self.enter(replace(stage, t_start=schedule_now() + SCHEDULER_LEAD_S, dispatchers=self.dispatchers()))
        return self.stage.dispatchers, 100.0


class StaggeredShape(_OpenShape):
    """One start every D ms (`--stagger-ms`), N starts in all (`-u N`), as the public sandbox benchmarks do."""

    abstract = True

    def stages(self) -> list[Stage]:
        settings = self.settings()
        count = settings.users or DEFAULT_BURST_SIZE
        return [Stage(1, f"01-stagger{settings.stagger_ms:g}ms", count, rate=1000.0 / settings.stagger_ms, count=count)]

    def stage_over(self, stage: Stage) -> bool:
        state = self.state()
        dropped = state.live.dropped.get(stage.name, 0) if state else 0
        return self.live_stage(stage.name).ended + dropped >= (stage.count or 0)

    def describe(self) -> dict[str, Any]:
        settings = self.settings()
        return {"shape": "staggered", "starts": settings.users or DEFAULT_BURST_SIZE, "stagger_ms": settings.stagger_ms}


class ArrivalShape(_OpenShape):
    """Starts at a fixed or Poisson rate (`--rates 2,4,8`, starts per second), each rate held `--hold` seconds.

    Intended start times are recorded with every rollout (`t_intended`); a start that finds `--max-inflight`
    rollouts already running is dropped and counted, never silently skipped.
    """

    abstract = True

    def stages(self) -> list[Stage]:
        settings = self.settings()
        return [
            Stage(i + 1, f"{i + 1:02d}-arrival{rate:g}ps", settings.max_inflight, rate=rate, poisson=settings.poisson)
            for i, rate in enumerate(settings.rates)
        ]

    def stage_over(self, stage: Stage) -> bool:
        return schedule_now() - stage.t_start >= self.hold(30.0)

    def describe(self) -> dict[str, Any]:
        settings = self.settings()
        return {
            "shape": "arrival",
            "rates": list(settings.rates),
            "poisson": settings.poisson,
            "hold_s": self.hold(30.0),
            "max_inflight": settings.max_inflight,
        }


class RehearseShape(StampedeShape):
    """`stampede rehearse`: N rollouts kept going while an emulated trainer (in the engine) consumes them and
    admits new ones as its RL framework would; the run ends when the trainer has done its steps."""

    abstract = True

    def level(self) -> int:
        return self.settings().users or DEFAULT_STEADY_USERS

    def peak_users(self, settings: RunSettings) -> int | None:
        return settings.users or DEFAULT_STEADY_USERS

    def tick(self) -> tuple[int, float] | None:
        if self.refused():
            return None
        if self.settings().trainer is None:  # nothing would ever end the run: refuse to start it
            log.error("the rehearse scenario needs an emulated trainer (--trainer, set by `stampede rehearse`)")
            return None
        state = self.state()
        trainer = state.live.trainer() if state is not None else None
        if trainer is not None and trainer.get("done"):
            return None
        rate = self.spawn_rate(default=float(self.level()))
        self.enter(Stage(1, f"01-rehearse{self.level()}", self.level(), start_rate=rate / self.dispatchers()))
        return self.level(), rate

    def describe(self) -> dict[str, Any]:
        return {"shape": "rehearse", "users": self.level(), "trainer": self.settings().trainer}
