"""Rows of the steps table (`steps/`, schema v2): one per step a rollout plan's rollout executed.

A rollout row says how long a rollout took and why it failed; with a plan (`stampede run --plan`, issue 30) a rollout
is a script of steps (a pull, an upload of a repository, tens of tool calls, a fork of G copies, a download), too many
and too varied for columns of one row. Each step is a row here, beside its rollout's identity, written like the
rollouts table: shards while the run goes (harness.engine.shards), one file at the end (harness.results.read
.compaction, which appends the vendor-seconds twins). The user's tools read it without our code.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, fields
from typing import Any

import pyarrow as pa

from harness.wire.records import IDENTITY_FIELDS, LOW_CARDINALITY, WALL_CLOCK, RolloutIdentity
from harness.wire.schema_version import SCHEMA_VERSION, STEPS_TABLE

STEP_KINDS: tuple[str, ...] = (
    "create",
    "pull",
    "ready",
    "fork",
    "upload",
    "exec",
    "background",
    "download",
    "snapshot",
    "terminate",
)
"""What a step row can be: a plan's step kinds, and the rows a step implies (a create's pull and ready)."""


@dataclass(slots=True, kw_only=True)
class StepRecord(RolloutIdentity):
    """One step of one rollout: its place in the plan, when it began and how long it took, what it moved."""

    step: int  # index of the plan's step that made it (the end-of-rollout terminate: the number of steps)
    kind: str  # one of STEP_KINDS
    name: str
    t_start_s: float  # from the rollout's start (monotonic)
    duration_s: float | None  # wall seconds (pull: the part of ready the vendor said it pulled; inside ready's)
    bytes: int | None = None
    files: int | None = None
    copies: int | None = None  # fork: copies asked for
    first_byte_s: float | None = None  # streamed exec: call -> first output byte
    last_byte_s: float | None = None
    command_s: float | None = None  # exec: the command's own time (wall seconds)
    overhead_s: float | None = None  # exec: duration_s - command_s
    ok: bool = True
    failure_kind: str | None = None
    failure_phase: str | None = None
    sandbox_id: str | None = None
    t_rollout: float | None = None  # epoch seconds: the rollout's start (its row's t_submit)


_COUNT = {b"unit": b"count"}
_SECONDS = {b"unit": b"s"}
_BYTES = {b"unit": b"B"}
_VENDOR_SECONDS = {b"unit": b"s", b"clock": b"vendor"}

STEP_VENDOR_SECONDS_COLUMNS: dict[str, str] = {
    "duration_s": "duration_vendor_s",
    "command_s": "command_vendor_s",
    "overhead_s": "overhead_vendor_s",
}
"""Each wall-seconds column -> its twin in vendor seconds (wall / the run's time scale), added at compaction."""


def _metadata(version: int = SCHEMA_VERSION) -> dict[bytes, bytes]:
    return {b"stampede.schema_version": str(version).encode(), b"stampede.table": STEPS_TABLE.encode()}


def _step_fields(clock: pa.DataType, repeated: pa.DataType) -> list[pa.Field]:
    identity = {
        "run_id": repeated,
        "worker": repeated,
        "rollout_id": pa.string(),
        "provider": repeated,
        "profile": repeated,
        "scenario": repeated,
        "stage": repeated,
        "target_users": pa.int32(),
        "inflight_at_submit": pa.int32(),
        "sdk_version": repeated,
        "t_intended": clock,
        "attempt": pa.int16(),
    }
    counted = {"target_users", "inflight_at_submit", "attempt"}
    return [
        *(pa.field(name, identity[name], metadata=_COUNT if name in counted else None) for name in IDENTITY_FIELDS),
        pa.field("step", pa.int16()),
        pa.field("kind", repeated),
        pa.field("name", repeated),
        pa.field("t_start_s", pa.float64(), metadata=_SECONDS),
        pa.field("duration_s", pa.float64(), metadata=_SECONDS),
        pa.field("bytes", pa.int64(), metadata=_BYTES),
        pa.field("files", pa.int32(), metadata=_COUNT),
        pa.field("copies", pa.int16(), metadata=_COUNT),
        pa.field("first_byte_s", pa.float64(), metadata=_SECONDS),
        pa.field("last_byte_s", pa.float64(), metadata=_SECONDS),
        pa.field("command_s", pa.float64(), metadata=_SECONDS),
        pa.field("overhead_s", pa.float64(), metadata=_SECONDS),
        pa.field("ok", pa.bool_()),
        pa.field("failure_kind", repeated),
        pa.field("failure_phase", repeated),
        pa.field("sandbox_id", pa.string()),
        pa.field("t_rollout", clock),
    ]


STEP_SCHEMA = pa.schema(_step_fields(WALL_CLOCK, LOW_CARDINALITY), metadata=_metadata())
"""The steps table as the engine writes it (shards): the rollouts table's identity columns first, in their order."""

COMPACTED_STEP_SCHEMA = pa.schema(
    [
        *STEP_SCHEMA,
        *(pa.field(name, pa.float64(), metadata=_VENDOR_SECONDS) for name in STEP_VENDOR_SECONDS_COLUMNS.values()),
    ],
    metadata=_metadata(),
)
"""The compacted `steps/steps.parquet`: the shards' columns, then the vendor-seconds twins."""

STEP_READ_SCHEMA = pa.schema(_step_fields(pa.float64(), pa.string()), metadata=_metadata(version=1))
"""As the analysis reads it: epoch seconds as floats, plain strings (the rollouts' ROLLOUT_READ_SCHEMA convention)."""

_identity_values = operator.attrgetter(*IDENTITY_FIELDS)


def step_record(identity: RolloutIdentity, **values: Any) -> StepRecord:
    """A step row of this rollout attempt (its identity copied)."""
    return StepRecord(*_identity_values(identity), **values)


def _check() -> None:
    names = [f.name for f in fields(StepRecord)]
    if sorted(names) != sorted(STEP_SCHEMA.names) or STEP_SCHEMA.names[: len(IDENTITY_FIELDS)] != list(IDENTITY_FIELDS):
        raise AssertionError(f"StepRecord fields {names} != schema {STEP_SCHEMA.names}")


_check()
