"""A served simulated vendor watching its own event loop, so a run can tell the profile's latency from the machine's.

The simulated vendor is a process of its own on the same cores as the harness. When the machine starves it, every
sandbox it serves is answered late at once: a delay no profile asked for, correlated across the whole fleet, and
invisible to the engine's own health rows (the engine's loop is not the one that stalled). Stopping a served vendor
0.4 s in every 3 s moved a rehearsal's simulated trainer rate 13.8% off while the engine saw 7 ms of loop lag
(2026-12-07). The watch wakes every `PROBE_S` and keeps how late it woke; the truth endpoints carry the figures in
the run's facts (`VendorSimulator.facts`) and the harness keeps them beside the run (`vendor_loop.json`).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from foundation.quantiles import nearest_rank

PROBE_S = 0.1
LAGS_KEPT = 100_000  # at one lag a probe, 2.8 hours of them; past that the p99 is of the first 2.8 hours


@dataclass(slots=True)
class LoopWatch:
    """How late the vendor's loop woke from each `PROBE_S` sleep, wall seconds."""

    probes: int = 0
    lag_max_s: float = 0.0
    late_s: float = 0.0  # the lags summed: how long the loop was behind in all
    _lags: list[float] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Probe on the running loop until it ends (an ended loop cancels the probe with every other task)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._probe(), name="vendor-loop-watch")

    def record(self, lag_s: float) -> None:
        lag_s = max(0.0, lag_s)
        self.probes += 1
        self.lag_max_s = max(self.lag_max_s, lag_s)
        self.late_s += lag_s
        if len(self._lags) < LAGS_KEPT:
            self._lags.append(lag_s)

    def lag_p99_s(self) -> float:
        """The project's nearest-rank p99 (foundation.quantiles), 0 before the first probe."""
        return nearest_rank(sorted(self._lags), 0.99) if self._lags else 0.0

    def facts(self) -> dict[str, Any]:
        """The figures the truth endpoints carry (milliseconds, wall)."""
        return {
            "probes": self.probes,
            "interval_ms": 1000 * PROBE_S,
            "lag_p99_ms": round(1000 * self.lag_p99_s(), 3),
            "lag_max_ms": round(1000 * self.lag_max_s, 3),
            "late_ms": round(1000 * self.late_s, 3),
        }

    async def _probe(self) -> None:
        while True:
            due = time.monotonic() + PROBE_S
            await asyncio.sleep(PROBE_S)
            self.record(time.monotonic() - due)
