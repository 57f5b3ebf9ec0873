"""Rows of the results dataset (schema version 2) and their Arrow schemas.

The parquet files are the product: users read them with pandas, polars, duckdb or pyarrow without our code,
so the schemas are explicit (no type guessing from the first shard) and every duration is in seconds,
null when the phase never happened.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import pyarrow as pa

from harness.wire.schema_version import (  # noqa: F401  (re-exported: the table names beside their schemas)
    OPS_TABLE,
    ROLLOUTS_TABLE,
    SCHEMA_VERSION,
    TABLES,
    TRAINER_TABLE,
    TRUTH_TABLE,
)
from providers.base import INIT_PHASES as INIT_PHASES  # re-exported: the failure_phase values results read

OUTCOME_OK = "ok"
OUTCOME_FAILED = "failed"
OUTCOME_CANCELLED = "cancelled"


@dataclass(slots=True)
class RolloutIdentity:
    """Who a rollout attempt is and the load it met when submitted: the one list of those fields.

    The engine's rollout context holds one, the write-ahead of submits writes one (`submit_fields`, with the run's
    part in each segment's header: `RUN_IDENTITY_FIELDS`), and every rollout row starts as one (`RolloutRecord`).
    Not frozen only because RolloutRecord, which is mutable, extends it; nothing assigns these fields.
    """

    run_id: str
    worker: str
    rollout_id: str
    provider: str
    profile: str
    scenario: str
    stage: str
    target_users: int
    inflight_at_submit: int
    sdk_version: str = ""
    t_intended: float | None = None  # open model: when the schedule wanted this rollout to start (epoch s)
    attempt: int = 1

    def record(self, t_submit: float) -> RolloutRecord:
        """The attempt's row, its identity copied (a tuple, not a dict: the engine's hot path) and stamped."""
        return RolloutRecord(*_identity_values(self), t_submit=t_submit)

    def submit_fields(self) -> dict[str, Any]:
        """What the write-ahead of submits keeps per attempt, beyond rollout_id and attempt (its line's keys)."""
        return {name: getattr(self, name) for name in SUBMIT_IDENTITY_FIELDS}


@dataclass(slots=True, kw_only=True)
class RolloutRecord(RolloutIdentity):
    """One rollout: create -> ready -> exec x N -> terminate, timed inside the engine's event loop.

    Its identity is inherited; the columns' order is the schema's (`ROLLOUT_SCHEMA`), not this class's field order.
    """

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
    turns: int = 0  # agentic turns completed
    gen_s: float | None = None  # emulated model generation time, summed over turns (wall seconds)
    ready_poll_s: float | None = None  # of ready_s, the window in which the provider's polling may have lagged
    ready_probe_s: float | None = None  # a direct command probe saw the sandbox usable this long into ready_s
    loop_lag_s: float | None = None  # worst engine loop stall up to TTI, outside the poll window
    # A rollout plan's steps (`--plan`, the steps table holds each): sums per phase, null when none ran.
    pull_s: float | None = None  # of ready_s, the image pull the vendor reported
    upload_s: float | None = None
    download_s: float | None = None
    fork_s: float | None = None  # the fork call (a copy's create: the fork that made it)
    snapshot_s: float | None = None
    exec_overhead_s: float | None = None  # over the commands whose own time is known: answer time minus it
    group_id: str | None = None  # a fork group (its prepared sandbox's rollout id), on it and on each copy

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
    # a failed call's Retry-After as the client read it (seconds, `ProviderError.retry_after`); None: the vendor
    # gave none, or the call did not fail. Added in schema v2 (columns only added): older files read it as null
    retry_after_s: float | None = None

    def to_row(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _OP_FIELDS}


IDENTITY_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RolloutIdentity))
"""The identity's fields in declaration order: the rollouts table's columns who a row is about."""
RUN_IDENTITY_FIELDS: tuple[str, ...] = ("run_id", "worker", "provider", "profile", "scenario")
"""The part of the identity one engine's run fixes: written once per write-ahead segment (its `run` header)."""
SUBMIT_IDENTITY_FIELDS: tuple[str, ...] = tuple(
    name for name in IDENTITY_FIELDS if name not in {*RUN_IDENTITY_FIELDS, "rollout_id", "attempt"}
)
"""The rest, written on each write-ahead `submit` line beside its rollout_id, attempt and t_submit."""
_identity_values = operator.attrgetter(*IDENTITY_FIELDS)

LIVE_FIELDS: tuple[str, ...] = (
    "rollout_id",
    "sandbox_id",  # with t_submit: the progress line's vendor seconds join a row to the vendor's record by these
    "t_submit",
    "stage",
    "target_users",
    "inflight_at_submit",
    "attempt",
    "outcome",
    "failure_kind",
    "failure_phase",
    "error",
    "create_s",
    "ready_s",
    "tti_s",
    "exec_count",
    "exec_s",
    "terminate_s",
    "total_s",
)
"""What a Locust user needs of a finished rollout to report it (the parquet row stays the record)."""


def live_row(record: RolloutRecord) -> dict[str, Any]:
    """The fields a Locust user reports, not the whole row: less to encode and decode per rollout."""
    return {name: getattr(record, name) for name in LIVE_FIELDS}


_OP_FIELDS = tuple(f.name for f in fields(OpRecord))

WALL_CLOCK = pa.timestamp("us", tz="UTC")
"""Wall-clock instants in the files (v2): readers see timestamps, not float epoch seconds."""
LOW_CARDINALITY = pa.dictionary(pa.int32(), pa.string())
"""Repeated strings (provider, stage, outcome, ...): dictionary-encoded in the files, categories in pandas."""

_SECONDS = {b"unit": b"s"}
_VENDOR_SECONDS = {b"unit": b"s", b"clock": b"vendor"}
_COUNT = {b"unit": b"count"}

VENDOR_SECONDS_COLUMNS: dict[str, str] = {
    "create_s": "create_vendor_s",
    "ready_s": "ready_vendor_s",
    "tti_s": "tti_vendor_s",
    "exec_s": "exec_vendor_s",
    "terminate_s": "terminate_vendor_s",
    "total_s": "total_vendor_s",
}
"""Each wall-seconds duration -> its twin in vendor seconds, the seconds every table and summary.json print.

The engine cannot write them: at a time scale only the simulated vendor's own record (`truth/`) says which part of
a duration was the vendor's (harness.results.read.vendor_time). The owner of the run folder adds them when it compacts
the rollouts table at the run's end (harness.results.read.compaction); shards (a run going, or crashed) lack them."""


def _table_metadata(table: str, version: int = SCHEMA_VERSION) -> dict[bytes, bytes]:
    return {b"stampede.schema_version": str(version).encode(), b"stampede.table": table.encode()}


def _rollout_fields(clock: pa.DataType, repeated: pa.DataType) -> list[pa.Field]:
    return [
        pa.field("run_id", repeated),
        pa.field("worker", repeated),
        pa.field("rollout_id", pa.string()),
        pa.field("provider", repeated),
        pa.field("profile", repeated),
        pa.field("scenario", repeated),
        pa.field("stage", repeated),
        pa.field("target_users", pa.int32(), metadata=_COUNT),
        pa.field("inflight_at_submit", pa.int32(), metadata=_COUNT),
        pa.field("t_submit", clock),
        pa.field("create_s", pa.float64(), metadata=_SECONDS),
        pa.field("ready_s", pa.float64(), metadata=_SECONDS),
        pa.field("tti_s", pa.float64(), metadata=_SECONDS),
        pa.field("exec_count", pa.int32(), metadata=_COUNT),
        pa.field("exec_s", pa.float64(), metadata=_SECONDS),
        pa.field("terminate_s", pa.float64(), metadata=_SECONDS),
        pa.field("total_s", pa.float64(), metadata=_SECONDS),
        pa.field("outcome", repeated),
        pa.field("failure_kind", repeated),
        pa.field("failure_phase", repeated),
        pa.field("error", pa.string()),
        pa.field("sandbox_id", pa.string()),
        pa.field("sdk_version", repeated),
        pa.field("t_intended", clock),
        pa.field("attempt", pa.int16(), metadata=_COUNT),
        pa.field("turns", pa.int16(), metadata=_COUNT),
        pa.field("gen_s", pa.float64(), metadata=_SECONDS),
        pa.field("ready_poll_s", pa.float64(), metadata=_SECONDS),
        pa.field("ready_probe_s", pa.float64(), metadata=_SECONDS),
        pa.field("loop_lag_s", pa.float64(), metadata=_SECONDS),
        pa.field("pull_s", pa.float64(), metadata=_SECONDS),
        pa.field("upload_s", pa.float64(), metadata=_SECONDS),
        pa.field("download_s", pa.float64(), metadata=_SECONDS),
        pa.field("fork_s", pa.float64(), metadata=_SECONDS),
        pa.field("snapshot_s", pa.float64(), metadata=_SECONDS),
        pa.field("exec_overhead_s", pa.float64(), metadata=_SECONDS),
        pa.field("group_id", pa.string()),
    ]


def _op_fields(clock: pa.DataType, repeated: pa.DataType) -> list[pa.Field]:
    return [
        pa.field("run_id", repeated),
        pa.field("rollout_id", pa.string()),
        pa.field("op", repeated),
        pa.field("t_start", clock),
        pa.field("dur_s", pa.float64(), metadata=_SECONDS),
        pa.field("ok", pa.bool_()),
        pa.field("failure_kind", repeated),
        pa.field("worker", repeated),
        pa.field("sandbox_id", pa.string()),
        pa.field("retry_after_s", pa.float64(), metadata=_SECONDS),
    ]


ROLLOUT_SCHEMA = pa.schema(_rollout_fields(WALL_CLOCK, LOW_CARDINALITY), metadata=_table_metadata(ROLLOUTS_TABLE))
"""The rollouts table as written (v2): timestamps in UTC, repeated strings dictionary-encoded, units per field."""

COMPACTED_ROLLOUT_SCHEMA = pa.schema(
    [
        *ROLLOUT_SCHEMA,
        *(pa.field(name, pa.float64(), metadata=_VENDOR_SECONDS) for name in VENDOR_SECONDS_COLUMNS.values()),
    ],
    metadata=_table_metadata(ROLLOUTS_TABLE),
)
"""The compacted rollouts file (`rollouts/rollouts.parquet`, still schema v2: columns were only added): the shards'
columns, then each duration in vendor seconds (`VENDOR_SECONDS_COLUMNS`, field metadata `unit: s`, `clock: vendor`)."""

OP_SCHEMA = pa.schema(_op_fields(WALL_CLOCK, LOW_CARDINALITY), metadata=_table_metadata(OPS_TABLE))

_ROLLOUT_FIELDS = tuple(ROLLOUT_SCHEMA.names)  # a row's keys in column order (the record inherits its identity)

ROLLOUT_READ_SCHEMA = pa.schema(
    _rollout_fields(pa.float64(), pa.string()), metadata=_table_metadata(ROLLOUTS_TABLE, version=1)
)
"""The rollouts table as the analysis reads it, and as v1 files hold it: epoch seconds as floats, plain strings
(harness.results.read.dataset converts v2 files to this, so the arithmetic on epoch seconds is unchanged)."""

OP_READ_SCHEMA = pa.schema(_op_fields(pa.float64(), pa.string()), metadata=_table_metadata(OPS_TABLE, version=1))


def truth_schema() -> pa.Schema:
    """The simulated vendor's own record of each sandbox (`truth/`): the cross-check of our timing.

    `*_wall` are its wall-clock instants; `*_s` the same instants in vendor seconds (on the vendor's clock): a live
    simulated vendor plays a burst's sending 1:1, so wall spans times 1 / time scale are not always vendor spans
    (harness.results.read.vendor_time).
    """
    vendor_clock = _VENDOR_SECONDS
    return pa.schema(
        [
            pa.field("id", pa.string()),
            pa.field("status", LOW_CARDINALITY),
            pa.field("error_type", LOW_CARDINALITY),
            pa.field("created_wall", WALL_CLOCK),
            pa.field("ready_wall", WALL_CLOCK),
            pa.field("ended_wall", WALL_CLOCK),
            pa.field("first_exec_done_wall", WALL_CLOCK),
            pa.field("first_exec_start_wall", WALL_CLOCK),
            pa.field("exec_busy_s", pa.float64(), metadata=vendor_clock),
            pa.field("created_s", pa.float64(), metadata=vendor_clock),
            pa.field("ready_s", pa.float64(), metadata=vendor_clock),
            pa.field("ended_s", pa.float64(), metadata=vendor_clock),
            pa.field("first_exec_start_s", pa.float64(), metadata=vendor_clock),
            pa.field("first_exec_done_s", pa.float64(), metadata=vendor_clock),
            pa.field("pull_s", pa.float64(), metadata=vendor_clock),  # placed -> image pulled (a span; 0 when cached)
        ],
        metadata=_table_metadata(TRUTH_TABLE),
    )


def file_column(values: Sequence[Any], field: pa.Field) -> pa.Array:
    """One column in its file type from plain Python values, vectorised (the engine's hot path, #11): epoch
    seconds become µs UTC timestamps, repeated strings a dictionary."""
    if pa.types.is_timestamp(field.type):
        import pyarrow.compute as pc  # deferred: 50 ms the engine need not spend before its first rollout

        seconds = pa.array(values, type=pa.float64())
        return pc.cast(pc.round(pc.multiply(seconds, 1_000_000.0)), pa.int64()).cast(field.type)
    if pa.types.is_dictionary(field.type):
        return pa.array(values, type=field.type.value_type).dictionary_encode()
    return pa.array(values, type=field.type)


def warm_file_types() -> None:
    """Import what writing the first table imports, ahead of it (the engine calls it while idle at its start).

    pyarrow imports pandas the first time `pa.array` is given plain values (its check for pandas objects),
    and `file_column` imports `pyarrow.compute`: ~0.3 s of imports quiet, more on a busy machine. Left to the
    first shard flush, they ran in a burst's surge, the flushing thread holding the interpreter while the
    engine's loop timed the creates (issue #32: the burst-hold protocol's loop lag); a run's `configure` waits
    for them, since Locust's side could be ready first."""
    import pyarrow.compute  # noqa: F401

    pa.array([0.0], type=pa.float64())


def file_table(rows: Sequence[Any], schema: pa.Schema) -> pa.Table:
    """Records (objects whose attributes are the schema's columns) or dicts as one table in the file types."""
    if rows and isinstance(rows[0], dict):
        columns = [file_column([row.get(name) for row in rows], schema.field(name)) for name in schema.names]
    else:
        columns = [file_column([getattr(row, name) for row in rows], schema.field(name)) for name in schema.names]
    return pa.Table.from_arrays(columns, schema=schema)


_TIME_UNITS_PER_SECOND = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}


def epoch_seconds(column: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """A timestamp column as float epoch seconds (what the analysis does arithmetic on); others unchanged."""
    if not pa.types.is_timestamp(column.type):
        return column
    import pyarrow.compute as pc

    ticks = pc.cast(pc.cast(column, pa.int64()), pa.float64())
    return pc.divide(ticks, _TIME_UNITS_PER_SECOND[column.type.unit])


SCHEMA_V1_ROLLOUT_COLUMNS: tuple[str, ...] = (
    "run_id",
    "worker",
    "rollout_id",
    "provider",
    "scenario",
    "stage",
    "target_users",
    "inflight_at_submit",
    "t_submit",
    "create_s",
    "ready_s",
    "exec_count",
    "exec_s",
    "terminate_s",
    "total_s",
    "outcome",
    "failure_kind",
    "failure_phase",
    "error",
    "sandbox_id",
)
"""The columns ARCHITECTURE.md promises (contract); the schema above adds tti_s, profile and a few more."""

SCHEMA_V1_OP_COLUMNS: tuple[str, ...] = ("run_id", "rollout_id", "op", "t_start", "dur_s", "ok", "failure_kind")


def _check_schema_matches(record_type: type, schema: pa.Schema, *, ordered: bool = True) -> None:
    names = [f.name for f in fields(record_type)]
    if (names if ordered else sorted(names)) != (schema.names if ordered else sorted(schema.names)):
        raise AssertionError(f"{record_type.__name__} fields {names} != schema {schema.names}")


def _check_identity() -> None:
    names = [name for name in ROLLOUT_SCHEMA.names if name in IDENTITY_FIELDS]
    if names != list(IDENTITY_FIELDS) or not set(RUN_IDENTITY_FIELDS) <= set(IDENTITY_FIELDS):
        raise AssertionError(f"identity {IDENTITY_FIELDS} out of the rollouts columns' order {names}")


_check_schema_matches(RolloutRecord, ROLLOUT_SCHEMA, ordered=False)  # inherited identity first: order is the schema's
_check_schema_matches(OpRecord, OP_SCHEMA)
_check_schema_matches(RolloutRecord, ROLLOUT_READ_SCHEMA, ordered=False)
_check_schema_matches(OpRecord, OP_READ_SCHEMA)
_check_identity()
