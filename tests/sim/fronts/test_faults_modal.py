"""The `modal` provider (real `modal` SDK) under a hostile transport: every fault the local Modal injects.

Each test turns on one fault of the profile's `[faults]` section on the local Modal's gRPC listeners (a
stream reset, UNAVAILABLE/INTERNAL, a slow or a hung answer, a reply that does not decode, a throttling
storm with and without Modal's retry policy, a command router dying mid-command) and runs a batch of
rollouts through the engine's own lifecycle at once. Every rollout must end within a bound set by the
rollout's timeouts (never the fault's own hold), every failure classified as something other than
`unknown`/`harness`, the other rollouts unaffected, and no sandbox left once the engine's drain has run.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from harness.engine.rollout import RolloutContext, SandboxRegistry, run_rollout
from harness.wire.plan import RolloutPlan
from harness.wire.records import RolloutIdentity, RolloutRecord
from providers.sim.modal.server import RunningModal
from providers.vendors.modal.provider import ModalProvider
from tests.support.local_modal import local_modal

ROLLOUTS = 8
STEP_TIMEOUT_S = 4.0  # create/ready/exec/terminate budgets: what bounds a rollout that met a fault
RPC_TIMEOUT_S = "3"
BOUND_S = 30.0  # every rollout's end: a few step budgets plus the SDK's own retries; below the engine's watchdog
HOLD_S = "600"  # a hung call is held this long (wall seconds): a test that waited for it would time out


@dataclass
class Batch:
    records: list[RolloutRecord]
    left: int  # sandboxes of the run still active after the drain
    injected: dict[str, int]

    @property
    def failures(self) -> set[str]:
        return {str(r.failure_kind) for r in self.records if r.failure_kind is not None}

    @property
    def slowest(self) -> float:
        return max(r.total_s or 0.0 for r in self.records)


async def run_batch(server: RunningModal, provider: ModalProvider, run_id: str = "run-faults") -> Batch:
    """ROLLOUTS rollouts at once through the engine's lifecycle, then the engine's drain (terminate, sweep)."""
    plan = RolloutPlan(
        commands=(("sh", "-c", "echo out; echo err >&2"),),
        create_timeout_s=STEP_TIMEOUT_S,
        ready_timeout_s=STEP_TIMEOUT_S,
        exec_timeout_s=STEP_TIMEOUT_S,
        terminate_timeout_s=STEP_TIMEOUT_S,
    )
    registry = SandboxRegistry()

    async def one(i: int) -> RolloutRecord:
        ctx = RolloutContext(
            RolloutIdentity(
                run_id=run_id,
                worker="w0",
                rollout_id=f"r{i}",
                provider="modal",
                profile="ideal",
                scenario="faults",
                stage="s1",
                target_users=ROLLOUTS,
                inflight_at_submit=ROLLOUTS,
            ),
        )
        return await run_rollout(provider, plan, ctx, lambda op: None, registry)

    records = list(await asyncio.gather(*(one(i) for i in range(ROLLOUTS))))
    # the engine's drain: terminate what rollouts could not, then sweep by the run's tags
    await asyncio.gather(*(provider.terminate(ref) for ref in registry.snapshot()), return_exceptions=True)
    for _ in range(3):
        try:
            await provider.cleanup(run_id)
            break
        except Exception:
            await asyncio.sleep(0.5)
    left = [
        row
        for row in server.truth()
        if f"stampede-run={run_id}" in row["labels"] and row["status"] not in ("TERMINATED", "ERROR", "TIMEOUT")
    ]
    return Batch(records, len(left), dict(server.faults.injector.injected))


def assert_survived(batch: Batch, fault: str, allowed: Sequence[str]) -> None:
    kinds = [f"{r.failure_kind}@{r.failure_phase}" for r in batch.records if r.failure_kind]
    print(f"\n{fault}: injected {batch.injected}; failures {kinds or 'none'}; slowest rollout {batch.slowest:.2f}s")
    assert any(key.endswith(f":{fault}") for key in batch.injected), f"no {fault} was injected: {batch.injected}"
    assert batch.failures <= set(allowed), f"{fault} ended as {batch.failures}, expected within {allowed}"
    assert batch.slowest < BOUND_S, f"a rollout took {batch.slowest:.1f}s"
    assert any(r.outcome == "ok" for r in batch.records), "the run did not go on: no rollout succeeded"
    assert batch.left == 0, f"{batch.left} sandboxes leaked"


def faults(*pairs: str) -> tuple[str, ...]:
    return (*tuple(f"faults.{pair}" for pair in pairs), "faults.seed=7")


# everywhere at 30% (the SDK's retries absorb most), and on create and terminate at 80% (past its retries)
STORMS = [("*", "0.3"), ("create,terminate", "0.8")]


@pytest.mark.parametrize(("operations", "prob"), STORMS)
async def test_a_reset_stream_is_retried_or_ends_as_transport(operations: str, prob: str) -> None:
    settings = faults(f"reset_prob={prob}", f"operations={operations}")
    async with local_modal(*settings, rpc_timeout=RPC_TIMEOUT_S) as (server, provider):
        batch = await run_batch(server, provider)
    assert_survived(batch, "reset", ["transport"])


@pytest.mark.parametrize(("operations", "prob"), STORMS)
async def test_unavailable_and_internal_are_retried_or_end_as_transport(operations: str, prob: str) -> None:
    settings = faults(f"error_5xx_prob={prob}", f"operations={operations}")
    async with local_modal(*settings, rpc_timeout=RPC_TIMEOUT_S) as (server, provider):
        batch = await run_batch(server, provider)
    assert_survived(batch, "error_5xx", ["transport"])


async def test_slow_answers_only_delay_the_rollouts_that_met_them() -> None:
    async with local_modal(*faults("slow_prob=0.3", "slow_delay_s=0.5"), rpc_timeout=RPC_TIMEOUT_S) as (
        server,
        provider,
    ):
        batch = await run_batch(server, provider)
    assert_survived(batch, "slow", [])
    slowed = sum(n for key, n in batch.injected.items() if key.endswith(":slow"))
    assert slowed >= ROLLOUTS, f"too few slow answers to tell shared from own delays: {batch.injected}"
    # had each slow answer held up every rollout (one shared channel, a lock), even the fastest would have waited
    # for all of them: the bound is the run's own injected delay, not a wall-clock guess a busy machine can break
    fastest = min(r.total_s or 0 for r in batch.records)
    assert fastest < 0.5 * slowed, f"the fastest rollout took {fastest:.2f}s of {slowed} x 0.5s slow answers"


@pytest.mark.parametrize("operation", ["create", "status", "exec", "terminate"])
async def test_a_hung_call_is_cut_by_the_rollouts_own_budget_and_stalls_no_one_else(operation: str) -> None:
    # an exec makes many exec calls (start, output, polls; more on a busy machine): at 0.25 a call 6 of 8 rollouts met
    # a hang and once, in CI, all 8 did (nothing left to show the run goes on); at 0.05, 2 hangs and 6 survivors
    prob = "0.05" if operation == "exec" else "0.25"
    settings = faults(f"hang_prob={prob}", f"hang_hold_s={HOLD_S}", f"operations={operation}")
    async with local_modal(*settings, rpc_timeout=RPC_TIMEOUT_S) as (server, provider):
        batch = await run_batch(server, provider, run_id=f"run-hang-{operation}")
    allowed = {
        "create": ["transport"],
        "status": ["ready_timeout"],  # the readiness wait is a long poll: a hung one is the ready budget running out
        "exec": ["transport"],  # the command had exited: the poll after the budget says so
        "terminate": ["transport"],
    }[operation]
    assert_survived(batch, "hang", allowed)
    assert statistics.median(r.total_s or 0 for r in batch.records) < STEP_TIMEOUT_S  # most never waited


async def test_replies_that_do_not_decode_end_as_transport() -> None:
    async with local_modal(*faults("malformed_prob=0.3"), rpc_timeout=RPC_TIMEOUT_S) as (server, provider):
        batch = await run_batch(server, provider)
    assert_survived(batch, "malformed", ["transport"])
    assert all("Error" in (r.error or "Error") for r in batch.records)


@pytest.mark.parametrize("retry_after", ["0", "1"])
async def test_a_throttling_storm_on_create_is_rate_limited_with_or_without_a_retry_hint(retry_after: str) -> None:
    settings = faults("throttle_prob=0.5", f"retry_after_s={retry_after}", "operations=create")
    async with local_modal(*settings, rpc_timeout=RPC_TIMEOUT_S) as (server, provider):
        batch = await run_batch(server, provider)
    assert_survived(batch, "throttle", ["rate_limited"])
    assert "rate_limited" in batch.failures  # surfaced at once (max_throttle_wait=0): TTI keeps no retry wait


async def test_a_retry_hint_is_honoured_when_the_sdk_may_wait() -> None:
    settings = faults("throttle_prob=0.5", "retry_after_s=1", "operations=create")
    async with local_modal(*settings, rpc_timeout=RPC_TIMEOUT_S, max_throttle_wait="30") as (server, provider):
        batch = await run_batch(server, provider)
    assert_survived(batch, "throttle", ["rate_limited"])
    waited = sorted(r.create_s or 0.0 for r in batch.records if r.outcome == "ok")
    assert waited[-1] >= 1.0  # a throttled create came back no sooner than the hint said
    # and the others did not wait for it: the fastest came back well before the slowest. Not `< 1.0` on its own: on
    # a busy machine one loopback create took 2.6 s (CI, 2026-12-07); a throttled one took that, the hint and a
    # second call, so the gap holds while the machine is slow for every create alike
    assert waited[0] < waited[-1] - 0.5, waited


async def test_the_vendors_retry_hint_holds_the_next_create_by_default() -> None:
    """Without max_throttle_wait (the SDK then drops the hint and raises at once) Modal's RPCRetryPolicy is still
    honoured: a throttled create fails `rate_limited`, and the next create waits out the hint before it is sent."""
    settings = faults("throttle_prob=1.0", "retry_after_s=1.5", "operations=create")
    async with local_modal(*settings, rpc_timeout=RPC_TIMEOUT_S) as (server, provider):
        first = await run_batch(server, provider, run_id="run-hint-1")
        loop = asyncio.get_running_loop()
        started = loop.time()
        second = await run_batch(server, provider, run_id="run-hint-2")
        held_s = loop.time() - started
    assert first.failures == second.failures == {"rate_limited"}
    assert held_s >= 1.5  # the hint held the second batch's creates (before: all failed within milliseconds)
    assert first.left == second.left == 0


async def test_a_command_router_dying_mid_command_ends_as_transport() -> None:
    async with local_modal(*faults("gateway_death_prob=0.1"), rpc_timeout=RPC_TIMEOUT_S) as (server, provider):
        batch = await run_batch(server, provider)
    assert_survived(batch, "gateway_death", ["transport"])
    assert "transport" in batch.failures
    assert all(r.failure_phase in (None, "exec") for r in batch.records)
