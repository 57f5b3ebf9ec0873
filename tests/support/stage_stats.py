"""A `StageStats` (harness.results.figures.stage_aggregate) with plausible defaults, for tests of what prints it."""

from __future__ import annotations

import dataclasses
from typing import Any

from harness.results.figures.stage_aggregate import StageStats


def make_stage(name: str = "01-s", n: int = 10, tti_s: float = 1.0, **overrides: Any) -> StageStats:
    """`n` rollouts, all ok, every TTI quantile `tti_s`; any field overridden by keyword."""
    tti = {q: tti_s for q in ("p50", "p90", "p95", "p99", "p99.9", "max", "mean")} | {"n": n}
    stats = StageStats(
        run_id="r",
        provider="stub",
        profile="ideal",
        stage=name,
        concurrency=n,
        measured_concurrency=float(n),
        rollouts=n,
        ok=n,
        failed=0,
        cancelled=0,
        cancelled_before_tti=0,
        retries=0,
        gave_up=0,
        failure_rate=0.0,
        success_rate=1.0,
        failures_by_kind={},
        failures_by_phase={},
        phases={"tti": tti},
        tti_p99_censored_upper=tti_s,
        start_rate=2.0,
        time_scale=1.0,
        basis="vendor",
        target=n,
    )
    return dataclasses.replace(stats, **overrides)
