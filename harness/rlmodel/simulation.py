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
"""

from __future__ import annotations

import functools
import math
from collections import Counter, deque
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy

from harness.rlmodel.config import STEPPED_MODES as STEPPED
from harness.rlmodel.duration_dists import Dist
from harness.rlmodel.inputs import Plan
from harness.rlmodel.result import ModelResult

BLOCK = 4096


class _Draws:
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


class _Area:
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
class _Handle:
    cancellable: bool = True  # False once its sample is delivered (or lost): an oversampling kill skips it
    sandbox: bool = False  # a create has been sent (sandbox-seconds count from here)


@dataclass(slots=True)
class _Group:
    size: int
    accepted: bool
    ended: int = 0
    samples: list[int] = field(default_factory=list)  # policy version at dispatch, per accepted sample
    on_end: Any = None  # sync: told every outcome of its members
    version: int | None = None  # prime-rl: the policy loaded when the group was dispatched
    off_policy: int = 0  # prime-rl: weight updates survived in flight
    members: list[tuple[Any, _Handle]] = field(default_factory=list)  # prime-rl: to cancel an over-age group
    cancelled: bool = False


@dataclass(slots=True)
class _Counts:
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
class _SlimeStep:
    finished: simpy.Event
    kept: int = 0
    submitted: int = 0
    filtered: int = 0
    trained: int = 0
    rounds: int = 0
    processes: list[tuple[Any, _Handle]] = field(default_factory=list)
    groups: list[_Group] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)  # the kept groups' samples' policy versions
    open: bool = False  # generation started (a partial rollout's carried group may end before)


class Simulation:
    def __init__(self, plan: Plan, seed: int | None = None, steps: int | None = None, warmup: int | None = None):
        cfg = plan.config
        self.plan = plan
        self.cfg = cfg
        self.steps = steps if steps is not None else cfg.steps
        self.warmup = warmup if warmup is not None else cfg.warmup_steps
        self.rng = np.random.default_rng(cfg.seed if seed is None else seed)
        self.env = simpy.Environment()
        self.slots = simpy.Resource(self.env, capacity=plan.concurrency)
        self.sandboxes = _Area(self.env)
        self.held = _Area(self.env)
        rng = self.rng
        self.startup = _Draws(plan.startup, rng)
        self.fail_time = _Draws(plan.init_failure_time, rng)
        self.teardown = _Draws(plan.teardown, rng)
        self.generation = _Draws(plan.generation, rng, columns=plan.turns)
        self.tool = _Draws(plan.tool, rng, columns=plan.turns if plan.tool_per_turn else 1)
        self.reward = _Draws(plan.reward, rng)
        self.uniform = _Draws(_Uniform(), rng)
        self.next_create = 0.0
        self.inflight = 0  # dispatched and not yet released (a new process asks for its slot only when it runs)
        self.version = 0
        self.counting = False
        self.counts = _Counts()
        self.group: _Group | None = None
        # async
        self.queue: deque[int] = deque()
        self.wake_dispatcher: simpy.Event = self.env.event()
        self.wake_trainer: simpy.Event | None = None
        self.lags: Counter[int] = Counter()
        self.dropped_stale = 0
        self.idle = 0.0
        self.step_ends: list[float] = []
        # prime-rl
        self.published = 0  # the trainer's newest checkpoint (self.version is the policy the generator loaded)
        self.live_groups: dict[int, _Group] = {}  # in flight, by id()
        self.finished_groups: deque[_Group] = deque()
        self.batches: deque[tuple[int, list[int]]] = deque()  # (batch index, dispatch version per sample)
        self.wake_orchestrator: simpy.Event = self.env.event()
        self.cancelled_stale = 0
        self.trained_sum = 0
        # verl, pipelinerl: weight updates pause in-flight generation; groups in flight; verl's dispatch budget
        self.pauses: list[tuple[float, float]] = []  # (start, end) of each pause, in time order
        self.pausing = (cfg.weight_sync_s > 0 and (cfg.mode == "pipelinerl" or (cfg.mode == "verl" and cfg.partial_rollout))
                        ) or (cfg.mode == "slime" and cfg.partial_rollout)  # fmt: skip
        self.pause_ends: simpy.Event = self.env.event()  # slime: a pause whose end is not known yet ends
        self.groups_inflight = 0
        self.syncing = False
        self.verl_spent = 0  # verl's staleness_samples: groups dispatched since the last version
        self.ready: deque[int] = deque()  # pipelinerl: ready samples' versions, oldest first
        self.submitted_groups = 0

    # -- one rollout ---------------------------------------------------------------------------------
    def rollout(self, group: _Group, on_success: Any, handle: _Handle) -> Generator[simpy.Event, Any, None]:
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

    def _attempts(self, group: _Group, on_success: Any, handle: _Handle) -> Generator[simpy.Event, Any, str]:
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
            yield env.timeout(self.startup())
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

    def _end(self, group: _Group, outcome: str, sample_version: int | None = None) -> None:
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
        if self.plan.mode == "async" and group.ended == group.size:
            self.queue.extend(group.samples)
            if self.wake_trainer is not None and not self.wake_trainer.triggered:
                self.wake_trainer.succeed()
        elif self.plan.mode == "prime-rl" and group.ended == group.size and not group.cancelled:
            self.live_groups.pop(id(group), None)
            self.finished_groups.append(group)
            self._wake_orchestrator()
        elif self.plan.mode in ("verl", "pipelinerl") and group.ended == group.size:
            self.groups_inflight -= 1
            if self.plan.mode == "verl":
                self.finished_groups.append(group)
            else:
                self.ready.extend(group.samples)
                self._trim_ring_buffer()
            if self.wake_trainer is not None and not self.wake_trainer.triggered:
                self.wake_trainer.succeed()
            self.wake()

    def _launch(self, group: _Group) -> list[tuple[Any, _Handle]]:
        """Every member of a group dispatched at once (the group is the unit of dispatch): their processes."""
        members = []
        for _ in range(group.size):
            handle = _Handle()
            self.inflight += 1
            if self.counting:
                self.counts.dispatched += 1
            members.append((self.env.process(self.rollout(group, _noop, handle)), handle))
        return members

    def wake(self) -> None:
        if not self.wake_dispatcher.triggered:
            self.wake_dispatcher.succeed()

    # -- async -------------------------------------------------------------------------------------
    def _dispatcher(self) -> Generator[simpy.Event, Any, None]:
        cfg = self.cfg
        cap = cfg.async_level * self.plan.samples_per_step
        group: _Group | None = None
        members = 0
        while True:
            while self.inflight < self.plan.concurrency and len(self.queue) < cap:
                if group is None or members == group.size:
                    group = _Group(cfg.group_size, self.uniform() >= cfg.zero_advantage_groups)
                    members = 0
                members += 1
                self.inflight += 1
                if self.counting:
                    self.counts.dispatched += 1
                self.env.process(self.rollout(group, _noop, _Handle()))
            self.wake_dispatcher = self.env.event()
            yield self.wake_dispatcher

    def _idle_until_woken(self) -> Generator[simpy.Event, Any, None]:
        """The trainer waits for the generator; inside the window the wait is its idle time."""
        self.wake_trainer = self.env.event()
        waited_from = self.env.now
        yield self.wake_trainer
        if self.counting:
            self.idle += self.env.now - waited_from

    def _trained(self, steps: int, done: simpy.Event) -> bool:
        """A continuous trainer finished its `steps`-th step: the window opens after warm-up; True at the end."""
        self.step_ends.append(self.env.now)
        if steps == self.warmup:
            self._start_window()
        if steps == self.warmup + self.steps:
            done.succeed()
            return True
        return False

    def _async_trainer(self, done: simpy.Event) -> Generator[simpy.Event, Any, None]:
        cfg, plan, env = self.cfg, self.plan, self.env
        samples = plan.samples_per_step
        step = 0
        while True:
            batch = 0
            while batch < samples:
                if not self.queue:
                    yield from self._idle_until_woken()
                    continue
                version = self.queue.popleft()
                lag = step - version
                if lag > cfg.max_off_policy_steps:
                    if self.counting:
                        self.dropped_stale += 1
                    continue
                batch += 1
                if self.counting:
                    self.lags[lag] += 1
            self.wake()
            yield env.timeout(samples / plan.trainer_rate + cfg.weight_sync_s)
            step += 1
            self.version = step
            if self._trained(step, done):
                return

    # -- prime-rl ----------------------------------------------------------------------------------
    # Scheduler @02b49f9 (docs/rl-frameworks.md section 1): a fixed number of groups in flight, each replaced when
    # it is consumed into a batch; batch n is consumed only once the policy of step n - max_async_level is
    # loaded (the newest on disk, or exactly that one when strict); at each weight update every in-flight group
    # counts one more update survived, and one past max_off_policy_steps is cancelled and replaced at once.
    def _wake_orchestrator(self) -> None:
        if not self.wake_orchestrator.triggered:
            self.wake_orchestrator.succeed()

    def _dispatch_group(self) -> None:
        cfg = self.cfg
        group = _Group(cfg.group_size, self.uniform() >= cfg.zero_advantage_groups, version=self.version)
        group.members = self._launch(group)
        self.live_groups[id(group)] = group

    def _load(self, version: int) -> None:
        """A weight update on the inference side: every in-flight group has survived one more."""
        if version <= self.version:
            return
        self.version = version
        for key, group in list(self.live_groups.items()):
            group.off_policy += 1
            if group.off_policy > self.cfg.max_off_policy_steps:
                group.cancelled = True
                del self.live_groups[key]
                for process, handle in group.members:
                    if process.is_alive and handle.cancellable:
                        process.interrupt()
                        if self.counting:
                            self.cancelled_stale += 1
                self._dispatch_group()

    def _prime_orchestrator(self) -> Generator[simpy.Event, Any, None]:
        cfg, env = self.cfg, self.env
        samples = self.plan.samples_per_step
        for _ in range(cfg.prime_rl_groups):
            self._dispatch_group()
        n = 0
        while True:
            needed = max(n - cfg.max_async_level, 0)
            while self.published < needed:
                self.wake_orchestrator = env.event()
                yield self.wake_orchestrator
            self._load(needed if cfg.strict_async_level else max(needed, self.published))
            versions: list[int] = []
            while len(versions) < samples:
                if not self.finished_groups:
                    self.wake_orchestrator = env.event()
                    yield self.wake_orchestrator
                    continue
                group = self.finished_groups.popleft()
                versions.extend(group.samples)
                self._dispatch_group()  # continuous batching: a consumed group is replaced at once
            self.batches.append((n, versions))
            if self.wake_trainer is not None and not self.wake_trainer.triggered:
                self.wake_trainer.succeed()
            n += 1

    def _prime_trainer(self, done: simpy.Event) -> Generator[simpy.Event, Any, None]:
        cfg, plan, env = self.cfg, self.plan, self.env
        step = 0
        while True:
            while not self.batches:
                yield from self._idle_until_woken()
            index, versions = self.batches.popleft()
            if self.counting:
                self.trained_sum += len(versions)
                for version in versions:
                    self.lags[index - version] += 1
            yield env.timeout(len(versions) / plan.trainer_rate + cfg.weight_sync_s)
            step += 1
            self.published = step
            if not cfg.strict_async_level:
                self._load(step)  # the orchestrator's policy loop picks up the newest checkpoint
            self._wake_orchestrator()
            if self._trained(step, done):
                return

    # -- verl fully-async and PipelineRL ----------------------------------------------------------------
    def _start_group(self) -> None:
        cfg = self.cfg
        group = _Group(cfg.group_size, self.uniform() >= cfg.zero_advantage_groups, version=self.version)
        self.groups_inflight += 1
        self._launch(group)

    def _verl_rollouter(self) -> Generator[simpy.Event, Any, None]:
        """FullyAsyncRollouter: a group per free concurrency slot, until the version's budget is spent or as many
        finished groups wait (_should_pause_generation); nothing is dispatched during a parameter sync."""
        cfg = self.cfg
        budget = cfg.verl_budget_groups
        cap = max(self.plan.concurrency // cfg.group_size, 1)
        while True:
            while (not self.syncing and self.groups_inflight < cap and self.verl_spent < budget
                   and len(self.finished_groups) < budget):  # fmt: skip
                self._start_group()
                self.verl_spent += 1
            self.wake_dispatcher = self.env.event()
            yield self.wake_dispatcher

    def _verl_trainer(self, done: simpy.Event) -> Generator[simpy.Event, Any, None]:
        cfg, plan, env = self.cfg, self.plan, self.env
        step = 0
        while True:
            groups: list[_Group] = []
            while len(groups) < cfg.prompts:
                if not self.finished_groups:
                    yield from self._idle_until_woken()
                    continue
                groups.append(self.finished_groups.popleft())
            self.wake()
            if self.counting:
                for group in groups:
                    self.trained_sum += len(group.samples)
                    for version in group.samples:
                        self.lags[step - version] += 1
            yield env.timeout(plan.samples_per_step / plan.trainer_rate)
            step += 1
            if step % cfg.trigger_parameter_sync_step == 0:
                yield from self._verl_sync(step)
            if self._trained(step, done):
                return

    def _verl_sync(self, step: int) -> Generator[simpy.Event, Any, None]:
        """The trainer's pause(): with partial_rollout in-flight generation stops for the sync and resumes on the
        new weights; without it the trainer waits for every in-flight group first. Then update_param_version
        resets the budget to the groups still in flight or queued."""
        cfg, env = self.cfg, self.env
        self.syncing = True
        if not cfg.partial_rollout:
            while self.groups_inflight > 0:
                yield from self._idle_until_woken()
        elif cfg.weight_sync_s > 0:
            self.pauses.append((env.now, env.now + cfg.weight_sync_s))
        yield env.timeout(cfg.weight_sync_s)
        self.version = step
        self.verl_spent = self.groups_inflight + len(self.finished_groups)
        self.syncing = False
        self.wake()

    def _pipelinerl_actor(self) -> Generator[simpy.Event, Any, None]:
        """schedule_rollouts: a group per free rollout slot, within the max_lag submission budget."""
        cfg = self.cfg
        cap = max(self.plan.concurrency // cfg.group_size, 1)
        while True:
            while self.groups_inflight < cap and self.submitted_groups < cfg.pipelinerl_budget_groups(self.version):
                self._start_group()
                self.submitted_groups += 1
            self.wake_dispatcher = self.env.event()
            yield self.wake_dispatcher

    def _trim_ring_buffer(self) -> None:
        """Without max_lag (pop_old_data), ready samples beyond the ring buffer are dropped oldest first."""
        if self.cfg.max_lag is not None:
            return
        while len(self.ready) > self.cfg.ring_buffer_size:
            self.ready.popleft()
            if self.counting:
                self.dropped_stale += 1

    def _pipelinerl_trainer(self, done: simpy.Event) -> Generator[simpy.Event, Any, None]:
        """The trainer streams: it trains on ready samples as they come (micro-batches, in random order: the ready
        queue is shuffled before a batch is cut), idles only when none is ready, and broadcasts after B·G."""
        cfg, plan, env = self.cfg, self.plan, self.env
        samples = plan.samples_per_step
        step = 0
        while True:
            taken = 0
            while taken < samples:
                if not self.ready:
                    yield from self._idle_until_woken()
                    continue
                chunk = self._take_ready(samples - taken)
                taken += len(chunk)
                if self.counting:
                    self.trained_sum += len(chunk)
                    for version in chunk:
                        self.lags[step - version] += 1
                yield env.timeout(len(chunk) / plan.trainer_rate)
            if cfg.weight_sync_s > 0:  # the broadcast: running rollouts stand still, then go on with new weights
                self.pauses.append((env.now, env.now + cfg.weight_sync_s))
                yield env.timeout(cfg.weight_sync_s)
            step += 1
            self.version = step
            self.wake()
            if self._trained(step, done):
                return

    def _take_ready(self, need: int) -> list[int]:
        if len(self.ready) <= need:
            chunk = list(self.ready)
            self.ready.clear()
            return chunk
        ready = list(self.ready)
        picked = set(self.rng.choice(len(ready), size=need, replace=False).tolist())
        self.ready = deque(v for i, v in enumerate(ready) if i not in picked)
        return [v for i, v in enumerate(ready) if i in picked]

    # -- sync --------------------------------------------------------------------------------------
    def _sync_trainer(self, done: simpy.Event) -> Generator[simpy.Event, Any, None]:
        cfg, plan, env = self.cfg, self.plan, self.env
        n, k = plan.dispatched_per_step, plan.finish_target
        self.generation_sum = 0.0
        self.trained_sum = 0
        for step in range(self.warmup + self.steps):
            state = {"successes": 0, "ended": 0, "trained": 0}
            finished = env.event()

            def on_success(group: _Group, version: int, accepted: bool, state: dict = state) -> None:
                if state["successes"] < k:
                    state["successes"] += 1
                    state["trained"] += int(accepted)

            processes = []
            group: _Group | None = None
            for index in range(n):
                if index % cfg.group_size == 0:
                    group = _Group(cfg.group_size, self.uniform() >= cfg.zero_advantage_groups)
                    group.on_end = lambda outcome, state=state, finished=finished: _count_end(state, finished, n)
                assert group is not None
                handle = _Handle()
                self.inflight += 1
                process = env.process(self._sync_rollout(group, on_success, state, finished, n, k, handle))
                processes.append((process, handle))
                if self.counting:
                    self.counts.dispatched += 1
            t0 = env.now
            yield finished
            if self.counting:
                self.generation_sum += env.now - t0
            for process, handle in processes:
                if process.is_alive and handle.cancellable:
                    process.interrupt()
            if self.counting:
                self.trained_sum += state["trained"]
                self.idle += env.now - t0
            yield env.timeout(state["trained"] / plan.trainer_rate + cfg.weight_sync_s)
            self.version = step + 1
            self.step_ends.append(env.now)
            if step + 1 == self.warmup:
                self._start_window()
        done.succeed()

    # -- slime -------------------------------------------------------------------------------------
    # generate_rollout_async (sglang_rollout.py @0044b40, docs/rl-frameworks.md section 2): a step dispatches
    # over_sampling_batch_size groups; a group that ends filtered (zero advantage, or nothing accepted) lowers the
    # remaining count, and when fewer than B remain another round is dispatched; at B kept groups every
    # unfinished rollout is killed and the step trains on the kept groups' samples.
    def _slime_round(self, step: _SlimeStep, carried: int = 0) -> None:
        """over_sampling_batch_size groups, the data buffer's aborted (partial) ones first."""
        cfg = self.cfg
        step.rounds += 1
        for _ in range(max(cfg.slime_round_groups - carried, 0)):
            group = _Group(cfg.group_size, self.uniform() >= cfg.zero_advantage_groups, version=self.version)
            group.on_end = functools.partial(self._slime_group_end, step, group)
            step.submitted += 1
            group.members = self._launch(group)
            step.groups.append(group)
            step.processes.extend(group.members)

    def _slime_group_end(self, step: _SlimeStep, group: _Group, outcome: str) -> None:
        if group.ended < group.size or step.finished.triggered:
            return
        if group.accepted and group.samples:
            step.kept += 1
            step.trained += len(group.samples)
            step.versions.extend(group.samples)
            if step.kept >= self.cfg.prompts:
                step.finished.succeed()
        else:  # filtered: it no longer counts toward B, and a round is added when fewer than B remain
            step.filtered += 1
            remaining = step.submitted - step.filtered < self.cfg.prompts
            if step.open and remaining and step.rounds < MAX_SLIME_ROUNDS:
                self._slime_round(step)

    def _slime_carry(self, step: _SlimeStep, following: _SlimeStep) -> None:
        """Partial rollout: the step's unfinished groups are aborted at the inference server and go back to the data
        buffer; they resume first in the next step, holding their sandboxes (and their state) meanwhile, and their
        generation stands still until then."""
        for group in step.groups:
            if group.ended < group.size:
                group.on_end = functools.partial(self._slime_group_end, following, group)
                following.groups.append(group)
                following.processes.extend(group.members)
                following.submitted += 1
        self.pauses.append((self.env.now, math.inf))

    def _slime_trainer(self, done: simpy.Event) -> Generator[simpy.Event, Any, None]:
        cfg, plan, env = self.cfg, self.plan, self.env
        self.generation_sum = 0.0
        self.trained_sum = 0
        following = _SlimeStep(env.event())
        for index in range(self.warmup + self.steps):
            step, following = following, _SlimeStep(env.event())
            step.open = True
            if self.pauses and self.pauses[-1][1] == math.inf:  # the carried groups resume
                self.pauses[-1] = (self.pauses[-1][0], env.now)
                self.pause_ends.succeed()
                self.pause_ends = env.event()
            carried = len(step.groups)
            self._slime_round(step, carried)
            if step.submitted - step.filtered < cfg.prompts and not step.finished.triggered:
                self._slime_round(step)  # carried groups filtered while the trainer trained
            t0 = env.now
            yield step.finished
            if self.counting:
                self.generation_sum += env.now - t0
            if cfg.partial_rollout:
                self._slime_carry(step, following)
            else:
                for process, handle in step.processes:
                    if process.is_alive and handle.cancellable:
                        process.interrupt()
            if self.counting:
                self.trained_sum += step.trained
                self.idle += env.now - t0
                for version in step.versions:
                    self.lags[index - version] += 1
            yield env.timeout(step.trained / plan.trainer_rate + cfg.weight_sync_s)
            self.version = index + 1
            self.step_ends.append(env.now)
            if index + 1 == self.warmup:
                self._start_window()
        done.succeed()

    def _sync_rollout(
        self, group: _Group, on_success: Any, state: dict, finished: simpy.Event, n: int, k: int, handle: _Handle
    ) -> Generator[simpy.Event, Any, None]:
        def success(g: _Group, version: int, accepted: bool) -> None:
            on_success(g, version, accepted)
            if state["successes"] >= k and not finished.triggered:
                finished.succeed()

        yield from self.rollout(group, success, handle)

    # -- measurement -------------------------------------------------------------------------------
    def _start_window(self) -> None:
        self.counting = True
        self.window_start = self.env.now
        self.sandbox_area0 = self.sandboxes.at_now()
        self.held_area0 = self.held.at_now()

    def run(self) -> ModelResult:
        env, plan = self.env, self.plan
        done = env.event()
        if self.warmup == 0:
            self._start_window()
        if plan.mode == "async":
            env.process(self._dispatcher())
            env.process(self._async_trainer(done))
        elif plan.mode == "prime-rl":
            env.process(self._prime_orchestrator())
            env.process(self._prime_trainer(done))
        elif plan.mode == "slime":
            env.process(self._slime_trainer(done))
        elif plan.mode == "verl":
            env.process(self._verl_rollouter())
            env.process(self._verl_trainer(done))
        elif plan.mode == "pipelinerl":
            env.process(self._pipelinerl_actor())
            env.process(self._pipelinerl_trainer(done))
        else:
            env.process(self._sync_trainer(done))
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
        budget = cfg.pipelinerl_budget_groups(self.version)
        if not complete and plan.mode == "pipelinerl" and self.submitted_groups >= budget:
            notes.append(f"PipelineRL's max_lag budget ran out ({self.submitted_groups} groups submitted after "
                         f"{self.version} updates): the trainer stalled")  # fmt: skip
        if not self.counting:
            self._start_window()
        window = max(env.now - self.window_start, 1e-12)
        steps_done = max(len(self.step_ends) - self.warmup, 0)
        samples = plan.samples_per_step
        c = self.counts
        if plan.mode == "async":
            trained = samples * steps_done
        else:
            trained = self.trained_sum
        step_time = window / steps_done if steps_done else math.inf
        trainer = trained / window
        syncs_per_step = 1.0 / cfg.trigger_parameter_sync_step if plan.mode == "verl" else 1.0
        train_busy = samples / plan.trainer_rate + cfg.weight_sync_s * syncs_per_step
        ended = max(c.dispatched_ended, 1)
        consumed = sum(self.lags.values())
        stale_base = consumed + self.dropped_stale
        if plan.mode == "prime-rl":  # cancelled in flight past max_off_policy_steps, of the rollouts dispatched
            stale_base = max(c.dispatched, 1)
        lags = {lag: count / consumed for lag, count in sorted(self.lags.items())} if consumed else {}
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
                c.successes / self.generation_sum
                if plan.mode in STEPPED and self.generation_sum > 0
                else c.successes / window
            ),
            effective_samples_per_s=trainer,
            trainer_samples_per_s=trainer,
            trainer_capacity_samples_per_s=(
                samples / train_busy if plan.mode not in STEPPED else trained / max(window - self.idle, 1e-12)
            ),
            trainer_idle_ratio=self.idle / window,
            step_time_s=step_time,
            generation_time_s=(
                self.generation_sum / steps_done
                if plan.mode in STEPPED and steps_done
                else c.delivery_sum / max(c.successes, 1)
            ),
            lost_to_init_failures=c.lost_init / max(c.dispatched if plan.mode in STEPPED else ended, 1),
            lost_to_exec_failures=c.lost_exec / max(c.dispatched if plan.mode in STEPPED else ended, 1),
            lost_to_staleness=(self.dropped_stale + self.cancelled_stale) / stale_base if stale_base else 0.0,
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


@dataclass(frozen=True, slots=True)
class _Uniform:
    label: str = "uniform"

    def ppf(self, u: np.ndarray) -> np.ndarray:
        return u

    def mean(self) -> float:
        return 0.5

    def cdf(self, t: np.ndarray) -> np.ndarray:
        return np.clip(t, 0, 1)

    def upper(self, eps: float = 0.0) -> float:
        return 1.0


def _count_end(state: dict, finished: simpy.Event, n: int) -> None:
    state["ended"] += 1
    if state["ended"] >= n and not finished.triggered:
        finished.succeed()


def _noop(group: _Group, version: int, accepted: bool) -> None:
    return None


def simulate(plan: Plan, seed: int | None = None, steps: int | None = None, warmup: int | None = None) -> ModelResult:
    return Simulation(plan, seed, steps, warmup).run()
