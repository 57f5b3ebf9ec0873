"""The rollout lifecycle's bookkeeping: what a user reads in every parquet row."""

from __future__ import annotations

import asyncio

import pytest

from harness.engine.rollout import RolloutCancelled, RolloutContext, SandboxRegistry, run_rollout
from harness.errors import UsageError
from harness.wire.plan import RolloutPlan, parse_commands
from harness.wire.records import OpRecord, RolloutIdentity
from tests.support.scripted_provider import ScriptedProvider


def context(rollout_id: str = "r1", secrets: tuple[str, ...] = ()) -> RolloutContext:
    return RolloutContext(
        RolloutIdentity(
            run_id="run",
            worker="w",
            rollout_id=rollout_id,
            provider="scripted",
            profile="p",
            scenario="s",
            stage="01-x",
            target_users=10,
            inflight_at_submit=3,
        ),
        secrets=secrets,
    )


async def run(provider: ScriptedProvider, plan: RolloutPlan | None = None, **kw: object):
    ops: list[OpRecord] = []
    registry = SandboxRegistry()
    record = await run_rollout(
        provider, plan or RolloutPlan(commands=(("true",), ("echo", "hi"))), context(**kw), ops.append, registry
    )  # type: ignore[arg-type]
    return record, ops, registry


async def test_ok_rollout_times_every_phase_and_terminates():
    provider = ScriptedProvider({"ready_delay_s": 0.05, "exec_delay_s": 0.01})
    record, ops, registry = await run(provider)
    assert record.outcome == "ok" and record.failure_kind is None
    assert record.create_s is not None and record.ready_s >= 0.04
    assert record.exec_count == 2 and record.exec_s >= 0.02
    # TTI ends with the first command: after ready, before the second command.
    assert record.create_s + record.ready_s <= record.tti_s < record.total_s
    assert record.terminate_s is not None and record.total_s >= record.tti_s
    assert [op.op for op in ops] == ["create", "wait_ready", "exec", "exec", "terminate"]
    assert all(op.ok for op in ops)
    assert provider.live == {} and len(registry) == 0
    assert record.inflight_at_submit == 3 and record.stage == "01-x"


async def test_nonzero_exit_code_is_a_result_not_a_failure():
    record, _, _ = await run(ScriptedProvider({}), RolloutPlan(commands=(("false",),)))
    assert record.outcome == "ok" and record.tti_s is not None


async def test_failure_is_classified_with_its_phase_and_the_sandbox_still_terminated():
    provider = ScriptedProvider({"fail": "ready:died_before_ready"})
    record, ops, _ = await run(provider)
    assert (record.outcome, record.failure_kind, record.failure_phase) == ("failed", "died_before_ready", "ready")
    assert record.tti_s is None and record.exec_count == 0
    assert provider.live == {} and len(provider.terminated) == 1
    assert [op.op for op in ops] == ["create", "wait_ready", "terminate"]
    assert ops[1].ok is False and ops[1].failure_kind == "died_before_ready"


async def test_create_failure_has_no_sandbox_to_terminate():
    record, ops, _ = await run(ScriptedProvider({"fail": "create:rate_limited"}))
    assert (record.failure_kind, record.failure_phase, record.sandbox_id) == ("rate_limited", "create", None)
    assert [op.op for op in ops] == ["create"]


async def test_unknown_exception_is_unknown_and_a_broken_classifier_is_harness():
    record, _, _ = await run(ScriptedProvider({}), RolloutPlan(commands=(("boom",),)))
    assert (record.failure_kind, record.failure_phase) == ("unknown", "exec")
    record, _, _ = await run(ScriptedProvider({"classify_raises": "1"}), RolloutPlan(commands=(("boom",),)))
    assert record.failure_kind == "harness"


async def test_terminate_failure_fails_an_otherwise_good_rollout_and_keeps_the_ref():
    provider = ScriptedProvider({"terminate_fail": "1"})
    record, _, registry = await run(provider)
    assert (record.outcome, record.failure_kind, record.failure_phase) == ("failed", "transport", "terminate")
    assert len(registry) == 1  # the engine's drain will try again


async def test_cancelled_rollout_terminates_its_sandbox_and_keeps_its_record():
    provider = ScriptedProvider({"ready_delay_s": 10})
    registry = SandboxRegistry()
    task = asyncio.create_task(run_rollout(provider, RolloutPlan(), context(), lambda op: None, registry))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(RolloutCancelled) as info:
        await task
    record = info.value.record
    assert (record.outcome, record.failure_phase) == ("cancelled", "ready")
    assert record.sandbox_id is not None and provider.live == {} and len(registry) == 0
    assert record.total_s is not None and record.total_s < 5


async def test_errors_are_redacted():
    provider = ScriptedProvider({})

    async def leaky_exec(*_: object) -> None:
        raise RuntimeError("auth failed for token=s3cr3t-value and Bearer abc.def")

    provider.exec = leaky_exec  # type: ignore[method-assign]
    record, _, _ = await run(provider, secrets=("s3cr3t-value",))
    assert "s3cr3t" not in record.error and "abc.def" not in record.error


def test_commands_parse_like_a_shell_and_keep_quoted_semicolons():
    assert parse_commands("true; echo 'a;b' c;sleep 2") == (("true",), ("echo", "a;b", "c"), ("sleep", "2"))
    with pytest.raises(UsageError):
        parse_commands(" ; ")
    with pytest.raises(UsageError):
        parse_commands("echo 'unterminated")


def test_plan_round_trips_through_json():
    plan = RolloutPlan(commands=(("echo", "x"),), ready_timeout_s=5, image="img", labels={"a": "b"})
    assert RolloutPlan.from_dict(plan.to_dict()) == plan
    with pytest.raises(UsageError):
        RolloutPlan(ready_timeout_s=0)


async def test_agentic_rollout_runs_turns_with_generation_time_and_a_reward():
    provider = ScriptedProvider({})
    plan = RolloutPlan(
        commands=(("true",),),
        turns=3,
        gen_time="const:0.05",
        reward_command=("echo", "reward"),
        turn_command=("echo", "turn {turn}"),
    )
    record, ops, _ = await run(provider, plan)
    assert record.outcome == "ok" and record.turns == 3 and record.exec_count == 5
    assert abs(record.gen_s - 0.15) < 1e-9 and record.total_s >= 0.15
    # TTI ends with the setup command, before any generation: the whole generation time fits after it (a bound from
    # this rollout's own clock, not a fixed 50 ms a busy machine can overrun)
    assert record.tti_s + record.gen_s <= record.total_s
    assert [op.op for op in ops].count("exec") == 5


async def test_generation_time_plays_at_the_time_scale_and_turns_are_reproducible():
    plan = RolloutPlan(commands=(("true",),), turns=2, turns_max=6, gen_time="uniform:0.1,0.2", time_scale=0.1, seed=4)
    first, _, _ = await run(ScriptedProvider({}), plan)
    again, _, _ = await run(ScriptedProvider({}), plan)
    assert 2 <= first.turns <= 6 and first.turns == again.turns and first.gen_s == again.gen_s
    assert 0.01 * first.turns <= first.gen_s <= 0.02 * first.turns


async def test_a_rollout_deadline_ends_a_stuck_episode():
    plan = RolloutPlan(commands=(("true",),), turns=10, gen_time="const:1", rollout_timeout_s=0.2)
    record, _, _ = await run(ScriptedProvider({}), plan)
    # the 0.2 s deadline ends it, not its 10 s of generation (5 s: room for a busy machine, far below the 10)
    assert (record.outcome, record.failure_phase) == ("failed", "exec") and record.total_s < 5


async def test_a_pause_between_the_two_clock_reads_never_pushes_the_end_past_the_next_submit(monkeypatch):
    """A closed loop's next rollout is submitted right after the last one ended; if the engine's thread is paused
    between reading the wall anchor and the monotonic start, the computed end (t_submit + total_s) must not land
    after that next submit, or the fleet-wide peak in flight reads one more than the users (1,201 of 1,200)."""
    import harness.engine.rollout as rollout_module

    class PausingClock:
        """Both clocks on one virtual timeline; the first read of either pauses the thread for 5 ms after it."""

        def __init__(self) -> None:
            self.now, self.paused = 1_000.0, False

        def read(self) -> float:
            value = self.now
            if not self.paused:
                self.paused, self.now = True, self.now + 0.005
            self.now += 1e-6
            return value

    clock = PausingClock()

    class VirtualTime:
        time = staticmethod(clock.read)
        monotonic = staticmethod(clock.read)

    monkeypatch.setattr(rollout_module, "time", VirtualTime)
    record, _, _ = await run(ScriptedProvider({}), RolloutPlan(commands=(("true",),)))
    next_submit = clock.read()
    assert record.total_s is not None and record.t_submit + record.total_s <= next_submit


@pytest.mark.parametrize("watched", [False, True], ids=["a timeout per call", "the engine's watchdog"])
async def test_a_vendor_call_stuck_past_its_budget_fails_as_a_timeout_either_way(monkeypatch, watched):
    """The engine bounds each vendor call (its budget plus WATCHDOG_GRACE_S) with one sweep over every rollout's
    calls; a rollout without it (a test, a tool) with asyncio.timeout. Both end a stuck create the same way."""
    import dataclasses

    from harness.engine import rollout as rollout_module
    from harness.engine.phase_watchdog import PhaseWatchdog

    monkeypatch.setattr(rollout_module, "WATCHDOG_GRACE_S", 0.0)
    provider = ScriptedProvider({"create_delay_s": 30.0})
    watchdog = PhaseWatchdog(resolution_s=0.02) if watched else None
    ctx = dataclasses.replace(context(), watchdog=watchdog)
    ops: list[OpRecord] = []
    record = await asyncio.wait_for(
        run_rollout(provider, RolloutPlan(create_timeout_s=0.05), ctx, ops.append, SandboxRegistry()), 5.0
    )
    assert record.outcome == "failed" and record.failure_phase == "create"
    assert record.failure_kind == str(provider.classify(TimeoutError(), rollout_module.Phase.CREATE))
    assert [(op.op, op.ok) for op in ops] == [("create", False)]
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # the deadline's cancel was taken back
    if watchdog is not None:
        assert watchdog.fired == 1
        watchdog.close()
