"""Every 5 s, a row of this engine's own state into the run's `engine_health/` table (harness.wire.engine_health).

The loop-lag probe (`harness.engine.health.LoopHealth`) already times the loop every 0.1 s; this keeps, per
interval, its worst delay beside what the process holds: open file descriptors against its limit, and how many
of them are sockets. A process near its descriptor limit refuses connections as if the vendor did, and a loop
seconds behind adds seconds to every TTI it times: the summary reads these rows to say, per worker, whether the
harness bound the figures (harness.results.figures.harness_bound).

Counting descriptors walks `/proc/self/fd` (one readlink per descriptor: ~10 ms at 10,000), so the count runs in a
thread; the lag is read on the loop. Rows are written as shards (`engine_health-<worker>-<seq>.parquet`, the
hidden-name-then-rename of `harness.engine.shards`) once a minute and when the run drains; a write that fails keeps
its rows for the next, and the last one is given up with a log line (this table never stops a run).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from foundation.open_files import count_open_files, open_files_soft_limit
from harness.engine.health import LoopHealth
from harness.engine.shards import safe_name, write_table_atomically
from harness.wire.engine_health import ENGINE_HEALTH_SCHEMA, HEALTH_INTERVAL_S, EngineHealthRecord
from harness.wire.schema_version import ENGINE_HEALTH_TABLE

WRITE_EVERY_ROWS = 12  # a shard a minute at 5 s
log = logging.getLogger("stampede.engine")


class HealthRows:
    """Samples every `interval_s` until `stop()`, which takes a last sample and writes what is buffered."""

    def __init__(
        self,
        run_dir: Path,
        run_id: str,
        worker: str,
        health: LoopHealth,
        in_flight: Callable[[], int],
        *,
        interval_s: float = HEALTH_INTERVAL_S,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_id = run_id
        self.worker = worker
        self.health = health
        self.in_flight = in_flight
        self.interval_s = interval_s
        self.rows: list[EngineHealthRecord] = []
        self.written = 0
        self._pending: list[EngineHealthRecord] = []
        self._seq = 0
        self._since = time.monotonic()
        self._process = psutil.Process()
        self._process.cpu_percent(None)
        self._task: asyncio.Task[None] | None = None
        self._write_lock = threading.Lock()  # a write cut off by `stop` may still run in its thread

    def start(self) -> None:
        if self._task is None:
            self._since = time.monotonic()
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(max(0.0, self._since + self.interval_s - time.monotonic()))
            await self.sample()
            if len(self._pending) >= WRITE_EVERY_ROWS:
                await asyncio.to_thread(self._write)

    async def sample(self) -> EngineHealthRecord:
        """One row: the worst lag since the last row (read on the loop), the descriptors (in a thread)."""
        now = time.monotonic()
        lag_s = self.health.lag_since(self._since)
        interval, self._since = now - self._since, now
        fds, sockets = await asyncio.to_thread(count_open_files)
        memory = self._process.memory_info().rss / 2**20
        record = EngineHealthRecord(
            run_id=self.run_id,
            worker=self.worker,
            t=time.time(),
            interval_s=round(interval, 3),
            loop_lag_max_ms=round(1000 * lag_s, 3),
            loop_lag_now_ms=round(1000 * self.health.lag_now(), 3),
            open_fds=fds,
            fd_limit=open_files_soft_limit(),
            sockets=sockets,
            cpu_percent=round(self._process.cpu_percent(None), 1),
            rss_mb=round(memory, 1),
            in_flight=self.in_flight(),
        )
        self.rows.append(record)
        self._pending.append(record)
        return record

    def _write(self) -> None:
        """The buffered rows as one shard; on failure they wait for the next write."""
        with self._write_lock:
            rows, self._pending = self._pending, []
            if not rows:
                return
            name = f"{ENGINE_HEALTH_TABLE}-{safe_name(self.worker)}-{self._seq:05d}.parquet"
            try:
                write_table_atomically(rows, ENGINE_HEALTH_SCHEMA, self.run_dir / ENGINE_HEALTH_TABLE / name)
            except OSError as exc:
                self._pending[:0] = rows
                log.warning("engine health rows not written yet (%d kept): %s", len(self._pending), exc)
                return
            self._seq += 1
            self.written += len(rows)

    async def stop(self) -> None:
        """The last sample (the drain's own interval) and every row still buffered, written before the drain
        answers: a worker ships its files once it has."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.sample()
        await asyncio.to_thread(self._write)
        if self._pending:
            log.error("engine health: %d rows could not be written to %s", len(self._pending), self.run_dir)
