"""Parquet shards written while the run goes, so a crash loses seconds, not the run.

Each engine writes its own shards into the run folder's table folders (`rollouts/rollouts-<worker>-<seq>.parquet`,
`ops/ops-<worker>-<seq>.parquet`, schema v2); a reader takes a table folder whole. A shard is written to a hidden
temporary name beside the table folder and renamed into it, so a reader never sees half a file. At the end of the
run the Locust side compacts each table (harness.results.compaction).
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from harness.wire.records import (
    OP_SCHEMA,
    OPS_TABLE,
    ROLLOUT_SCHEMA,
    ROLLOUTS_TABLE,
    OpRecord,
    RolloutRecord,
    file_table,
)

DEFAULT_FLUSH_INTERVAL_S = 2.0
DEFAULT_FLUSH_ROWS = 20_000


def safe_name(text: str) -> str:
    """A worker name usable in a file name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text) or "w"


def write_table_atomically(records: Sequence[Any], schema: pa.Schema, path: Path) -> None:
    """Records (dataclasses whose fields are the schema's columns) as one parquet file, built column by column:
    no per-row dict on the engine's hot path, and Arrow converts each column's list in one call (timestamps and
    dictionaries too: `file_table`). The temporary file sits one folder up, so a table folder holds only
    complete files (polars and duckdb would read a hidden one)."""
    table = file_table(records, schema)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent.parent / f".{path.parent.name}-{path.name}.tmp"
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)


@dataclass(slots=True)
class ShardCounts:
    rollouts: int = 0
    ops: int = 0
    shards: int = 0


class ShardWriter:
    """Buffers records and writes them as parquet shards, off the event loop."""

    def __init__(
        self,
        run_dir: Path,
        worker: str,
        *,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
        flush_rows: int = DEFAULT_FLUSH_ROWS,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.worker = safe_name(worker)
        self.flush_interval_s = flush_interval_s
        self.flush_rows = flush_rows
        self._rollouts: list[RolloutRecord] = []
        self._ops: list[OpRecord] = []
        self._seq = 0
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._last_flush = time.monotonic()
        self._closed = False
        self._kicks: set[asyncio.Task[None]] = set()
        self.counts = ShardCounts()
        self.run_dir.mkdir(parents=True, exist_ok=True)

    def add_rollout(self, record: RolloutRecord) -> None:
        self._rollouts.append(record)
        if self._closed:
            self.flush_sync()  # a straggler after close: rare, and losing it would be worse than blocking
        elif len(self._rollouts) >= self.flush_rows:
            self._kick()

    def add_op(self, record: OpRecord) -> None:
        self._ops.append(record)
        if self._closed:
            self.flush_sync()
        elif len(self._ops) >= self.flush_rows:
            self._kick()

    def _kick(self) -> None:
        task = asyncio.get_running_loop().create_task(self.flush())
        self._kicks.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(self._kicks.discard)

    def start(self) -> None:
        """Flush on a timer until `close()`."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._flush_periodically())

    async def _flush_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval_s)
            await self.flush()

    async def flush(self) -> None:
        async with self._lock:
            rollouts, self._rollouts = self._rollouts, []
            ops, self._ops = self._ops, []
            if not rollouts and not ops:
                return
            seq = self._seq
            self._seq += 1
            await asyncio.to_thread(self._write, seq, rollouts, ops)
            self.counts.rollouts += len(rollouts)
            self.counts.ops += len(ops)
            self.counts.shards += 1
            self._last_flush = time.monotonic()

    def _write(self, seq: int, rollouts: list[RolloutRecord], ops: list[OpRecord]) -> None:
        if rollouts:
            name = f"{ROLLOUTS_TABLE}-{self.worker}-{seq:05d}.parquet"
            write_table_atomically(rollouts, ROLLOUT_SCHEMA, self.run_dir / ROLLOUTS_TABLE / name)
        if ops:
            name = f"{OPS_TABLE}-{self.worker}-{seq:05d}.parquet"
            write_table_atomically(ops, OP_SCHEMA, self.run_dir / OPS_TABLE / name)

    async def close(self) -> None:
        if self._task is not None:
            async with self._lock:  # never cancel the timer task in the middle of a write
                self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        await self.flush()
        self._closed = True

    def flush_sync(self) -> None:
        """Last resort on an abnormal exit: write what is buffered without an event loop."""
        rollouts, self._rollouts = self._rollouts, []
        ops, self._ops = self._ops, []
        if rollouts or ops:
            self._write(self._seq, rollouts, ops)
            self._seq += 1
            self.counts.rollouts += len(rollouts)
            self.counts.ops += len(ops)
            self.counts.shards += 1
