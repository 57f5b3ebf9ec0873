"""A run's figures per stage and for the whole run, from the one aggregation (harness.results.figures.stage_aggregate):
what the end-of-run table, `stampede summary`, summary.json and `--threshold` all read.

The whole run is aggregated as one stage holding every rollout (pooled, never an average of stages), so its
quantiles, rates and counts follow exactly the rules the stages follow.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.results.figures.stage_aggregate import RunStats, StageStats, TimeBasis, compute_run_stats
from harness.results.figures.step_figures import StepView, step_figures
from harness.results.figures.thresholds import COUNT_METRIC, STATS, Figures, RunFigures
from harness.results.read.dataset import RunInfo, load_rollout_frame, read_run_info
from harness.wire.records import INIT_PHASES

WHOLE_RUN = "(run)"


@dataclass(frozen=True, slots=True)
class RunAggregate:
    """Per stage (`stats.stages`) and the whole run pooled (`run`, None when nothing was recorded)."""

    stats: RunStats
    run: StageStats | None

    @property
    def basis(self) -> TimeBasis:
        return self.stats.basis


def aggregate_run(info: RunInfo, frame: pd.DataFrame, basis: TimeBasis = "vendor") -> RunAggregate:
    stats = compute_run_stats(info, frame, basis)
    if frame.empty:
        return RunAggregate(stats=stats, run=None)
    pooled = frame.assign(stage=pd.Categorical([WHOLE_RUN] * len(frame)))
    whole = compute_run_stats(info, pooled, basis).stages
    return RunAggregate(stats=stats, run=whole[0] if whole else None)


def load_aggregate(run_dir: Path | str, basis: TimeBasis = "vendor") -> tuple[RunInfo, RunAggregate]:
    """A run folder's figures (a folder that is not a run is a one-line UsageError)."""
    info = read_run_info(run_dir)
    return info, aggregate_run(info, load_rollout_frame(info.run_dir), basis)


def unfinished(stats: StageStats) -> int:
    """Submitted rollouts with no recorded end (outcome `unfinished`): what the other outcomes leave."""
    return stats.rollouts - stats.ok - stats.failed - stats.cancelled


def init_failure_rate(stats: StageStats) -> float:
    """Failures before the sandbox was interactive (create or ready phase) over finished rollouts."""
    finished = stats.ok + stats.failed
    init = sum(count for phase, count in stats.failures_by_phase.items() if phase in INIT_PHASES)
    return init / finished if finished else 0.0


def figures_of(stats: StageStats) -> dict[str, float]:
    """One scope's figures by threshold metric name (durations in the stats' own seconds)."""
    figures: dict[str, float] = {}
    for phase, summary in stats.phases.items():
        for stat in STATS:
            if stat in summary:
                figures[f"{phase}.{stat}"] = float(summary[stat])
    figures.update(
        {
            "failure_rate": stats.failure_rate,
            "init_failure_rate": init_failure_rate(stats),
            "success_rate": stats.success_rate,
            "start_rate": stats.start_rate,
            COUNT_METRIC: float(stats.failed),
        }
    )
    for kind, count in stats.failures_by_kind.items():
        figures[f"{COUNT_METRIC}.{kind}"] = float(count)
    return figures


def run_figures(aggregate: RunAggregate, steps: StepView | None = None) -> RunFigures:
    """What thresholds are checked against; thresholds are in vendor seconds, so the aggregate must be too.
    `steps` (a run with a plan) adds each step's figures (`step:upload.p99`, ...), whole run and per stage."""
    if aggregate.basis != "vendor":
        raise ValueError("thresholds are checked in vendor seconds: aggregate with basis='vendor'")
    run = figures_of(aggregate.run) if aggregate.run is not None else {}
    stages: dict[str, Figures] = {stage.stage: figures_of(stage) for stage in aggregate.stats.stages}
    if steps is not None:
        run |= step_figures(steps.run)
        for stage, entries in steps.stages.items():
            stages[stage] = {**stages.get(stage, {}), **step_figures(entries)}
    return RunFigures(run=run, stages=stages, steps=tuple(steps.keys()) if steps is not None else ())
