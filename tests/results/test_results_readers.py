"""Results are readable by pandas, polars, duckdb and pyarrow without stampede: the contract users rely on."""

from __future__ import annotations

import asyncio
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.dataset as ds

from harness.engine.shards import ShardWriter
from harness.wire.records import ROLLOUT_SCHEMA, SCHEMA_V1_ROLLOUT_COLUMNS, OpRecord, RolloutRecord
from tests.support.rollout_rows import finished_rollout


def record(i: int, outcome: str = "ok") -> RolloutRecord:
    failed = outcome == "failed"
    return finished_rollout(
        i,
        stage="01-ramp60" if i < 5 else "02-ramp120",
        target_users=60,
        ready_s=None if failed else 0.2,
        tti_s=None if failed else 0.35 + i / 100,
        exec_count=0 if failed else 3,
        exec_s=None if failed else 2.1,
        terminate_s=0.01,
        total_s=2.5,
        outcome=outcome,
        failure_kind="ready_timeout" if failed else None,
        failure_phase="ready" if failed else None,
        error="ProviderError: ready_timeout" if failed else None,
    )


def write_shards(run_dir: Path) -> None:
    async def main() -> None:
        writer = ShardWriter(run_dir, "w0", flush_interval_s=60)
        for i in range(10):
            writer.add_rollout(record(i, "failed" if i == 3 else "ok"))
            writer.add_op(OpRecord("run", f"w0-{i:07d}", "create", 1.8e9 + i, 0.1, True))
            if i == 4:
                await writer.flush()  # two shards: readers must take the union
        await writer.close()

    asyncio.run(main())


def test_every_reader_sees_the_union_of_shards_with_typed_nulls(tmp_path):
    write_shards(tmp_path)
    assert len(list((tmp_path / "rollouts").glob("rollouts-*.parquet"))) == 2
    pattern = str(tmp_path / "rollouts" / "*.parquet")

    frame = pl.read_parquet(pattern)
    assert frame.height == 10 and set(SCHEMA_V1_ROLLOUT_COLUMNS) <= set(frame.columns)
    assert frame.filter(pl.col("outcome") == "failed")["tti_s"].to_list() == [None]

    ((count, failed, p50),) = duckdb.sql(
        f"select count(*), count(*) filter (where outcome = 'failed'), quantile_disc(tti_s, 0.5) from '{pattern}'"
    ).fetchall()
    assert (count, failed) == (10, 1) and abs(p50 - 0.40) < 1e-9  # the 5th of 9 TTIs (0.35..0.44, one failed)

    table = ds.dataset(tmp_path / "rollouts", format="parquet").to_table()
    assert table.num_rows == 10 and table.schema.equals(ROLLOUT_SCHEMA, check_metadata=False)
    assert table.schema.metadata[b"stampede.schema_version"] == b"2"
