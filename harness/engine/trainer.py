"""An emulated RL trainer inside the engine: what `stampede rehearse` measures for real.

The trainer consumes finished rollouts as samples, trains one step on `batch` of them at its configured
rate, and records when it waits for the generator. It also governs the generator the way RL frameworks do:
- async (PipelineRL / prime-rl style): rollouts start freely, unless `async_level` steps' worth of finished
  samples already wait (backpressure); a group's samples wait until its last member ended; at consumption,
  samples older than `max_off_policy_steps` policy versions are dropped as stale;
- prime-rl (its Scheduler @02b49f9, docs/rl-frameworks.md): `oversampling x batch / G` groups in flight, a group
  replaced only when it is consumed into a batch; batch n is built only once the policy of step n -
  `max_async_level` is loaded (the newest checkpoint, or exactly that one with `strict_async_level`); at each
  weight update a group that has survived more than `max_off_policy_steps` of them is cancelled and replaced;
- slime (generate_rollout_async @0044b40): step n dispatches a round of ceil(oversampling x B) groups; a group
  without an accepted sample is filtered and, when fewer than B remain, another round may start; at B kept groups
  the step's other rollouts are killed and it trains on the kept groups' samples;
- verl (FullyAsyncRollouter @01217507): up to `max_groups` groups in flight; a new group starts only while fewer
  than int(B x (1 + staleness_threshold) x T) groups were dispatched since the last sync (reset then to those in
  flight and queued) and fewer than that many wait; the trainer takes B finished groups per step and every
  T = trigger_parameter_sync_step steps syncs: with partial_rollout in-flight generation stands still for the sync,
  without it the trainer first waits until no group is in flight;
- pipelinerl (actor.py @005a1f17): up to `max_groups` groups in flight, at most ceil(max_lag / G) + (updates + 1)
  x B submitted when max_lag is set; the trainer takes B x G ready samples in random order; without max_lag ready
  samples beyond `ring_buffer_size` are dropped oldest first while it trains; each weight broadcast stands
  in-flight generation still (the rollouts go on with the new weights);
- sync: the rollouts of step n start only once step n-1 is trained; `batch x oversampling` are dispatched per
  step, and with `kill_unfinished` the rest are cancelled once `batch` accepted samples are in.
Acceptance losses are emulated: whole groups (G consecutive rollouts) dropped as zero-advantage, and single
samples filtered. All trainer times are in vendor seconds, played at the run's time scale.

It runs in the engine because only there are completions known exactly when they happen; a rehearsal is
therefore one engine (a local run).
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from harness.engine.trainer_frameworks import FrameworkPolicies
from harness.engine.trainer_settings import SLIME_GROUPS_PER_STEP, Ticket, TrainerSettings, seeded_uniform

STEP_SCHEMA = pa.schema(
    [
        ("step", pa.int32()),
        ("measured", pa.bool_()),
        ("t_wait_start", pa.float64()),  # epoch s: the trainer became free and asked for a batch
        ("t_batch_ready", pa.float64()),  # epoch s: the batch was complete (the wait ended)
        ("t_end", pa.float64()),  # epoch s: training (and weight sync) done
        ("wait_s", pa.float64()),  # wall seconds
        ("train_s", pa.float64()),  # wall seconds
        ("samples", pa.int32()),
        ("stale_dropped", pa.int32()),  # samples dropped as too old while gathering this batch
        ("mean_lag", pa.float64()),  # policy versions between dispatch and consumption, over the batch
    ]
)


class TrainerEmulator(FrameworkPolicies):
    def __init__(
        self, settings: TrainerSettings, out_dir: Path, worker: str, kill: Callable[[int], None] | None = None
    ) -> None:
        self.s = settings
        self.out_dir = out_dir
        self.worker = worker
        self.version = 0
        self.seq = 0
        self.queue: deque[tuple[float, int]] = deque()  # (t_ready epoch, version at dispatch) of accepted samples
        self.changed = asyncio.Event()
        self.done = asyncio.Event()
        self.steps: list[dict[str, Any]] = []
        self.counts = {
            "dispatched": 0,
            "ok": 0,
            "failed": 0,
            "cancelled": 0,
            "killed": 0,
            "filtered": 0,
            "stale": 0,
            "consumed": 0,
        }
        self.ok_times: list[float] = []  # epoch seconds each successful rollout finished
        self.step_open = 0  # sync: the step whose rollouts may start
        self.step_dispatched: dict[int, int] = {}
        self.step_ended: dict[int, int] = {}
        self.step_accepted: dict[int, int] = {}
        self.group_ended: dict[int, int] = {}  # async: members of an unfinished group that ended
        self.group_samples: dict[int, list[tuple[float, int]]] = {}  # async: their accepted samples, held back
        # prime-rl: rollouts the generator may still start (a consumed group gives its G back), the policy the
        # generator has loaded, in-flight groups' weight updates survived, finished groups, built batches
        self.permits = settings.groups_in_flight * max(1, settings.group_size) if settings.mode == "prime-rl" else 0
        self.loaded = 0
        self.live_groups: dict[int, int] = {}
        self.cancelled_groups: set[int] = set()
        self.finished_groups: deque[list[tuple[float, int]]] = deque()
        self.batches: deque[tuple[int, list[tuple[float, int]]]] = deque()
        # slime: rollouts a step may dispatch (a round more per refill), its kept and filtered groups
        self.slime_allowed: dict[int, int] = {}
        self.slime_kept: dict[int, int] = {}
        self.slime_filtered: dict[int, int] = {}
        self.slime_live: dict[int, Ticket] = {}  # partial rollout: what a step carries into the next
        # verl, pipelinerl: groups in flight, finished groups (verl) or ready samples (pipelinerl), the budget spent,
        # and the weight updates that stood in-flight generation still (wall epoch seconds)
        self.pool_inflight = 0
        self.pool_started = 0  # groups started
        self.pool_spent = 0  # verl's staleness_samples
        self.syncing = False
        self.pauses: list[tuple[float, float]] = []
        self.rng_pick = random.Random(settings.seed)
        self.kill = kill  # sync: cancel the rest of a step; prime-rl: an over-age group (the engine's)
        self._task: asyncio.Task[None] | None = None
        self._orchestrator: asyncio.Task[None] | None = None

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._train_loop())
        if self.s.mode == "prime-rl":
            self._orchestrator = loop.create_task(self._prime_orchestrator())

    async def admit_or_none(self) -> Ticket | None:
        """The admission policy the engine asks before each rollout: a ticket, or None once the rehearsal is over."""
        if self.done.is_set():
            return None
        waiter = asyncio.ensure_future(self.admit())
        done = asyncio.ensure_future(self.done.wait())
        try:
            finished, _ = await asyncio.wait({waiter, done}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            done.cancel()
        if waiter not in finished:
            waiter.cancel()
            return None
        return waiter.result()

    async def close(self) -> None:
        """No more admissions (waiting requests hear the rehearsal is over), and the training loop stops."""
        self.done.set()
        self._notify()
        await self.stop()

    async def stop(self) -> None:
        for task in (self._task, self._orchestrator):
            if task is not None:
                task.cancel()
                try:
                    await task
                except (asyncio.CancelledError, Exception):
                    pass

    def _notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    async def _wait_change(self) -> None:
        event = self.changed
        await event.wait()

    # -- the generator side ----------------------------------------------------------------------------
    async def admit(self) -> Ticket:
        """Before a rollout starts: wait until the trainer lets the generator dispatch it."""
        while True:
            if self.done.is_set():
                raise asyncio.CancelledError  # the rehearsal is over: no more rollouts
            if self.s.mode == "sync":
                step = self.step_open
                if self.step_dispatched.get(step, 0) < self.s.dispatch_per_step:
                    self.step_dispatched[step] = self.step_dispatched.get(step, 0) + 1
                    break
            elif self.s.mode == "prime-rl":
                if self.permits > 0:
                    self.permits -= 1
                    break
            elif self.s.mode == "slime":
                step = self.step_open
                if self.step_dispatched.get(step, 0) < self.slime_allowed.setdefault(step, self.s.slime_round):
                    self.step_dispatched[step] = self.step_dispatched.get(step, 0) + 1
                    break
            elif self.s.mode in ("verl", "pipelinerl"):
                if self._pool_admits():
                    step = self.loaded if self.s.mode == "verl" else self.version
                    break
            elif self.s.async_level <= 0 or len(self.queue) < self.s.async_level * self.s.batch:
                step = self.version
                break
            await self._wait_change()
        self.seq += 1
        self.counts["dispatched"] += 1
        group = (self.seq - 1) // max(1, self.s.group_size)
        if self.s.mode == "slime":  # groups count within their step (a step may close before its last dispatch)
            group = step * SLIME_GROUPS_PER_STEP + (self.step_dispatched[step] - 1) // max(1, self.s.group_size)
        if self.s.mode == "prime-rl":
            self.live_groups.setdefault(group, 0)
            return Ticket(self.seq, self.loaded, group, group)  # its "step" is its group: what a cancel names
        if self.s.mode == "verl":
            return Ticket(self.seq, self.loaded, step, group)
        ticket = Ticket(self.seq, self.version, step, group)
        if self.s.mode == "slime":
            self.slime_live[ticket.seq] = ticket
        return ticket

    def finished(self, ticket: Ticket, outcome: str, killed: bool = False) -> None:
        """A rollout's last attempt ended: an accepted success becomes a sample in the trainer's queue."""
        now = time.time()
        self.slime_live.pop(ticket.seq, None)
        self.step_ended[ticket.step] = self.step_ended.get(ticket.step, 0) + 1
        if killed:
            self.counts["killed"] += 1
        elif outcome == "ok":
            self.counts["ok"] += 1
            self.ok_times.append(now)
            zero_advantage = seeded_uniform(self.s.seed, "group", ticket.group) < self.s.zero_advantage_groups
            filtered = seeded_uniform(self.s.seed, "sample", ticket.seq) < self.s.filtered_samples
            if zero_advantage or filtered:
                self.counts["filtered"] += 1
            elif self.s.mode != "sync":
                self.group_samples.setdefault(ticket.group, []).append((now, ticket.version))
            else:
                self.queue.append((now, ticket.version))
                self.step_accepted[ticket.step] = self.step_accepted.get(ticket.step, 0) + 1
                if (
                    self.s.mode == "sync"
                    and self.s.kill_unfinished
                    and self.step_accepted[ticket.step] == self.s.batch
                    and self.kill is not None
                ):
                    self.kill(ticket.step)
        else:
            self.counts["failed" if outcome == "failed" else "cancelled"] += 1
        if self.s.mode != "sync":
            # a group's samples reach the trainer together, when its last member ended (advantages are computed
            # over the whole group), so a straggler holds back its siblings' samples
            ended = self.group_ended[ticket.group] = self.group_ended.get(ticket.group, 0) + 1
            if ended >= self.s.group_size:
                del self.group_ended[ticket.group]
                samples = self.group_samples.pop(ticket.group, [])
                if self.s.mode == "async":
                    self.queue.extend(samples)
                elif self.s.mode == "slime":
                    self._slime_group_end(ticket.step, samples)
                elif self.s.mode == "verl":
                    self.pool_inflight -= 1
                    self.finished_groups.append(samples)
                elif self.s.mode == "pipelinerl":
                    self.pool_inflight -= 1
                    self.queue.extend(samples)
                    self._trim_ring_buffer()
                elif ticket.group in self.cancelled_groups:
                    self.cancelled_groups.discard(ticket.group)
                else:
                    self.live_groups.pop(ticket.group, None)
                    self.finished_groups.append(samples)
        self._notify()

    def _take_batch(self) -> tuple[int, list[int]]:
        """A ready batch off the queue: how many samples it holds and each one's lag in policy versions."""
        if self.s.mode == "prime-rl":
            index, built = self.batches.popleft()
            return len(built), [index - version for _, version in built]
        if self.s.mode == "verl":  # B finished groups
            picked = [sample for _ in range(self.s.prompts) for sample in self.finished_groups.popleft()]
            self._notify()
            return len(picked), [self.version - version for _, version in picked]
        take = len(self.queue) if self.s.mode == "slime" else min(self.s.batch, len(self.queue))  # slime: every kept
        return take, [self.version - self.queue.popleft()[1] for _ in range(take)]

    # -- the trainer side ------------------------------------------------------------------------------
    def _batch_ready(self) -> bool:
        if self.s.mode == "sync":
            step = self.step_open
            accepted = self.step_accepted.get(step, 0)
            dispatched = self.step_dispatched.get(step, 0)
            all_ended = dispatched >= self.s.dispatch_per_step and self.step_ended.get(step, 0) >= dispatched
            return accepted >= self.s.batch or (all_ended and accepted > 0)
        if self.s.mode == "prime-rl":
            return bool(self.batches)
        if self.s.mode == "slime":
            return self.slime_kept.get(self.step_open, 0) >= self.s.prompts
        if self.s.mode == "verl":
            return len(self.finished_groups) >= self.s.prompts
        self._drop_stale()
        return len(self.queue) >= self.s.batch

    def _drop_stale(self) -> int:
        dropped = 0
        while self.queue and self.version - self.queue[0][1] > self.s.max_off_policy_steps:
            self.queue.popleft()
            dropped += 1
        self.counts["stale"] += dropped
        return dropped

    async def _train_loop(self) -> None:
        total = self.s.warmup_steps + self.s.steps
        for step in range(total):
            t_wait = time.time()
            stale_before = self.counts["stale"]
            if self.s.mode == "pipelinerl":  # it streams: waits for and trains on samples as they come
                waited, lags = await self._stream_step()
                take, t_ready = len(lags), t_wait + waited
            else:
                while not self._batch_ready():
                    await self._wait_change()
                t_ready = time.time()
                take, lags = self._take_batch()
                train = self._per_sample_s() * self.s.batch if self.s.mode == "verl" else self.s.train_seconds(take)
                await asyncio.sleep(train * self.s.time_scale)  # verl's weight sync is its own, below
            self.counts["consumed"] += take
            drained = 0.0
            if self.s.mode == "pipelinerl" or (
                self.s.mode == "verl" and (self.version + 1) % self.s.trigger_parameter_sync_step == 0
            ):
                drained = await self._sync_weights(self.version + 1)  # the weights of the step just trained
            t_end = time.time()
            self.steps.append(
                {
                    "step": step,
                    "measured": step >= self.s.warmup_steps,
                    "t_wait_start": t_wait,
                    "t_batch_ready": t_ready,
                    "t_end": t_end,
                    "wait_s": t_ready - t_wait + drained,
                    "train_s": t_end - t_ready - drained,
                    "samples": take,
                    "stale_dropped": self.counts["stale"] - stale_before,
                    "mean_lag": sum(lags) / len(lags) if lags else 0.0,
                }
            )
            self.version += 1
            if self.s.mode == "prime-rl" and not self.s.strict_async_level:
                self._load(self.version)  # the orchestrator's policy loop picks up the newest checkpoint
            if self.s.mode in ("sync", "slime"):
                if self.kill is not None:
                    self.kill(self.step_open)  # anything of the trained step still running is no longer needed
                self.step_open += 1
                if self.pauses and self.pauses[-1][1] == math.inf:  # the carried rollouts resume
                    self.pauses[-1] = (self.pauses[-1][0], time.time())
            self._notify()
        self.done.set()
        self._notify()

    # -- results ---------------------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """Measured over the steps after warm-up; rates in samples per vendor second (wall / time scale)."""
        measured = [row for row in self.steps if row["measured"]]
        result: dict[str, Any] = {
            "settings": self.s.to_dict(),
            "counts": dict(self.counts),
            "steps_done": len(self.steps),
            "measured_steps": len(measured),
            "inference_pauses": len(self.pauses),
        }
        if not measured:
            return result
        t0, t1 = measured[0]["t_wait_start"], measured[-1]["t_end"]
        wall = t1 - t0
        scale = self.s.time_scale
        wait = sum(row["wait_s"] for row in measured)
        produced = sum(1 for t in self.ok_times if t0 <= t < t1)
        consumed = sum(row["samples"] for row in measured)
        lags = [row["mean_lag"] for row in measured]
        result.update(
            {
                "window_wall_s": wall,
                "generator_samples_per_s": produced / wall * scale,
                "trainer_samples_per_s": consumed / wall * scale,
                "trainer_idle_ratio": wait / wall,
                "step_time_s": wall / len(measured) / scale,
                "mean_staleness_steps": sum(lags) / len(lags),
                "time_scale": scale,
            }
        )
        return result

    def write(self) -> dict[str, Any]:
        """The steps as `trainer/trainer-<worker>.parquet`: the run folder's table folder for this table (v2)."""
        table_dir = self.out_dir / "trainer"
        table_dir.mkdir(parents=True, exist_ok=True)
        steps = pa.Table.from_pylist(self.steps, schema=STEP_SCHEMA)
        pq.write_table(steps, table_dir / f"trainer-{self.worker}.parquet")
        return self.summary()


__all__ = ["Ticket", "TrainerEmulator", "TrainerSettings"]
