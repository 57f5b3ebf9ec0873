"""The knee: the highest concurrency a vendor holds before it breaks.

Stages are taken in concurrency order; the knee is the last stage before the first one that breaks a
threshold, so a noisy recovery above a break never counts. Thresholds (all settable on the command line):
- failure rate (failed / finished) at most `max_failure_rate` (default 5%: the modal-like profile fails ~2% at
  low load by design; 960 at once fails ~15%);
- TTI p99 at most `max_p99_ratio` times the p99 of the lowest-concurrency stage (default 3×), and, if given,
  at most `max_p99_s` seconds (in the report's seconds).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.results.stage_aggregate import StageStats

DEFAULT_MAX_FAILURE_RATE = 0.05
DEFAULT_MAX_P99_RATIO = 3.0


@dataclass(frozen=True, slots=True)
class KneeThresholds:
    max_failure_rate: float = DEFAULT_MAX_FAILURE_RATE
    max_p99_ratio: float | None = DEFAULT_MAX_P99_RATIO
    max_p99_s: float | None = None

    def describe(self) -> str:
        parts = [f"failure rate ≤ {100 * self.max_failure_rate:g}%"]
        if self.max_p99_ratio is not None:
            parts.append(f"TTI p99 ≤ {self.max_p99_ratio:g}× the lowest stage's")
        if self.max_p99_s is not None:
            parts.append(f"TTI p99 ≤ {self.max_p99_s:g} s")
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class Knee:
    stage: str | None  # None: even the lowest stage broke a threshold
    concurrency: int | None
    broken_stage: str | None  # the first stage that broke (None: none did)
    reason: str

    def describe(self) -> str:
        if self.stage is None:
            return f"no knee: the lowest stage {self.broken_stage} already breaks ({self.reason})"
        if self.broken_stage is None:
            return f"holds up to {self.concurrency} in flight ({self.stage}), the highest stage tested"
        return f"{self.concurrency} in flight ({self.stage}); {self.broken_stage} breaks: {self.reason}"


def find_knee(stages: list[StageStats], thresholds: KneeThresholds = KneeThresholds()) -> Knee:
    ordered = sorted((s for s in stages if s.ok + s.failed > 0), key=lambda s: (s.concurrency, s.stage))
    if not ordered:
        return Knee(None, None, None, "no finished rollouts")
    baseline = ordered[0].phases["tti"]["p99"]
    last_good: StageStats | None = None
    for stage in ordered:
        reason = _breach(stage, baseline, thresholds)
        if reason:
            return Knee(
                last_good.stage if last_good else None,
                last_good.concurrency if last_good else None,
                stage.stage,
                reason,
            )
        last_good = stage
    assert last_good is not None
    return Knee(last_good.stage, last_good.concurrency, None, "")


def _breach(stage: StageStats, baseline_p99: float, thresholds: KneeThresholds) -> str:
    if stage.failure_rate > thresholds.max_failure_rate:
        return f"failure rate {100 * stage.failure_rate:.1f}% > {100 * thresholds.max_failure_rate:g}%"
    p99 = stage.phases["tti"]["p99"]
    if p99 != p99:  # no successful rollout: failure rate already caught it unless nothing finished
        return "no successful rollout"
    if thresholds.max_p99_s is not None and p99 > thresholds.max_p99_s:
        return f"TTI p99 {p99:.3g} s > {thresholds.max_p99_s:g} s"
    if thresholds.max_p99_ratio is not None and baseline_p99 == baseline_p99 and baseline_p99 > 0:
        ratio = p99 / baseline_p99
        if ratio > thresholds.max_p99_ratio:
            return f"TTI p99 {p99:.3g} s is {ratio:.1f}× the lowest stage's {baseline_p99:.3g} s"
    return ""
