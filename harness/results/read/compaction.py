"""End-of-run compaction: each table folder's many small shards become one file (row groups of up to ~1M rows).

The engines write a shard per table every couple of seconds (a two-minute run leaves ~50 per table); readers are
faster and tidier on one file. Called by the process that owns the run folder once every engine and worker has
delivered (harness.locust.session `end_run`), never by the readers: a report on a run still going must not
rewrite it under the engines, and a crashed run's shards read as they are.

Atomic for readers: the compacted file is written into a hidden folder beside the table, which then trades places
with the table folder in one `renameat2(RENAME_EXCHANGE)` (Linux); a reader lists either every shard or the one
compacted file, never both and never neither. Where that call is missing, two renames leave a window of
microseconds without the folder (never a duplicate row); `compact_run` finishes that swap if it was cut short.

The compacted rollouts file also gains each duration in vendor seconds (`tti_vendor_s`, ...:
harness.wire.records.VENDOR_SECONDS_COLUMNS), the seconds summary.json and every table print. This is the one
place they can be written: the engine writes rows as they finish, the vendor's record of each sandbox (`truth/`)
arrives only at the run's end, and at a time scale the vendor's share of a duration is known only from that record
(harness.results.read.vendor_time, the same per-row seconds the summary aggregates). At time scale 1 they equal the wall
seconds. The table's metadata says how they were made (`stampede.vendor_seconds`: `wall`, `truth` or `scaled`).
"""

from __future__ import annotations

import ctypes
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from harness.results.read.dataset import load_truth, read_run_info
from harness.results.read.layout import table_files
from harness.results.read.vendor_time import to_vendor_seconds, vendor_seconds_source
from harness.wire.records import (
    COMPACTED_ROLLOUT_SCHEMA,
    OP_SCHEMA,
    OPS_TABLE,
    ROLLOUT_SCHEMA,
    ROLLOUTS_TABLE,
    TABLES,
    VENDOR_SECONDS_COLUMNS,
    epoch_seconds,
)
from harness.wire.steps import COMPACTED_STEP_SCHEMA, STEP_SCHEMA, STEP_VENDOR_SECONDS_COLUMNS, STEPS_TABLE

ROW_GROUP_ROWS = 1 << 20
_FILE_SCHEMAS = {ROLLOUTS_TABLE: ROLLOUT_SCHEMA, OPS_TABLE: OP_SCHEMA, STEPS_TABLE: STEP_SCHEMA}
_DERIVED_COLUMNS = {
    ROLLOUTS_TABLE: set(VENDOR_SECONDS_COLUMNS.values()),
    STEPS_TABLE: set(STEP_VENDOR_SECONDS_COLUMNS.values()),
}


@dataclass(frozen=True, slots=True)
class Compacted:
    table: str
    shards: int  # files the table folder held before
    rows: int


def compact_run(run_dir: Path) -> list[Compacted]:
    """Compact every table folder of a run that holds more than one file; what was compacted."""
    done = []
    for table in TABLES:
        result = compact_table(Path(run_dir), table)
        if result is not None:
            done.append(result)
    return done


def compact_table(run_dir: Path, table: str) -> Compacted | None:
    """One table folder into one file `<table>/<table>.parquet`; None when it is that already (or empty)."""
    table_dir = run_dir / table
    staging = run_dir / f".{table}.compacting"
    _finish_interrupted_swap(table_dir, staging)
    if staging.exists():  # a compaction that died: a partial output, or the old shards it had swapped out
        shutil.rmtree(staging)
    files = table_files(table_dir)
    if not files:
        return None
    compacted = table_dir / f"{table}.parquet"
    complete = _DERIVED_COLUMNS.get(table, set()) <= set(pq.read_schema(files[0]).names)
    if len(files) == 1 and complete:
        if files[0] == compacted:
            return None
        os.rename(files[0], compacted)  # one shard: the same name as a compacted table, atomically
        return Compacted(table, 1, pq.ParquetFile(compacted).metadata.num_rows)
    staging.mkdir()
    schema = _FILE_SCHEMAS.get(table) or pq.read_schema(files[0])
    out = staging / f"{table}.parquet"
    if table == ROLLOUTS_TABLE:
        add, written = _vendor_seconds(run_dir)
        rows = _write_compacted(files, schema, out, written, add)
    elif table == STEPS_TABLE:
        add, written = _step_vendor_seconds(run_dir)
        rows = _write_compacted(files, schema, out, written, add)
    else:
        rows = _write_compacted(files, schema, out, schema)
    _swap_folders(staging, table_dir)
    shutil.rmtree(staging, ignore_errors=True)  # now the old shards
    return Compacted(table, len(files), rows)


def _write_compacted(
    files: list[Path],
    schema: pa.Schema,
    out: Path,
    written: pa.Schema,
    add: Callable[[pa.Table], pa.Table] | None = None,
) -> int:
    """Stream the shards (read as `schema`) into one file (`written`), a row group per ~1M rows, one dictionary per
    column per group; `add` appends the derived columns to each group."""
    rows = 0
    pending: list[pa.Table] = []
    pending_rows = 0
    with pq.ParquetWriter(out, written, compression="zstd") as writer:
        for path in files:
            table = pq.read_table(path, schema=schema)
            pending.append(table)
            pending_rows += table.num_rows
            rows += table.num_rows
            if pending_rows >= ROW_GROUP_ROWS:
                _write_group(writer, pending, add)
                pending, pending_rows = [], 0
        if pending:
            _write_group(writer, pending, add)
    with open(out, "rb") as handle:
        os.fsync(handle.fileno())  # on disk before the shards it replaces are removed
    return rows


def _write_group(
    writer: pq.ParquetWriter, tables: list[pa.Table], add: Callable[[pa.Table], pa.Table] | None = None
) -> None:
    combined = pa.concat_tables(tables).unify_dictionaries().combine_chunks()
    if add is not None:
        combined = add(combined)
    writer.write_table(combined, row_group_size=ROW_GROUP_ROWS)


def _vendor_seconds(run_dir: Path) -> tuple[Callable[[pa.Table], pa.Table], pa.Schema]:
    """What appends the vendor-seconds columns to a group of rollouts, and the file schema that holds them.

    The run's time scale comes from run.json and the vendor's record from `truth/` (read once); each row's vendor
    seconds depend on that row and its sandbox's record only, so a group gets exactly what the summary computes
    for the same rows over the whole run.
    """
    info = read_run_info(run_dir)
    truth = load_truth(run_dir) if info.time_scale != 1.0 else None
    metadata = {
        **(COMPACTED_ROLLOUT_SCHEMA.metadata or {}),
        b"stampede.vendor_seconds": vendor_seconds_source(info, truth).encode(),
        b"stampede.time_scale": repr(info.time_scale).encode(),
    }
    schema = COMPACTED_ROLLOUT_SCHEMA.with_metadata(metadata)

    def add(table: pa.Table) -> pa.Table:
        converted = to_vendor_seconds(info, _duration_frame(table), truth).durations
        for wall, vendor in VENDOR_SECONDS_COLUMNS.items():
            column = pa.array(converted[wall], type=pa.float64(), from_pandas=True)  # NaN (never happened): null
            table = table.append_column(schema.field(vendor), column)
        return table.replace_schema_metadata(metadata)

    return add, schema


def _step_vendor_seconds(run_dir: Path) -> tuple[Callable[[pa.Table], pa.Table], pa.Schema]:
    """The steps' vendor-seconds twins: each wall duration over the run's time scale (no step has a record of its
    own in `truth/`; at time scale 1 they equal the wall seconds)."""
    scale = read_run_info(run_dir).time_scale or 1.0
    metadata = {
        **(COMPACTED_STEP_SCHEMA.metadata or {}),
        b"stampede.vendor_seconds": b"wall" if scale == 1.0 else b"scaled",
        b"stampede.time_scale": repr(scale).encode(),
    }
    schema = COMPACTED_STEP_SCHEMA.with_metadata(metadata)

    def add(table: pa.Table) -> pa.Table:
        import pyarrow.compute as pc

        for wall, vendor in STEP_VENDOR_SECONDS_COLUMNS.items():
            table = table.append_column(schema.field(vendor), pc.divide(table.column(wall), scale))
        return table.replace_schema_metadata(metadata)

    return add, schema


def _duration_frame(table: pa.Table) -> pd.DataFrame:
    """What vendor_time reads of rollouts, as the dataset reader hands it (epoch seconds, plain strings)."""
    columns = {"t_submit": epoch_seconds(table.column("t_submit")).to_numpy()}
    columns["sandbox_id"] = table.column("sandbox_id").to_numpy(zero_copy_only=False)
    for name in VENDOR_SECONDS_COLUMNS:
        columns[name] = table.column(name).to_numpy(zero_copy_only=False)
    return pd.DataFrame(columns)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _swap_folders(new: Path, current: Path) -> None:
    """`current` gets `new`'s contents and `new` the old ones, atomically where the kernel can."""
    if _exchange(new, current):
        return
    old = current.with_name(f".{current.name}.old")
    if old.exists():
        shutil.rmtree(old)
    os.rename(current, old)
    os.rename(new, current)
    os.rename(old, new)


def _exchange(a: Path, b: Path) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    result = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return bool(result == 0)


def _finish_interrupted_swap(table_dir: Path, staging: Path) -> None:
    """The fallback swap died between its renames: the table folder is missing and the compacted one is staged."""
    old = table_dir.with_name(f".{table_dir.name}.old")
    if table_dir.exists() or not old.is_dir():
        return
    if staging.is_dir() and table_files(staging):  # staged only once complete: it replaces the shards in `old`
        os.rename(staging, table_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(old, table_dir)
