"""What the load looks like right now, over every engine of the run: the progress line, burst steps and the
knee search read it. Locally it is fed by polling the engine; on a master, by the workers' reports."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from harness.wire.stage_counters import StageStats, merge_stages


@dataclass
class LiveView:
    snapshots: dict[str, dict[str, Any]] = field(default_factory=dict)  # engine name -> its latest stats
    received_at: dict[str, float] = field(default_factory=dict)
    dropped: Counter[str] = field(default_factory=Counter)  # open model: starts the schedule could not make
    dropped_by: dict[str, Counter[str]] = field(default_factory=dict)

    def update(self, engine: str, stats: dict[str, Any] | None, dropped: dict[str, int] | None = None) -> None:
        if stats:
            self.snapshots[engine] = stats
            self.received_at[engine] = time.monotonic()
        if dropped is not None:  # cumulative per reporter: replace, then re-sum
            self.dropped_by[engine] = Counter({str(k): int(v) for k, v in dropped.items()})
            self.dropped = sum(self.dropped_by.values(), Counter())

    def trainer(self) -> dict[str, Any] | None:
        """A rehearsal's emulated trainer, as its engine last reported it."""
        for snapshot in self.snapshots.values():
            if snapshot.get("trainer"):
                trainer: dict[str, Any] = snapshot["trainer"]
                return trainer
        return None

    def stages(self) -> dict[str, StageStats]:
        return merge_stages([snapshot.get("stages") or {} for snapshot in self.snapshots.values()])

    def stage(self, name: str) -> StageStats:
        return self.stages().get(name, StageStats())

    def totals(self) -> dict[str, Any]:
        snapshots = list(self.snapshots.values())
        failures: Counter[str] = Counter()
        for snapshot in snapshots:
            failures.update(snapshot.get("failures") or {})
        healths = [snapshot.get("health") or {} for snapshot in snapshots]
        return {
            "engines": len(snapshots),
            "inflight": sum(int(s.get("inflight", 0)) for s in snapshots),
            "ok": sum(int(s.get("ok", 0)) for s in snapshots),
            "failed": sum(int(s.get("failed", 0)) for s in snapshots),
            "cancelled": sum(int(s.get("cancelled", 0)) for s in snapshots),
            "failures": dict(failures),
            "live_sandboxes": sum(int(s.get("live_sandboxes", 0)) for s in snapshots),
            "loop_lag_p99_ms": max((float(h.get("recent_lag_p99_ms", 0)) for h in healths), default=0.0),
            "cpu_percent": [round(float(h.get("cpu_percent", 0))) for h in healths],
            "dropped": sum(self.dropped.values()),
        }
