"""How much load one engine carries: what `--workers auto` decides from (imports nothing heavy, no Locust)."""

from __future__ import annotations

import math

PER_ENGINE_IN_FLIGHT = 5000
"""Rollouts one engine holds with its loop lag p99 under 50 ms on a 2-core machine (bench/bench_scale.py);
`--workers auto` spreads a larger peak over more engines rather than measuring one engine's queue."""


def engines_needed(peak_in_flight: int | None) -> int:
    """Local workers `--workers auto` starts for this peak (0: the run stays one process with one engine)."""
    if not peak_in_flight or peak_in_flight <= PER_ENGINE_IN_FLIGHT:
        return 0
    return math.ceil(peak_in_flight / PER_ENGINE_IN_FLIGHT)
