"""The engine's 5 s health rows (harness.engine.health_rows) and the summary's per-worker verdict on them
(harness.results.figures.harness_bound)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from foundation.open_files import count_open_files
from harness.engine.health import LoopHealth
from harness.engine.health_rows import HealthRows
from harness.results.figures.harness_bound import (
    FD_SHARE,
    LAG_BOUND_MS,
    harness_bound_lines,
    load_engine_health,
    worker_health,
)
from harness.wire.engine_health import ENGINE_HEALTH_SCHEMA


def test_count_fds_counts_a_socket_it_holds() -> None:
    before_fds, before_sockets = count_open_files()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        fds, sockets = count_open_files()
    assert fds == before_fds + 1 and sockets == before_sockets + 1


def test_rows_every_interval_and_a_last_one_at_stop(tmp_path: Path) -> None:
    async def scenario() -> HealthRows:
        health = LoopHealth(interval_s=0.01)
        health.start()
        rows = HealthRows(tmp_path, "run-1", "w1", health, lambda: 7, interval_s=0.1)
        rows.start()
        await asyncio.sleep(0.35)
        await rows.stop()
        await health.stop()
        return rows

    rows = asyncio.run(scenario())
    assert 3 <= len(rows.rows) <= 5  # three or four on the timer, one at stop
    assert rows.written == len(rows.rows)
    table = pq.read_table(tmp_path / "engine_health")
    assert table.schema.names == ENGINE_HEALTH_SCHEMA.names
    frame = table.to_pandas()
    assert (frame["in_flight"] == 7).all() and (frame["open_fds"] > 0).all() and (frame["fd_limit"] != 0).all()
    assert frame["interval_s"].iloc[0] >= 0.09
    assert load_engine_health(tmp_path).shape[0] == len(rows.rows)


def frame(**values: object) -> pd.DataFrame:
    base: dict[str, object] = {
        "worker": ["w1", "w1", "w2"],
        "loop_lag_max_ms": [3.0, 5.0, 2.0],
        "open_fds": [100, 120, 90],
        "fd_limit": [1000, 1000, 1000],
        "sockets": [80, 95, 70],
    }
    return pd.DataFrame(base | values)


def test_per_worker_worst_interval_and_no_flag_when_clear() -> None:
    w1, w2 = worker_health(frame())
    assert (w1.worker, w1.rows, w1.lag_max_ms, w1.fds_max, w1.sockets_max) == ("w1", 2, 5.0, 120, 95)
    assert not w1.bound and not w2.bound
    assert "harness not bound" in w1.describe() and "(!)" not in w1.describe()


def test_lag_over_the_bound_flags_its_worker_only() -> None:
    w1, w2 = worker_health(frame(loop_lag_max_ms=[3.0, LAG_BOUND_MS + 1, 2.0]))
    assert w1.lag_bound and not w1.fds_bound and not w2.bound
    assert "(!) harness bound: loop lag over" in w1.describe()
    assert w1.to_dict()["bound"] is True and w2.to_dict()["bound"] is False


def test_fds_near_the_limit_flag() -> None:
    near = int(FD_SHARE * 1000)
    (w1, w2) = worker_health(frame(open_fds=[100, near, near - 1]))
    assert w1.fds_bound and not w2.fds_bound
    assert "fds at 90% of the limit" in w1.describe()


def test_a_run_without_the_table_prints_nothing(tmp_path: Path) -> None:
    assert harness_bound_lines(tmp_path) == []
