"""Rows of the results dataset (schema version 1) and their Arrow schemas.

The parquet files are the product: users read them with pandas, polars, duckdb or pyarrow without our code,
so the schemas are explicit (no type guessing from the first shard) and every duration is in seconds,
null when the phase never happened.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import pyarrow as pa

from harness.wire.schema_version import SCHEMA_VERSION

OUTCOME_OK = "ok"
OUTCOME_FAILED = "failed"
OUTCOME_CANCELLED = "cancelled"


@dataclass(slots=True)
class RolloutRecord:
    """One rollout: create -> ready -> exec x N -> terminate, timed inside the engine's event loop."""

    run_id: str
    worker: str
    rollout_id: str
    provider: str
    profile: str
    scenario: str
    stage: str
    target_users: int
    inflight_at_submit: int
    t_submit: float  # epoch seconds: the one wall-clock anchor of the rollout
    create_s: float | None = None  # submit -> vendor acknowledged an id
    ready_s: float | None = None  # acknowledged -> usable
    tti_s: float | None = None  # submit -> first command returned (the headline metric)
    exec_count: int = 0
    exec_s: float | None = None  # sum over commands
    terminate_s: float | None = None
    total_s: float | None = None  # submit -> terminate returned (or failure)
    outcome: str = OUTCOME_OK
    failure_kind: str | None = None
    failure_phase: str | None = None
    error: str | None = None  # short, secrets redacted
    sandbox_id: str | None = None
    sdk_version: str = ""
    t_intended: float | None = None  # open model: when the schedule wanted this rollout to start (epoch s)
    attempt: int = 1
    turns: int = 0  # agentic turns completed
    gen_s: float | None = None  # emulated model generation time, summed over turns (wall seconds)
    ready_poll_s: float | None = None  # of ready_s, the window in which the provider's polling may have lagged
    ready_probe_s: float | None = None  # a direct command probe saw the sandbox usable this long into ready_s
    loop_lag_s: float | None = None  # the engine's own event-loop lag when the first command returned

    def to_row(self) -> dict[str, Any]:
        # not dataclasses.asdict: it deep-copies every value and showed up in the engine's profile
        return {name: getattr(self, name) for name in _ROLLOUT_FIELDS}


@dataclass(slots=True)
class OpRecord:
    """One vendor call made on behalf of a rollout."""

    run_id: str
    rollout_id: str
    op: str  # create | wait_ready | exec | terminate
    t_start: float  # epoch seconds
    dur_s: float
    ok: bool
    failure_kind: str | None = None
    worker: str = ""
    sandbox_id: str | None = None

    def to_row(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _OP_FIELDS}


_ROLLOUT_FIELDS = tuple(f.name for f in fields(RolloutRecord))

LIVE_FIELDS: tuple[str, ...] = (
    "rollout_id", "stage", "target_users", "inflight_at_submit", "attempt", "outcome", "failure_kind",
    "failure_phase", "error", "create_s", "ready_s", "tti_s", "exec_count", "exec_s", "terminate_s", "total_s",
)  # fmt: skip
"""What a Locust user needs of a finished rollout to report it (the parquet row stays the record)."""


def live_row(record: RolloutRecord) -> dict[str, Any]:
    """The fields a Locust user reports, not the whole row: less to encode and decode per rollout."""
    return {name: getattr(record, name) for name in LIVE_FIELDS}


_OP_FIELDS = tuple(f.name for f in fields(OpRecord))

ROLLOUT_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("worker", pa.string()),
        ("rollout_id", pa.string()),
        ("provider", pa.string()),
        ("profile", pa.string()),
        ("scenario", pa.string()),
        ("stage", pa.string()),
        ("target_users", pa.int32()),
        ("inflight_at_submit", pa.int32()),
        ("t_submit", pa.float64()),
        ("create_s", pa.float64()),
        ("ready_s", pa.float64()),
        ("tti_s", pa.float64()),
        ("exec_count", pa.int32()),
        ("exec_s", pa.float64()),
        ("terminate_s", pa.float64()),
        ("total_s", pa.float64()),
        ("outcome", pa.string()),
        ("failure_kind", pa.string()),
        ("failure_phase", pa.string()),
        ("error", pa.string()),
        ("sandbox_id", pa.string()),
        ("sdk_version", pa.string()),
        ("t_intended", pa.float64()),
        ("attempt", pa.int16()),
        ("turns", pa.int16()),
        ("gen_s", pa.float64()),
        ("ready_poll_s", pa.float64()),
        ("ready_probe_s", pa.float64()),
        ("loop_lag_s", pa.float64()),
    ],
    metadata={b"stampede.schema_version": str(SCHEMA_VERSION).encode(), b"stampede.table": b"rollouts"},
)

OP_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("rollout_id", pa.string()),
        ("op", pa.string()),
        ("t_start", pa.float64()),
        ("dur_s", pa.float64()),
        ("ok", pa.bool_()),
        ("failure_kind", pa.string()),
        ("worker", pa.string()),
        ("sandbox_id", pa.string()),
    ],
    metadata={b"stampede.schema_version": str(SCHEMA_VERSION).encode(), b"stampede.table": b"ops"},
)

SCHEMA_V1_ROLLOUT_COLUMNS: tuple[str, ...] = (
    "run_id", "worker", "rollout_id", "provider", "scenario", "stage", "target_users", "inflight_at_submit",
    "t_submit", "create_s", "ready_s", "exec_count", "exec_s", "terminate_s", "total_s", "outcome",
    "failure_kind", "failure_phase", "error", "sandbox_id",
)  # fmt: skip
"""The columns ARCHITECTURE.md promises (contract); the schema above adds tti_s, profile and a few more."""

SCHEMA_V1_OP_COLUMNS: tuple[str, ...] = ("run_id", "rollout_id", "op", "t_start", "dur_s", "ok", "failure_kind")


def _check_schema_matches(record_type: type, schema: pa.Schema) -> None:
    names = [f.name for f in fields(record_type)]
    if names != schema.names:
        raise AssertionError(f"{record_type.__name__} fields {names} != schema {schema.names}")


_check_schema_matches(RolloutRecord, ROLLOUT_SCHEMA)
_check_schema_matches(OpRecord, OP_SCHEMA)
