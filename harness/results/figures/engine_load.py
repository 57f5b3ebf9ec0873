"""The engine's own load per stage, read from `engine-<worker>.json`: beside each stage, how busy the harness was.

A stage where the engine ran near a full core, or its loop lagged, measured the harness as much as the vendor.
Engines' CPU adds up (cores in use by the harness's engines); the lag shown is the worst engine's p99, and beside it
the worst engine's longest lag when that was a stall (`STALL_MS`), which a p99 over thousands of probes hides.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STALL_MS = 250.0
"""A loop lag this long is a stall (the engine frozen, swapped out, stopped): shown beside the p99 it would hide.
One probe of 15 s among a ten-minute stage's 6,000 left the p99 at 3 ms."""


def stall_text(lag_max_ms: float) -> str:
    """`, stalled 15.0 s` when the worst lag was a stall; else empty."""
    if math.isnan(lag_max_ms) or lag_max_ms < STALL_MS:
        return ""
    return f", stalled {lag_max_ms / 1000:.1f} s"


@dataclass(frozen=True, slots=True)
class EngineLoad:
    cpu_share: float  # cores the engines used while the stage was in force (1.0 = one full core); NaN unknown
    lag_p99_ms: float  # the worst engine's loop lag p99 during the stage; NaN unknown
    lag_max_ms: float = math.nan  # the worst engine's longest lag during the stage (a stall); NaN unknown

    def describe(self) -> str:
        cpu = "-" if math.isnan(self.cpu_share) else f"{100 * self.cpu_share:.0f}% cpu"
        lag = "-" if math.isnan(self.lag_p99_ms) else f"lag {self.lag_p99_ms:.0f} ms"
        return f"{cpu}, {lag}{stall_text(self.lag_max_ms)}"


def stage_engine_load(run_dir: str | Path) -> dict[str, EngineLoad]:
    """Per stage, summed over the run's engines; empty for runs written before engines recorded it."""
    summaries: list[Mapping[str, Any]] = []
    for path in sorted(Path(run_dir).glob("engine-*.json")):
        try:
            summaries.append(json.loads(path.read_text()))
        except (OSError, ValueError, RecursionError):
            continue
    return engine_load_of(summaries)


def engine_load_of(summaries: Sequence[Mapping[str, Any]]) -> dict[str, EngineLoad]:
    """The same, from the engines' drain summaries (what `engine-*.json` holds)."""
    cpu: dict[str, float] = {}
    lag: dict[str, float] = {}
    worst: dict[str, float] = {}
    for summary in summaries:
        for stage, load in (summary.get("stage_health") or {}).items():
            if load.get("cpu_share") is not None:
                cpu[stage] = cpu.get(stage, 0.0) + float(load["cpu_share"])
            if load.get("lag_p99_ms") is not None:
                lag[stage] = max(lag.get(stage, 0.0), float(load["lag_p99_ms"]))
            if load.get("lag_max_ms") is not None:
                worst[stage] = max(worst.get(stage, 0.0), float(load["lag_max_ms"]))
    return {
        stage: EngineLoad(cpu.get(stage, math.nan), lag.get(stage, math.nan), worst.get(stage, math.nan))
        for stage in sorted({*cpu, *lag})
    }
