"""The RL frameworks' own generators and trainers in the simulation: prime-rl's scheduler, verl's fully-async
rollouter, PipelineRL's actor and streaming trainer, and slime's kept-group steps (docs/rl-frameworks.md: file and
commit of each). A mixin of `Simulation`: it runs on the simulation's state and its rollouts."""

from __future__ import annotations

import functools
import math
from collections import deque
from collections.abc import Generator
from typing import Any

import simpy

from harness.rlmodel.simulation_records import MAX_SLIME_ROUNDS, Group, SlimeStep


class FrameworkModes:
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
        group = Group(cfg.group_size, self.uniform() >= cfg.zero_advantage_groups, version=self.version)
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
        group = Group(cfg.group_size, self.uniform() >= cfg.zero_advantage_groups, version=self.version)
        self.groups_inflight += 1
        self._launch(group)

    def _verl_rollouter(self) -> Generator[simpy.Event, Any, None]:
        """FullyAsyncRollouter: a group per free concurrency slot, until the version's budget is spent or as many
        finished groups wait (_should_pause_generation); nothing is dispatched during a parameter sync."""
        cfg = self.cfg
        budget = cfg.verl_budget_groups
        cap = max(self.plan.concurrency // cfg.group_size, 1)
        while True:
            while (
                not self.syncing
                and self.groups_inflight < cap
                and self.verl_spent < budget
                and len(self.finished_groups) < budget
            ):
                self._start_group()
                self.verl_spent += 1
            self.wake_dispatcher = self.env.event()
            yield self.wake_dispatcher

    def _verl_trainer(self, done: simpy.Event) -> Generator[simpy.Event, Any, None]:
        cfg, plan, env = self.cfg, self.plan, self.env
        step = 0
        while True:
            groups: list[Group] = []
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

    # -- slime -------------------------------------------------------------------------------------
    # generate_rollout_async (sglang_rollout.py @0044b40, docs/rl-frameworks.md section 2): a step dispatches
    # over_sampling_batch_size groups; a group that ends filtered (zero advantage, or nothing accepted) lowers the
    # remaining count, and when fewer than B remain another round is dispatched; at B kept groups every
    # unfinished rollout is killed and the step trains on the kept groups' samples.
    def _slime_round(self, step: SlimeStep, carried: int = 0) -> None:
        """over_sampling_batch_size groups, the data buffer's aborted (partial) ones first."""
        cfg = self.cfg
        step.rounds += 1
        for _ in range(max(cfg.slime_round_groups - carried, 0)):
            group = Group(cfg.group_size, self.uniform() >= cfg.zero_advantage_groups, version=self.version)
            group.on_end = functools.partial(self._slime_group_end, step, group)
            step.submitted += 1
            group.members = self._launch(group)
            step.groups.append(group)
            step.processes.extend(group.members)

    def _slime_group_end(self, step: SlimeStep, group: Group, outcome: str) -> None:
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

    def _slime_carry(self, step: SlimeStep, following: SlimeStep) -> None:
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
        following = SlimeStep(env.event())
        for index in range(self.warmup + self.steps):
            step, following = following, SlimeStep(env.event())
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
