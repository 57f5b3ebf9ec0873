"""Results layout, schema v2: a folder per table, compacted at the end, UTC timestamps, dictionaries, units,
and a `latest` pointer that recursive readers do not follow. What users' scripts (pandas, polars, duckdb,
pyarrow, without stampede) and v1 folders rely on."""

from __future__ import annotations

import asyncio
import glob
import json
from pathlib import Path

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

from harness.engine.shards import ShardWriter
from harness.errors import UsageError
from harness.results.read import compaction
from harness.results.read.dataset import load_ops, load_rollout_frame, load_rollouts, load_truth, read_run_info
from harness.results.read.layout import files_to_ship, shipped_path
from harness.results.read.run_pointer import resolve_run_dir
from harness.wire.records import OP_READ_SCHEMA, ROLLOUT_READ_SCHEMA, OpRecord, RolloutRecord
from tests.support.commands import stampede
from tests.support.rollout_rows import finished_rollout

TABLES = ("rollouts", "ops", "truth")
WALL_CLOCK_COLUMNS = {
    "rollouts": ("t_submit", "t_intended"),
    "ops": ("t_start",),
    "truth": ("created_wall", "ready_wall", "ended_wall", "first_exec_start_wall", "first_exec_done_wall"),
}


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    """One real short run against the embedded simulated vendor; its out folder."""
    out = tmp_path_factory.mktemp("layout-out")
    result = stampede(
        "run",
        "--profile",
        "ideal",
        "--scenario",
        "burst",
        "--users",
        "30",
        "--out",
        str(out),
        "--run-id",
        "r1",
        "--progress-interval",
        "0",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def expected_rows(run_dir: Path) -> dict[str, int]:
    rollouts = json.loads((run_dir / "run.json").read_text())["rows"]["rollouts"]
    return {"rollouts": rollouts, "ops": len(load_ops(run_dir)), "truth": rollouts}


@pytest.mark.parametrize("table", TABLES)
def test_each_library_reads_each_table_with_one_call_on_its_folder(real_run, table):
    run_dir = real_run / "r1"
    folder = run_dir / table
    rows = expected_rows(run_dir)[table]
    assert rows > 0

    frame = pd.read_parquet(folder)
    assert len(frame) == rows
    for column in WALL_CLOCK_COLUMNS[table]:
        assert isinstance(frame[column].dtype, pd.DatetimeTZDtype) and str(frame[column].dt.tz) == "UTC", column

    polars_frame = pl.read_parquet(folder / "*.parquet")
    assert polars_frame.height == rows
    for column in WALL_CLOCK_COLUMNS[table]:
        assert polars_frame.schema[column] == pl.Datetime("us", "UTC"), column

    ((count,),) = duckdb.sql(f"select count(*) from read_parquet('{folder}/*.parquet')").fetchall()
    assert count == rows

    for arrow_table in (pq.read_table(folder), pads.dataset(folder, format="parquet").to_table()):
        assert arrow_table.num_rows == rows
        for column in WALL_CLOCK_COLUMNS[table]:
            assert arrow_table.schema.field(column).type == pa.timestamp("us", tz="UTC"), column


def test_duckdb_sees_wall_clock_columns_as_timestamps_with_time_zone(real_run):
    folder = real_run / "r1" / "rollouts"
    ((kind,),) = duckdb.sql(f"select typeof(t_submit) from read_parquet('{folder}/*.parquet') limit 1").fetchall()
    assert kind == "TIMESTAMP WITH TIME ZONE"


def test_every_table_carries_its_name_version_units_and_dictionaries(real_run):
    for table in TABLES:
        schema = pq.read_schema(next((real_run / "r1" / table).glob("*.parquet")))
        assert schema.metadata[b"stampede.schema_version"] == b"2"
        assert schema.metadata[b"stampede.table"] == table.encode()
    rollouts = pq.read_schema(real_run / "r1" / "rollouts" / "rollouts.parquet")
    assert rollouts.field("tti_s").metadata == {b"unit": b"s"}
    for column in ("provider", "profile", "scenario", "stage", "outcome", "failure_kind", "failure_phase", "worker"):
        assert pa.types.is_dictionary(rollouts.field(column).type), column
    assert pa.types.is_dictionary(pq.read_schema(real_run / "r1" / "ops" / "ops.parquet").field("op").type)
    truth = pq.read_schema(real_run / "r1" / "truth" / "truth.parquet")
    assert truth.field("created_s").metadata == {b"unit": b"s", b"clock": b"vendor"}
    assert json.loads((real_run / "r1" / "run.json").read_text())["schema_version"] == 2


def test_the_end_of_the_run_leaves_one_file_per_table_and_nothing_hidden(real_run):
    run_dir = real_run / "r1"
    for table in TABLES:
        assert [p.name for p in (run_dir / table).iterdir()] == [f"{table}.parquet"]
    assert not list(run_dir.glob(".*")), "a staging folder or temporary file was left behind"
    assert not list(run_dir.glob("*.parquet")), "a table file outside its folder"


def test_a_recursive_glob_over_the_out_folder_counts_the_run_once(real_run):
    rows = expected_rows(real_run / "r1")["rollouts"]
    found = glob.glob(str(real_run / "**" / "rollouts" / "*.parquet"), recursive=True)
    assert len(found) == 1
    assert sum(pq.ParquetFile(path).metadata.num_rows for path in found) == rows
    ((count,),) = duckdb.sql(f"select count(*) from read_parquet('{real_run}/**/rollouts/*.parquet')").fetchall()
    assert count == rows


def test_latest_is_a_file_naming_the_run_and_commands_still_take_it(real_run):
    latest = real_run / "latest"
    assert latest.is_file() and not latest.is_symlink()
    assert latest.read_text().strip() == "r1"
    assert resolve_run_dir(latest) == real_run / "r1"
    assert read_run_info(latest).run_id == "r1"
    result = stampede("summary", str(latest), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "ended: completed" in result.stdout


def test_the_analysis_reads_v2_timestamps_as_float_epoch_seconds(real_run):
    run_dir = real_run / "r1"
    rollouts = load_rollouts(run_dir)
    assert rollouts["t_submit"].dtype == "float64" and rollouts["t_submit"].min() > 1.7e9
    frame = load_rollout_frame(run_dir)
    assert frame["t_submit"].dtype == "float64" and isinstance(frame["stage"].dtype, pd.CategoricalDtype)
    assert load_ops(run_dir)["t_start"].dtype == "float64"
    truth = load_truth(run_dir)
    assert truth["created_wall"].dtype == "float64"
    # the same instants, whichever reader: pandas' timestamp and the analysis' float agree to the microsecond
    raw = pd.read_parquet(run_dir / "rollouts", columns=["rollout_id", "t_submit"]).set_index("rollout_id")
    seconds = raw["t_submit"].astype("int64") / 1e6
    joined = rollouts.set_index("rollout_id")["t_submit"].reindex(seconds.index)
    assert (abs(joined - seconds) < 1e-6).all()


# -- without a run: layouts written by hand ------------------------------------------------------------------


def rollout(i: int) -> RolloutRecord:
    return finished_rollout(
        i,
        scenario="burst",
        stage="01-burst",
        t_submit=1.8e9 + i / 8,
        tti_s=0.3 + i / 100,
        t_intended=1.8e9 + i / 8 - 0.001,
    )


def write_v2_shards(run_dir: Path, count: int, per_shard: int) -> None:
    """The engine's shard writer, as a run leaves it before compaction (or after a crash)."""

    async def main() -> None:
        writer = ShardWriter(run_dir, "w0", flush_interval_s=60)
        for i in range(count):
            writer.add_rollout(rollout(i))
            writer.add_op(OpRecord("run", f"w0-{i:07d}", "create", 1.8e9 + i / 8, 0.1, True, worker="w0"))
            if (i + 1) % per_shard == 0:
                await writer.flush()
        await writer.close()

    asyncio.run(main())


def write_v1_folder(run_dir: Path, count: int) -> None:
    """A folder as schema v1 wrote it: flat shards of every table side by side, float epoch seconds."""
    run_dir.mkdir(parents=True)
    records = [rollout(i) for i in range(count)]
    half = count // 2
    for seq, part in enumerate((records[:half], records[half:])):
        table = pa.Table.from_pylist([r.to_row() for r in part], schema=ROLLOUT_READ_SCHEMA)
        pq.write_table(table, run_dir / f"rollouts-w0-{seq:05d}.parquet")
    ops = [OpRecord("run", r.rollout_id, "create", r.t_submit, 0.1, True, worker="w0").to_row() for r in records]
    pq.write_table(pa.Table.from_pylist(ops, schema=OP_READ_SCHEMA), run_dir / "ops-w0-00000.parquet")
    truth = [{"id": r.sandbox_id, "status": "TERMINATED", "created_wall": r.t_submit + 0.01} for r in records]
    pq.write_table(pa.Table.from_pylist(truth), run_dir / "sim_truth.parquet")
    (run_dir / "run.json").write_text(json.dumps({"schema_version": 1, "run_id": "v1", "status": "completed"}))
    (run_dir.parent / "latest").symlink_to(run_dir.name, target_is_directory=True)


def test_a_v1_folder_still_reads_through_the_dataset(tmp_path):
    write_v1_folder(tmp_path / "v1", 10)
    rollouts = load_rollouts(tmp_path / "v1")
    assert len(rollouts) == 10 and rollouts["t_submit"].dtype == "float64"
    assert rollouts["t_submit"].min() == 1.8e9
    assert len(load_rollout_frame(tmp_path / "v1")) == 10
    assert len(load_ops(tmp_path / "v1")) == 10
    assert load_truth(tmp_path / "v1")["created_wall"].min() == pytest.approx(1.8e9 + 0.01)
    info = read_run_info(tmp_path / "latest")  # the old symlink pointer still works
    assert info.run_id == "v1" and info.provider == "stub" and info.scenario == "burst"


def test_v1_and_v2_folders_of_the_same_rows_read_alike(tmp_path):
    write_v1_folder(tmp_path / "v1", 12)
    write_v2_shards(tmp_path / "v2", 12, per_shard=5)
    v1 = load_rollouts(tmp_path / "v1").sort_values("rollout_id", ignore_index=True)
    v2 = load_rollouts(tmp_path / "v2").sort_values("rollout_id", ignore_index=True)
    assert list(v1.columns) == list(v2.columns)
    assert (abs(v1["t_submit"] - v2["t_submit"]) < 1e-6).all()
    assert (abs(v1["t_intended"] - v2["t_intended"]) < 1e-6).all()
    pd.testing.assert_frame_equal(
        v1.drop(columns=["t_submit", "t_intended"]), v2.drop(columns=["t_submit", "t_intended"])
    )


def test_a_crashed_runs_uncompacted_shards_read_with_one_call(tmp_path):
    run_dir = tmp_path / "crashed"
    write_v2_shards(run_dir, 23, per_shard=5)
    (run_dir / ".rollouts-rollouts-w0-00099.parquet.tmp").write_bytes(b"PAR1 half a file")  # killed mid-write
    assert len(list((run_dir / "rollouts").glob("*.parquet"))) == 5
    assert len(pd.read_parquet(run_dir / "rollouts")) == 23
    assert pl.read_parquet(run_dir / "rollouts" / "*.parquet").height == 23
    assert len(load_rollouts(run_dir)) == 23 and len(load_ops(run_dir)) == 23


def test_compaction_keeps_every_row_and_the_schema_in_row_groups(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    write_v2_shards(run_dir, 23, per_shard=5)
    before = load_rollouts(run_dir).sort_values("rollout_id", ignore_index=True)
    monkeypatch.setattr(compaction, "ROW_GROUP_ROWS", 10)
    done = compaction.compact_run(run_dir)
    assert {(c.table, c.shards, c.rows) for c in done} == {("rollouts", 5, 23), ("ops", 5, 23)}
    compacted = run_dir / "rollouts" / "rollouts.parquet"
    assert [p.name for p in (run_dir / "rollouts").iterdir()] == ["rollouts.parquet"]
    assert not list(run_dir.glob(".*"))
    meta = pq.ParquetFile(compacted)
    assert meta.metadata.num_rows == 23 and meta.metadata.num_row_groups >= 2
    assert meta.schema_arrow.metadata[b"stampede.table"] == b"rollouts"
    assert pa.types.is_dictionary(meta.schema_arrow.field("stage").type)
    after = load_rollouts(run_dir).sort_values("rollout_id", ignore_index=True)
    pd.testing.assert_frame_equal(before, after)
    assert compaction.compact_run(run_dir) == []  # once is enough


def test_compaction_finishes_a_swap_cut_short_between_its_renames(tmp_path):
    """The fallback (no renameat2) renames twice: killed between them, the table folder is missing."""
    run_dir = tmp_path / "run"
    write_v2_shards(run_dir, 12, per_shard=4)
    staging = run_dir / ".rollouts.compacting"
    staging.mkdir()
    pq.write_table(pq.read_table(run_dir / "rollouts"), staging / "rollouts.parquet")
    (run_dir / "rollouts").rename(run_dir / ".rollouts.old")
    compaction.compact_run(run_dir)
    assert [p.name for p in (run_dir / "rollouts").iterdir()] == ["rollouts.parquet"]
    assert len(load_rollouts(run_dir)) == 12 and not list(run_dir.glob(".*"))


def test_a_pointer_naming_a_missing_run_is_one_line(tmp_path):
    (tmp_path / "latest").write_text("gone\n")
    with pytest.raises(UsageError, match="names gone"):
        resolve_run_dir(tmp_path / "latest")
    assert resolve_run_dir(tmp_path) == tmp_path  # a folder is itself


def test_a_workers_table_files_land_in_their_folders_and_nothing_escapes_the_run(tmp_path):
    worker_run = tmp_path / "spool" / "r1"
    write_v2_shards(worker_run, 6, per_shard=3)
    (worker_run / "engine-w1.json").write_text("{}")
    names = [path.relative_to(worker_run).as_posix() for path in files_to_ship(worker_run)]
    assert names == [
        "engine-w1.json",
        "ops/ops-w0-00000.parquet",
        "ops/ops-w0-00001.parquet",
        "rollouts/rollouts-w0-00000.parquet",
        "rollouts/rollouts-w0-00001.parquet",
    ]
    master_run = tmp_path / "master" / "r1"
    assert [shipped_path(master_run, name) for name in names] == [master_run / name for name in names]
    for hostile in (
        "../x.parquet",
        "/etc/passwd",
        "rollouts/../../x",
        ".hidden",
        "rollouts/.x.tmp",
        "rollouts",
        "other/x.parquet",
        "rollouts/a/b.parquet",
        "",
        "a\\b",
    ):
        assert shipped_path(master_run, hostile) is None, hostile
