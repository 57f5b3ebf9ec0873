"""One identity per rollout attempt: the row the engine writes and the row crash repair makes from the write-ahead agree.

A run killed mid-flight gets its rollouts' rows from the write-ahead of submits (`unfinished`); those rows must say
who each attempt was exactly as the engine's own rows do. The identity fields are one list (`RolloutIdentity`); this
fails if the write-ahead, the record or the rollouts columns drift from it.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from harness.engine.health import LoopHealth
from harness.engine.run import EngineRun
from harness.results.read.dataset import read_table
from harness.results.read.submit_ledger import read_submits, unfinished_records
from harness.wire.messages import EngineConfig, RolloutRequest
from harness.wire.records import IDENTITY_FIELDS, ROLLOUT_SCHEMA, ROLLOUTS_TABLE, RolloutIdentity
from tests.support.scripted_provider import ScriptedProvider


async def _retried_rollout(tmp_path: Path) -> Path:
    """A real engine runs one rollout whose create is rate limited twice: two attempts, two rows, two submits."""
    config = EngineConfig(
        run_id="identity",
        worker="w0",
        out_dir=str(tmp_path),
        provider="scripted",
        profile="prof",
        scenario="scen",
        plan={"commands": [["true"]], "retries": 1, "retry_backoff_s": 0.0},
    )
    run = EngineRun(config, ScriptedProvider({"fail": "create:rate_limited"}), LoopHealth())
    await run.start(RolloutRequest(stage="01-hold", target_users=7, t_intended=time.time() - 0.5))
    await run.drain(10.0)
    return config.run_dir


def test_crash_repair_rows_carry_the_identity_the_engine_wrote(tmp_path: Path) -> None:
    run_dir = asyncio.run(_retried_rollout(tmp_path))
    written = read_table(run_dir, ROLLOUTS_TABLE).to_pylist()
    assert sorted(row["attempt"] for row in written) == [1, 2]

    # every identity field reaches the write-ahead (the segment header or the submit line), none is made up
    submits = read_submits(run_dir)
    assert set(submits) == {(row["rollout_id"], row["attempt"]) for row in written}
    for submit in submits.values():
        assert set(IDENTITY_FIELDS) <= set(submit.fields)

    repaired = {(row["rollout_id"], row["attempt"]): row for row in unfinished_records(run_dir, set())}
    for row in written:
        again = repaired[(row["rollout_id"], row["attempt"])]
        exact = [name for name in IDENTITY_FIELDS if name != "t_intended"]
        assert {name: again[name] for name in exact} == {name: row[name] for name in exact}
        assert again["t_intended"] == pytest.approx(row["t_intended"], abs=1e-6)  # the file holds microseconds
    assert written[0]["profile"] == "prof" and written[1]["inflight_at_submit"] == 1


def test_the_identity_is_the_leading_columns_of_a_row() -> None:
    identity = RolloutIdentity(
        run_id="r",
        worker="w",
        rollout_id="w-1",
        provider="p",
        profile="f",
        scenario="s",
        stage="01",
        target_users=3,
        inflight_at_submit=2,
        sdk_version="sdk=1",
        t_intended=5.0,
        attempt=2,
    )
    row: dict[str, Any] = identity.record(t_submit=6.0).to_row()
    assert list(row) == ROLLOUT_SCHEMA.names
    assert {name: row[name] for name in IDENTITY_FIELDS} == {name: getattr(identity, name) for name in IDENTITY_FIELDS}
    assert [name for name in ROLLOUT_SCHEMA.names if name in IDENTITY_FIELDS] == list(IDENTITY_FIELDS)
