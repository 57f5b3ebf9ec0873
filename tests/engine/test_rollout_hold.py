"""burst-hold's engine side (`RolloutPlan.hold_s`): the sandbox held until the hold's end after its submit, no call in
flight meanwhile, then asked its first command again; a sandbox that died while held fails there (`partial`)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import pytest

from harness.engine.rollout import RolloutContext, SandboxRegistry, run_rollout
from harness.errors import UsageError
from harness.results.figures.burst_hold import PARTIAL, SUCCESS, classify
from harness.wire.plan import RolloutPlan
from harness.wire.records import OpRecord, RolloutIdentity, RolloutRecord
from providers.base import ExecResult, FailureKind, ProviderError, SandboxRef
from tests.support.scripted_provider import ScriptedProvider


def context() -> RolloutContext:
    return RolloutContext(
        RolloutIdentity(
            run_id="run",
            worker="w",
            rollout_id="r1",
            provider="scripted",
            profile="p",
            scenario="burst-hold",
            stage="01-burst1",
            target_users=1,
            inflight_at_submit=0,
        )
    )


class DiesWhileHeld(ScriptedProvider):
    """Answers the first command; by the hold's end the sandbox is gone."""

    calls = 0

    async def exec(self, ref: SandboxRef, argv: Sequence[str], timeout: float) -> ExecResult:
        self.calls += 1
        if self.calls > 1:
            raise ProviderError(FailureKind.DIED_DURING_EXEC, "sandbox not found")
        return await super().exec(ref, argv, timeout)


async def hold(provider: ScriptedProvider, hold_s: float) -> tuple[RolloutRecord, list[OpRecord]]:
    ops: list[OpRecord] = []
    plan = RolloutPlan(commands=(("true",),), hold_s=hold_s)
    record = await run_rollout(provider, plan, context(), ops.append, SandboxRegistry())
    return record, ops


async def test_held_to_the_hold_end_then_checked_and_terminated() -> None:
    # a hold long against what the rest takes (~0.02 s), so "at once" keeps its meaning on a busy machine
    record, ops = await hold(ScriptedProvider({"ready_delay_s": 0.02}), 1.0)
    assert [op.op for op in ops] == ["create", "wait_ready", "exec", "exec", "terminate"]
    check = ops[3]
    assert check.t_start - record.t_submit >= 1.0 - 0.005  # no call until the hold's end after the submit
    assert ops[2].t_start - record.t_submit < 0.5  # the first command ran at once, not at the hold's end
    assert record.outcome == "ok" and record.exec_count == 2
    assert record.total_s is not None and record.total_s >= 1.0
    assert record.tti_s is not None and record.tti_s < 0.5  # TTI is the first answer, not the hold's
    frame = _frame(record)
    assert classify(frame, 1.0).tolist() == [SUCCESS]


async def test_a_sandbox_dead_at_the_hold_end_is_partial() -> None:
    record, _ = await hold(DiesWhileHeld({}), 0.1)
    assert record.outcome == "failed" and record.failure_phase == "exec"
    assert record.failure_kind == "died_during_exec" and record.tti_s is not None
    assert classify(_frame(record), 0.1).tolist() == [PARTIAL]


def test_a_hold_must_be_positive() -> None:
    with pytest.raises(UsageError):
        RolloutPlan(hold_s=0.0)
    assert RolloutPlan.from_dict(RolloutPlan(hold_s=2.5).to_dict()).hold_s == 2.5


def _frame(record: RolloutRecord) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "t_submit": record.t_submit,
                "create_s": record.create_s,
                "ready_s": record.ready_s,
                "tti_s": record.tti_s,
                "terminate_s": record.terminate_s,
                "total_s": record.total_s,
                "outcome": record.outcome,
                "failure_kind": record.failure_kind,
                "failure_phase": record.failure_phase,
                "error": record.error,
                "worker": record.worker,
            }
        ]
    )
