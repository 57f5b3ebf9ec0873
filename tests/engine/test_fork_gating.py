"""A fork group's copies under the RL client's STARTING semaphore (`--client`): each copy holds one permit from its
fork until it is alive, as a fresh create does, so a client's cap on sandboxes starting at once holds across forks.
Counted on the vendor's side: a sandbox is starting from its create (a copy's: inside the fork) until its
readiness answered."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

from harness.engine.script_rollout import run_script_rollout
from harness.wire.plan import RolloutPlan
from harness.wire.records import RolloutRecord
from harness.wire.script_plan import ScriptPlan
from providers.base import FailureKind, ProviderError, ReadyObservation, SandboxRef, SandboxSpec
from tests.engine.test_script_rollout import Sinks, plan_of
from tests.support.steps_provider import StepsProvider


class CountsStarts(StepsProvider):
    """The vendor's count of sandboxes starting (created, not yet ready), and its peak."""

    def __init__(self, options: Mapping[str, Any], fail_fork_call: int | None = None) -> None:
        super().__init__(options)
        self.starting = 0
        self.peak = 0
        self.fail_fork_call = fail_fork_call  # this fork call (1-based) is refused

    async def create(self, spec: SandboxSpec) -> SandboxRef:
        self.starting += 1
        self.peak = max(self.peak, self.starting)
        return await super().create(spec)

    async def wait_ready(self, ref: SandboxRef, timeout: float) -> ReadyObservation | None:  # type: ignore[override]
        try:
            return await super().wait_ready(ref, timeout)
        finally:
            self.starting -= 1

    async def fork(self, snapshot: str, spec: SandboxSpec, count: int) -> list[SandboxRef]:
        if len(self.forks) + 1 == self.fail_fork_call:
            self.forks.append(count)
            raise ProviderError(FailureKind.CAPACITY, "scripted: no room for the copies")
        return await super().fork(snapshot, spec, count)


GROUP = plan_of({"kind": "fork", "copies": 4}, {"kind": "exec", "command": ["true"]})


async def _group(provider: CountsStarts, sinks: Sinks, gate: asyncio.Semaphore, group: str) -> RolloutRecord:
    ctx = dataclasses.replace(sinks.context(group), starting=gate)
    plan = RolloutPlan(script=GROUP.to_dict(), exec_timeout_s=10)
    script: ScriptPlan = GROUP
    return await run_script_rollout(provider, plan, ctx, sinks.ops.append, sinks.registry, script)


async def test_copies_never_start_more_at_once_than_the_clients_cap() -> None:
    provider = CountsStarts({"ready_delay_s": 0.02})  # each start overlaps the next unless the gate holds it back
    sinks = Sinks()
    gate = asyncio.Semaphore(2)
    groups = await asyncio.gather(*(_group(provider, sinks, gate, f"g{n}") for n in (1, 2)))
    assert [group.outcome for group in groups] == ["ok", "ok"]
    assert sorted(record.rollout_id for record in sinks.copies) == [f"g{g}-{i}" for g in (1, 2) for i in range(4)]
    assert all(record.outcome == "ok" for record in sinks.copies)
    assert provider.peak == 2  # the two prepared sandboxes and eight copies, never more than 2 starting
    assert sum(provider.forks) == 8 and max(provider.forks) <= 2  # forked in batches of the permits free
    assert provider.live == {} and len(sinks.registry) == 0
    for record in sinks.copies:  # a copy's create: its fork and the wait for its permit, never less than the fork
        assert record.create_s is not None and record.fork_s is not None and record.create_s >= record.fork_s
    assert not gate.locked()


async def test_a_refused_fork_gives_its_permits_back_and_the_copies_already_made_run_on() -> None:
    provider = CountsStarts({"ready_delay_s": 0.02}, fail_fork_call=2)
    sinks = Sinks()
    gate = asyncio.Semaphore(2)
    group = await _group(provider, sinks, gate, "g1")
    assert (group.outcome, group.failure_kind, group.failure_phase) == ("failed", "capacity", "fork")
    assert provider.forks[:1] == [2] and len(provider.forks) == 2  # the second batch was refused; none after it
    assert sorted(record.rollout_id for record in sinks.copies) == ["g1-0", "g1-1"]
    assert all(record.outcome == "ok" for record in sinks.copies)
    assert provider.live == {} and len(sinks.registry) == 0
    for _ in range(2):  # every permit back
        assert not gate.locked()
        await gate.acquire()
    assert gate.locked()
