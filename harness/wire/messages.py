"""The messages the Locust side and the engine exchange, typed: one record per request that carries data.

Requests carry an `id`; the engine answers each with the same `id`:
`configure` (an `EngineConfig`) -> `configured`; `rollout` (a `RolloutRequest`) -> `result` (a rollout row);
`lease` (a `RolloutRequest`) -> a `result` per rollout, run back to back in the engine until `cancel` (a
closed-model user: no socket round trip between one rollout and the next), or until `release`: the rollout
in flight finishes, then `released` ends the lease (Locust's graceful stop); `stage` (a `StageUpdate`, no
answer): what leased rollouts record from now on; `cancel` -> no answer (the `result` arrives cancelled);
`stats` -> `stats`; `drain` -> `drained`; `shutdown` -> `drained`, then the engine exits. A request that
cannot be served gets `error` with a kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# requests
CONFIGURE = "configure"
ROLLOUT = "rollout"
LEASE = "lease"
RELEASE = "release"
RELEASED = "released"
STAGE = "stage"
CANCEL = "cancel"
STATS = "stats"
DRAIN = "drain"
SHUTDOWN = "shutdown"
# answers
CONFIGURED = "configured"
RESULT = "result"
DRAINED = "drained"
ERROR = "error"

# error kinds
ERROR_HARNESS = "harness"  # our own bug, or a message we could not read
ERROR_CONFIG = "config"  # the provider could not be built or reached: a user's mistake, one line
ERROR_NOT_CONFIGURED = "not_configured"  # a rollout before `configure` or after `drain`
ERROR_DONE = "done"  # a rehearsal's emulated trainer has all its steps: the user stops


def _known_fields(cls: type, data: Mapping[str, Any], what: str) -> dict[str, Any]:
    known = set(cls.__dataclass_fields__)  # type: ignore[attr-defined]
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"unknown {what} keys: {sorted(unknown)}")
    return dict(data)


@dataclass(slots=True)
class EngineConfig:
    """Everything an engine needs for one run (the `configure` request)."""

    run_id: str
    worker: str
    out_dir: str
    provider: str
    provider_options: dict[str, Any] = field(default_factory=dict)
    profile: str = ""
    scenario: str = ""
    plan: dict[str, Any] = field(default_factory=dict)  # a `harness.wire.plan.RolloutPlan` as a dict
    secrets: list[str] = field(default_factory=list)
    flush_interval_s: float = 2.0
    trainer: dict[str, Any] | None = None  # `stampede rehearse`: the emulated trainer's settings
    otlp_endpoint: str = ""  # `--otlp-endpoint`: a trace per rollout to this collector (harness.engine.otlp_traces)

    def to_wire(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> EngineConfig:
        return cls(**_known_fields(cls, data, "engine config"))

    @property
    def run_dir(self) -> Path:
        return Path(self.out_dir) / self.run_id


@dataclass(frozen=True, slots=True)
class RolloutRequest:
    """Run one rollout now (the `rollout` request): the stage and load it belongs to."""

    stage: str = ""
    target_users: int = 0
    t_intended: float | None = None  # open model: when the schedule meant it to start (epoch s)
    attempt: int = 1

    def to_wire(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> RolloutRequest:
        return cls(
            stage=str(data.get("stage", "")),
            target_users=int(data.get("target_users", 0)),
            t_intended=data.get("t_intended"),
            attempt=int(data.get("attempt", 1)),
        )


@dataclass(frozen=True, slots=True)
class StageUpdate:
    """The load shape moved on: leased rollouts submitted from now on record this stage and target."""

    stage: str
    target_users: int

    def to_wire(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> StageUpdate:
        return cls(stage=str(data.get("stage", "")), target_users=int(data.get("target_users", 0)))


OTLP_ENDPOINT_ENV = "STAMPEDE_OTLP_ENDPOINT"
"""`stampede run --otlp-endpoint`'s variable (a remote worker's way to export its engine's traces too)."""

RECENT_WINDOW_S = 10.0
"""What the `recent_*` figures cover: the engine's last rollouts over this many seconds, and its loop lag over the
last one to two of these windows (two rotating histograms)."""


@dataclass(slots=True)
class HealthSnapshot:
    """How late the engine's event loop ran and how busy its process was (`harness.engine.health`)."""

    loop_lag_p50_ms: float = 0.0
    loop_lag_p99_ms: float = 0.0
    loop_lag_max_ms: float = 0.0
    loop_lag_samples: int = 0
    recent_lag_p99_ms: float = 0.0  # over the last 1 to 2 RECENT_WINDOW_S: what the load looks like now
    recent_lag_max_ms: float = 0.0
    cpu_percent: float = 0.0  # of one core, since the previous snapshot
    cpu_seconds: float = 0.0  # user + system, whole life of the process
    rss_mb: float = 0.0

    @classmethod
    def from_wire(cls, data: Mapping[str, Any] | None) -> HealthSnapshot:
        return cls(**_known_fields(cls, data or {}, "health"))


@dataclass(slots=True)
class EngineStats:
    """One engine's cumulative counters (the `stats` answer): the live view, burst steps and the knee search.

    `stages` holds each stage's `harness.wire.stage_counters.StageStats` in wire form, so a master merges the
    HDR histograms of every worker exactly.
    """

    run_id: str = ""
    worker: str = ""
    inflight: int = 0
    started: int = 0
    ok: int = 0
    failed: int = 0
    cancelled: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    live_sandboxes: int = 0
    peak_inflight: int = 0
    recent_tti_p50_s: float | None = None
    recent_tti_p99_s: float | None = None
    recent_completed: int = 0  # rollouts ended in the last RECENT_WINDOW_S
    health: HealthSnapshot = field(default_factory=HealthSnapshot)
    rows_written: int = 0
    write_error: str | None = None  # the results cannot be written now (rows wait in memory): the run must stop
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)
    trainer: dict[str, Any] | None = None  # a rehearsal's emulated trainer: steps_done, done, counts
    metrics: dict[str, Any] = field(default_factory=dict)  # harness.wire.live_metrics.RowMetrics: the metrics port

    def to_wire(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> EngineStats:
        values = _known_fields(cls, data, "engine stats")
        values["health"] = HealthSnapshot.from_wire(values.get("health"))
        return cls(**values)
