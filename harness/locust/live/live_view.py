"""What the load looks like right now, over every engine of the run: the progress line, burst steps and the
knee search read it. Locally it is fed by polling the engine; on a master, by the workers' reports."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from harness.wire.messages import EngineStats
from harness.wire.stage_counters import StageStats, merge_stages

SILENT_MIN_S = 2.0
SILENT_AFTER_CADENCES = 3.0


@dataclass(frozen=True, slots=True)
class LiveTotals:
    """Every engine's latest counters, summed (loop lag: the worst engine's)."""

    engines: int
    inflight: int
    ok: int
    failed: int
    cancelled: int
    failures: dict[str, int]
    live_sandboxes: int
    loop_lag_p99_ms: float
    cpu_percent: list[int]
    dropped: int
    loop_lag_max_ms: float = 0.0  # the worst engine's longest recent lag: a stall the p99 may hide
    silent_s: float = 0.0  # the longest an engine has not answered beyond its usual cadence: a stall in progress


@dataclass
class LiveView:
    snapshots: dict[str, EngineStats] = field(default_factory=dict)  # engine name -> its latest stats
    received_at: dict[str, float] = field(default_factory=dict)
    dropped: Counter[str] = field(default_factory=Counter)  # open model: starts the schedule could not make
    dropped_by: dict[str, Counter[str]] = field(default_factory=dict)
    cadence: dict[str, float] = field(default_factory=dict)  # engine name -> seconds between its last two answers

    def update(self, engine: str, stats: EngineStats | None, dropped: dict[str, int] | None = None) -> None:
        if stats is not None:
            self.snapshots[engine] = stats
            now = time.monotonic()
            if engine in self.received_at:
                self.cadence[engine] = now - self.received_at[engine]
            self.received_at[engine] = now
        if dropped is not None:  # cumulative per reporter: replace, then re-sum
            self.dropped_by[engine] = Counter({str(k): int(v) for k, v in dropped.items()})
            self.dropped = sum(self.dropped_by.values(), Counter())

    def trainer(self) -> dict[str, Any] | None:
        """A rehearsal's emulated trainer, as its engine last reported it."""
        for snapshot in self.snapshots.values():
            if snapshot.trainer:
                return snapshot.trainer
        return None

    def stages(self) -> dict[str, StageStats]:
        return merge_stages([snapshot.stages for snapshot in self.snapshots.values()])

    def stage(self, name: str) -> StageStats:
        return self.stages().get(name, StageStats())

    def silent_s(self, now: float | None = None) -> float:
        """How long the quietest engine has gone without answering, when that is past SILENT_AFTER_CADENCES of its
        usual cadence (and SILENT_MIN_S): a frozen engine answers nothing, so its last counters would otherwise
        stand in the live view as if all were well. 0.0 when every engine answers as usual."""
        now = time.monotonic() if now is None else now
        worst = 0.0
        for engine, at in self.received_at.items():
            quiet = now - at
            if quiet > max(SILENT_MIN_S, SILENT_AFTER_CADENCES * self.cadence.get(engine, SILENT_MIN_S)):
                worst = max(worst, quiet)
        return worst

    def totals(self) -> LiveTotals:
        snapshots = list(self.snapshots.values())
        failures: Counter[str] = Counter()
        for snapshot in snapshots:
            failures.update(snapshot.failures)
        return LiveTotals(
            engines=len(snapshots),
            inflight=sum(s.inflight for s in snapshots),
            ok=sum(s.ok for s in snapshots),
            failed=sum(s.failed for s in snapshots),
            cancelled=sum(s.cancelled for s in snapshots),
            failures=dict(failures),
            live_sandboxes=sum(s.live_sandboxes for s in snapshots),
            loop_lag_p99_ms=max((s.health.recent_lag_p99_ms for s in snapshots), default=0.0),
            cpu_percent=[round(s.health.cpu_percent) for s in snapshots],
            dropped=sum(self.dropped.values()),
            loop_lag_max_ms=max((s.health.recent_lag_max_ms for s in snapshots), default=0.0),
            silent_s=self.silent_s(),
        )
