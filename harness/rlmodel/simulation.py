"""The generator-side model as a discrete-event simulation (SimPy): the check on the closed forms, and the
answer where they do not hold (waves, create-rate limits, staleness drops, stragglers within groups).

Every rollout is a process: wait for a sandbox slot (effective concurrency), create (at most `create_rate`
per second), fail to start with the latency model's per-attempt probability (after a time drawn from its
time-to-failure distribution, then back off and retry) or start (startup drawn from the model at this
concurrency), work (turns × generation and tool time, reward), fail in exec with the model's probability, and
tear down. A group's samples reach the trainer together when its last member ends.
- async: the generator keeps the slots full while fewer than async_level × B·G accepted samples wait; the
  trainer takes B·G samples per step (FIFO, dropping those more than max_off_policy_steps policy versions
  old), trains, and publishes a new version.
- prime-rl (its Scheduler @02b49f9, docs/rl-frameworks.md): int(oversampling·B·G / G) groups in flight, each
  replaced when consumed into a batch; batch n is consumed once the policy of step n − max_async_level is loaded
  (the newest published, or exactly that one when strict); a weight update counts one more for every in-flight
  group, and cancels and replaces one past max_off_policy_steps.
- slime (generate_rollout_async @0044b40): a step dispatches over_sampling_batch_size = ceil(oversampling·B)
  groups; a filtered group (zero advantage, or nothing accepted) lowers the remaining count and a round is added
  when fewer than B remain; at B kept groups the rest is killed and the kept groups' samples train.
- verl fully-async (FullyAsyncRollouter @01217507): groups in flight up to concurrency / G; the rollouter stops
  dispatching once it has spent its budget of int(B·(1 + staleness_threshold)·T) groups since the last version
  (reset at each sync to the groups in flight and queued) or that many wait; the trainer takes B finished groups
  per step and syncs weights every T = trigger_parameter_sync_step steps: with partial_rollout in-flight
  generation pauses for the sync, without it the trainer first waits for every in-flight group to end.
- pipelinerl (actor.py @005a1f17, preprocess.py @04105834): groups in flight up to concurrency / G; with max_lag
  the actor submits at most ceil(max_lag / G) + (updates + 1)·B groups; without it ready samples waiting beyond
  ring_buffer_size are dropped oldest first; the trainer streams ready samples (in random order) into its step of
  B·G, and each weight broadcast pauses in-flight generation (running rollouts continue on the new weights).
- sync: each step dispatches N = B·G·oversampling rollouts, ends generation when k = B·G succeeded (or all
  ended without oversampling), cancels the rest, then trains.
Measured over `steps` trainer steps after `warmup_steps`.

`Simulation` is the core every mode runs on (`SimulationCore`, simulation_records): the rollout process, the
policy version, the measurement window and the result; each mode's generator and trainer is a `Mode`
(simulation_modes: async, sync; simulation_frameworks: prime-rl, slime, verl, PipelineRL).
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from harness.rlmodel.config import STEPPED_MODES as STEPPED
from harness.rlmodel.inputs import Plan
from harness.rlmodel.result import ModelResult
from harness.rlmodel.simulation_frameworks import PipelineRL, PrimeRL, Slime, VerlFullyAsync
from harness.rlmodel.simulation_modes import AsyncMode, SyncMode
from harness.rlmodel.simulation_records import Area, Counts, Draws, Group, Handle, Mode, OnSuccess, Uniform, noop

MODES: dict[str, type[Mode]] = {
    "async": AsyncMode,
    "prime-rl": PrimeRL,
    "slime": Slime,
    "verl": VerlFullyAsync,
    "pipelinerl": PipelineRL,
    "sync": SyncMode,
}


class Simulation:
    """The core every mode runs on (it implements `SimulationCore`); `run` starts the plan's mode and measures."""

    def __init__(
        self, plan: Plan, seed: int | None = None, steps: int | None = None, warmup: int | None = None
    ) -> None:
        cfg = plan.config
        self.plan = plan
        self.cfg = cfg
        self.steps = steps if steps is not None else cfg.steps
        self.warmup = warmup if warmup is not None else cfg.warmup_steps
        self.rng = np.random.default_rng(cfg.seed if seed is None else seed)
        self.env = simpy.Environment()
        self.slots = simpy.Resource(self.env, capacity=plan.concurrency)
        self.sandboxes = Area(self.env)
        self.held = Area(self.env)
        rng = self.rng
        self.startup = Draws(plan.startup, rng)
        self.cold_left = plan.image.cold_per_run if plan.image is not None else 0  # creates still to pull cold
        self.cold_pull = Draws(plan.image.cold_pull, rng) if plan.image is not None else None
        self.fail_time = Draws(plan.init_failure_time, rng)
        self.teardown = Draws(plan.teardown, rng)
        self.generation = Draws(plan.generation, rng, columns=plan.turns)
        self.tool = Draws(plan.tool, rng, columns=plan.turns if plan.tool_per_turn else 1)
        self.reward = Draws(plan.reward, rng)
        self.uniform = Draws(Uniform(), rng)
        self.next_create = 0.0
        self.inflight = 0  # dispatched and not yet released (a new process asks for its slot only when it runs)
        self.version = 0
        self.counting = False
        self.counts = Counts()
        self.window_start = 0.0
        self.sandbox_area0 = 0.0
        self.held_area0 = 0.0
        self.wake_dispatcher: simpy.Event = self.env.event()
        self.wake_trainer: simpy.Event | None = None
        self.step_ends: list[float] = []
        # verl, pipelinerl, slime with partial_rollout: weight updates pause in-flight generation
        self.pauses: list[tuple[float, float]] = []  # (start, end) of each pause, in time order
        self.pausing = (
            cfg.weight_sync_s > 0 and (cfg.mode == "pipelinerl" or (cfg.mode == "verl" and cfg.partial_rollout))
        ) or (cfg.mode == "slime" and cfg.partial_rollout)
        self.pause_ends: simpy.Event = self.env.event()  # slime: a pause whose end is not known yet ends
        self.mode: Mode = MODES.get(plan.mode, SyncMode)(self)

    # -- one rollout ---------------------------------------------------------------------------------
    def rollout(self, group: Group, on_success: OnSuccess, handle: Handle) -> Generator[simpy.Event, Any, None]:
        env = self.env
        request = self.slots.request()
        try:
            yield request
        except simpy.Interrupt:  # cancelled before it got a slot: no sandbox, nothing to tear down
            request.cancel()
            self.inflight -= 1
            if self.counting:
                self.counts.killed += 1
            return
        self.held.add(1)
        handle.sandbox = False
        torn_down = False
        try:
            outcome = yield from self._attempts(group, on_success, handle)
            handle.cancellable = False
            if outcome == "lost_init":
                torn_down = True  # the failed attempt's time already includes its terminate
            elif self.cfg.teardown_holds_slot:
                yield env.timeout(self.teardown())
                torn_down = True
        except simpy.Interrupt:
            if self.counting:
                self.counts.killed += 1
        self.slots.release(request)
        self.held.add(-1)
        self.inflight -= 1
        self.wake()
        if not handle.sandbox:  # cancelled while waiting for its first create
            return
        if torn_down:
            self.sandboxes.add(-1)
        else:  # the slot is free; the sandbox lives on through its teardown
            env.process(self._teardown_after())

    def _attempts(self, group: Group, on_success: OnSuccess, handle: Handle) -> Generator[simpy.Event, Any, str]:
        plan, cfg, env = self.plan, self.cfg, self.env
        version = self.version if group.version is None else group.version
        t0 = env.now
        failures = 0
        while True:
            if cfg.create_rate:
                start = max(env.now, self.next_create)
                self.next_create = start + 1.0 / cfg.create_rate
                if start > env.now:
                    yield env.timeout(start - env.now)
            if self.counting:
                self.counts.creates += 1
            if not handle.sandbox:  # sandbox time runs from the first create (the vendor's bill)
                handle.sandbox = True
                self.sandboxes.add(1)
            if self.uniform() < plan.p_init:
                yield env.timeout(self.fail_time())
                failures += 1
                if failures > cfg.max_retries:
                    self._end(group, "lost_init")
                    return "lost_init"
                if cfg.backoff_s:
                    yield env.timeout(cfg.backoff_s)
                continue
            yield env.timeout(self._start_time(group))
            break
        if self.pausing:
            yield from self._generate(self.generation())
            yield env.timeout(self.tool() + self.reward())
        else:
            yield env.timeout(self.generation() + self.tool() + self.reward())
        if self.uniform() < plan.p_exec:
            self._end(group, "lost_exec")
            return "lost_exec"
        handle.cancellable = False
        if self.counting:
            self.counts.delivery_sum += env.now - t0
        accepted = group.accepted and self.uniform() >= cfg.filtered_samples
        self._end(group, "success", version if accepted else None)
        on_success(group, version, accepted)
        return "success"

    def _start_time(self, group: Group) -> float:
        """A fresh start (the first creates of a run also pull cold while the image cache warms), or, when the plan
        forks groups, the wait until the group's one fork call returns (its first member draws it)."""
        if self.plan.group_fork:
            if group.fork_done is None:
                group.fork_done = self.env.now + self.startup()
            return max(group.fork_done - self.env.now, 0.0)
        start = self.startup()
        if self.cold_left > 0 and self.cold_pull is not None:
            self.cold_left -= 1
            start += self.cold_pull()
        return start

    def _generate(self, seconds: float) -> Generator[simpy.Event, Any, None]:
        """Generation that stands still while the inference servers pause for a weight update."""
        env = self.env
        t0 = env.now
        while True:
            now = env.now
            done = now - t0 - self._paused(t0, now)
            if done >= seconds - 1e-9:
                return
            resume = next((end for start, end in reversed(self.pauses) if start <= now < end), None)
            if resume == math.inf:  # until the next step opens
                yield self.pause_ends
                continue
            yield env.timeout(resume - now if resume is not None else seconds - done)

    def _paused(self, t0: float, t1: float) -> float:
        total = 0.0
        for start, end in reversed(self.pauses):
            if end <= t0:
                break
            total += max(0.0, min(end, t1) - max(start, t0))
        return total

    def _teardown_after(self) -> Generator[simpy.Event, Any, None]:
        yield self.env.timeout(self.teardown())
        self.sandboxes.add(-1)

    def _end(self, group: Group, outcome: str, sample_version: int | None = None) -> None:
        if self.counting:
            self.counts.dispatched_ended += 1
            if outcome == "lost_init":
                self.counts.lost_init += 1
            elif outcome == "lost_exec":
                self.counts.lost_exec += 1
            else:
                self.counts.successes += 1
                if sample_version is not None:
                    self.counts.produced_accepted += 1
        if sample_version is not None:
            group.samples.append(sample_version)
        group.ended += 1
        if group.on_end is not None:
            group.on_end(outcome)
        if group.ended == group.size:
            self.mode.group_ended(group)

    def launch(self, group: Group) -> list[tuple[simpy.Process, Handle]]:
        """Every member of a group dispatched at once (the group is the unit of dispatch): their processes."""
        members = []
        for _ in range(group.size):
            handle = Handle()
            self.inflight += 1
            if self.counting:
                self.counts.dispatched += 1
            members.append((self.env.process(self.rollout(group, noop, handle)), handle))
        return members

    def wake(self) -> None:
        if not self.wake_dispatcher.triggered:
            self.wake_dispatcher.succeed()

    def sleep_dispatcher(self) -> simpy.Event:
        self.wake_dispatcher = self.env.event()
        return self.wake_dispatcher

    def nudge_trainer(self) -> None:
        if self.wake_trainer is not None and not self.wake_trainer.triggered:
            self.wake_trainer.succeed()

    def idle_until_woken(self) -> Generator[simpy.Event, Any, None]:
        """The trainer waits for the generator; inside the window the wait is its idle time."""
        self.wake_trainer = self.env.event()
        waited_from = self.env.now
        yield self.wake_trainer
        if self.counting:
            self.counts.idle += self.env.now - waited_from

    def trained(self, steps: int, done: simpy.Event) -> bool:
        """A continuous trainer finished its `steps`-th step: the window opens after warm-up; True at the end."""
        self.step_ends.append(self.env.now)
        if steps == self.warmup:
            self.start_window()
        if steps == self.warmup + self.steps:
            done.succeed()
            return True
        return False

    # -- measurement -------------------------------------------------------------------------------
    def start_window(self) -> None:
        self.counting = True
        self.window_start = self.env.now
        self.sandbox_area0 = self.sandboxes.at_now()
        self.held_area0 = self.held.at_now()

    def run(self) -> ModelResult:
        env = self.env
        done = env.event()
        if self.warmup == 0:
            self.start_window()
        self.mode.start(done)
        limit = self._time_limit()
        env.run(until=simpy.AnyOf(env, [done, env.timeout(limit)]))
        return self._result(done.triggered)

    def _time_limit(self) -> float:
        plan = self.plan
        per_rollout = (
            plan.startup.upper()
            + plan.mean_work() * 10
            + 10 * (self.cfg.max_retries + 1) * plan.init_failure_time.upper()
        )
        per_step = plan.samples_per_step / plan.trainer_rate + per_rollout * max(
            1, math.ceil(plan.dispatched_per_step / plan.concurrency)
        )
        return 100.0 * (self.warmup + self.steps + 1) * max(per_step, 1.0)

    def _result(self, complete: bool) -> ModelResult:
        plan, cfg, env = self.plan, self.cfg, self.env
        notes = [] if complete else ["the simulation hit its time limit before finishing its steps"]
        notes += self.mode.notes(complete)
        if not self.counting:
            self.start_window()
        window = max(env.now - self.window_start, 1e-12)
        steps_done = max(len(self.step_ends) - self.warmup, 0)
        samples = plan.samples_per_step
        c = self.counts
        if plan.mode == "async":
            trained = samples * steps_done
        else:
            trained = c.trained_sum
        step_time = window / steps_done if steps_done else math.inf
        trainer = trained / window
        syncs_per_step = 1.0 / cfg.trigger_parameter_sync_step if plan.mode == "verl" else 1.0
        train_busy = samples / plan.trainer_rate + cfg.weight_sync_s * syncs_per_step
        ended = max(c.dispatched_ended, 1)
        consumed = sum(c.lags.values())
        stale_base = consumed + c.dropped_stale
        if plan.mode == "prime-rl":  # cancelled in flight past max_off_policy_steps, of the rollouts dispatched
            stale_base = max(c.dispatched, 1)
        lags = {lag: count / consumed for lag, count in sorted(c.lags.items())} if consumed else {}
        if plan.mode == "sync" or not lags:
            lags = {0: 1.0}
        sandbox_area = self.sandboxes.at_now() - self.sandbox_area0
        held_area = self.held.at_now() - self.held_area0
        return ModelResult(
            engine="simulation",
            mode=plan.mode,
            concurrency=plan.concurrency,
            generator_samples_per_s=c.successes / window,
            generator_capacity_samples_per_s=(
                c.successes / c.generation_sum
                if plan.mode in STEPPED and c.generation_sum > 0
                else c.successes / window
            ),
            effective_samples_per_s=trainer,
            trainer_samples_per_s=trainer,
            trainer_capacity_samples_per_s=(
                samples / train_busy if plan.mode not in STEPPED else trained / max(window - c.idle, 1e-12)
            ),
            trainer_idle_ratio=c.idle / window,
            step_time_s=step_time,
            generation_time_s=(
                c.generation_sum / steps_done
                if plan.mode in STEPPED and steps_done
                else c.delivery_sum / max(c.successes, 1)
            ),
            lost_to_init_failures=c.lost_init / max(c.dispatched if plan.mode in STEPPED else ended, 1),
            lost_to_exec_failures=c.lost_exec / max(c.dispatched if plan.mode in STEPPED else ended, 1),
            lost_to_staleness=(c.dropped_stale + c.cancelled_stale) / stale_base if stale_base else 0.0,
            killed_by_oversampling=c.killed / max(c.dispatched, 1) if plan.mode in STEPPED else 0.0,
            filtered_by_acceptance=1 - c.produced_accepted / max(c.successes, 1),
            sandbox_seconds_per_step=sandbox_area / steps_done if steps_done else math.inf,
            sandbox_seconds_per_trained_sample=sandbox_area / trained if trained else math.inf,
            mean_staleness_steps=sum(lag * share for lag, share in lags.items()),
            staleness_distribution=lags,
            concurrency_used=held_area / window,
            creates_per_step=c.creates / steps_done if steps_done else math.inf,
            holds=True,
            notes=notes,
        )


def simulate(plan: Plan, seed: int | None = None, steps: int | None = None, warmup: int | None = None) -> ModelResult:
    return Simulation(plan, seed, steps, warmup).run()
