"""The emulated trainer's admission policies: the state a policy shares with the trainer (`TrainerState`), the
interface every policy implements (`AdmissionPolicy`), and the two generic ones (async, sync). The frameworks'
own policies (verl, PipelineRL, slime, prime-rl) are in trainer_frameworks.py.

A policy is told the trainer's state, not inherited into it: what it reads and writes is declared here, and the
trainer (trainer.py) asks it through these hooks only."""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from harness.engine.trainer_settings import Ticket, TrainerSettings

Sample = tuple[float, int]  # an accepted sample: (t_ready epoch, policy version at dispatch)

COUNTS = ("dispatched", "ok", "failed", "cancelled", "killed", "filtered", "stale", "consumed")


@dataclass(eq=False)
class TrainerState:
    """What the trainer and its admission policy share: the policy versions trained, the rollouts dispatched, the
    ready samples, the counts, the weight updates that stood generation still, and the events both wait on."""

    s: TrainerSettings
    kill: Callable[[int], None] | None = None  # the engine's: cancel the rollouts of a step (prime-rl: of a group)
    version: int = 0  # steps trained: the trainer's policy version
    seq: int = 0  # rollouts dispatched
    queue: deque[Sample] = field(default_factory=deque)  # accepted samples ready for the trainer
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))
    pauses: list[tuple[float, float]] = field(default_factory=list)  # (start, end) wall epoch s; end inf: not known
    done: asyncio.Event = field(default_factory=asyncio.Event)  # the rehearsal is over
    changed: asyncio.Event = field(default_factory=asyncio.Event)  # replaced at each notify

    def notify(self) -> None:
        """Something changed: every waiter looks again."""
        self.changed.set()
        self.changed = asyncio.Event()

    async def wait_change(self) -> None:
        await self.changed.wait()

    def cancel_rollouts(self, key: int) -> None:
        """Ask the engine to cancel the rollouts still running of a step (prime-rl: of a group)."""
        if self.kill is not None:
            self.kill(key)


class Groups:
    """A group's samples reach the trainer together, when its last member ended (advantages are computed over the
    whole group), so a straggler holds back its siblings' samples."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.ended: dict[int, int] = {}  # members of an unfinished group that ended
        self.samples: dict[int, list[Sample]] = {}  # their accepted samples, held back

    def hold(self, group: int, sample: Sample) -> None:
        self.samples.setdefault(group, []).append(sample)

    def end(self, group: int) -> list[Sample] | None:
        """A member ended: the group's accepted samples once it was the last, else None."""
        ended = self.ended[group] = self.ended.get(group, 0) + 1
        if ended < self.size:
            return None
        del self.ended[group]
        return self.samples.pop(group, [])


class AdmissionPolicy(ABC):
    """One framework's rules over the generator (which rollout may start, with what ticket) and over the trainer's
    batches (when one is ready, what it holds, what a step costs). The defaults are the common case: a ticket
    carries the trainer's version, a group's samples are held until its last member ended and then queued, and a
    batch of B x G is cut from the ready queue and trained at the configured rate."""

    def __init__(self, state: TrainerState) -> None:
        self.state = state
        self.s = state.s
        self.groups = Groups(state.s.group_size)

    @property
    def pauses_inference(self) -> bool:
        """Weight updates stand in-flight generation still (the engine then asks the trainer's pauses)."""
        return False

    def side_loops(self) -> list[Coroutine[Any, Any, None]]:
        """Loops of its own the trainer runs beside its training loop (prime-rl's orchestrator)."""
        return []

    # -- the generator side ----------------------------------------------------------------------------
    @abstractmethod
    def gate(self) -> bool:
        """A rollout may start now (and is counted against the framework's limits), or the generator waits."""

    def group(self) -> int:
        """The group of the rollout just dispatched: G consecutive rollouts."""
        return (self.state.seq - 1) // max(1, self.s.group_size)

    def ticket(self) -> Ticket:
        """What the rollout just admitted (the state's `seq`) is dispatched with."""
        return Ticket(self.state.seq, self.state.version, self.state.version, self.group())

    def accept(self, ticket: Ticket, sample: Sample) -> None:
        """A rollout ended with an accepted sample."""
        self.groups.hold(ticket.group, sample)

    def ended(self, ticket: Ticket) -> None:
        """A rollout's last attempt ended (after `accept`, if its sample was accepted)."""
        samples = self.groups.end(ticket.group)
        if samples is not None:
            self.group_end(ticket, samples)

    def group_end(self, ticket: Ticket, samples: list[Sample]) -> None:
        """A group's last member ended: its accepted samples reach the trainer."""
        self.state.queue.extend(samples)

    # -- the trainer side ------------------------------------------------------------------------------
    def batch_ready(self) -> bool:
        return len(self.state.queue) >= self.s.batch

    def take_batch(self) -> tuple[int, list[int]]:
        """A ready batch: how many samples it holds and each one's lag in policy versions."""
        queue, version = self.state.queue, self.state.version
        take = min(self.s.batch, len(queue))
        return take, [version - queue.popleft()[1] for _ in range(take)]

    def train_seconds(self, samples: int) -> float:
        """Vendor seconds the step on this batch trains (and syncs, unless the policy syncs on its own)."""
        return self.s.train_seconds(samples)

    async def gather(self, t_wait: float) -> tuple[int, list[int], float]:
        """Wait for a batch and train on it: its samples, their lags and when it was complete (wall epoch s)."""
        while not self.batch_ready():
            await self.state.wait_change()
        t_ready = time.time()
        take, lags = self.take_batch()
        await asyncio.sleep(self.train_seconds(take) * self.s.time_scale)
        return take, lags, t_ready

    async def sync_weights(self) -> float:
        """After a step's training: a weight sync of the policy's own; returns the wall seconds the trainer waited
        for the generator first (idle time)."""
        return 0.0

    def trained(self) -> None:
        """The step was trained and the state's version raised."""


class AsyncPolicy(AdmissionPolicy):
    """Async (PipelineRL / prime-rl style, generic): rollouts start freely unless `async_level` steps' worth of
    samples already wait; at consumption samples older than `max_off_policy_steps` versions are dropped as stale."""

    def gate(self) -> bool:
        return self.s.async_level <= 0 or len(self.state.queue) < self.s.async_level * self.s.batch

    def batch_ready(self) -> bool:
        self.drop_stale()
        return super().batch_ready()

    def drop_stale(self) -> int:
        queue, version = self.state.queue, self.state.version
        dropped = 0
        while queue and version - queue[0][1] > self.s.max_off_policy_steps:
            queue.popleft()
            dropped += 1
        self.state.counts["stale"] += dropped
        return dropped


class SyncPolicy(AdmissionPolicy):
    """Sync: the rollouts of step n start only once step n-1 is trained; `batch x oversampling` are dispatched per
    step, and with `kill_unfinished` the rest are cancelled once `batch` accepted samples are in. Samples are
    queued as they come (no group holds them back)."""

    def __init__(self, state: TrainerState) -> None:
        super().__init__(state)
        self.step_open = 0  # the step whose rollouts may start
        self.step_dispatched: dict[int, int] = {}
        self.step_ended: dict[int, int] = {}
        self.step_accepted: dict[int, int] = {}

    def gate(self) -> bool:
        step = self.step_open
        if self.step_dispatched.get(step, 0) >= self.s.dispatch_per_step:
            return False
        self.step_dispatched[step] = self.step_dispatched.get(step, 0) + 1
        return True

    def ticket(self) -> Ticket:
        return Ticket(self.state.seq, self.state.version, self.step_open, self.group())

    def accept(self, ticket: Ticket, sample: Sample) -> None:
        self.state.queue.append(sample)
        accepted = self.step_accepted[ticket.step] = self.step_accepted.get(ticket.step, 0) + 1
        if self.s.kill_unfinished and accepted == self.s.batch:
            self.state.cancel_rollouts(ticket.step)

    def ended(self, ticket: Ticket) -> None:
        self.step_ended[ticket.step] = self.step_ended.get(ticket.step, 0) + 1

    def batch_ready(self) -> bool:
        step = self.step_open
        accepted = self.step_accepted.get(step, 0)
        dispatched = self.step_dispatched.get(step, 0)
        all_ended = dispatched >= self.s.dispatch_per_step and self.step_ended.get(step, 0) >= dispatched
        return accepted >= self.s.batch or (all_ended and accepted > 0)

    def trained(self) -> None:
        self.state.cancel_rollouts(self.step_open)  # anything of the trained step still running is no longer needed
        self.step_open += 1
