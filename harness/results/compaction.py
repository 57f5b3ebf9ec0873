"""End-of-run compaction: each table folder's many small shards become one file (row groups of up to ~1M rows).

The engines write a shard per table every couple of seconds (a two-minute run leaves ~50 per table); readers are
faster and tidier on one file. Called by the process that owns the run folder once every engine and worker has
delivered (harness.locust.session `end_run`), never by the readers: a report on a run still going must not
rewrite it under the engines, and a crashed run's shards read as they are.

Atomic for readers: the compacted file is written into a hidden folder beside the table, which then trades places
with the table folder in one `renameat2(RENAME_EXCHANGE)` (Linux); a reader lists either every shard or the one
compacted file, never both and never neither. Where that call is missing, two renames leave a window of
microseconds without the folder (never a duplicate row); `compact_run` finishes that swap if it was cut short.
"""

from __future__ import annotations

import ctypes
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from harness.results.layout import table_files
from harness.wire.records import OP_SCHEMA, OPS_TABLE, ROLLOUT_SCHEMA, ROLLOUTS_TABLE, TABLES

ROW_GROUP_ROWS = 1 << 20
_FILE_SCHEMAS = {ROLLOUTS_TABLE: ROLLOUT_SCHEMA, OPS_TABLE: OP_SCHEMA}


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
    compacted = table_dir / f"{table}.parquet"
    if len(files) == 1 and files[0] != compacted:  # one shard: the same name as a compacted table, atomically
        os.rename(files[0], compacted)
        return Compacted(table, 1, pq.ParquetFile(compacted).metadata.num_rows)
    if len(files) <= 1:
        return None
    staging.mkdir()
    rows = _write_compacted(files, _FILE_SCHEMAS.get(table) or pq.read_schema(files[0]), staging / f"{table}.parquet")
    _swap_folders(staging, table_dir)
    shutil.rmtree(staging, ignore_errors=True)  # now the old shards
    return Compacted(table, len(files), rows)


def _write_compacted(files: list[Path], schema: pa.Schema, out: Path) -> int:
    """Stream the shards into one file, a row group per ~1M rows, one dictionary per column per group."""
    rows = 0
    pending: list[pa.Table] = []
    pending_rows = 0
    with pq.ParquetWriter(out, schema, compression="zstd") as writer:
        for path in files:
            table = pq.read_table(path, schema=schema)
            pending.append(table)
            pending_rows += table.num_rows
            rows += table.num_rows
            if pending_rows >= ROW_GROUP_ROWS:
                _write_group(writer, pending)
                pending, pending_rows = [], 0
        if pending:
            _write_group(writer, pending)
    with open(out, "rb") as handle:
        os.fsync(handle.fileno())  # on disk before the shards it replaces are removed
    return rows


def _write_group(writer: pq.ParquetWriter, tables: list[pa.Table]) -> None:
    combined = pa.concat_tables(tables).unify_dictionaries().combine_chunks()
    writer.write_table(combined, row_group_size=ROW_GROUP_ROWS)


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
