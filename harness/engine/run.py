"""One configured run inside the engine: the provider, the plan, the shard writer, live sandboxes, counters.

Admission is a policy asked before each rollout: by default every request runs at once; under `stampede
rehearse` the emulated trainer (`harness.engine.trainer`) admits rollouts as its RL framework would.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import math
import os
import sys
import time
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from foundation.quantiles import nearest_rank_index
from foundation.sandbox_client import client_named
from harness.engine.health import LoopHealth
from harness.engine.outage_gate import OutageGate
from harness.engine.paced_cancel import CancelPacer
from harness.engine.phase_watchdog import PhaseWatchdog
from harness.engine.rollout import RolloutCancelled, RolloutContext, SandboxRegistry, run_rollout
from harness.engine.script_rollout import run_script_rollout
from harness.engine.shards import ShardWriter, safe_name
from harness.engine.submit_log import SubmitLog
from harness.engine.trainer import Ticket, TrainerEmulator, TrainerSettings
from harness.wire.live_metrics import RowMetrics
from harness.wire.messages import RECENT_WINDOW_S, EngineConfig, EngineStats, RolloutRequest, StageUpdate
from harness.wire.plan import RolloutPlan
from harness.wire.records import (
    OUTCOME_CANCELLED,
    OUTCOME_FAILED,
    OUTCOME_OK,
    RUN_IDENTITY_FIELDS,
    RolloutIdentity,
    RolloutRecord,
)
from harness.wire.redact import secret_values, short_error
from harness.wire.script_plan import ScriptPlan
from harness.wire.stage_counters import StageStats
from providers.base import INIT_FAILURE_KINDS, INIT_PHASES, Provider, SandboxRef

if TYPE_CHECKING:  # imported when --otlp-endpoint asks: the OpenTelemetry SDK stays off every other run's start
    from harness.engine.otlp_traces import RolloutTracer

ABORT_GRACE_S = 1.0  # aborted (a second Ctrl-C): how long cancelled rollouts get to end on their own
ABORT_DEADLINE_S = 10.0  # aborted: the whole drain (terminating leftovers, the label sweep) within this


class RehearsalOver(Exception):
    """The emulated trainer has all its steps: no more rollouts are admitted."""


class EngineRun:
    """One configured run: provider, plan, collector, live sandboxes and counters."""

    def __init__(self, config: EngineConfig, provider: Provider, health: LoopHealth) -> None:
        self.config = config
        self.provider = provider
        self.plan = RolloutPlan.from_dict(config.plan)
        self.script = ScriptPlan.from_dict(self.plan.script) if self.plan.script is not None else None
        # Every string this run writes or answers with is redacted against these (and credential shapes).
        self.secrets = (*config.secrets, *secret_values(config.provider_options))
        self.health = health
        self.writer = ShardWriter(config.run_dir, config.worker, flush_interval_s=config.flush_interval_s)
        self.submits = SubmitLog(
            config.run_dir,
            safe_name(config.worker),
            {**{name: getattr(config, name) for name in RUN_IDENTITY_FIELDS}, "pid": os.getpid()},
            rotate_s=config.flush_interval_s,
        )
        self.hurried = asyncio.Event()  # set by an abort: the drain gives rollouts no grace
        self.outage = OutageGate()  # one backoff for every create while the vendor refuses connections
        # the RL framework's client played around the provider (--client): its semaphore is this engine's
        self.client = client_named(self.plan.client) if self.plan.client != "none" else None
        self.starting = (
            asyncio.Semaphore(int(self.client.max_starting))
            if self.client is not None and math.isfinite(self.client.max_starting)
            else None
        )
        self.registry = SandboxRegistry(on_add=self._sandbox_acknowledged)
        self.tasks: dict[str, asyncio.Task[RolloutRecord]] = {}
        self.cancels = CancelPacer()
        self.watchdog = PhaseWatchdog()  # every rollout's vendor calls past their deadline, swept once a second
        self.versions = dict(provider.versions())
        self.sdk_version = ";".join(f"{name}={version}" for name, version in sorted(self.versions.items()))
        self.seq = 0
        self._id_prefix = f"{safe_name(config.worker)}-"  # once a run: a regex per rollout id showed in the profile
        self.inflight = 0
        self.peak_inflight = 0
        self.peak_live = 0
        self.started = 0
        self.outcomes: Counter[str] = Counter()
        self.recent: deque[tuple[float, float | None, bool]] = deque()
        self.stage_stats: dict[str, StageStats] = {}
        self.row_metrics = RowMetrics()  # the metrics port's histograms, from the same rows
        self.tracer = _tracer(config)  # --otlp-endpoint: a trace per row, built from the row
        self.accepting = True
        self._stage_update: StageUpdate | None = None
        self.t_start = time.time()
        self.trainer: TrainerEmulator | None = None
        self.tickets: dict[str, Ticket] = {}
        self.killed: set[str] = set()
        if config.trainer is not None:
            settings = TrainerSettings.from_dict(config.trainer)
            self.trainer = TrainerEmulator(settings, config.run_dir, config.worker, kill=self.kill_step)
            self.trainer.start()

    @property
    def stage(self) -> StageUpdate | None:
        """What leased rollouts record: the Locust side's current stage, as last told."""
        return self._stage_update

    @stage.setter
    def stage(self, update: StageUpdate | None) -> None:
        self._stage_update = update
        if update is not None:
            self.health.stages.switch(update.stage)

    def next_rollout_id(self) -> str:
        self.seq += 1
        return f"{self._id_prefix}{self.seq:07d}"

    def start(self, request: RolloutRequest) -> asyncio.Task[RolloutRecord]:
        """A rollout task: admitted by the emulated trainer when there is one, then run and recorded."""
        if self.trainer is None:
            return self._dispatch(request, None)
        return asyncio.get_running_loop().create_task(self._admitted(request))

    async def _admitted(self, request: RolloutRequest) -> RolloutRecord:
        assert self.trainer is not None
        ticket = await self.trainer.admit_or_none()
        if ticket is None:
            raise RehearsalOver()
        return await self._dispatch(request, ticket)

    def leased_request(self, lease: RolloutRequest) -> RolloutRequest:
        """The next rollout of a lease: the current stage (as last told), stamped now."""
        stage = self.stage
        return RolloutRequest(
            stage=stage.stage if stage is not None else lease.stage,
            target_users=stage.target_users if stage is not None else lease.target_users,
            t_intended=time.time(),
        )

    def kill_step(self, step: int) -> None:
        """Sync oversampling: the step has its samples; cancel its rollouts still running."""
        for rollout_id, ticket in list(self.tickets.items()):
            task = self.tasks.get(rollout_id)
            if ticket.step == step and task is not None and not task.done():
                self.killed.add(rollout_id)
                task.cancel()

    def _dispatch(self, request: RolloutRequest, ticket: Ticket | None) -> asyncio.Task[RolloutRecord]:
        rollout_id = self.next_rollout_id()
        if self._stage_update is None:  # no stage told (one-off requests): the requests name it
            self.health.stages.switch(request.stage)
        if ticket is not None:
            self.tickets[rollout_id] = ticket
        self.inflight += 1
        self.started += 1
        self.peak_inflight = max(self.peak_inflight, self.inflight)
        identity = RolloutIdentity(
            run_id=self.config.run_id,
            worker=self.config.worker,
            rollout_id=rollout_id,
            provider=self.config.provider,
            profile=self.config.profile,
            scenario=self.config.scenario,
            stage=request.stage,
            target_users=request.target_users,
            inflight_at_submit=self.inflight,
            sdk_version=self.sdk_version,
            t_intended=request.t_intended,
            attempt=request.attempt,
        )
        self._write_ahead(identity)
        ctx = RolloutContext(
            identity=identity,
            secrets=self.secrets,
            loop_lag=self.health.lag_since,
            outage=self.outage,
            inference_pauses=self.trainer.inference_pauses if self.trainer and self.trainer.pauses_inference else None,
            client=self.client,
            starting=self.starting,
            give_up_at=self._budget_end(),
            on_step=self.writer.add_step if self.script is not None else None,
            on_record=self.record_row if self.script is not None else None,  # a fork group's copies
            watchdog=self.watchdog,
        )
        task = asyncio.get_running_loop().create_task(self._run_and_record(ctx))
        self.tasks[rollout_id] = task
        return task

    async def _run_and_record(self, ctx: RolloutContext) -> RolloutRecord:
        """Every attempt is kept whatever happens to it (done, failed, cancelled, or our own bug).

        Init failures (the sandbox never became usable) are retried up to `plan.retries` times, as an RL
        generator's retry policy would; each attempt is its own row, numbered by `attempt`.
        """
        outcome = "cancelled"  # what the rollout came to, for the emulated trainer
        backoff_s = self.plan.retry_backoff_s * self.plan.time_scale
        try:
            while True:
                record = await self._attempt(ctx)
                self.record_row(record)
                outcome = record.outcome
                if not self._retryable(record) or ctx.identity.attempt > self.plan.retries:
                    return record
                if ctx.give_up_at is not None and time.monotonic() + backoff_s >= ctx.give_up_at:
                    return record  # the client's init budget is spent: no attempt left to make
                identity = dataclasses.replace(
                    ctx.identity, attempt=ctx.identity.attempt + 1, inflight_at_submit=self.inflight
                )
                ctx = dataclasses.replace(ctx, identity=identity)
                self._write_ahead(identity)
                await asyncio.sleep(backoff_s)
        finally:
            rollout_id = ctx.identity.rollout_id
            self.tasks.pop(rollout_id, None)
            self.inflight -= 1
            self._stage(ctx.identity.stage).ended += 1
            ticket = self.tickets.pop(rollout_id, None)
            if ticket is not None and self.trainer is not None:
                killed = rollout_id in self.killed
                self.killed.discard(rollout_id)
                self.trainer.finished(ticket, outcome, killed)

    async def _attempt(self, ctx: RolloutContext) -> RolloutRecord:
        try:
            if self.script is not None:
                return await run_script_rollout(
                    self.provider, self.plan, ctx, self.writer.add_op, self.registry, self.script
                )
            return await run_rollout(self.provider, self.plan, ctx, self.writer.add_op, self.registry)
        except RolloutCancelled as cancelled:
            if ctx.identity.rollout_id in self.killed:
                cancelled.record.error = "killed: the step already had its samples (oversampling)"
            return cancelled.record
        except Exception as exc:  # a bug of ours: recorded as `harness`, never a crash
            record = ctx.new_record()
            record.outcome, record.failure_kind, record.failure_phase = OUTCOME_FAILED, "harness", "create"
            record.error = short_error(exc, self.secrets)
            return record

    def _budget_end(self) -> float | None:
        """Monotonic end of the client's init budget for a rollout submitted now (None: no budget)."""
        if self.client is None or not math.isfinite(self.client.init_budget_s):
            return None
        return time.monotonic() + self.client.init_budget_s * self.plan.time_scale

    def _write_ahead(self, identity: RolloutIdentity) -> None:
        """The attempt on disk before its first vendor call: its identity (the run's part is each segment's header)."""
        self.submits.submitted(identity.rollout_id, identity.attempt, identity.submit_fields())

    def _sandbox_acknowledged(self, ref: SandboxRef, rollout_id: str) -> None:
        self.submits.created(rollout_id, ref.sandbox_id)

    def hurry(self) -> None:
        """Aborted: the drain (now or to come) gives rollouts no grace and bounds itself to ABORT_DEADLINE_S."""
        self.hurried.set()

    def _stage(self, name: str) -> StageStats:
        """This stage's live counters, made on first use (not `setdefault`: it builds two HDR histograms)."""
        stats = self.stage_stats.get(name)
        if stats is None:
            stats = self.stage_stats[name] = StageStats()
        return stats

    @staticmethod
    def _retryable(record: RolloutRecord) -> bool:
        return (
            record.outcome == OUTCOME_FAILED
            and record.failure_phase in INIT_PHASES
            and record.failure_kind in INIT_FAILURE_KINDS
        )

    def record_row(self, record: RolloutRecord) -> None:
        self._stage(record.stage).add(record.outcome, record.failure_kind, record.tti_s)
        self.row_metrics.observe(record)
        if self.tracer is not None:
            self.tracer.record(record)
        self.writer.add_rollout(record)
        self.outcomes[record.outcome] += 1
        self.peak_live = max(self.peak_live, len(self.registry))
        now = time.monotonic()
        self.recent.append((now, record.tti_s, record.outcome == OUTCOME_OK))
        while self.recent and self.recent[0][0] < now - RECENT_WINDOW_S:
            self.recent.popleft()

    def stats(self) -> EngineStats:
        recent_p50, recent_p99 = recent_quantiles([tti for _, tti, _ in self.recent if tti is not None], (0.5, 0.99))
        trainer = self.trainer
        return EngineStats(
            run_id=self.config.run_id,
            worker=self.config.worker,
            inflight=self.inflight,
            started=self.started,
            ok=self.outcomes[OUTCOME_OK],
            failed=self.outcomes[OUTCOME_FAILED],
            cancelled=self.outcomes[OUTCOME_CANCELLED],
            failures=self.row_metrics.failures_by_kind(),
            live_sandboxes=len(self.registry),
            peak_inflight=self.peak_inflight,
            recent_tti_p50_s=recent_p50,
            recent_tti_p99_s=recent_p99,
            recent_completed=len(self.recent),
            health=self.health.snapshot(),
            rows_written=self.writer.counts.rollouts,
            write_error=self.writer.error,
            stages={name: stats.to_wire() for name, stats in self.stage_stats.items()},
            metrics=self.row_metrics.to_wire(),
            trainer=None
            if trainer is None
            else {"steps_done": len(trainer.steps), "done": trainer.done.is_set(), **trainer.counts},
        )

    async def drain(self, timeout_s: float) -> dict[str, Any]:
        """Stop everything: cancel rollouts, terminate what they held, sweep the label, flush the shards."""
        self.accepting = False
        deadline = time.monotonic() + (min(timeout_s, ABORT_DEADLINE_S) if self.hurried.is_set() else timeout_s)
        rehearsal: dict[str, Any] | None = None
        if self.trainer is not None:  # no more admissions: waiting requests are told the rehearsal is over
            await self.trainer.close()
        tasks = list(self.tasks.values())
        for task in tasks:
            self.cancels.cancel(task)  # paced: one iteration unwinding thousands is a lag spike for the rest
        if tasks:
            deadline = await self._wait_for_rollouts(tasks, deadline)
        leftovers = self.registry.snapshot()
        terminate_errors = 0
        if leftovers:
            results = await _bounded_gather(
                [self.provider.terminate(ref) for ref in leftovers], max(1.0, deadline - time.monotonic())
            )
            for ref, result in zip(leftovers, results, strict=True):
                if isinstance(result, BaseException):
                    terminate_errors += 1
                else:
                    self.registry.discard(ref)
        reaped: int | None = None
        sweep_error: str | None = None
        try:
            async with asyncio.timeout(max(1.0, deadline - time.monotonic())):
                # this engine's leftovers only: in a distributed run the others are still working
                reaped = await self.provider.cleanup(self.config.run_id, self.config.worker)
        except Exception as exc:  # an unreachable vendor must not lose the results
            sweep_error = short_error(exc, self.secrets)
        await self.writer.close()
        self.submits.close()
        if self.tracer is not None:  # its last batches, off the loop and bounded; what was lost is said once
            lost = await asyncio.to_thread(self.tracer.close)
            if lost:
                print(lost, file=sys.stderr, flush=True)
        if self.trainer is not None:
            rehearsal = await asyncio.to_thread(self.trainer.write)
            await asyncio.to_thread(
                _write_json, self.config.run_dir / f"rehearsal-{safe_name(self.config.worker)}.json", rehearsal
            )
        health = self.health.snapshot()
        summary = {
            "worker": self.config.worker,
            "run_id": self.config.run_id,
            "started": self.started,
            "outcomes": dict(self.outcomes),
            "failures": self.row_metrics.failures_by_kind(),
            "unfinished_tasks": sum(1 for task in tasks if not task.done()),
            "aborted": self.hurried.is_set(),
            "submits_logged": self.submits.written,
            "submit_log_error": self.submits.error,
            "terminated_leftovers": len(leftovers) - terminate_errors,
            "terminate_errors": terminate_errors,
            "reaped_by_label": reaped,
            "sweep_error": sweep_error,
            "rows": {"rollouts": self.writer.counts.rollouts, "ops": self.writer.counts.ops},
            "results_error": self.writer.first_error,  # a write failed (disk full, read-only): rows were kept
            "rows_rescued_to": self.writer.rescued_to,  # rows the run folder never took, written here instead
            "peak_inflight": self.peak_inflight,
            "peak_live_sandboxes": self.peak_live,
            "versions": self.versions,
            "health": asdict(health),
            "stage_health": self.health.stages.summary(),
            "t_start": self.t_start,
            "t_end": time.time(),
            "rehearsal": rehearsal,
        }
        await asyncio.to_thread(
            _write_json, self.config.run_dir / f"engine-{safe_name(self.config.worker)}.json", summary
        )
        with contextlib.suppress(Exception):
            await self.provider.aclose()
        return summary

    async def _wait_for_rollouts(self, tasks: list[asyncio.Task[RolloutRecord]], deadline: float) -> float:
        """Until the cancelled rollouts ended (each terminates its own sandbox), or an abort cut the wait to
        ABORT_GRACE_S; returns the drain's deadline (an abort shortens it)."""
        hurried = asyncio.ensure_future(self.hurried.wait())
        all_ended = asyncio.ensure_future(asyncio.wait(tasks, timeout=max(1.0, deadline - time.monotonic())))
        try:
            await asyncio.wait({all_ended, hurried}, return_when=asyncio.FIRST_COMPLETED)
            if not all_ended.done():  # aborted while rollouts were still ending
                deadline = min(deadline, time.monotonic() + ABORT_DEADLINE_S)
                await asyncio.wait({all_ended}, timeout=ABORT_GRACE_S)
        finally:
            hurried.cancel()
            all_ended.cancel()
        return deadline


def recent_quantiles(values: list[float], qs: tuple[float, ...]) -> list[float | None]:
    """`nearest_rank(sorted(values), q)` for each q, the same values, without sorting them: the Locust side asks for
    the recent window's quantiles twice a second, and sorting 10 s of rows (24,000 at 64 in flight on the stub) took
    ~2.4 ms of the engine's loop each time; numpy's partition picks the same order statistics in a third of that."""
    if not values:
        return [None] * len(qs)
    import numpy as np  # pyarrow has imported it already

    ranks = [nearest_rank_index(len(values), q) for q in qs]
    picked = np.partition(np.array(values, dtype=np.float64), ranks)
    return [float(picked[rank]) for rank in ranks]


async def _bounded_gather(calls: list[Any], timeout_s: float) -> list[Any]:
    tasks = [asyncio.ensure_future(call) for call in calls]
    _done, pending = await asyncio.wait(tasks, timeout=timeout_s)
    for task in pending:
        task.cancel()
    results: list[Any] = []
    for task in tasks:
        if task in pending:
            results.append(TimeoutError("terminate did not finish before the drain deadline"))
        elif task.exception() is not None:
            results.append(task.exception())
        else:
            results.append(task.result())
    return results


def _tracer(config: EngineConfig) -> RolloutTracer | None:
    """`--otlp-endpoint`'s traces for this run, or None (the option off, or the SDK missing: the Locust side already
    refused the option then, so a missing package here only means no traces)."""
    if not config.otlp_endpoint:
        return None
    try:
        from harness.engine.otlp_traces import RolloutTracer, run_resource
    except ImportError as exc:
        print(f"stampede: --otlp-endpoint: no traces from {config.worker}: {exc}", file=sys.stderr, flush=True)
        return None
    resource = run_resource(config.run_id, config.provider, config.profile, config.worker)
    return RolloutTracer(config.otlp_endpoint, resource)


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    """A summary beside the rows; on a full or read-only disk it is skipped (the drain's answer still carries it,
    and the Locust side records it in run.json), never an error that loses the drain."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str))
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        logging.getLogger("stampede.engine").error("could not write %s: %s", path.name, exc.strerror or exc)
