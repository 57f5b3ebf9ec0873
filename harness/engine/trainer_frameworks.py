"""The emulated trainer's framework policies: verl's rollouter (dispatch budget, syncs that pause or drain),
PipelineRL's actor (submission budget, ring buffer, a streaming trainer, in-flight broadcasts), slime's kept-group
step with its refills and partial rollout, and prime-rl's orchestrator (docs/rl-frameworks.md: file and commit of
each). Each is an `AdmissionPolicy` (trainer_policy.py) told the trainer's shared `TrainerState`."""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import deque
from collections.abc import Coroutine
from typing import Any

from harness.engine.trainer_policy import AdmissionPolicy, Sample, TrainerState
from harness.engine.trainer_settings import SLIME_GROUPS_PER_STEP, Ticket


def _mid_group(state: TrainerState) -> bool:
    """The next rollout belongs to a started group: it always starts (a group is dispatched whole)."""
    return state.seq % max(1, state.s.group_size) != 0


async def _weight_update(state: TrainerState, pauses_inference: bool) -> None:
    """The update itself, `weight_sync_s` vendor seconds, recorded as a pause when it stands generation still."""
    sync = state.s.weight_sync_s * state.s.time_scale
    if sync > 0:
        if pauses_inference:
            now = time.time()
            state.pauses.append((now, now + sync))
        await asyncio.sleep(sync)


class VerlPolicy(AdmissionPolicy):
    """verl (FullyAsyncRollouter @01217507): up to `max_groups` groups in flight; a new group starts only while fewer
    than int(B x (1 + staleness_threshold) x T) were dispatched since the last sync and fewer than that many wait;
    the trainer takes B finished groups per step and syncs every T steps, pausing in-flight generation
    (partial_rollout) or first waiting until no group is in flight."""

    def __init__(self, state: TrainerState) -> None:
        super().__init__(state)
        self.loaded = 0  # the policy the rollouter generates with, raised at each sync
        self.inflight = 0  # groups in flight
        self.spent = 0  # staleness_samples: groups dispatched since the last sync (reset to those in flight, queued)
        self.syncing = False
        self.finished_groups: deque[list[Sample]] = deque()

    @property
    def pauses_inference(self) -> bool:
        return self.s.weight_sync_s > 0 and self.s.partial_rollout

    def gate(self) -> bool:
        if _mid_group(self.state):
            return True
        if self.inflight >= max(self.s.max_groups, 1):
            return False
        budget = self.s.verl_budget
        if self.syncing or self.spent >= budget or len(self.finished_groups) >= budget:
            return False
        self.spent += 1
        self.inflight += 1
        return True

    def ticket(self) -> Ticket:
        return Ticket(self.state.seq, self.loaded, self.loaded, self.group())

    def group_end(self, ticket: Ticket, samples: list[Sample]) -> None:
        self.inflight -= 1
        self.finished_groups.append(samples)

    def batch_ready(self) -> bool:
        return len(self.finished_groups) >= self.s.prompts

    def take_batch(self) -> tuple[int, list[int]]:
        """B finished groups."""
        picked = [sample for _ in range(self.s.prompts) for sample in self.finished_groups.popleft()]
        self.state.notify()
        return len(picked), [self.state.version - version for _, version in picked]

    def train_seconds(self, samples: int) -> float:
        return self.s.per_sample_s * self.s.batch  # its weight sync is its own, every T steps

    async def sync_weights(self) -> float:
        """Every T steps the parameter sync, carrying the weights of the step just trained: the seconds the trainer
        waited for in-flight groups first (without partial_rollout), then the sync itself."""
        version = self.state.version + 1
        if version % self.s.trigger_parameter_sync_step != 0:
            return 0.0
        drained = 0.0
        self.syncing = True
        if not self.s.partial_rollout:
            t0 = time.time()
            while self.inflight > 0:
                await self.state.wait_change()
            drained = time.time() - t0
        await _weight_update(self.state, self.pauses_inference)
        self.loaded = version
        self.spent = self.inflight + len(self.finished_groups)
        self.syncing = False
        self.state.notify()
        return drained


class PipelineRLPolicy(AdmissionPolicy):
    """PipelineRL (actor.py @005a1f17): up to `max_groups` groups in flight, at most ceil(max_lag / G) + (updates +
    1) x B submitted when max_lag is set; the trainer streams B x G ready samples in random order; without max_lag
    ready samples beyond `ring_buffer_size` are dropped oldest first; each weight broadcast stands in-flight
    generation still (the rollouts go on with the new weights)."""

    def __init__(self, state: TrainerState) -> None:
        super().__init__(state)
        self.inflight = 0  # groups in flight
        self.started = 0  # groups submitted
        self.rng = random.Random(state.s.seed)

    @property
    def pauses_inference(self) -> bool:
        return self.s.weight_sync_s > 0

    def gate(self) -> bool:
        if _mid_group(self.state):
            return True
        if self.inflight >= max(self.s.max_groups, 1) or self.started >= self.s.pipelinerl_budget(self.state.version):
            return False
        self.inflight += 1
        self.started += 1
        return True

    def group_end(self, ticket: Ticket, samples: list[Sample]) -> None:
        self.inflight -= 1
        self.state.queue.extend(samples)
        self.trim_ring_buffer()

    def trim_ring_buffer(self) -> None:
        """Without max_lag (pop_old_data): ready samples beyond the ring buffer go, oldest first."""
        if self.s.max_lag is not None:
            return
        while len(self.state.queue) > self.s.ring_buffer_size:
            self.state.queue.popleft()
            self.state.counts["stale"] += 1

    async def gather(self, t_wait: float) -> tuple[int, list[int], float]:
        """The trainer streams: it trains on ready samples as they come (in random order: the ready queue is
        shuffled before a batch is cut) until it has B x G, idling only when none is ready."""
        state = self.state
        waited = 0.0
        lags: list[int] = []
        while len(lags) < self.s.batch:
            if not state.queue:
                t0 = time.time()
                await state.wait_change()
                waited += time.time() - t0
                continue
            need = self.s.batch - len(lags)
            ready = list(state.queue)
            chosen = set(self.rng.sample(range(len(ready)), need)) if len(ready) > need else set(range(len(ready)))
            state.queue = deque(item for i, item in enumerate(ready) if i not in chosen)
            lags.extend(state.version - ready[i][1] for i in sorted(chosen))
            state.notify()
            await asyncio.sleep(self.s.per_sample_s * len(chosen) * self.s.time_scale)
        return len(lags), lags, t_wait + waited

    async def sync_weights(self) -> float:
        """The broadcast after every step."""
        await _weight_update(self.state, self.pauses_inference)
        self.state.notify()
        return 0.0


class SlimePolicy(AdmissionPolicy):
    """slime (generate_rollout_async @0044b40): step n dispatches a round of ceil(oversampling x B) groups; a group
    without an accepted sample is filtered and, when fewer than B remain, another round may start; at B kept groups
    the step's other rollouts are killed (or, with partial rollout, carried into the next step) and it trains on the
    kept groups' samples."""

    def __init__(self, state: TrainerState) -> None:
        super().__init__(state)
        self.step_open = 0  # the step whose rollouts may start
        self.step_dispatched: dict[int, int] = {}
        self.allowed: dict[int, int] = {}  # rollouts a step may dispatch (a round more per refill)
        self.kept: dict[int, int] = {}
        self.filtered: dict[int, int] = {}
        self.live: dict[int, Ticket] = {}  # partial rollout: what a step carries into the next

    @property
    def pauses_inference(self) -> bool:
        return self.s.partial_rollout  # carried rollouts stand still until the next step opens

    def gate(self) -> bool:
        step = self.step_open
        if self.step_dispatched.get(step, 0) >= self.allowed.setdefault(step, self.s.slime_round):
            return False
        self.step_dispatched[step] = self.step_dispatched.get(step, 0) + 1
        return True

    def ticket(self) -> Ticket:
        """Groups count within their step (a step may close before its last dispatch)."""
        step = self.step_open
        group = step * SLIME_GROUPS_PER_STEP + (self.step_dispatched[step] - 1) // max(1, self.s.group_size)
        ticket = Ticket(self.state.seq, self.state.version, step, group)
        self.live[ticket.seq] = ticket
        return ticket

    def ended(self, ticket: Ticket) -> None:
        self.live.pop(ticket.seq, None)
        super().ended(ticket)

    def group_end(self, ticket: Ticket, samples: list[Sample]) -> None:
        """A group of the open step ended: kept (it holds an accepted sample) until B are, then the step's other
        rollouts are killed; filtered otherwise, and another round is allowed when fewer than B remain."""
        step, prompts = ticket.step, self.s.prompts
        if step not in (self.step_open, self.step_open + 1) or self.kept.get(step, 0) >= prompts:
            return  # a late finisher of a step that already has its groups: discarded, as slime does
        if samples:
            self.kept[step] = self.kept.get(step, 0) + 1
            self.state.queue.extend(samples)
            if self.kept[step] == prompts:
                if self.s.partial_rollout:
                    self.carry(step)
                else:
                    self.state.cancel_rollouts(step)
            return
        self.filtered[step] = self.filtered.get(step, 0) + 1
        submitted = self.allowed.get(step, self.s.slime_round) // max(1, self.s.group_size)
        if submitted - self.filtered[step] < prompts:
            self.allowed[step] = self.allowed.get(step, self.s.slime_round) + self.s.slime_round

    def carry(self, step: int) -> None:
        """Partial rollout: the step's unfinished rollouts are aborted at the inference server and resume first in
        the next step (their groups count in its round), holding their sandboxes; their generation stands still
        until that step opens."""
        carried = [ticket for ticket in self.live.values() if ticket.step == step]
        for ticket in carried:
            ticket.step = step + 1
        groups = {ticket.group for ticket in carried}
        self.step_dispatched[step + 1] = len(groups) * max(1, self.s.group_size)
        self.state.pauses.append((time.time(), math.inf))

    def batch_ready(self) -> bool:
        return self.kept.get(self.step_open, 0) >= self.s.prompts

    def take_batch(self) -> tuple[int, list[int]]:
        """Every kept sample."""
        queue, version = self.state.queue, self.state.version
        take = len(queue)
        return take, [version - queue.popleft()[1] for _ in range(take)]

    def trained(self) -> None:
        state = self.state
        state.cancel_rollouts(self.step_open)  # anything of the trained step still running is no longer needed
        self.step_open += 1
        if state.pauses and state.pauses[-1][1] == math.inf:  # the carried rollouts resume
            state.pauses[-1] = (state.pauses[-1][0], time.time())


class PrimeRLPolicy(AdmissionPolicy):
    """prime-rl (its Scheduler @02b49f9): `oversampling x batch / G` groups in flight, a group replaced only when it
    is consumed into a batch; batch n is built only once the policy of step n - `max_async_level` is loaded (the
    newest checkpoint, or exactly that one with `strict_async_level`); at each weight update a group that has
    survived more than `max_off_policy_steps` of them is cancelled and replaced."""

    def __init__(self, state: TrainerState) -> None:
        super().__init__(state)
        self.permits = state.s.groups_in_flight * max(1, state.s.group_size)  # rollouts the generator may start
        self.loaded = 0  # the policy the generator has loaded
        self.live_groups: dict[int, int] = {}  # in-flight groups: weight updates survived
        self.cancelled_groups: set[int] = set()
        self.finished_groups: deque[list[Sample]] = deque()
        self.batches: deque[tuple[int, list[Sample]]] = deque()  # (step, samples) built by the orchestrator

    def side_loops(self) -> list[Coroutine[Any, Any, None]]:
        return [self.orchestrate()]

    def gate(self) -> bool:
        if self.permits <= 0:
            return False
        self.permits -= 1
        return True

    def ticket(self) -> Ticket:
        """Its "step" is its group: what a cancel names."""
        group = self.group()
        self.live_groups.setdefault(group, 0)
        return Ticket(self.state.seq, self.loaded, group, group)

    def group_end(self, ticket: Ticket, samples: list[Sample]) -> None:
        if ticket.group in self.cancelled_groups:
            self.cancelled_groups.discard(ticket.group)
        else:
            self.live_groups.pop(ticket.group, None)
            self.finished_groups.append(samples)

    def batch_ready(self) -> bool:
        return bool(self.batches)

    def take_batch(self) -> tuple[int, list[int]]:
        index, built = self.batches.popleft()
        return len(built), [index - version for _, version in built]

    def trained(self) -> None:
        if not self.s.strict_async_level:
            self.load(self.state.version)  # the orchestrator's policy loop picks up the newest checkpoint

    def load(self, version: int) -> None:
        """A weight update on the inference side: every in-flight group has survived one more; one past
        max_off_policy_steps is cancelled (the engine cancels its rollouts) and replaced at once."""
        if version <= self.loaded:
            return
        self.loaded = version
        for group in list(self.live_groups):
            self.live_groups[group] += 1
            if self.live_groups[group] > self.s.max_off_policy_steps:
                del self.live_groups[group]
                self.cancelled_groups.add(group)
                self.state.counts["stale"] += 1
                self.permits += max(1, self.s.group_size)
                self.state.cancel_rollouts(group)
        self.state.notify()

    async def orchestrate(self) -> None:
        """Batch n is built from finished groups once the policy of step n - max_async_level is loaded (the newest
        checkpoint, or exactly that one when strict); each consumed group frees G rollouts to start."""
        state = self.state
        n = 0
        while not state.done.is_set():
            needed = max(n - self.s.max_async_level, 0)
            while state.version < needed:
                await state.wait_change()
            self.load(needed if self.s.strict_async_level else max(needed, state.version))
            batch: list[Sample] = []
            while len(batch) < self.s.batch:
                if not self.finished_groups:
                    await state.wait_change()
                    continue
                batch.extend(self.finished_groups.popleft())
                self.permits += max(1, self.s.group_size)
                state.notify()
            self.batches.append((n, batch))
            state.notify()
            n += 1
