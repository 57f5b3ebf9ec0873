"""Rows of the engine-health table (`engine_health/`, schema v2): each engine's own state every few seconds.

A harness that runs out of file descriptors or whose loop falls behind measures itself, not the vendor (issue #32:
the public 100,000-sandbox protocol records every coordinator's event-loop delay, open descriptors and sockets every
5 s). `engine-<worker>.json` keeps the run's lag histogram and CPU; this table keeps them over time, so a reader
sees when an engine was bound and whether a rollout's figures came from then. Written by `harness.engine
.health_rows`, read by `harness.results.figures.harness_bound`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import pyarrow as pa

from harness.wire.records import LOW_CARDINALITY, WALL_CLOCK
from harness.wire.schema_version import ENGINE_HEALTH_TABLE, SCHEMA_VERSION

HEALTH_INTERVAL_S = 5.0
"""How often an engine writes its row: the protocol's 5 s."""


@dataclass(slots=True)
class EngineHealthRecord:
    """One engine at one instant (`t`), and its loop over the interval before it."""

    run_id: str
    worker: str
    t: float  # epoch seconds (a UTC timestamp in the file)
    interval_s: float  # since the previous row (or the engine's configure)
    loop_lag_max_ms: float  # the worst loop delay in the interval (a probe every 0.1 s)
    loop_lag_now_ms: float  # the latest probe's
    open_fds: int  # file descriptors this process holds
    fd_limit: int  # its soft RLIMIT_NOFILE: how many it may hold
    sockets: int  # of those, sockets (TCP, UDP and Unix: the vendor's connections and the Locust side's)
    cpu_percent: float  # of one core over the interval
    rss_mb: float
    in_flight: int  # rollouts this engine was running


_COUNT = {b"unit": b"count"}
_MS = {b"unit": b"ms"}
_S = {b"unit": b"s"}

ENGINE_HEALTH_SCHEMA = pa.schema(
    [
        pa.field("run_id", LOW_CARDINALITY),
        pa.field("worker", LOW_CARDINALITY),
        pa.field("t", WALL_CLOCK),
        pa.field("interval_s", pa.float64(), metadata=_S),
        pa.field("loop_lag_max_ms", pa.float64(), metadata=_MS),
        pa.field("loop_lag_now_ms", pa.float64(), metadata=_MS),
        pa.field("open_fds", pa.int32(), metadata=_COUNT),
        pa.field("fd_limit", pa.int64(), metadata=_COUNT),
        pa.field("sockets", pa.int32(), metadata=_COUNT),
        pa.field("cpu_percent", pa.float64(), metadata={b"unit": b"%"}),
        pa.field("rss_mb", pa.float64(), metadata={b"unit": b"MiB"}),
        pa.field("in_flight", pa.int32(), metadata=_COUNT),
    ],
    metadata={
        b"stampede.schema_version": str(SCHEMA_VERSION).encode(),
        b"stampede.table": ENGINE_HEALTH_TABLE.encode(),
    },
)


def _check() -> None:
    names = [f.name for f in fields(EngineHealthRecord)]
    if names != ENGINE_HEALTH_SCHEMA.names:
        raise AssertionError(f"EngineHealthRecord fields {names} != schema {ENGINE_HEALTH_SCHEMA.names}")


_check()
