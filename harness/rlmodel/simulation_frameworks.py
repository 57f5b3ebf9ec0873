"""The RL frameworks' own generators and trainers in the simulation: prime-rl's scheduler, slime's kept-group
steps, verl's fully-async rollouter and PipelineRL's actor and streaming trainer (docs/rl-frameworks.md: file and
commit of each). Each is a `Mode` that keeps its own queues and runs on the simulation through `SimulationCore`."""

from __future__ import annotations

import functools
import math
from collections import deque
from collections.abc import Generator
from typing import Any

import simpy

from harness.rlmodel.simulation_records import MAX_SLIME_ROUNDS, Group, Mode, SimulationCore, SlimeStep


def _new_group(sim: SimulationCore) -> Group:
    """A group dispatched on the policy the generator has loaded now."""
    cfg = sim.cfg
    return Group(cfg.group_size, sim.uniform() >= cfg.zero_advantage_groups, version=sim.version)


class PrimeRL(Mode):
    """Scheduler @02b49f9 (docs/rl-frameworks.md section 1): a fixed number of groups in flight, each replaced when
    it is consumed into a batch; batch n is consumed only once the policy of step n - max_async_level is loaded
    (the newest on disk, or exactly that one when strict); at each weight update every in-flight group counts one
    more update survived, and one past max_off_policy_steps is cancelled and replaced at once."""

    def __init__(self, sim: SimulationCore) -> None:
        super().__init__(sim)
        self.published = 0  # the trainer's newest checkpoint (sim.version is the policy the generator loaded)
        self.live_groups: dict[int, Group] = {}  # in flight, by id()
        self.finished_groups: deque[Group] = deque()
        self.batches: deque[tuple[int, list[int]]] = deque()  # (batch index, dispatch version per sample)
        self.wake_orchestrator: simpy.Event = sim.env.event()

    def start(self, done: simpy.Event) -> None:
        self.sim.env.process(self._orchestrator())
        self.sim.env.process(self._trainer(done))

    def group_ended(self, group: Group) -> None:
        if group.cancelled:
            return
        self.live_groups.pop(id(group), None)
        self.finished_groups.append(group)
        self._wake_orchestrator()

    def _wake_orchestrator(self) -> None:
        if not self.wake_orchestrator.triggered:
            self.wake_orchestrator.succeed()

    def _dispatch_group(self) -> None:
        group = _new_group(self.sim)
        group.members = self.sim.launch(group)
        self.live_groups[id(group)] = group

    def _load(self, version: int) -> None:
        """A weight update on the inference side: every in-flight group has survived one more."""
        sim = self.sim
        if version <= sim.version:
            return
        sim.version = version
        for key, group in list(self.live_groups.items()):
            group.off_policy += 1
            if group.off_policy > sim.cfg.max_off_policy_steps:
                group.cancelled = True
                del self.live_groups[key]
                for process, handle in group.members:
                    if process.is_alive and handle.cancellable:
                        process.interrupt()
                        if sim.counting:
                            sim.counts.cancelled_stale += 1
                self._dispatch_group()

    def _orchestrator(self) -> Generator[simpy.Event, Any, None]:
        cfg, env = self.sim.cfg, self.sim.env
        samples = self.sim.plan.samples_per_step
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
            self.sim.nudge_trainer()
            n += 1

    def _trainer(self, done: simpy.Event) -> Generator[simpy.Event, Any, None]:
        sim = self.sim
        cfg, plan, env = sim.cfg, sim.plan, sim.env
        step = 0
        while True:
            while not self.batches:
                yield from sim.idle_until_woken()
            index, versions = self.batches.popleft()
            if sim.counting:
                sim.counts.trained_sum += len(versions)
                for version in versions:
                    sim.counts.lags[index - version] += 1
            yield env.timeout(len(versions) / plan.trainer_rate + cfg.weight_sync_s)
            step += 1
            self.published = step
            if not cfg.strict_async_level:
                self._load(step)  # the orchestrator's policy loop picks up the newest checkpoint
            self._wake_orchestrator()
            if sim.trained(step, done):
                return


class _GroupPool(Mode):
    """verl's rollouter and PipelineRL's actor: groups in flight up to concurrency / G, each started on a free
    rollout slot; a finished group is collected for the trainer, which is woken, and so is the dispatcher."""

    def __init__(self, sim: SimulationCore) -> None:
        super().__init__(sim)
        self.groups_inflight = 0
        self.cap = max(sim.plan.concurrency // sim.cfg.group_size, 1)

    def group_ended(self, group: Group) -> None:
        self.groups_inflight -= 1
        self._collect(group)
        self.sim.nudge_trainer()
        self.sim.wake()

    def _collect(self, group: Group) -> None:
        raise NotImplementedError

    def _start_group(self) -> None:
        group = _new_group(self.sim)
        self.groups_inflight += 1
        self.sim.launch(group)


class VerlFullyAsync(_GroupPool):
    """FullyAsyncRollouter @01217507: the rollouter stops dispatching once it has spent its budget of
    int(B·(1 + staleness_threshold)·T) groups since the last version (reset at each sync to the groups in flight
    and queued) or that many wait; the trainer takes B finished groups per step and syncs weights every
    T = trigger_parameter_sync_step steps."""

    def __init__(self, sim: SimulationCore) -> None:
        super().__init__(sim)
        self.finished_groups: deque[Group] = deque()
        self.syncing = False
        self.spent = 0  # verl's staleness_samples: groups dispatched since the last version

    def start(self, done: simpy.Event) -> None:
        self.sim.env.process(self._rollouter())
        self.sim.env.process(self._trainer(done))

    def _collect(self, group: Group) -> None:
        self.finished_groups.append(group)

    def _rollouter(self) -> Generator[simpy.Event, Any, None]:
        """A group per free concurrency slot, until the version's budget is spent or as many finished groups wait
        (_should_pause_generation); nothing is dispatched during a parameter sync."""
        budget = self.sim.cfg.verl_budget_groups
        while True:
            while (
                not self.syncing
                and self.groups_inflight < self.cap
                and self.spent < budget
                and len(self.finished_groups) < budget
            ):
                self._start_group()
                self.spent += 1
            yield self.sim.sleep_dispatcher()

    def _trainer(self, done: simpy.Event) -> Generator[simpy.Event, Any, None]:
        sim = self.sim
        cfg, plan, env = sim.cfg, sim.plan, sim.env
        step = 0
        while True:
            groups: list[Group] = []
            while len(groups) < cfg.prompts:
                if not self.finished_groups:
                    yield from sim.idle_until_woken()
                    continue
                groups.append(self.finished_groups.popleft())
            sim.wake()
            if sim.counting:
                for group in groups:
                    sim.counts.trained_sum += len(group.samples)
                    for version in group.samples:
                        sim.counts.lags[step - version] += 1
            yield env.timeout(plan.samples_per_step / plan.trainer_rate)
            step += 1
            if step % cfg.trigger_parameter_sync_step == 0:
                yield from self._sync(step)
            if sim.trained(step, done):
                return

    def _sync(self, step: int) -> Generator[simpy.Event, Any, None]:
        """The trainer's pause(): with partial_rollout in-flight generation stops for the sync and resumes on the
        new weights; without it the trainer waits for every in-flight group first. Then update_param_version
        resets the budget to the groups still in flight or queued."""
        sim = self.sim
        cfg, env = sim.cfg, sim.env
        self.syncing = True
        if not cfg.partial_rollout:
            while self.groups_inflight > 0:
                yield from sim.idle_until_woken()
        elif cfg.weight_sync_s > 0:
            sim.pauses.append((env.now, env.now + cfg.weight_sync_s))
        yield env.timeout(cfg.weight_sync_s)
        sim.version = step
        self.spent = self.groups_inflight + len(self.finished_groups)
        self.syncing = False
        sim.wake()


class PipelineRL(_GroupPool):
    """actor.py @005a1f17, preprocess.py @04105834: with max_lag the actor submits at most
    ceil(max_lag / G) + (updates + 1)·B groups; without it ready samples waiting beyond ring_buffer_size are dropped
    oldest first; the trainer streams ready samples (in random order) into its step of B·G, and each weight
    broadcast pauses in-flight generation (running rollouts continue on the new weights)."""

    def __init__(self, sim: SimulationCore) -> None:
        super().__init__(sim)
        self.ready: deque[int] = deque()  # ready samples' versions, oldest first
        self.submitted_groups = 0

    def start(self, done: simpy.Event) -> None:
        self.sim.env.process(self._actor())
        self.sim.env.process(self._trainer(done))

    def _collect(self, group: Group) -> None:
        self.ready.extend(group.samples)
        self._trim_ring_buffer()

    def notes(self, complete: bool) -> list[str]:
        version = self.sim.version
        if complete or self.submitted_groups < self.sim.cfg.pipelinerl_budget_groups(version):
            return []
        return [
            f"PipelineRL's max_lag budget ran out ({self.submitted_groups} groups submitted after "
            f"{version} updates): the trainer stalled"
        ]

    def _actor(self) -> Generator[simpy.Event, Any, None]:
        """schedule_rollouts: a group per free rollout slot, within the max_lag submission budget."""
        sim = self.sim
        while True:
            while self.groups_inflight < self.cap and self.submitted_groups < sim.cfg.pipelinerl_budget_groups(
                sim.version
            ):
                self._start_group()
                self.submitted_groups += 1
            yield sim.sleep_dispatcher()

    def _trim_ring_buffer(self) -> None:
        """Without max_lag (pop_old_data), ready samples beyond the ring buffer are dropped oldest first."""
        sim = self.sim
        if sim.cfg.max_lag is not None:
            return
        while len(self.ready) > sim.cfg.ring_buffer_size:
            self.ready.popleft()
            if sim.counting:
                sim.counts.dropped_stale += 1

    def _trainer(self, done: simpy.Event) -> Generator[simpy.Event, Any, None]:
        """The trainer streams: it trains on ready samples as they come (micro-batches, in random order: the ready
        queue is shuffled before a batch is cut), idles only when none is ready, and broadcasts after B·G."""
        sim = self.sim
        cfg, plan, env = sim.cfg, sim.plan, sim.env
        samples = plan.samples_per_step
        step = 0
        while True:
            taken = 0
            while taken < samples:
                if not self.ready:
                    yield from sim.idle_until_woken()
                    continue
                chunk = self._take_ready(samples - taken)
                taken += len(chunk)
                if sim.counting:
                    sim.counts.trained_sum += len(chunk)
                    for version in chunk:
                        sim.counts.lags[step - version] += 1
                yield env.timeout(len(chunk) / plan.trainer_rate)
            if cfg.weight_sync_s > 0:  # the broadcast: running rollouts stand still, then go on with new weights
                sim.pauses.append((env.now, env.now + cfg.weight_sync_s))
                yield env.timeout(cfg.weight_sync_s)
            step += 1
            sim.version = step
            sim.wake()
            if sim.trained(step, done):
                return

    def _take_ready(self, need: int) -> list[int]:
        if len(self.ready) <= need:
            chunk = list(self.ready)
            self.ready.clear()
            return chunk
        ready = list(self.ready)
        picked = set(self.sim.rng.choice(len(ready), size=need, replace=False).tolist())
        self.ready = deque(v for i, v in enumerate(ready) if i not in picked)
        return [v for i, v in enumerate(ready) if i in picked]


class Slime(Mode):
    """generate_rollout_async (sglang_rollout.py @0044b40, docs/rl-frameworks.md section 2): a step dispatches
    over_sampling_batch_size groups; a group that ends filtered (zero advantage, or nothing accepted) lowers the
    remaining count, and when fewer than B remain another round is dispatched; at B kept groups every unfinished
    rollout is killed (or, with partial_rollout, carried into the next step) and the step trains on the kept
    groups' samples."""

    def start(self, done: simpy.Event) -> None:
        self.sim.env.process(self._trainer(done))

    def _round(self, step: SlimeStep, carried: int = 0) -> None:
        """over_sampling_batch_size groups, the data buffer's aborted (partial) ones first."""
        sim = self.sim
        step.rounds += 1
        for _ in range(max(sim.cfg.slime_round_groups - carried, 0)):
            group = _new_group(sim)
            group.on_end = functools.partial(self._group_end, step, group)
            step.submitted += 1
            group.members = sim.launch(group)
            step.groups.append(group)
            step.processes.extend(group.members)

    def _group_end(self, step: SlimeStep, group: Group, outcome: str) -> None:
        if group.ended < group.size or step.finished.triggered:
            return
        prompts = self.sim.cfg.prompts
        if group.accepted and group.samples:
            step.kept += 1
            step.trained += len(group.samples)
            step.versions.extend(group.samples)
            if step.kept >= prompts:
                step.finished.succeed()
        else:  # filtered: it no longer counts toward B, and a round is added when fewer than B remain
            step.filtered += 1
            remaining = step.submitted - step.filtered < prompts
            if step.open and remaining and step.rounds < MAX_SLIME_ROUNDS:
                self._round(step)

    def _carry(self, step: SlimeStep, following: SlimeStep) -> None:
        """Partial rollout: the step's unfinished groups are aborted at the inference server and go back to the data
        buffer; they resume first in the next step, holding their sandboxes (and their state) meanwhile, and their
        generation stands still until then."""
        for group in step.groups:
            if group.ended < group.size:
                group.on_end = functools.partial(self._group_end, following, group)
                following.groups.append(group)
                following.processes.extend(group.members)
                following.submitted += 1
        self.sim.pauses.append((self.sim.env.now, math.inf))

    def _trainer(self, done: simpy.Event) -> Generator[simpy.Event, Any, None]:
        sim = self.sim
        cfg, plan, env = sim.cfg, sim.plan, sim.env
        sim.counts.generation_sum = 0.0
        sim.counts.trained_sum = 0
        following = SlimeStep(env.event())
        for index in range(sim.warmup + sim.steps):
            step, following = following, SlimeStep(env.event())
            step.open = True
            if sim.pauses and sim.pauses[-1][1] == math.inf:  # the carried groups resume
                sim.pauses[-1] = (sim.pauses[-1][0], env.now)
                sim.pause_ends.succeed()
                sim.pause_ends = env.event()
            carried = len(step.groups)
            self._round(step, carried)
            if step.submitted - step.filtered < cfg.prompts and not step.finished.triggered:
                self._round(step)  # carried groups filtered while the trainer trained
            t0 = env.now
            yield step.finished
            if sim.counting:
                sim.counts.generation_sum += env.now - t0
            if cfg.partial_rollout:
                self._carry(step, following)
            else:
                for process, handle in step.processes:
                    if process.is_alive and handle.cancellable:
                        process.interrupt()
            if sim.counting:
                sim.counts.trained_sum += step.trained
                sim.counts.idle += env.now - t0
                for version in step.versions:
                    sim.counts.lags[index - version] += 1
            yield env.timeout(step.trained / plan.trainer_rate + cfg.weight_sync_s)
            sim.version = index + 1
            sim.step_ends.append(env.now)
            if index + 1 == sim.warmup:
                sim.start_window()
        done.succeed()
