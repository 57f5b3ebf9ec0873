"""How much of a measured TTI could be the harness's own doing, and which stages that makes untrustworthy.

Each rollout records two terms the vendor did not cause: `loop_lag_s`, the engine's event loop's worst stall
between the rollout's start and its first command's answer (a freeze while it waited for its create answer delayed
that answer as much), outside its readiness poll window, and `ready_poll_s`, the window in which a polling provider may have seen readiness late. The two
cover disjoint spans of the rollout, so a stall (the engine frozen while the rollout waited for readiness) is in one
term, not both: their sum bounds the timing error of that TTI. A
stage is flagged when the error's p99 could exceed 5% of the stage's TTI p50, or 50 ms, whichever is larger:
its figures describe the harness as much as the vendor, and must not reach a capacity planner unmarked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

ERROR_SHARE_OF_P50 = 0.05
ERROR_FLOOR_S = 0.05
COLUMNS = ("loop_lag_s", "ready_poll_s")


@dataclass(frozen=True, slots=True)
class TimingError:
    """One stage's harness timing error, in the same seconds as the TTI it is compared with."""

    p99_s: float  # NaN: the run recorded neither term (written before stampede measured them)
    limit_s: float

    @classmethod
    def unknown(cls) -> TimingError:
        """Neither term recorded (a run written before stampede measured them)."""
        return cls(p99_s=math.nan, limit_s=ERROR_FLOOR_S)

    @property
    def flagged(self) -> bool:
        return not math.isnan(self.p99_s) and self.p99_s > self.limit_s

    def describe(self) -> str:
        if math.isnan(self.p99_s):
            return "not recorded"
        mark = " (!)" if self.flagged else ""
        return f"{1000 * self.p99_s:.0f} ms{mark}"


def per_rollout_error_s(frame: pd.DataFrame, scale: float = 1.0) -> np.ndarray:
    """Each rollout's error bound (NaN where neither term was recorded), divided by `scale` (vendor seconds)."""
    present = [column for column in COLUMNS if column in frame.columns]
    if not present:
        return np.full(len(frame), np.nan)
    terms = frame[present].to_numpy(dtype=float)
    recorded = ~np.isnan(terms).all(axis=1)
    total = np.where(recorded, np.nansum(terms, axis=1), np.nan)
    return total / scale


def stage_timing_error(errors: np.ndarray, tti_p50_s: float) -> TimingError:
    """The p99 of a stage's per-rollout errors (nearest rank, untrimmed) against its limit."""
    known = np.sort(errors[~np.isnan(errors)])
    p99 = float(known[min(len(known) - 1, math.ceil(0.99 * len(known)) - 1)]) if len(known) else math.nan
    p50 = tti_p50_s if tti_p50_s == tti_p50_s else 0.0
    return TimingError(p99_s=p99, limit_s=max(ERROR_SHARE_OF_P50 * p50, ERROR_FLOOR_S))


FLAG_NOTE = (
    "(!) the harness's own timing error (engine loop lag + readiness poll window, p99) could exceed 5% of "
    "this stage's TTI p50 or 50 ms: its figures are partly the harness's"
)
