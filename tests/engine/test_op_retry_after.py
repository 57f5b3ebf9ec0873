"""A failed vendor call's op row keeps the Retry-After the vendor gave (issue #31: how a vendor refuses past its
create-rate limit is fitted from it, harness.fitting.limits)."""

from __future__ import annotations

import pyarrow as pa

from harness.engine.rollout import RolloutContext, SandboxRegistry, run_rollout
from harness.wire.plan import RolloutPlan
from harness.wire.records import OP_SCHEMA, OpRecord, RolloutIdentity, file_table
from providers.base import FailureKind, ProviderError, SandboxRef, SandboxSpec
from tests.support.scripted_provider import ScriptedProvider


class Refusing(ScriptedProvider):
    """Every create refused with `error`."""

    def __init__(self, error: BaseException) -> None:
        super().__init__({})
        self.error = error

    async def create(self, spec: SandboxSpec) -> SandboxRef:
        raise self.error


class Odd(Exception):
    """Not a ProviderError, with a `retry_after` of the wrong type: never copied into a float column."""

    retry_after = "soon"


async def _ops(error: BaseException) -> list[OpRecord]:
    identity = RolloutIdentity("run", "w", "r1", "scripted", "p", "s", "01-x", 1, 0)
    ops: list[OpRecord] = []
    record = await run_rollout(Refusing(error), RolloutPlan(), RolloutContext(identity), ops.append, SandboxRegistry())
    assert record.failure_phase == "create"
    return ops


async def test_a_429s_retry_after_is_kept_on_its_op_and_reaches_the_file() -> None:
    ops = await _ops(ProviderError(FailureKind.RATE_LIMITED, "HTTP 429: slow down", retry_after=2.5))
    assert [(op.op, op.ok, op.failure_kind, op.retry_after_s) for op in ops] == [("create", False, "rate_limited", 2.5)]
    table = file_table(ops, OP_SCHEMA)
    assert table.schema.field("retry_after_s").type == pa.float64()
    assert table.column("retry_after_s").to_pylist() == [2.5]


async def test_a_refusal_without_retry_after_or_another_error_keeps_none() -> None:
    bare = await _ops(ProviderError(FailureKind.RATE_LIMITED, "HTTP 429: slow down"))
    odd = await _ops(Odd("no"))
    assert [op.retry_after_s for op in bare + odd] == [None, None]
    assert file_table(bare + odd, OP_SCHEMA).column("retry_after_s").null_count == 2
