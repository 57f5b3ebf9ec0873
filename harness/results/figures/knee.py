"""The knee: the highest concurrency a vendor holds before it breaks. The one definition of "past the knee".

Both the live knee search (`stampede run --scenario knee`, which stops the run at the first dirty stage) and
the report (`stampede report`, which reads a finished run) judge a stage with `stage_verdicts`, so the report
says what the run did. A stage is past the knee when any of these holds:
- its failure rate (failed / finished) is above `max_failure_rate` (default 5%: the modal-like profile fails
  ~2% at low load by design; 960 at once fails ~15%);
- its TTI p99 is above the p99 limit: `max_p99_s` seconds if given, else `max_p99_ratio` (default 5×: "the
  tail blew up") times the reference stage's p99. The reference is the lowest-concurrency stage, which is the
  first stage of a ramp;
- no rollout finished in it, or none succeeded.

Stages are taken in concurrency order; the knee is the last stage before the first one that breaks, so a
noisy recovery above a break never counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the live shape imports this module: keep it free of pandas
    from harness.results.figures.stage_aggregate import StageStats

DEFAULT_MAX_FAILURE_RATE = 0.05
DEFAULT_P99_FACTOR = 5.0


@dataclass(frozen=True, slots=True)
class KneeThresholds:
    max_failure_rate: float = DEFAULT_MAX_FAILURE_RATE
    max_p99_ratio: float | None = DEFAULT_P99_FACTOR  # × the reference stage's TTI p99 (None: no relative limit)
    max_p99_s: float | None = None  # an absolute TTI p99 limit in seconds; replaces the relative one when given

    def p99_limit(self, reference_p99_s: float | None) -> float | None:
        """The TTI p99 a stage may reach: the explicit maximum, else the factor times the reference's p99."""
        if self.max_p99_s is not None:
            return self.max_p99_s
        if self.max_p99_ratio is None or reference_p99_s is None or not reference_p99_s > 0:
            return None  # no reference yet (or a NaN one): no relative limit
        return self.max_p99_ratio * reference_p99_s

    def describe(self) -> str:
        parts = [f"failure rate ≤ {100 * self.max_failure_rate:g}%"]
        if self.max_p99_s is not None:
            parts.append(f"TTI p99 ≤ {self.max_p99_s:g} s")
        elif self.max_p99_ratio is not None:
            parts.append(f"TTI p99 ≤ {self.max_p99_ratio:g}× the lowest stage's")
        return ", ".join(parts)


def stage_verdicts(
    failure_rate: float,
    finished: int,
    p99_s: float | None,
    reference_p99_s: float | None,
    thresholds: KneeThresholds = KneeThresholds(),
) -> list[str]:
    """Why a stage is past the knee, one reason per broken threshold; an empty list means it stayed clean.

    Plain numbers, so the live shape (HDR counters) and the report (parquet) share it: `failure_rate` is
    failed / finished, `finished` counts ok + failed, `p99_s` is the stage's TTI p99 (None or NaN: no TTI),
    `reference_p99_s` the lowest-concurrency (first) stage's.
    """
    if finished <= 0:
        return ["no rollout finished during the stage"]
    verdicts = []
    if failure_rate > thresholds.max_failure_rate:
        verdicts.append(f"failure rate {100 * failure_rate:.1f}% > {100 * thresholds.max_failure_rate:g}%")
    if p99_s is None or p99_s != p99_s:
        if not verdicts:  # with every rollout failed, the failure rate already says it
            verdicts.append("no successful rollout")
        return verdicts
    limit = thresholds.p99_limit(reference_p99_s)
    if limit is not None and p99_s > limit:
        if thresholds.max_p99_s is None and reference_p99_s:
            verdicts.append(
                f"TTI p99 {p99_s:.3g} s is {p99_s / reference_p99_s:.1f}× the lowest stage's {reference_p99_s:.3g} s"
                f" (limit {thresholds.max_p99_ratio:g}×)"
            )
        else:
            verdicts.append(f"TTI p99 {p99_s:.3g} s > {limit:g} s")
    return verdicts


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
    reference = ordered[0].phases["tti"]["p99"]
    last_good: StageStats | None = None
    for stage in ordered:
        verdicts = stage_verdicts(
            stage.failure_rate, stage.ok + stage.failed, stage.phases["tti"]["p99"], reference, thresholds
        )
        if verdicts:
            return Knee(
                last_good.stage if last_good else None,
                last_good.concurrency if last_good else None,
                stage.stage,
                "; ".join(verdicts),
            )
        last_good = stage
    assert last_good is not None
    return Knee(last_good.stage, last_good.concurrency, None, "")
