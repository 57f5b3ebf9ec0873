"""Parquet shards written while the run goes, so a crash loses seconds, not the run.

Each engine writes its own shards into the run folder's table folders (`rollouts/rollouts-<worker>-<seq>.parquet`,
`ops/ops-<worker>-<seq>.parquet`, schema v2); a reader takes a table folder whole. A shard is written to a hidden
temporary name beside the table folder and renamed into it, so a reader never sees half a file. At the end of the
run the Locust side compacts each table (harness.results.read.compaction).

A write that fails (a full disk, a folder made read-only) loses nothing: the rows stay buffered, the error is
reported (`error`: the engine's stats carry it, and the Locust side stops the run), and every later flush tries
again. What the run folder still cannot take when the writer closes goes to a fallback folder (`rescued_to`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import tempfile
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
from harness.wire.steps import STEP_SCHEMA, STEPS_TABLE, StepRecord

DEFAULT_FLUSH_INTERVAL_S = 2.0
DEFAULT_FLUSH_ROWS = 20_000
FALLBACK_ROOT = Path(tempfile.gettempdir()) / "stampede-unwritten"
"""Where rows go that the run folder cannot take by the end of the run: `<this>/<run folder name>-<unique>/<table>/`
(a folder of its own for each writer that needs one)."""

log = logging.getLogger("stampede.engine")


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
    try:
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a partial file would hold the space a retry needs
        raise


@dataclass(slots=True)
class ShardCounts:
    rollouts: int = 0
    ops: int = 0
    shards: int = 0
    steps: int = 0


class ShardWriter:
    """Buffers records and writes them as parquet shards, off the event loop."""

    def __init__(
        self,
        run_dir: Path,
        worker: str,
        *,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
        flush_rows: int = DEFAULT_FLUSH_ROWS,
        fallback_dir: Path | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.fallback_dir = Path(fallback_dir) if fallback_dir is not None else None  # None: made when needed
        self.error: str | None = None  # the last write's error while rows wait in memory; None once written
        self.first_error: str | None = None  # the first write error of the run, kept for its summary
        self.rescued_to: str | None = None  # the fallback folder, once rows had to go there
        self.worker = safe_name(worker)
        self.flush_interval_s = flush_interval_s
        self.flush_rows = flush_rows
        self._rollouts: list[RolloutRecord] = []
        self._ops: list[OpRecord] = []
        self._steps: list[StepRecord] = []  # a rollout plan's steps (`--plan`); none for the commands rollout
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
        elif len(self._rollouts) >= self.flush_rows and self.error is None:  # failing: the timer retries
            self._kick()

    def add_op(self, record: OpRecord) -> None:
        self._ops.append(record)
        if self._closed:
            self.flush_sync()
        elif len(self._ops) >= self.flush_rows and self.error is None:
            self._kick()

    def add_step(self, record: StepRecord) -> None:
        self._steps.append(record)
        if self._closed:
            self.flush_sync()
        elif len(self._steps) >= self.flush_rows and self.error is None:
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
        while True:  # a failed write never ends it: the rows wait, the next turn tries again
            await asyncio.sleep(self.flush_interval_s)
            await self.flush()

    async def flush(self) -> None:
        async with self._lock:
            rollouts, self._rollouts = self._rollouts, []
            ops, self._ops = self._ops, []
            steps, self._steps = self._steps, []
            if not rollouts and not ops and not steps:
                return
            seq = self._seq
            self._seq += 1
            written = await asyncio.to_thread(self._write, seq, rollouts, ops, self.run_dir, steps)
            self._account(written, rollouts, ops, steps)

    def _account(
        self,
        written: tuple[bool, bool, str | None] | tuple[bool, bool, str | None, bool],
        rollouts: list[Any],
        ops: list[Any],
        steps: list[Any] | None = None,
    ) -> None:
        """Counts for what was written; what was not goes back in front of the buffers, in order."""
        rollouts_written, ops_written, error = written[:3]
        steps_written = not steps or (len(written) > 3 and bool(written[3]))
        if steps and steps_written:
            self.counts.steps += len(steps)
        elif steps:
            self._steps[:0] = steps
        if rollouts_written:
            self.counts.rollouts += len(rollouts)
        else:
            self._rollouts[:0] = rollouts
        if ops_written:
            self.counts.ops += len(ops)
        else:
            self._ops[:0] = ops
        if rollouts_written and ops_written and steps_written:
            self.counts.shards += 1
            self._last_flush = time.monotonic()
            self.error = None if not self._rollouts and not self._ops and not self._steps else self.error
        if error is not None:
            if self.error is None:
                log.error("cannot write the results (%d rows kept in memory): %s", len(self._rollouts), error)
            self.error = error
            self.first_error = self.first_error or error

    def _write(
        self,
        seq: int,
        rollouts: list[RolloutRecord],
        ops: list[OpRecord],
        run_dir: Path,
        steps: list[StepRecord] | None = None,
    ) -> tuple[bool, bool, str | None, bool]:
        """Each table's shard, on its own (one written is not written again): which were, and the error."""
        error: str | None = None
        done = []
        tables: tuple[tuple[str, list[Any], pa.Schema], ...] = (
            (ROLLOUTS_TABLE, rollouts, ROLLOUT_SCHEMA),
            (OPS_TABLE, ops, OP_SCHEMA),
            (STEPS_TABLE, steps or [], STEP_SCHEMA),
        )
        for table, records, schema in tables:
            if not records:
                done.append(True)
                continue
            try:
                name = f"{table}-{self.worker}-{seq:05d}.parquet"
                write_table_atomically(records, schema, run_dir / table / name)
                done.append(True)
            except OSError as exc:
                error = f"{run_dir}: {exc.strerror or exc}"
                done.append(False)
        return done[0], done[1], error, done[2]

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
        if self._rollouts or self._ops or self._steps:  # the run folder still cannot take them: the fallback folder
            async with self._lock:
                self._rescue()
        self._closed = True

    def _rescue(self) -> None:
        rollouts, self._rollouts = self._rollouts, []
        ops, self._ops = self._ops, []
        steps, self._steps = self._steps, []
        if self.fallback_dir is None:
            try:
                FALLBACK_ROOT.mkdir(parents=True, exist_ok=True)
                self.fallback_dir = Path(tempfile.mkdtemp(prefix=f"{self.run_dir.name}-", dir=FALLBACK_ROOT))
            except OSError as exc:
                self._account((False, False, f"{FALLBACK_ROOT}: {exc.strerror or exc}", False), rollouts, ops, steps)
                return
        written = self._write(self._seq, rollouts, ops, self.fallback_dir, steps)
        self._seq += 1
        self._account(written, rollouts, ops, steps)
        if written[0] or written[1] or (steps and written[3]):
            self.rescued_to = str(self.fallback_dir)
            log.error("results the run folder could not take were written to %s", self.fallback_dir)

    def flush_sync(self) -> None:
        """Last resort on an abnormal exit: write what is buffered without an event loop (the run folder, else
        the fallback folder)."""
        rollouts, self._rollouts = self._rollouts, []
        ops, self._ops = self._ops, []
        steps, self._steps = self._steps, []
        if rollouts or ops or steps:
            seq = self._seq
            self._seq += 1
            self._account(self._write(seq, rollouts, ops, self.run_dir, steps), rollouts, ops, steps)
            if self._rollouts or self._ops or self._steps:
                self._rescue()
