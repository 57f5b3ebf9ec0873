"""The emulated trainer's framework policies: verl's rollouter (dispatch budget, syncs that pause or drain),
PipelineRL's actor (submission budget, ring buffer, a streaming trainer, in-flight broadcasts), slime's kept-group
step with its refills and partial rollout, and prime-rl's orchestrator (docs/rl-frameworks.md: file and commit of
each). A mixin of `TrainerEmulator`: it runs on the emulator's state."""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque


class FrameworkPolicies:
    # -- verl's rollouter and PipelineRL's actor ------------------------------------------------------------
    @property
    def pauses_inference(self) -> bool:
        """Weight updates stand in-flight generation still (PipelineRL; verl with partial_rollout)."""
        if self.s.mode == "slime":  # partial rollout: carried rollouts stand still until the next step opens
            return self.s.partial_rollout
        return self.s.weight_sync_s > 0 and (
            self.s.mode == "pipelinerl" or (self.s.mode == "verl" and self.s.partial_rollout)
        )

    def inference_pauses(self, t0: float, t1: float) -> tuple[float, float | None]:
        """Seconds within [t0, t1] the inference servers stood still for a weight update, and when one under way
        at t1 ends (one whose end is not known yet, slime's until the next step opens: look again shortly)."""
        paused, resume = 0.0, None
        for start, end in reversed(self.pauses):
            if end <= t0:
                break
            paused += max(0.0, min(end, t1) - max(start, t0))
            if start <= t1 < end:
                resume = end if end != math.inf else t1 + 0.02
        return paused, resume

    def _pool_admits(self) -> bool:
        """A rollout may start: the rest of a started group always (a group is dispatched whole), a new group
        within the framework's gates."""
        size = max(1, self.s.group_size)
        if self.seq % size:
            return True
        if self.pool_inflight >= max(self.s.max_groups, 1):
            return False
        if self.s.mode == "verl":
            budget = self.s.verl_budget
            if self.syncing or self.pool_spent >= budget or len(self.finished_groups) >= budget:
                return False
            self.pool_spent += 1
        elif self.pool_started >= self.s.pipelinerl_budget(self.version):
            return False
        self.pool_inflight += 1
        self.pool_started += 1
        return True

    def _trim_ring_buffer(self) -> None:
        """PipelineRL without max_lag (pop_old_data): ready samples beyond the ring buffer go, oldest first."""
        if self.s.max_lag is not None:
            return
        while len(self.queue) > self.s.ring_buffer_size:
            self.queue.popleft()
            self.counts["stale"] += 1

    async def _sync_weights(self, version: int) -> float:
        """verl's parameter sync (every T steps) or PipelineRL's broadcast (every step): seconds the trainer waited
        for in-flight groups first (verl without partial_rollout), then the sync itself."""
        drained = 0.0
        self.syncing = self.s.mode == "verl"
        if self.s.mode == "verl" and not self.s.partial_rollout:
            t0 = time.time()
            while self.pool_inflight > 0:
                await self._wait_change()
            drained = time.time() - t0
        sync = self.s.weight_sync_s * self.s.time_scale
        if sync > 0:
            if self.pauses_inference:
                now = time.time()
                self.pauses.append((now, now + sync))
            await asyncio.sleep(sync)
        if self.s.mode == "verl":
            self.loaded = version
            self.pool_spent = self.pool_inflight + len(self.finished_groups)
            self.syncing = False
        self._notify()
        return drained

    def _per_sample_s(self) -> float:
        """Vendor seconds the trainer spends on one sample (a step's training without its weight sync, over B x G)."""
        return (self.s.train_seconds(self.s.batch) - self.s.weight_sync_s) / max(self.s.batch, 1)

    async def _stream_step(self) -> tuple[float, list[int]]:
        """PipelineRL's trainer streams: it trains on ready samples as they come (in random order: the ready queue
        is shuffled before a batch is cut) until it has B x G, idling only when none is ready. Returns the wall
        seconds it idled and each sample's lag."""
        waited, lags = 0.0, []
        while len(lags) < self.s.batch:
            if not self.queue:
                t0 = time.time()
                await self._wait_change()
                waited += time.time() - t0
                continue
            need = self.s.batch - len(lags)
            ready = list(self.queue)
            chosen = set(self.rng_pick.sample(range(len(ready)), need)) if len(ready) > need else set(range(len(ready)))
            self.queue = deque(item for i, item in enumerate(ready) if i not in chosen)
            lags.extend(self.version - ready[i][1] for i in sorted(chosen))
            self._notify()
            await asyncio.sleep(self._per_sample_s() * len(chosen) * self.s.time_scale)
        return waited, lags

    # -- slime's step ----------------------------------------------------------------------------------
    def _slime_group_end(self, step: int, samples: list[tuple[float, int]]) -> None:
        """A group of the open step ended: kept (it holds an accepted sample) until B are, then the step's other
        rollouts are killed; filtered otherwise, and another round is allowed when fewer than B remain."""
        prompts = self.s.prompts
        if step not in (self.step_open, self.step_open + 1) or self.slime_kept.get(step, 0) >= prompts:
            return  # a late finisher of a step that already has its groups: discarded, as slime does
        if samples:
            self.slime_kept[step] = self.slime_kept.get(step, 0) + 1
            self.queue.extend(samples)
            if self.slime_kept[step] == prompts:
                if self.s.partial_rollout:
                    self._slime_carry(step)
                elif self.kill is not None:
                    self.kill(step)
            return
        self.slime_filtered[step] = self.slime_filtered.get(step, 0) + 1
        submitted = self.slime_allowed.get(step, self.s.slime_round) // max(1, self.s.group_size)
        if submitted - self.slime_filtered[step] < prompts:
            self.slime_allowed[step] = self.slime_allowed.get(step, self.s.slime_round) + self.s.slime_round

    def _slime_carry(self, step: int) -> None:
        """Partial rollout: the step's unfinished rollouts are aborted at the inference server and resume first in
        the next step (their groups count in its round), holding their sandboxes; their generation stands still
        until that step opens."""
        carried = [ticket for ticket in self.slime_live.values() if ticket.step == step]
        for ticket in carried:
            ticket.step = step + 1
        groups = {ticket.group for ticket in carried}
        self.step_dispatched[step + 1] = len(groups) * max(1, self.s.group_size)
        self.pauses.append((time.time(), math.inf))

    # -- prime-rl's orchestrator -----------------------------------------------------------------------
    def _load(self, version: int) -> None:
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
                self.counts["stale"] += 1
                self.permits += max(1, self.s.group_size)
                if self.kill is not None:
                    self.kill(group)
        self._notify()

    async def _prime_orchestrator(self) -> None:
        """Batch n is built from finished groups once the policy of step n - max_async_level is loaded (the
        newest checkpoint, or exactly that one when strict); each consumed group frees G rollouts to start."""
        n = 0
        while not self.done.is_set():
            needed = max(n - self.s.max_async_level, 0)
            while self.version < needed:
                await self._wait_change()
            self._load(needed if self.s.strict_async_level else max(needed, self.version))
            batch: list[tuple[float, int]] = []
            while len(batch) < self.s.batch:
                if not self.finished_groups:
                    await self._wait_change()
                    continue
                batch.extend(self.finished_groups.popleft())
                self.permits += max(1, self.s.group_size)
                self._notify()
            self.batches.append((n, batch))
            self._notify()
            n += 1
