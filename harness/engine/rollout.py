"""The rollout lifecycle: create -> wait ready -> exec x N -> terminate, timed phase by phase.

Runs inside the engine's plain asyncio loop. Every duration comes from the monotonic clock; the rollout has
one wall-clock anchor (`t_submit`). The sandbox is always terminated, even when the rollout is cancelled
mid-phase: a load test that leaks sandboxes costs users money and fills their account quota.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from harness.engine.outage_gate import OutageGate
from harness.wire.durations import Distribution
from harness.wire.plan import RolloutPlan
from harness.wire.records import OUTCOME_CANCELLED, OUTCOME_FAILED, OpRecord, RolloutIdentity, RolloutRecord
from harness.wire.redact import short_error
from providers.base import FailureKind, Phase, Provider, SandboxRef, SandboxSpec

T = TypeVar("T")


WATCHDOG_GRACE_S = 30.0
"""Extra time past a phase's own deadline before the harness itself gives up on a stuck vendor call."""


@dataclass(frozen=True, slots=True)
class RolloutContext:
    """Who this rollout is and what the load looked like when it was submitted, and what the engine lends it."""

    identity: RolloutIdentity
    secrets: tuple[str, ...] = ()
    # the engine loop's current lag, the part after a monotonic instant (harness.engine.health.LoopHealth.lag_since)
    loop_lag: Callable[[float], float] | None = None
    # the emulated trainer's weight updates that pause inference: (paused s within [t0, t1], end of one under way)
    inference_pauses: Callable[[float, float], tuple[float, float | None]] | None = None
    outage: OutageGate | None = None  # the engine's backoff while the vendor refuses connections

    def new_record(self) -> RolloutRecord:
        """A record stamped now (`t_submit`), carrying who the rollout is and the load it met."""
        return self.identity.record(time.time())


def sandbox_spec(plan: RolloutPlan, run_id: str, rollout_id: str, engine: str = "") -> SandboxSpec:
    """The vendor-facing request for one rollout's sandbox, labelled with the run, rollout and engine."""
    return SandboxSpec(
        run_id=run_id,
        rollout_id=rollout_id,
        engine=engine,
        image=plan.image,
        cpu=plan.cpu,
        memory_mb=plan.memory_mb,
        lifetime_s=plan.lifetime_s,
        network=plan.network,
        labels=dict(plan.labels),
    )


class SandboxRegistry:
    """Live sandboxes by id, so the engine can terminate whatever a cancelled rollout left behind."""

    def __init__(self, on_add: Callable[[SandboxRef, str], None] | None = None) -> None:
        self._live: dict[str, SandboxRef] = {}
        self._on_add = on_add  # the write-ahead: which rollout holds which sandbox, before anything else happens

    def add(self, ref: SandboxRef, rollout_id: str = "") -> None:
        self._live[ref.sandbox_id] = ref
        if self._on_add is not None:
            self._on_add(ref, rollout_id or ref.rollout_id)

    def discard(self, ref: SandboxRef) -> None:
        self._live.pop(ref.sandbox_id, None)

    def snapshot(self) -> list[SandboxRef]:
        return list(self._live.values())

    def __len__(self) -> int:
        return len(self._live)


OpSink = Callable[[OpRecord], None]


class _Rollout:
    """One lifecycle's mutable state; `run_rollout` is the public entry point."""

    def __init__(
        self,
        provider: Provider,
        plan: RolloutPlan,
        ctx: RolloutContext,
        on_op: OpSink,
        registry: SandboxRegistry,
    ) -> None:
        self.provider = provider
        self.plan = plan
        self.ctx = ctx
        self.on_op = on_op
        self.registry = registry
        self.t0 = time.monotonic()
        self.record = ctx.new_record()
        self.ref: SandboxRef | None = None
        self.phase = Phase.CREATE
        # Generation times and turn counts are drawn per rollout and attempt: reproducible for a seed.
        self.rng = random.Random(f"{plan.seed}:{ctx.identity.rollout_id}:{ctx.identity.attempt}")

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def classify(self, exc: BaseException, phase: Phase) -> FailureKind:
        try:
            return FailureKind(self.provider.classify(exc, phase))
        except Exception:  # a broken classifier is our bug, never a crash
            return FailureKind.HARNESS

    async def timed(self, op: str, phase: Phase, call: Awaitable[T], budget_s: float) -> T:
        t_wall = time.time()
        start = time.monotonic()
        sandbox_id = self.ref.sandbox_id if self.ref else None
        try:
            async with asyncio.timeout(budget_s + WATCHDOG_GRACE_S):
                result = await call
        except asyncio.CancelledError:
            self.emit_op(op, t_wall, start, ok=False, kind=None, sandbox_id=sandbox_id)
            raise
        except BaseException as exc:
            self.emit_op(op, t_wall, start, ok=False, kind=self.classify(exc, phase), sandbox_id=sandbox_id)
            raise
        self.emit_op(op, t_wall, start, ok=True, kind=None, sandbox_id=sandbox_id)
        return result

    def emit_op(
        self, op: str, t_wall: float, start: float, *, ok: bool, kind: FailureKind | None, sandbox_id: str | None
    ) -> None:
        self.on_op(
            OpRecord(
                run_id=self.ctx.identity.run_id,
                rollout_id=self.ctx.identity.rollout_id,
                op=op,
                t_start=t_wall,
                dur_s=time.monotonic() - start,
                ok=ok,
                failure_kind=str(kind) if kind else None,
                worker=self.ctx.identity.worker,
                sandbox_id=sandbox_id or (self.ref.sandbox_id if self.ref else None),
            )
        )

    def fail(self, exc: BaseException, phase: Phase) -> None:
        if self.record.failure_kind is not None:
            return  # keep the first failure: it is the cause
        self.record.outcome = OUTCOME_FAILED
        self.record.failure_kind = str(self.classify(exc, phase))
        self.record.failure_phase = str(phase)
        self.record.error = short_error(exc, self.ctx.secrets)

    async def lifecycle(self) -> None:
        plan, record = self.plan, self.record
        spec = sandbox_spec(plan, self.ctx.identity.run_id, self.ctx.identity.rollout_id, self.ctx.identity.worker)
        self.phase = Phase.CREATE
        create: Awaitable[SandboxRef]
        if self.ctx.outage is None:
            create = self.provider.create(spec)
        else:  # a vendor gone away: creates wait out one engine-wide backoff
            create = self.ctx.outage.through(
                lambda: self.provider.create(spec),
                lambda exc: self.classify(exc, Phase.CREATE) is FailureKind.TRANSPORT,
                plan.create_timeout_s,
            )
        self.ref = await self.timed("create", Phase.CREATE, create, plan.create_timeout_s)
        self.registry.add(self.ref, self.ctx.identity.rollout_id)
        record.sandbox_id = self.ref.sandbox_id
        record.create_s = self.elapsed()

        self.phase = Phase.READY
        ready_start = self.elapsed()
        observation = await self.timed(
            "wait_ready", Phase.READY, self.provider.wait_ready(self.ref, plan.ready_timeout_s), plan.ready_timeout_s
        )
        record.ready_s = self.elapsed() - ready_start
        if observation is not None:
            record.ready_poll_s = observation.poll_window_s
            record.ready_probe_s = observation.probe_ready_s

        self.phase = Phase.EXEC
        for argv in plan.commands:
            await self.run_command(argv)
        turns = plan.turns if plan.turns_max is None else self.rng.randint(plan.turns, plan.turns_max)
        generation = plan.generation
        tool = Distribution.parse(plan.tool_time) if plan.tool_time else None
        for turn in range(1, turns + 1):
            pause = generation.sample(self.rng) * plan.time_scale  # the model thinks; the sandbox is held
            if pause > 0:
                pause = await self.think(pause)
            record.gen_s = (record.gen_s or 0.0) + pause
            tool_s = f"{tool.sample(self.rng):.3f}" if tool else "0"
            await self.run_command(
                tuple(word.replace("{turn}", str(turn)).replace("{tool_s}", tool_s) for word in plan.turn_command)
            )
            record.turns = turn
        if plan.reward_command:
            await self.run_command(plan.reward_command)

    async def think(self, seconds: float) -> float:
        """The model generates for `seconds`, standing still while a weight update pauses the inference servers
        (an emulated trainer's in-flight update); returns the wall seconds it took."""
        t0 = time.time()
        await asyncio.sleep(seconds)
        pauses = self.ctx.inference_pauses
        paused = 0.0
        while pauses is not None:
            now = time.time()
            paused, resume = pauses(t0, now)
            done = now - t0 - paused
            if done >= seconds - 1e-3:
                break
            await asyncio.sleep(resume - now if resume is not None else seconds - done)
        return seconds + paused  # what it drew and what it stood still (a late wake-up is the loop's, not its)

    async def run_command(self, argv: Sequence[str]) -> None:
        plan, record, ref = self.plan, self.record, self.ref
        assert ref is not None, "commands run in a created sandbox"
        exec_start = self.elapsed()
        await self.timed("exec", Phase.EXEC, self.provider.exec(ref, argv, plan.exec_timeout_s), plan.exec_timeout_s)
        record.exec_count += 1
        record.exec_s = (record.exec_s or 0.0) + self.elapsed() - exec_start
        if record.tti_s is None:
            record.tti_s = self.elapsed()
            if self.ctx.loop_lag is not None:  # the lag within this command: the poll window holds any before it
                record.loop_lag_s = self.ctx.loop_lag(self.t0 + exec_start)

    async def terminate(self) -> None:
        if self.ref is None:
            return
        ref = self.ref
        start = self.elapsed()
        try:
            await self.timed("terminate", Phase.TERMINATE, self.provider.terminate(ref), self.plan.terminate_timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.fail(exc, Phase.TERMINATE)
        else:
            self.registry.discard(ref)
        finally:
            self.record.terminate_s = self.elapsed() - start

    async def run(self) -> RolloutRecord:
        try:
            if self.plan.rollout_timeout_s is None:
                await self.lifecycle()
            else:
                async with asyncio.timeout(self.plan.rollout_timeout_s):
                    await self.lifecycle()
        except asyncio.CancelledError:
            self.record.outcome = OUTCOME_CANCELLED
            self.record.failure_phase = str(self.phase)
            # Terminate in a task that survives a second cancellation; the registry keeps the ref for the
            # engine's final sweep if even that is cut short.
            cleanup = asyncio.ensure_future(self.terminate())
            try:
                await asyncio.shield(cleanup)
            finally:
                self.record.total_s = self.elapsed()
            raise
        except Exception as exc:
            self.fail(exc, self.phase)
        await self.terminate()
        self.record.total_s = self.elapsed()
        return self.record


async def run_rollout(
    provider: Provider,
    plan: RolloutPlan,
    ctx: RolloutContext,
    on_op: OpSink,
    registry: SandboxRegistry,
) -> RolloutRecord:
    """Run one whole rollout. Returns its record; on cancellation the record is in `RolloutCancelled`."""
    rollout = _Rollout(provider, plan, ctx, on_op, registry)
    try:
        return await rollout.run()
    except asyncio.CancelledError:
        raise RolloutCancelled(rollout.record) from None


class RolloutCancelled(Exception):
    """A rollout stopped by the load shape or the user; its partial record is still data."""

    def __init__(self, record: RolloutRecord) -> None:
        super().__init__(f"rollout {record.rollout_id} cancelled in {record.failure_phase}")
        self.record = record
