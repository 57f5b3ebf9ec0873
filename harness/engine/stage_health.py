"""The engine's own load per stage: how late its loop ran and how much CPU it used while each stage was in force.

A run-wide loop lag hides the stage where the harness saturated: the knee a run reports may be the engine's
own. So the lag probe also feeds the histogram of the stage in force, and a change of stage books the CPU and
wall seconds since the last change to the stage that ends. `engine-<worker>.json` carries the result
(`stage_health`), which `report` and the end-of-run summary put beside each stage.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import psutil
from hdrh.histogram import HdrHistogram

from foundation.quantiles import hdr_quantile

_LAG_MAX_US = 3_600_000_000


def _histogram() -> HdrHistogram:
    return HdrHistogram(1, _LAG_MAX_US, 3)


@dataclass
class StageLoad:
    lag: HdrHistogram = field(default_factory=_histogram)
    cpu_s: float = 0.0
    wall_s: float = 0.0

    def to_wire(self) -> dict[str, Any]:
        count = self.lag.get_total_count()
        lag_p99 = hdr_quantile(self.lag, 0.99)
        return {
            "lag_p99_ms": lag_p99 / 1000 if lag_p99 is not None else None,
            "lag_max_ms": self.lag.get_max_value() / 1000 if count else None,
            "lag_samples": count,
            "cpu_s": round(self.cpu_s, 3),
            "wall_s": round(self.wall_s, 3),
            "cpu_share": round(self.cpu_s / self.wall_s, 3) if self.wall_s > 0 else None,  # of one core
        }


class StageHealth:
    """Per-stage loop lag and CPU of this process; `switch` at every change of stage."""

    def __init__(self) -> None:
        self._process = psutil.Process()
        self.stages: dict[str, StageLoad] = {}
        self.current: str | None = None
        self._cpu0 = 0.0
        self._wall0 = 0.0

    def _cpu(self) -> float:
        times = self._process.cpu_times()
        return times.user + times.system

    def _book(self) -> None:
        """Charge the CPU and wall seconds since the last booking to the stage in force."""
        cpu, wall = self._cpu(), time.monotonic()
        if self.current is not None:
            load = self.stages[self.current]
            load.cpu_s += cpu - self._cpu0
            load.wall_s += wall - self._wall0
        self._cpu0, self._wall0 = cpu, wall

    def switch(self, stage: str) -> None:
        if not stage or stage == self.current:  # an unnamed stage (before the first) books nothing
            return
        self._book()
        self.current = stage
        self.stages.setdefault(stage, StageLoad())

    def record_lag(self, lag_us: int) -> None:
        if self.current is not None:
            self.stages[self.current].lag.record_value(lag_us)

    def reset(self) -> None:
        self.stages.clear()
        self.current = None

    def summary(self) -> dict[str, dict[str, Any]]:
        """Every stage so far (the one in force counted up to now)."""
        self._book()
        return {name: load.to_wire() for name, load in self.stages.items()}
