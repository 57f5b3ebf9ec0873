"""What one protocol of one run showed, in the one shape every fit reads.

Our own runs give raw TTI samples; published benchmark files often give only trimmed quantiles. Both become a
`ProtocolObservation`, so the fit does not care where the evidence came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ProtocolObservation:
    protocol: str  # "sequential" | "staggered" | "burst" | "ramp" | "steady" (what the run's shape was)
    concurrency: int  # sandboxes asked for at once (burst width; 1 for sequential; peak for a ramp)
    attempts: int  # creates asked for
    tti_s: tuple[float, ...]  # raw TTI samples of the successes, vendor seconds (empty when only quantiles are known)
    quantiles: Mapping[str, float]  # e.g. {"p50": 1.7, "p95": 2.3, "p99": 2.5}; from tti_s when raw, else published
    trimmed: float  # fraction trimmed each side before the quantiles (computesdk: 0.05), 0 for our runs
    success_rate: float
    failures: Mapping[str, int]  # "kind@phase" -> count
    source: str  # run dir, or "computesdk results/burst_tti/2026-05-05.json, Modal"
