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
therefore one engine (a local run). Each mode's rules are an `AdmissionPolicy` told the `TrainerState` it shares
with the trainer (trainer_policy.py: the interface, async and sync; trainer_frameworks.py: the four frameworks).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from harness.engine.trainer_frameworks import PipelineRLPolicy, PrimeRLPolicy, SlimePolicy, VerlPolicy
from harness.engine.trainer_policy import AdmissionPolicy, AsyncPolicy, SyncPolicy, TrainerState
from harness.engine.trainer_settings import Ticket, TrainerSettings, seeded_uniform

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

POLICIES: dict[str, type[AdmissionPolicy]] = {
    "async": AsyncPolicy,
    "sync": SyncPolicy,
    "prime-rl": PrimeRLPolicy,
    "slime": SlimePolicy,
    "verl": VerlPolicy,
    "pipelinerl": PipelineRLPolicy,
}


class TrainerEmulator:
    """The trainer's loop, its records and the engine's view of it; what the generator may do and what a batch
    holds is its mode's `AdmissionPolicy`, told the `TrainerState` they share."""

    def __init__(
        self, settings: TrainerSettings, out_dir: Path, worker: str, kill: Callable[[int], None] | None = None
    ) -> None:
        if settings.mode not in POLICIES:
            raise ValueError(f"unknown trainer mode {settings.mode!r}: one of {', '.join(POLICIES)}")
        self.s = settings
        self.out_dir = out_dir
        self.worker = worker
        # kill: sync and slime cancel the rest of a step, prime-rl an over-age group (the engine's)
        self.state = TrainerState(settings, kill=kill)
        self.policy = POLICIES[settings.mode](self.state)
        self.steps: list[dict[str, Any]] = []
        self.ok_times: list[float] = []  # epoch seconds each successful rollout finished
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def counts(self) -> dict[str, int]:
        return self.state.counts

    @property
    def done(self) -> asyncio.Event:
        """Set once the rehearsal is over (every step trained, or closed)."""
        return self.state.done

    @property
    def pauses_inference(self) -> bool:
        """Weight updates stand in-flight generation still (PipelineRL; verl with partial_rollout; slime's carry)."""
        return self.policy.pauses_inference

    def inference_pauses(self, t0: float, t1: float) -> tuple[float, float | None]:
        """Seconds within [t0, t1] the inference servers stood still for a weight update, and when one under way
        at t1 ends (one whose end is not known yet, slime's until the next step opens: look again shortly)."""
        paused, resume = 0.0, None
        for start, end in reversed(self.state.pauses):
            if end <= t0:
                break
            paused += max(0.0, min(end, t1) - max(start, t0))
            if start <= t1 < end:
                resume = end if end != math.inf else t1 + 0.02
        return paused, resume

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._train_loop())]
        self._tasks += [loop.create_task(side_loop) for side_loop in self.policy.side_loops()]

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
        self.state.notify()
        await self.stop()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass

    # -- the generator side ----------------------------------------------------------------------------
    async def admit(self) -> Ticket:
        """Before a rollout starts: wait until the trainer lets the generator dispatch it."""
        while True:
            if self.done.is_set():
                raise asyncio.CancelledError  # the rehearsal is over: no more rollouts
            if self.policy.gate():
                break
            await self.state.wait_change()
        self.state.seq += 1
        self.counts["dispatched"] += 1
        return self.policy.ticket()

    def finished(self, ticket: Ticket, outcome: str, killed: bool = False) -> None:
        """A rollout's last attempt ended: an accepted success becomes a sample for the trainer."""
        now = time.time()
        if killed:
            self.counts["killed"] += 1
        elif outcome == "ok":
            self.counts["ok"] += 1
            self.ok_times.append(now)
            zero_advantage = seeded_uniform(self.s.seed, "group", ticket.group) < self.s.zero_advantage_groups
            filtered = seeded_uniform(self.s.seed, "sample", ticket.seq) < self.s.filtered_samples
            if zero_advantage or filtered:
                self.counts["filtered"] += 1
            else:
                self.policy.accept(ticket, (now, ticket.version))
        else:
            self.counts["failed" if outcome == "failed" else "cancelled"] += 1
        self.policy.ended(ticket)
        self.state.notify()

    # -- the trainer side ------------------------------------------------------------------------------
    async def _train_loop(self) -> None:
        total = self.s.warmup_steps + self.s.steps
        for step in range(total):
            t_wait = time.time()
            stale_before = self.counts["stale"]
            take, lags, t_ready = await self.policy.gather(t_wait)
            self.counts["consumed"] += take
            drained = await self.policy.sync_weights()
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
            self.state.version += 1
            self.policy.trained()
            self.state.notify()
        self.done.set()
        self.state.notify()

    # -- results ---------------------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """Measured over the steps after warm-up; rates in samples per vendor second (wall / time scale)."""
        measured = [row for row in self.steps if row["measured"]]
        result: dict[str, Any] = {
            "settings": self.s.to_dict(),
            "counts": dict(self.counts),
            "steps_done": len(self.steps),
            "measured_steps": len(measured),
            "inference_pauses": len(self.state.pauses),
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
