"""Live per-stage counters and TTI histograms that merge exactly across engines and workers.

Each engine keeps one `StageStats` per stage; the Locust side (a local runner, or a master fed by its
workers) sums the counters and merges the HDR histograms (`decode_and_add`), so aggregated percentiles are
computed from the merged distribution, never by averaging per-worker percentiles. Shapes that react to what
the vendor does (burst steps, the knee search) and the progress line read these. The parquet records stay
the source of truth for reports.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hdrh.histogram import HdrHistogram

from foundation.quantiles import hdr_quantile

_LOWEST_US = 1
_HIGHEST_US = 24 * 3600 * 1_000_000  # a day: nothing a rollout waits for is longer
_DIGITS = 3


def new_histogram() -> HdrHistogram:
    return HdrHistogram(_LOWEST_US, _HIGHEST_US, _DIGITS)


@dataclass
class StageStats:
    """One stage as seen by one engine (or, after `merge`, by all of them)."""

    ok: int = 0
    failed: int = 0
    cancelled: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    tti: HdrHistogram = field(default_factory=new_histogram)
    ended: int = 0  # rollouts whose last attempt is over (a retried rollout is one, however many rows)

    @property
    def finished(self) -> int:
        """Rollouts that ran to an end (ok or failed); cancelled ones were cut off by the run."""
        return self.ok + self.failed

    @property
    def failure_rate(self) -> float:
        return self.failed / self.finished if self.finished else 0.0

    def tti_quantile(self, q: float) -> float | None:
        """Seconds, from the merged histogram: the sample at the summary's rank (`foundation.quantiles`), to the
        histogram's 3 significant digits (HDR's highest equivalent value: 99 s reads 99.02 s)."""
        value_us = hdr_quantile(self.tti, q)
        return None if value_us is None else value_us / 1e6

    def add(self, outcome: str, failure_kind: str | None, tti_s: float | None) -> None:
        if tti_s is not None:  # any rollout that got its first command back has a TTI
            self.tti.record_value(min(max(_LOWEST_US, int(tti_s * 1e6)), _HIGHEST_US))
        if outcome == "ok":
            self.ok += 1
        elif outcome == "failed":
            self.failed += 1
            self.failures[failure_kind or "unknown"] += 1
        else:
            self.cancelled += 1

    def merge(self, other: StageStats) -> None:
        self.ok += other.ok
        self.failed += other.failed
        self.cancelled += other.cancelled
        self.ended += other.ended
        self.failures.update(other.failures)
        self.tti.add(other.tti)

    def to_wire(self) -> dict[str, Any]:
        encoded = self.tti.encode() if self.tti.get_total_count() else b""
        return {
            "ok": self.ok,
            "failed": self.failed,
            "cancelled": self.cancelled,
            "ended": self.ended,
            "failures": dict(self.failures),
            "tti_hdr": encoded.decode() if isinstance(encoded, bytes) else encoded,
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> StageStats:
        stats = cls(
            ok=int(data.get("ok", 0)),
            failed=int(data.get("failed", 0)),
            cancelled=int(data.get("cancelled", 0)),
            ended=int(data.get("ended", 0)),
            failures=Counter({str(k): int(v) for k, v in (data.get("failures") or {}).items()}),
        )
        blob = data.get("tti_hdr")
        if blob:
            stats.tti.decode_and_add(blob)
        return stats


def merge_stages(snapshots: list[dict[str, dict[str, Any]]]) -> dict[str, StageStats]:
    """Per-stage totals over several engines' cumulative snapshots (`{stage: to_wire()}` each)."""
    merged: dict[str, StageStats] = {}
    for snapshot in snapshots:
        for stage, data in snapshot.items():
            merged.setdefault(stage, StageStats()).merge(StageStats.from_wire(data))
    return merged
