"""summary.json: a run's figures for machines (CI gates, dashboards), written at the end of every run and by
`stampede summary RUN`. Per stage and for the whole run: counts, failures by kind and phase, quantiles of TTI and
each phase with their small-sample marks, startup across retries per logical rollout (`quantiles.startup`,
`counts.logical_rollouts`: added within v1, optional), per step of a run with a plan (`steps`: added within v1,
optional: each step's count, failures by phase and kind, duration quantiles, and the infrastructure tax), measured concurrency, start rate, the harness's timing-error flag,
and every threshold with its observed value and verdict. Durations are vendor seconds (`unit`); JSON Schema
`harness/results/schemas/summary.v1.schema.json`, checked on every write.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.results.export.json_schemas import check_against, load_schema
from harness.results.figures.burst_hold import load_burst_hold
from harness.results.figures.harness_bound import load_engine_health, worker_health
from harness.results.figures.vendor_loop import load_vendor_loops
from harness.results.figures.quantiles import REPORT_QUANTILES, supported
from harness.results.figures.run_figures import RunAggregate, init_failure_rate, unfinished
from harness.results.figures.stage_aggregate import StageStats
from harness.results.figures.step_figures import StepStats, StepView
from harness.results.figures.thresholds import Verdict, any_crossed

FORMAT = "stampede.summary"
VERSION = 1
UNIT = "vendor_seconds"
FILENAME = "summary.json"
SCHEMA_RESOURCE = "summary.v1.schema.json"


def _number(value: float | int | None) -> float | None:
    """JSON has no NaN or infinity: null."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _quantiles(summary: Mapping[str, float]) -> dict[str, Any]:
    n = int(summary.get("n", 0))
    block: dict[str, Any] = {"n": n, "mean": _number(summary.get("mean")), "max": _number(summary.get("max"))}
    for name, level in REPORT_QUANTILES:
        block[name] = {"value": _number(summary.get(name)), "small_sample": not supported(level, n)}
    return block


def scope_block(stats: StageStats) -> dict[str, Any]:
    """One stage's (or the whole run's) figures."""
    return {
        "counts": {
            "rollouts": stats.rollouts,
            "ok": stats.ok,
            "failed": stats.failed,
            "cancelled": stats.cancelled,
            "unfinished": unfinished(stats),
            "retries": stats.retries,
            "logical_rollouts": stats.logical_rollouts,
        },
        "failure_rate": _number(stats.failure_rate),
        "init_failure_rate": _number(init_failure_rate(stats)),
        "success_rate": _number(stats.success_rate),
        "failures_by_kind": dict(stats.failures_by_kind),
        "failures_by_phase": dict(stats.failures_by_phase),
        "quantiles": {phase: _quantiles(summary) for phase, summary in stats.phases.items()},
        "concurrency": {"measured": _number(stats.measured_concurrency), "level": stats.concurrency},
        "start_rate": _number(stats.start_rate),
        "timing_error": {
            "p99_s": _number(stats.timing_error.p99_s),
            "limit_s": _number(stats.timing_error.limit_s),
            "flagged": stats.timing_error.flagged,
        },
    }


def step_block(entry: StepStats) -> dict[str, Any]:
    """One step's figures (summary.json `steps`): its count, failures by phase and kind, duration quantiles."""
    return {
        "step": entry.key,
        "kind": entry.kind,
        "name": entry.name,
        "count": entry.count,
        "failed": entry.failed,
        "failure_rate": _number(entry.failure_rate),
        "per_rollout": float(entry.per_rollout),
        "failures_by_phase": dict(entry.failures_by_phase),
        "failures_by_kind": dict(entry.failures_by_kind),
        "quantiles": _quantiles(entry.durations),
    }


def steps_section(view: StepView) -> dict[str, Any]:
    """summary.json `steps` (added within v1, optional: runs with a plan only)."""
    return {
        "run": [step_block(entry) for entry in view.run],
        "stages": {stage: [step_block(entry) for entry in entries] for stage, entries in view.stages.items()},
        "infrastructure_tax": view.tax.to_dict() if view.tax is not None else None,
    }


def build_summary(
    aggregate: RunAggregate,
    manifest: Mapping[str, Any],
    verdicts: Sequence[Verdict],
    status: str,
    exit_code: int | None,
    steps: StepView | None = None,
) -> dict[str, Any]:
    if aggregate.basis != "vendor":
        raise ValueError("summary.json is in vendor seconds: aggregate with basis='vendor'")
    info = aggregate.stats.info
    stages = []
    for stats in aggregate.stats.stages:
        stages.append({"stage": stats.stage, "target": stats.target, **scope_block(stats)})
    document = {
        "format": FORMAT,
        "version": VERSION,
        "unit": UNIT,
        "run_id": info.run_id,
        "scenario": info.scenario,
        "provider": info.provider,
        "profile": info.profile,
        "time_scale": info.time_scale if info.time_scale_recorded else None,
        "status": status,
        "exit_code": exit_code,
        "wall_s": _number(manifest.get("wall_s")),
        "run": scope_block(aggregate.run) if aggregate.run is not None else None,
        "stages": stages,
        "thresholds": [verdict.to_dict() for verdict in verdicts],
        "thresholds_crossed": any_crossed(verdicts),
    }
    if steps is not None:
        document["steps"] = steps_section(steps)
    burst_hold = load_burst_hold(info.run_dir, manifest) if info.scenario == "burst-hold" else None
    if burst_hold is not None:  # added within v1, optional: issue #32's protocol (harness.results.figures.burst_hold)
        document["burst_hold"] = burst_hold.to_dict()
    workers = worker_health(load_engine_health(info.run_dir))
    if workers:  # added within v1, optional: per worker, whether the harness bound the figures (engine_health/)
        document["engine_health"] = [health.to_dict() for health in workers]
    loops = load_vendor_loops(info.run_dir)
    if loops:  # added within v1, optional: whether the simulated vendor's own process stalled (vendor_loop.json)
        document["vendor_loop"] = [loop.to_dict() for loop in loops]
    return document


def summary_schema() -> dict[str, Any]:
    return load_schema(SCHEMA_RESOURCE)


def validate_summary(document: Any, source: str = FILENAME) -> None:
    """Raise UsageError naming the first problem (its JSON path), else return."""
    check_against(document, SCHEMA_RESOURCE, f"summary v{VERSION}", source)


def write_summary(run_dir: Path, document: Mapping[str, Any]) -> Path:
    """Validated, then written whole (a reader never sees half a file)."""
    validate_summary(document)
    path = Path(run_dir) / FILENAME
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(document, indent=1, allow_nan=False) + "\n")
    partial.replace(path)
    return path
