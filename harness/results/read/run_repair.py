"""A crashed run's folder repaired once, so a plain parquet reader sees every attempt stampede's own readers see.

A run killed with -9 (or OOM) leaves attempts with no row: rows still in an engine's buffer, rollouts that never
finished. Stampede's readers reconcile the engines' write-ahead of submits (`submit_ledger`) in memory; pandas,
polars and duckdb read only the parquet. The first stampede command that reads a crashed run (`read_run_info`)
writes the missing attempts' `unfinished` rows as one more shard of the rollouts table, in the engine's file schema
and the engine's way (a hidden name beside the table folder, renamed in: a reader never sees half a file). Under a
lock, re-counted inside it: two commands at once write the rows once; a second command finds nothing missing. A
folder it cannot write (a read-only copy) is left alone: the readers still reconcile in memory.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from harness.results.read.layout import files_of
from harness.results.read.submit_ledger import recorded_keys, submit_logs, unfinished_records
from harness.wire.records import ROLLOUT_SCHEMA, ROLLOUTS_TABLE, file_table

LOCK_NAME = ".repair.lock"
SHARD_STEM = "rollouts-unfinished"

log = logging.getLogger("stampede.results")


def repair_crashed_run(run_dir: Path) -> int:
    """Write the `unfinished` rows of a crashed run's attempts that have none; how many were written (0 when the
    folder is whole, is a v1 folder, or cannot be written)."""
    run_dir = Path(run_dir)
    if not submit_logs(run_dir) or files_of(run_dir, ROLLOUTS_TABLE).v1:
        return 0  # nothing written ahead; or schema v1, whose readers never read a table folder
    try:
        lock = os.open(run_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return 0
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _write_missing(run_dir)
    except (OSError, pa.ArrowException) as exc:
        log.warning("could not write %s's unfinished rows (its readers still count them): %s", run_dir, exc)
        return 0
    finally:
        os.close(lock)


def _write_missing(run_dir: Path) -> int:
    files = [str(path) for path in files_of(run_dir, ROLLOUTS_TABLE).v2]
    keys = pads.dataset(files, schema=ROLLOUT_SCHEMA, format="parquet").to_table(columns=["rollout_id", "attempt"])
    rows = unfinished_records(run_dir, recorded_keys(keys.column(0).to_pylist(), keys.column(1).to_pylist()))
    if not rows:
        return 0
    table_dir = run_dir / ROLLOUTS_TABLE
    table_dir.mkdir(exist_ok=True)
    number = 0
    while (path := table_dir / f"{SHARD_STEM}-{number:03d}.parquet").exists():
        number += 1
    tmp = run_dir / f".{ROLLOUTS_TABLE}-{path.name}.tmp"
    try:
        pq.write_table(file_table(rows, ROLLOUT_SCHEMA), tmp, compression="zstd")
        with open(tmp, "rb") as written:
            os.fsync(written.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return len(rows)


__all__ = ["repair_crashed_run"]
