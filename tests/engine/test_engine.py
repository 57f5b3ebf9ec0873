"""The engine process and its bridge: real processes, a real Unix socket, real parquet shards."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import gevent
import pandas as pd
import pytest

from harness.locust.engine_client import EngineClient, EngineError
from harness.wire.messages import EngineConfig, RolloutRequest, StageUpdate
from harness.wire.records import SCHEMA_V1_ROLLOUT_COLUMNS

SCRIPTED = "tests.support.scripted_provider:ScriptedProvider"


def config(tmp_path: Path, run_id: str = "run-a", **options: object) -> EngineConfig:
    return EngineConfig(
        run_id=run_id,
        worker="t0",
        out_dir=str(tmp_path),
        provider=SCRIPTED,
        provider_options={"ledger": str(tmp_path / "ledger.jsonl"), **options},
        profile="scripted",
        scenario="test",
        plan={"commands": [["true"], ["echo", "hi"]]},
        flush_interval_s=0.2,
    )


def ledger_balance(tmp_path: Path) -> tuple[int, int]:
    path = tmp_path / "ledger.jsonl"
    events = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    created = {e["id"] for e in events if e["event"] == "create"}
    terminated = {e["id"] for e in events if e["event"] == "terminate"}
    return len(created), len(created - terminated)


def rollouts_waiting_for_ready(client: EngineClient, tmp_path: Path, count: int) -> list[gevent.Greenlet]:
    """`count` rollouts in flight, each holding a created sandbox that takes 30 s to be ready: what a stop ends."""
    client.configure(config(tmp_path, ready_delay_s=30))
    greenlets = [gevent.spawn(client.run_rollout, RolloutRequest("01-s", count)) for _ in range(count)]
    deadline = time.monotonic() + 60  # a hang guard: the loop ends as soon as they are all created
    while ledger_balance(tmp_path)[0] < count and time.monotonic() < deadline:
        gevent.sleep(0.05)
    return greenlets


@pytest.fixture
def engine():
    client = EngineClient.spawn("t0")
    yield client
    client.shutdown(timeout=30)


def test_concurrent_rollouts_come_back_and_land_in_parquet(engine, tmp_path):
    engine.configure(config(tmp_path, exec_delay_s=0.01, ready_delay_s=0.05))
    greenlets = [gevent.spawn(engine.run_rollout, RolloutRequest("01-s", 50)) for _ in range(50)]
    gevent.joinall(greenlets, raise_error=True)
    records = [g.value for g in greenlets]
    assert all(r["outcome"] == "ok" for r in records)
    assert len({r["rollout_id"] for r in records}) == 50
    # All 50 were submitted before any finished, and the engine saw them in flight together.
    assert max(r["inflight_at_submit"] for r in records) == 50
    summary = engine.drain()
    assert summary["rows"]["rollouts"] == 50 and summary["outcomes"] == {"ok": 50}
    frame = pd.read_parquet(tmp_path / "run-a" / "rollouts")
    assert set(SCHEMA_V1_ROLLOUT_COLUMNS) <= set(frame.columns) and len(frame) == 50
    ops = pd.read_parquet(tmp_path / "run-a" / "ops")
    assert len(ops) == 50 * 5
    assert (tmp_path / "run-a" / "engine-t0.json").exists()
    assert ledger_balance(tmp_path) == (50, 0)


def test_killing_waiting_users_cancels_rollouts_and_terminates_their_sandboxes(engine, tmp_path):
    greenlets = rollouts_waiting_for_ready(engine, tmp_path, 20)
    gevent.killall(greenlets)  # what Locust does to users at stop
    summary = engine.drain()
    assert summary["outcomes"] == {"cancelled": 20}
    assert ledger_balance(tmp_path) == (20, 0)
    frame = pd.read_parquet(tmp_path / "run-a" / "rollouts")
    assert set(frame["outcome"]) == {"cancelled"} and set(frame["failure_phase"]) == {"ready"}


def test_parent_death_drains_the_engine(tmp_path):
    client = EngineClient.spawn("t0")
    rollouts_waiting_for_ready(client, tmp_path, 10)
    client.process.stdin.close()  # exactly what the OS does when the Locust process dies
    assert client.process.wait(timeout=30) == 0
    assert ledger_balance(tmp_path) == (10, 0)
    frame = pd.read_parquet(tmp_path / "run-a" / "rollouts")
    assert len(frame) == 10


def test_sigterm_drains_the_engine(tmp_path):
    client = EngineClient.spawn("t0")
    rollouts_waiting_for_ready(client, tmp_path, 5)
    os.kill(client.process.pid, signal.SIGTERM)
    assert client.process.wait(timeout=30) == 0
    assert ledger_balance(tmp_path) == (5, 0)


def test_configuration_errors_come_back_as_one_line(engine, tmp_path):
    bad = config(tmp_path)
    bad.provider = "no-such-vendor"
    with pytest.raises(EngineError) as info:
        engine.configure(bad)
    assert info.value.kind == "config" and "unknown provider" in str(info.value)
    with pytest.raises(EngineError) as info:
        engine.run_rollout(RolloutRequest("01-s", 1))
    assert info.value.kind == "not_configured"


def test_a_new_run_drains_the_previous_one(engine, tmp_path):
    engine.configure(config(tmp_path, run_id="run-1"))
    engine.run_rollout(RolloutRequest("01-s", 1))
    engine.configure(config(tmp_path, run_id="run-2"))
    engine.run_rollout(RolloutRequest("01-s", 1))
    engine.drain()
    assert len(pd.read_parquet(tmp_path / "run-1" / "rollouts")) == 1
    assert len(pd.read_parquet(tmp_path / "run-2" / "rollouts")) == 1


def test_init_failures_are_retried_each_attempt_a_row_but_exec_failures_are_not(engine, tmp_path):
    cfg = config(tmp_path, fail="create:rate_limited")
    cfg.plan = {"commands": [["true"]], "retries": 2, "retry_backoff_s": 0.01}
    engine.configure(cfg)
    record = engine.run_rollout(RolloutRequest("01-s", 1))
    assert (record["attempt"], record["failure_kind"]) == (3, "rate_limited")
    cfg = config(tmp_path, run_id="run-b", fail="exec:exec_error")
    cfg.plan = {"commands": [["true"]], "retries": 2, "retry_backoff_s": 0.01}
    engine.configure(cfg)
    assert engine.run_rollout(RolloutRequest("01-s", 1))["attempt"] == 1
    engine.drain()
    frame = pd.read_parquet(tmp_path / "run-a" / "rollouts")
    assert list(frame["attempt"]) == [1, 2, 3] and frame["rollout_id"].nunique() == 1
    assert len(pd.read_parquet(tmp_path / "run-b" / "rollouts")) == 1


def test_stats_carry_mergeable_per_stage_histograms(engine, tmp_path):
    from harness.wire.stage_counters import merge_stages

    engine.configure(config(tmp_path, ready_delay_s=0.02))
    gevent.joinall(
        [gevent.spawn(engine.run_rollout, RolloutRequest(stage, 5)) for stage in ["01-a"] * 6 + ["02-b"] * 4]
    )
    stats = engine.stats()
    assert stats is not None
    stages = merge_stages([stats.stages] * 2)  # as a master merges two workers
    assert (stages["01-a"].ok, stages["02-b"].ok) == (12, 8)
    assert 0.02 <= stages["01-a"].tti_quantile(0.5) < 1


def test_a_lease_whose_user_stops_mid_rollout_releases_before_its_row_comes(engine, tmp_path):
    """Locust stopping a leased user (a graceful stop) is seen while the user waits for its row, not only when a
    row comes: the lease is released during the rollout in flight, which finishes, and no other starts."""
    engine.configure(config(tmp_path, exec_delay_s=2.0))
    stop = {"now": False}
    rows: list[dict] = []
    consumer = gevent.spawn(lambda: rows.extend(engine.lease(RolloutRequest("01-a", 1), lambda: stop["now"])))
    gevent.sleep(0.5)
    stop["now"] = True  # the rollout in flight still has ~1.5 s of its command to go
    consumer.join(timeout=10)
    assert consumer.successful(), consumer.exception
    assert [row["outcome"] for row in rows] == ["ok"]
    assert engine.drain()["started"] == 1


def test_a_lease_runs_rollouts_back_to_back_in_the_stage_it_is_told(engine, tmp_path):
    """A closed-model user's lease: rows stream in, each records the stage in force when it started, and
    closing the lease stops it (its sandbox terminated) with nothing left running."""
    engine.configure(config(tmp_path, exec_delay_s=0.005))
    rows = []
    lease = engine.lease(RolloutRequest("01-a", 3))
    for row in lease:
        rows.append(row)
        if len(rows) == 3:
            engine.stage(StageUpdate("02-b", 7))
        # the update lands while later rollouts may already have started (5 ms each, longer on a busy machine):
        # read on until three rows of the new stage, bounded
        if sum(r["stage"] == "02-b" for r in rows) == 3 or len(rows) == 200:
            break
    lease.close()
    assert all(row["outcome"] == "ok" for row in rows)
    stages = [row["stage"] for row in rows]
    assert stages[:3] == ["01-a"] * 3
    switched = stages.index("02-b")
    # a rollout records the stage in force when it started: once switched, never back
    assert stages[switched:] == ["02-b"] * 3, stages
    assert {row["target_users"] for row in rows[switched:]} == {7}
    assert {row["target_users"] for row in rows[:switched]} == {3}
    assert len({row["rollout_id"] for row in rows}) == len(rows)
    # Closing stops the lease: once the close is in, nothing more starts. The rollouts the engine ran while the
    # close was on its way (5 ms each, their rows batched to Locust) are not a fixed count on a busy machine (CI of
    # 57619c4: 9 started against 7 read), so the check is that the count stops growing, 100 rollouts' time apart.
    gevent.sleep(0.5)
    before = engine.stats()
    gevent.sleep(0.5)
    after = engine.stats()
    assert before is not None and after is not None
    assert after.started == before.started >= len(rows) and after.inflight == 0
    summary = engine.drain()
    assert summary["started"] == after.started
    assert ledger_balance(tmp_path)[1] == 0  # every sandbox it created terminated
