"""The rollout lifecycle: create -> wait ready -> exec x N -> terminate, timed phase by phase.

Runs inside the engine's plain asyncio loop. Every duration comes from the monotonic clock; the rollout has
one wall-clock anchor (`t_submit`). The sandbox is always terminated, even when the rollout is cancelled
mid-phase: a load test that leaks sandboxes costs users money and fills their account quota.

With an RL client in the plan (`--client`, `foundation/sandbox_client.py`) the rollout plays that client around
the provider: it holds the engine's STARTING semaphore from create to alive (the wait counts in the create phase,
as the framework sees it), gives up when its startup deadline (from its own start, minus what the create took)
or its init budget passes (`client_startup_deadline`: the client's failure, never the vendor's), runs the
client's install step before alive, and may leave a failed start's sandbox behind (`leak_prob`; the engine's
end-of-run sweep still reaps it).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from foundation.sandbox_client import SandboxClient
from harness.engine.outage_gate import OutageGate
from harness.engine.phase_watchdog import PhaseWatchdog
from harness.wire.durations import Distribution
from harness.wire.plan import RolloutPlan
from harness.wire.records import OUTCOME_CANCELLED, OUTCOME_FAILED, OpRecord, RolloutIdentity, RolloutRecord
from harness.wire.redact import short_error
from harness.wire.steps import StepRecord
from providers.base import FailureKind, Phase, Provider, ProviderError, ReadyObservation, SandboxRef, SandboxSpec

T = TypeVar("T")


WATCHDOG_GRACE_S = 30.0
"""Extra time past a phase's own deadline before the harness itself gives up on a stuck vendor call."""


@dataclass(frozen=True, slots=True)
class RolloutContext:
    """Who this rollout is and what the load looked like when it was submitted, and what the engine lends it."""

    identity: RolloutIdentity
    secrets: tuple[str, ...] = ()
    # the engine loop's worst stall after a monotonic instant, outside a window (LoopHealth.lag_since)
    loop_lag: Callable[[float, tuple[float, float] | None], float] | None = None
    # the emulated trainer's weight updates that pause inference: (paused s within [t0, t1], end of one under way)
    inference_pauses: Callable[[float, float], tuple[float, float | None]] | None = None
    outage: OutageGate | None = None  # the engine's backoff while the vendor refuses connections
    client: SandboxClient | None = None  # the RL framework's client played around the provider (None: none)
    starting: asyncio.Semaphore | None = None  # the client's semaphore on sandboxes between create and alive
    give_up_at: float | None = None  # monotonic: the end of the client's init budget (over every attempt)
    # a rollout plan's (`--plan`, harness.engine.script_rollout): where its step rows go, and the rows of the
    # fork copies a group's rollout makes beside its own
    on_step: Callable[[StepRecord], None] | None = None
    on_record: Callable[[RolloutRecord], None] | None = None
    watchdog: PhaseWatchdog | None = None  # the engine's one sweep over vendor calls' deadlines (None: asyncio.timeout)

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
        # the wall anchor first, then the monotonic start: a pause between the two reads (a GIL switch, a
        # preemption) then shortens the computed end (t_submit + total_s) instead of pushing it past the submit
        # of the rollout that follows this one in its user's loop (a peak of 1,201 in a closed loop of 1,200)
        self.record = ctx.new_record()
        self.t0 = time.monotonic()
        self.ref: SandboxRef | None = None
        self.poll_window: tuple[float, float] | None = None  # monotonic: the readiness poll window charged already
        self.phase = Phase.CREATE
        self.observation: ReadyObservation | None = None  # what wait_ready said (a plan's pull row reads it)
        self.terminate_error: BaseException | None = None  # why the terminate failed, when it did
        self._rng: random.Random | None = None

    @property
    def rng(self) -> random.Random:
        """Generation times and turn counts are drawn per rollout and attempt: reproducible for a seed. Seeded at
        its first draw (a string seed costs ~13 us, and a rollout of commands alone never draws)."""
        if self._rng is None:
            self._rng = random.Random(f"{self.plan.seed}:{self.ctx.identity.rollout_id}:{self.ctx.identity.attempt}")
        return self._rng

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def classify(self, exc: BaseException, phase: Phase) -> FailureKind:
        if isinstance(exc, ClientStartupDeadline):
            return FailureKind.CLIENT_STARTUP_DEADLINE  # the client's own, whatever the adapter would say
        try:
            return FailureKind(self.provider.classify(exc, phase))
        except Exception:  # a broken classifier is our bug, never a crash
            return FailureKind.HARNESS

    async def timed(self, op: str, phase: Phase, call: Awaitable[T], budget_s: float) -> T:
        t_wall = time.time()
        start = time.monotonic()
        sandbox_id = self.ref.sandbox_id if self.ref else None
        watchdog = self.ctx.watchdog
        try:
            if watchdog is None:
                async with asyncio.timeout(budget_s + WATCHDOG_GRACE_S):
                    result = await call
            else:  # the same deadline, one dict entry instead of a Timeout and a timer per call (phase_watchdog.py)
                task = asyncio.current_task()
                assert task is not None
                watchdog.arm(task, start + budget_s + WATCHDOG_GRACE_S)
                try:
                    result = await call
                except BaseException as exc:
                    if watchdog.release(task, isinstance(exc, asyncio.CancelledError)):
                        raise TimeoutError from exc
                    raise
                watchdog.release(task, False)
        except asyncio.CancelledError:
            self.emit_op(op, t_wall, start, ok=False, kind=None, sandbox_id=sandbox_id)
            raise
        except BaseException as exc:
            kind = self.classify(exc, phase)
            # the vendor's Retry-After kept with the call: how it refuses past its limits (harness.fitting.limits)
            wait = exc.retry_after if isinstance(exc, ProviderError) else None
            self.emit_op(op, t_wall, start, ok=False, kind=kind, sandbox_id=sandbox_id, retry_after=wait)
            raise
        self.emit_op(op, t_wall, start, ok=True, kind=None, sandbox_id=sandbox_id)
        return result

    def emit_op(
        self,
        op: str,
        t_wall: float,
        start: float,
        *,
        ok: bool,
        kind: FailureKind | None,
        sandbox_id: str | None,
        retry_after: float | None = None,
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
                retry_after_s=retry_after,
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
        await self.start()
        self.phase = Phase.EXEC
        await self.episode()

    async def start(self) -> None:
        """The sandbox alive: create and ready, inside the client's STARTING semaphore when it has one."""
        starting = self.ctx.starting
        async with starting if starting is not None else contextlib.nullcontext():
            await self.start_sandbox()

    def client_deadline(self) -> float:
        """Seconds since t0 by which the client must see the sandbox alive (inf without a client deadline)."""
        client, scale = self.ctx.client, self.plan.time_scale
        deadline = float("inf") if client is None else self.elapsed() + client.startup_deadline_s * scale
        if self.ctx.give_up_at is not None:
            deadline = min(deadline, self.ctx.give_up_at - self.t0)
        return deadline

    def give_up(self, deadline: float) -> ClientStartupDeadline:
        """The client's failure, in its own words (SWE-ReX counts the seconds left after the create)."""
        client = self.ctx.client
        left = max(0.0, deadline - (self.record.create_s or 0.0)) / self.plan.time_scale
        text = client.message(left) if client is not None else f"init budget spent ({left:.0f}s left)"
        return ClientStartupDeadline(f"client {client.name if client else 'none'}: {text}")

    def spec(self) -> SandboxSpec:
        """What this rollout asks the vendor for (a plan's create step adds its image)."""
        return sandbox_spec(self.plan, self.ctx.identity.run_id, self.ctx.identity.rollout_id, self.ctx.identity.worker)

    async def start_sandbox(self) -> None:
        """create -> ready (-> the client's install step): the sandbox is alive, or the attempt failed."""
        plan, record = self.plan, self.record
        deadline = self.client_deadline()
        spec = self.spec()
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
        budget = min(plan.ready_timeout_s, deadline - ready_start)
        if budget <= 0:
            raise self.give_up(deadline)
        try:
            observation = await self.timed(
                "wait_ready", Phase.READY, self.provider.wait_ready(self.ref, budget), budget
            )
        except Exception as exc:
            if budget < plan.ready_timeout_s and self.classify(exc, Phase.READY) is FailureKind.READY_TIMEOUT:
                raise self.give_up(deadline) from exc
            raise
        answered = time.monotonic()  # the poll window ends when wait_ready returned, before the client's install
        self.observation = observation
        install_s = self.ctx.client.install_s * plan.time_scale if self.ctx.client is not None else 0.0
        if install_s > 0:  # the client's own step (its in-sandbox server, an install) before it calls it alive
            await asyncio.sleep(install_s)
            if self.elapsed() > deadline:
                raise self.give_up(deadline)
        record.ready_s = self.elapsed() - ready_start
        if observation is not None:
            record.ready_poll_s = observation.poll_window_s
            if observation.poll_window_s is not None:
                self.poll_window = (answered - observation.poll_window_s, answered)
            record.ready_probe_s = observation.probe_ready_s

    async def episode(self) -> None:
        """The commands, then the agentic turns and the reward command, on a live sandbox."""
        plan = self.plan
        for argv in plan.commands:
            await self.run_command(argv)
        turns = plan.turns if plan.turns_max is None else self.rng.randint(plan.turns, plan.turns_max)
        if turns > 0:  # the distributions are parsed for a rollout that draws from them, not for every one
            await self.agentic_turns(turns)
        if plan.reward_command:
            await self.run_command(plan.reward_command)
        if plan.hold_s is not None:
            await self.hold(plan.hold_s)

    async def hold(self, hold_s: float) -> None:
        """burst-hold: the sandbox held with no call in flight until `hold_s` after this rollout's submit (every
        rollout of the burst was submitted at once: the holds end together), then its first command again, so a
        sandbox that died while held fails here (`partial` in harness.results.figures.burst_hold) rather than
        passing unnoticed into its terminate."""
        remaining = self.t0 + hold_s - time.monotonic()
        if remaining > 0:
            await asyncio.sleep(remaining)
        await self.run_command(self.plan.commands[0])

    async def agentic_turns(self, turns: int) -> None:
        """Each turn: the model thinks (a drawn generation time), then the turn's tool command runs."""
        plan, record = self.plan, self.record
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
            if self.ctx.loop_lag is not None:  # a stall since it began that its poll window does not already hold
                record.loop_lag_s = self.ctx.loop_lag(self.t0, self.poll_window)

    async def terminate(self) -> None:
        if self.ref is None:
            return
        ref = self.ref
        client = self.ctx.client
        if (
            client is not None
            and client.leak_prob > 0
            and self.record.failure_phase in (str(Phase.CREATE), str(Phase.READY))
            and self.rng.random() < client.leak_prob
        ):
            return  # the client failed to delete it: it holds the account's quota until the end-of-run sweep
        start = self.elapsed()
        try:
            await self.timed("terminate", Phase.TERMINATE, self.provider.terminate(ref), self.plan.terminate_timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.terminate_error = exc
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


class ClientStartupDeadline(Exception):
    """The RL client gave up on a start (its deadline or init budget): recorded `client_startup_deadline`."""


class RolloutCancelled(Exception):
    """A rollout stopped by the load shape or the user; its partial record is still data."""

    def __init__(self, record: RolloutRecord) -> None:
        super().__init__(f"rollout {record.rollout_id} cancelled in {record.failure_phase}")
        self.record = record
