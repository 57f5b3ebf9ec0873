"""Each engine's rows as Prometheus-shaped bucket counts: TTI and phase histograms, failures by kind and phase.

Why here: the engine is where every row is made (`harness.engine.run.Run.record_row`, the rows the parquet files
and the summary read), so one `observe` per row beside the live stage counters keeps the metrics the summary's own
measurements, not a second timer. The counts are cumulative over the run and ride on the `stats` answer
(`EngineStats.metrics`) that a local runner polls and every worker already ships to its master each second, so a
scrape (`harness.locust.live.metrics_endpoint`) only reads the latest snapshots: no lock, thread or message per
rollout. Fixed bucket edges (the same in every engine) let a master lay every worker's counts out as they are.

Seconds are the engine's wall seconds as measured (`tti_s`, `create_s`, ...): the summary's vendor seconds at time
scale 1 (every real vendor, and the simulated ones at their default 1); at another time scale the summary joins the
simulated vendor's record at the end of the run (`harness.results.read.vendor_time`), which a live figure cannot.

Cost (measured 2026-12-06, 2 shared cores at load 3): `observe` is 1.2 µs a row (timeit over a `RolloutRecord`) and
`to_wire` 2 µs a stats answer, against the harness's ~450 µs of CPU a lifecycle at 64 in flight
(bench/bench_harness_share.py; the whole endpoint's cost is in harness.locust.live.metrics_endpoint's docstring).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

BUCKETS_S: tuple[float, ...] = (
    0.01,
    0.015,
    0.02,
    0.03,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    3.0,
    5.0,
    7.5,
    10.0,
    15.0,
    20.0,
    30.0,
    45.0,
    60.0,
    90.0,
    120.0,
    180.0,
    300.0,
    600.0,
)
"""Upper bounds (seconds, inclusive as Prometheus' `le`): 10 ms to 10 minutes at about 1.5x steps, so
`histogram_quantile` lands within one bucket's width (a third to a half of its value) of the summary's figure."""

PHASE_FIELDS: dict[str, str] = {
    "create": "create_s",
    "ready": "ready_s",
    "exec": "exec_s",
    "terminate": "terminate_s",
}
"""The phases a histogram each (the report's create, ready, commands, teardown), by the row field that times it."""


@dataclass(slots=True)
class BucketCounts:
    """One histogram: a count per bucket (not cumulative; the last one past the largest edge) and the sum."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS_S) + 1))
    sum_s: float = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(BUCKETS_S, seconds)] += 1
        self.sum_s += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """Prometheus' `le` buckets: (upper bound as text, observations at or below it), `+Inf` last."""
        out: list[tuple[str, int]] = []
        running = 0
        for edge, n in zip((*map(repr, BUCKETS_S), "+Inf"), self.counts, strict=True):
            running += n
            out.append((edge, running))
        return out

    def to_wire(self) -> dict[str, Any]:
        return {"counts": list(self.counts), "sum": self.sum_s}

    @classmethod
    def from_wire(cls, data: dict[str, Any] | None) -> BucketCounts:
        if not data:
            return cls()
        counts = [int(n) for n in data.get("counts", ())]
        if len(counts) != len(BUCKETS_S) + 1:  # another version's edges: nothing rather than a wrong histogram
            return cls()
        return cls(counts, float(data.get("sum", 0.0)))


@dataclass(slots=True)
class RowMetrics:
    """One engine's rows so far: the TTI histogram, one per phase, and failures by kind and phase."""

    tti: BucketCounts = field(default_factory=BucketCounts)
    phases: dict[str, BucketCounts] = field(default_factory=lambda: {name: BucketCounts() for name in PHASE_FIELDS})
    failures: Counter[tuple[str, str]] = field(default_factory=Counter)

    def observe(self, row: Any) -> None:
        """A finished row (a `RolloutRecord`, or anything with its fields): each duration it has, and its failure."""
        if row.tti_s is not None:
            self.tti.observe(row.tti_s)
        phases = self.phases
        for name, attribute in PHASE_FIELDS.items():
            value = getattr(row, attribute)
            if value is not None:
                phases[name].observe(value)
        if row.failure_kind is not None:
            self.failures[(row.failure_kind, row.failure_phase or "unknown")] += 1

    def failures_by_kind(self) -> dict[str, int]:
        """The failures by kind alone: what the engine's stats and drain summary carry (one count of each row)."""
        totals: Counter[str] = Counter()
        for (kind, _phase), n in self.failures.items():
            totals[kind] += n
        return dict(totals)

    def to_wire(self) -> dict[str, Any]:
        return {
            "tti": self.tti.to_wire(),
            "phases": {name: counts.to_wire() for name, counts in self.phases.items()},
            "failures": [[kind, phase, n] for (kind, phase), n in self.failures.items()],
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any] | None) -> RowMetrics:
        data = data or {}
        phases = data.get("phases") or {}
        failures: Counter[tuple[str, str]] = Counter()
        for kind, phase, n in data.get("failures") or ():
            failures[(str(kind), str(phase))] += int(n)
        return cls(
            tti=BucketCounts.from_wire(data.get("tti")),
            phases={name: BucketCounts.from_wire(phases.get(name)) for name in PHASE_FIELDS},
            failures=failures,
        )
