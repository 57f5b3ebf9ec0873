"""A rollout plan run by the engine's lifecycle: every step a row, the first failure classified in its step, every
sandbox (a fork group's copies too) terminated whatever happens."""

from __future__ import annotations

import asyncio
import io
import tarfile
from typing import Any

from harness.engine.rollout import RolloutCancelled, RolloutContext, SandboxRegistry
from harness.engine.script_rollout import reported_command_s, run_script_rollout
from harness.wire.plan import RolloutPlan
from harness.wire.records import OpRecord, RolloutIdentity, RolloutRecord
from harness.wire.script_plan import ScriptPlan, parse_plan
from harness.wire.steps import StepRecord
from tests.support.steps_provider import StepsProvider


def plan_of(*steps: dict[str, Any]) -> ScriptPlan:
    return parse_plan({"plan": {"name": "t"}, "step": [{"kind": "create", "image_size_mb": 512}, *steps]}, "t.toml")


class Sinks:
    def __init__(self) -> None:
        self.steps: list[StepRecord] = []
        self.copies: list[RolloutRecord] = []
        self.ops: list[OpRecord] = []
        self.registry = SandboxRegistry()

    def context(self, rollout_id: str = "g1") -> RolloutContext:
        identity = RolloutIdentity(
            run_id="run",
            worker="w",
            rollout_id=rollout_id,
            provider="steps",
            profile="p",
            scenario="s",
            stage="01-x",
            target_users=1,
            inflight_at_submit=1,
        )
        return RolloutContext(identity, on_step=self.steps.append, on_record=self.copies.append)

    async def run(self, provider: StepsProvider, script: ScriptPlan) -> RolloutRecord:
        plan = RolloutPlan(script=script.to_dict(), exec_timeout_s=10)
        return await run_script_rollout(provider, plan, self.context(), self.ops.append, self.registry, script)

    def rows(self, rollout_id: str) -> list[StepRecord]:
        return [row for row in self.steps if row.rollout_id == rollout_id]


async def test_every_step_kind_is_a_row_with_what_it_moved_and_the_sandbox_ends():
    provider = StepsProvider({"pull_s": 0.01})
    sinks = Sinks()
    script = plan_of(
        {"kind": "exec", "command": ["true"], "name": "probe"},
        {"kind": "upload", "dest": "/w/repo", "files": "const:30", "file_size": "const:100"},
        {"kind": "upload", "dest": "/w/many", "files": "const:5", "file_size": "const:10", "mode": "files"},
        {"kind": "upload", "path": "/w/patch.diff", "file_size": "const:64", "name": "edits"},
        {"kind": "exec", "command": ["echo", "hi"], "repeat": "const:3", "stream": True, "think": "const:0.01"},
        {"kind": "exec", "command": ["sleep", "0.02"], "command_s": 0.02, "name": "timed"},
        {"kind": "background", "command": ["sleep", "1"]},
        {"kind": "download", "path": "/w/patch.diff"},
        {"kind": "snapshot"},
        {"kind": "terminate"},
    )
    record = await sinks.run(provider, script)
    assert record.outcome == "ok", record.error
    rows = sinks.rows("g1")
    assert [row.kind for row in rows] == [
        "create", "pull", "ready", "exec", "upload", "upload", "upload", "exec", "exec", "exec", "exec",
        "background", "download", "snapshot", "terminate",
    ]  # fmt: skip
    assert [row.step for row in rows] == [0, 0, 0, 1, 2, 3, 4, 5, 5, 5, 6, 7, 8, 9, 10]
    assert all(row.ok and row.duration_s is not None and row.duration_s >= 0 for row in rows)
    starts = [row.t_start_s for row in rows if row.kind != "pull"]
    assert starts == sorted(starts)  # one clock from the rollout's start
    tar, files, one = (row for row in rows if row.kind == "upload")
    assert tar.files == 30 and tar.bytes is not None and tar.bytes >= 3000  # one archive of 30 files
    assert (files.files, files.bytes) == (5, 50) and (one.files, one.bytes) == (1, 64)
    with tarfile.open(fileobj=io.BytesIO(provider.uploaded["/w/repo/stampede-upload.tar"])) as archive:
        members = archive.getmembers()
        assert len(members) == 30 and all(member.size == 100 for member in members)
        assert members[0].name == "w/repo/f00000.txt" and len(archive.extractfile(members[0]).read()) == 100
    assert next(row for row in rows if row.kind == "download").bytes == 64  # what went in comes out
    streamed = [row for row in rows if row.name == "echo"]
    assert len(streamed) == 3 and all(row.first_byte_s is not None for row in streamed)
    (timed,) = [row for row in rows if row.name == "timed"]
    assert timed.command_s == 0.02 and timed.overhead_s == timed.duration_s - 0.02
    # the rollout row: TTI ends with the first command, per-phase sums from the same rows
    # (after the command's end and before the next step began, on the rollout's one clock: a 10 ms closeness to
    # the row's end failed when a busy machine paused the rollout between the two stamps)
    probe, following = rows[3], rows[4]
    assert record.tti_s is not None and probe.duration_s is not None
    assert probe.t_start_s + probe.duration_s - 1e-9 <= record.tti_s <= following.t_start_s
    assert record.pull_s == 0.01 and record.exec_count == 5
    assert record.upload_s == sum(row.duration_s or 0 for row in rows if row.kind == "upload")
    assert record.exec_overhead_s == timed.overhead_s and record.snapshot_s is not None
    assert provider.live == {} and len(sinks.registry) == 0


async def test_a_fork_group_is_a_row_per_copy_and_none_leaks_when_a_copy_fails():
    provider = StepsProvider({"fail_copy": 1})
    sinks = Sinks()
    script = plan_of(
        {"kind": "upload", "path": "/w/prompt.txt", "file_size": "const:10"},
        {"kind": "fork", "copies": 4},
        {"kind": "exec", "command": ["true"], "repeat": "const:2"},
        {"kind": "download", "path": "/w/prompt.txt"},
    )
    group = await sinks.run(provider, script)
    assert group.outcome == "ok" and group.group_id == "g1" and group.fork_s is not None
    assert provider.forks == [4]
    copies = {record.rollout_id: record for record in sinks.copies}
    assert sorted(copies) == ["g1-0", "g1-1", "g1-2", "g1-3"]
    failed = copies.pop("g1-1")
    assert (failed.outcome, failed.failure_kind, failed.failure_phase) == ("failed", "exec_error", "exec")
    for record in copies.values():
        assert record.outcome == "ok" and record.group_id == "g1" and record.exec_count == 2
        assert record.create_s == record.fork_s == group.fork_s  # a copy's create is the fork
        assert record.tti_s is not None and record.tti_s > record.create_s
        kinds = [row.kind for row in sinks.rows(record.rollout_id)]
        assert kinds == ["ready", "exec", "exec", "download", "terminate"]  # the snapshot's file is in each copy
    group_kinds = [row.kind for row in sinks.rows("g1")]
    assert group_kinds == ["create", "ready", "upload", "snapshot", "fork", "terminate"]
    assert [row.copies for row in sinks.rows("g1") if row.kind == "fork"] == [4]
    assert provider.live == {} and len(sinks.registry) == 0  # the prepared sandbox and every copy
    assert len(provider.terminated) == 5


async def test_cancelling_a_group_mid_copies_ends_every_copy():
    provider = StepsProvider({})
    sinks = Sinks()
    script = plan_of({"kind": "fork", "copies": 3}, {"kind": "exec", "command": ["sleep", "30"]})
    task = asyncio.create_task(sinks.run(provider, script))
    for _ in range(200):
        await asyncio.sleep(0.01)
        if len(provider.live) == 3 and sinks.rows("g1-2"):
            break
    task.cancel()
    try:
        await task
    except RolloutCancelled as cancelled:
        assert cancelled.record.outcome == "cancelled"
    assert provider.live == {} and len(sinks.registry) == 0
    assert sorted(record.outcome for record in sinks.copies) == ["cancelled"] * 3


async def test_failures_are_classified_in_the_step_that_failed():
    sinks = Sinks()
    missing = await sinks.run(StepsProvider({}), plan_of({"kind": "download", "path": "/nope"}))
    assert (missing.failure_kind, missing.failure_phase) == ("transfer_error", "download")
    (row,) = [row for row in sinks.rows("g1") if row.kind == "download"]
    assert (row.ok, row.failure_kind, row.failure_phase) == (False, "transfer_error", "download")

    sinks = Sinks()
    pulled = await sinks.run(StepsProvider({"pull_fail": True}), plan_of({"kind": "exec", "command": ["true"]}))
    assert (pulled.failure_kind, pulled.failure_phase) == ("image", "pull")  # the vendor placed it in the pull
    assert [(row.kind, row.ok) for row in sinks.rows("g1")] == [("create", True), ("ready", False), ("terminate", True)]
    assert pulled.tti_s is None


def test_a_command_may_report_its_own_time():
    assert reported_command_s("building\nSTAMPEDE_COMMAND_S=0.25\n") == 0.25
    assert reported_command_s("STAMPEDE_COMMAND_S=1\nSTAMPEDE_COMMAND_S=2e-3") == 0.002
    assert reported_command_s("no mark here") is None


async def test_a_tree_upload_shares_the_engines_few_trees_at_any_concurrency():
    """960 rollouts each holding a 20 MB repository of their own was 19 GB of payloads in the engine; the trees an
    upload step sends are REPOSITORIES_PER_STEP made once and shared, each a draw of the plan's distributions."""
    from harness.engine.script_rollout import REPOSITORIES_PER_STEP

    provider = StepsProvider({})
    sent: list[bytes] = []
    upload_file = provider.upload_file

    async def keep(ref: Any, path: str, data: bytes) -> None:
        sent.append(data)
        await upload_file(ref, path, data)

    provider.upload_file = keep  # type: ignore[method-assign]
    sinks = Sinks()
    script = plan_of({"kind": "upload", "dest": "/w/repo", "files": "uniform:20,400", "file_size": "const:64"})
    plan = RolloutPlan(script=script.to_dict(), exec_timeout_s=10)
    records = await asyncio.gather(
        *(
            run_script_rollout(provider, plan, sinks.context(f"r{i}"), sinks.ops.append, sinks.registry, script)
            for i in range(4 * REPOSITORIES_PER_STEP)
        )
    )
    assert all(record.outcome == "ok" for record in records)
    assert len(sent) == 4 * REPOSITORIES_PER_STEP
    distinct = {id(data) for data in sent}
    assert 1 < len(distinct) <= REPOSITORIES_PER_STEP  # shared objects, not copies
    counts = {row.files for row in sinks.steps if row.kind == "upload"}
    assert len(counts) > 1 and all(20 <= count <= 400 for count in counts)  # each tree its own draw
