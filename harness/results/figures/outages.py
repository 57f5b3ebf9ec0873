"""Where a run met a vendor it could not reach: spans of vendor calls that failed at the connection level.

A vendor outage (refused connections, then back on the same address) shows in the stage table only as a mass of
`transport` failures; the summary names when it was, so a reader does not mistake the stage's failure and start
rates for the vendor's behaviour under load. A span is a run of `transport` failures in any phase (a vendor that
goes while every sandbox is booting fails their readiness looks, not their creates), each within OUTAGE_GAP_S of the
last (the engine probes a gone vendor at most MAX_BACKOFF_S apart: one outage, one span), of at least
OUTAGE_MIN_FAILURES (a lone reset is not an outage); the line counts them by phase.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import pandas as pd

OUTAGE_GAP_S = 5.0
OUTAGE_MIN_FAILURES = 3


@dataclass(frozen=True, slots=True)
class OutageSpan:
    start: float  # epoch seconds: the first call that failed unreachable
    end: float  # the last
    failures: int
    by_phase: tuple[tuple[str, int], ...] = ()  # (phase, failures), most first

    @property
    def duration_s(self) -> float:
        return self.end - self.start

    def describe(self) -> str:
        def clock(t: float) -> str:
            return datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S.%f")[:-5]

        phases = ", ".join(f"{count} {phase}" for phase, count in self.by_phase)
        held = "; the engine held creates meanwhile" if any(phase == "create" for phase, _ in self.by_phase) else ""
        return (
            f"vendor unreachable: calls failed (transport) from {clock(self.start)} to {clock(self.end)} UTC "
            f"({self.duration_s:.1f} s, {self.failures} failed: {phases}){held}"
        )


def outage_spans(rollouts: pd.DataFrame) -> list[OutageSpan]:
    """The outage spans of a rollouts frame (read schema: `t_submit` epoch seconds, `total_s`, failure columns)."""
    needed = {"t_submit", "total_s", "failure_kind", "failure_phase"}
    if rollouts.empty or not needed <= set(rollouts.columns):
        return []
    kind = rollouts["failure_kind"].astype("string")
    failed = rollouts[(kind == "transport").fillna(False)]
    if failed.empty:
        return []
    at = failed["t_submit"].to_numpy(dtype=float) + failed["total_s"].fillna(0.0).to_numpy(dtype=float)
    order = np.argsort(at, kind="stable")
    at = at[order]
    phases = failed["failure_phase"].astype("string").fillna("unknown").to_numpy(dtype=object)[order]
    breaks = np.flatnonzero(np.diff(at) > OUTAGE_GAP_S) + 1
    spans = []
    for times, named in zip(np.split(at, breaks), np.split(phases, breaks), strict=True):
        if len(times) >= OUTAGE_MIN_FAILURES:
            counted = Counter(str(phase) for phase in named).most_common()
            spans.append(OutageSpan(float(times[0]), float(times[-1]), len(times), tuple(counted)))
    return spans


def outage_lines(rollouts: pd.DataFrame) -> list[str]:
    """One line per outage span, for the end-of-run summary and `stampede summary`."""
    return [span.describe() for span in outage_spans(rollouts)]


__all__ = ["OUTAGE_GAP_S", "OutageSpan", "outage_lines", "outage_spans"]
