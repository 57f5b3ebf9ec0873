"""The text a run prints when it ends: how it ended (first), the stage table (vendor seconds), the thresholds'
verdicts and what the harness knows about its own accuracy; and summary.json beside run.json. A cut-short run
gets no knee verdict: its last stage did not run its course."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from harness.results.export.json_schemas import SchemaMismatch
from harness.results.export.summary_json import build_summary, write_summary
from harness.results.figures.burst_hold import format_burst_hold, load_burst_hold
from harness.results.figures.harness_bound import harness_bound_lines
from harness.results.figures.outages import outage_lines
from harness.results.figures.quantiles import quantiles
from harness.results.figures.run_figures import RunAggregate, aggregate_run, run_figures
from harness.results.figures.stage_aggregate import TimeBasis
from harness.results.figures.step_figures import StepView, load_step_view
from harness.results.figures.thresholds import Threshold, Verdict, any_crossed, evaluate, format_verdicts
from harness.results.figures.vendor_loop import vendor_loop_lines
from harness.results.read.concurrency import concurrency_at_submit
from harness.results.read.dataset import load_rollout_frame, read_run_info
from harness.results.read.run_ending import run_ending
from harness.results.render.step_tables import format_step_table
from harness.results.render.summary import format_stage_table, load_truth, measurement_error
from harness.wire.run_endings import EXIT_SCHEMA_MISMATCH, exit_code_for, normalize


@dataclass(frozen=True, slots=True)
class RunConclusion:
    """What the end of a run leaves: the printed text, each threshold's verdict, the exit status, summary.json."""

    text: str
    verdicts: list[Verdict]
    exit_code: int
    summary_path: Path | None


def conclude_run(
    run_dir: Path,
    manifest: dict[str, Any],
    rollouts: pd.DataFrame,
    engines: Sequence[Mapping[str, Any]],
    thresholds: Sequence[Threshold] = (),
    seconds: TimeBasis = "vendor",
) -> RunConclusion:
    """Check the thresholds, record them in `manifest` (the caller writes it), write summary.json, render the
    table in `seconds` (thresholds and summary.json: always vendor seconds)."""
    info = read_run_info(run_dir)
    frame = load_rollout_frame(Path(run_dir))
    aggregate = aggregate_run(info, frame, "vendor")
    steps = load_step_view(info)
    verdicts = evaluate(thresholds, run_figures(aggregate, steps))
    status = normalize(manifest.get("status"))
    exit_code = exit_code_for(status, any_crossed(verdicts))
    manifest.update({"exit_code": exit_code, "thresholds": [verdict.to_dict() for verdict in verdicts]})
    path: Path | None = None
    try:
        path = write_summary(Path(run_dir), build_summary(aggregate, manifest, verdicts, status, exit_code, steps))
    except SchemaMismatch as mismatch:  # a bug of ours: the rows stay, the run says so and exits 3, not 0
        exit_code, unwritten = (
            EXIT_SCHEMA_MISMATCH,
            f"\nexit {EXIT_SCHEMA_MISMATCH}: summary.json not written: {mismatch}",
        )
        manifest["exit_code"] = exit_code
    else:
        unwritten = ""
    shown = aggregate if seconds == "vendor" else aggregate_run(info, frame, seconds)
    text = render_run_summary(Path(run_dir), manifest, rollouts, engines, shown, verdicts, steps) + unwritten
    return RunConclusion(text=text, verdicts=verdicts, exit_code=exit_code, summary_path=path)


def render_run_summary(
    run_dir: Path,
    manifest: Mapping[str, Any],
    rollouts: pd.DataFrame,
    engines: Sequence[Mapping[str, Any]],
    aggregate: RunAggregate,
    verdicts: Sequence[Verdict] = (),
    steps: StepView | None = None,
) -> str:
    run_id, scenario, provider = manifest.get("run_id"), manifest.get("scenario"), manifest.get("provider")
    profile, time_scale = manifest.get("profile"), manifest.get("time_scale")
    ending = run_ending(manifest, rollouts["outcome"] if len(rollouts) else None)
    lines = [
        "",
        ending.banner(),
        f"stampede run {run_id} — scenario {scenario}, provider {provider}"
        + (f", profile {profile}" if profile else ""),
    ]
    if time_scale is not None and time_scale != 1:
        lines.append(
            f"time scale {time_scale:g}: the simulated vendor ran {1 / time_scale:g}x faster than real time;"
            f" durations below are {aggregate.basis} seconds"
            + (" (--seconds wall for wall seconds)" if aggregate.basis == "vendor" else "")
        )
    total = len(rollouts)
    stages = aggregate.stats.stages
    lines.append(
        format_stage_table(stages, aggregate.stats.engine_load, aggregate.basis) if stages else "(no rollouts recorded)"
    )
    if steps is not None:
        lines.append(format_step_table(steps))
    burst_hold = load_burst_hold(run_dir, manifest)
    if burst_hold is not None:
        lines.append(format_burst_hold(burst_hold))
    unknown = int((rollouts["failure_kind"] == "unknown").sum()) if total else 0
    harness = int((rollouts["failure_kind"] == "harness").sum()) if total else 0
    peak = int(concurrency_at_submit(rollouts).max()) if total else 0
    workers = f" over {len(engines)} engines" if len(engines) > 1 else ""
    lines.append(
        f"{total} rollouts in {float(manifest.get('wall_s') or 0):.1f}s wall{workers}; peak in flight {peak}; "
        f"unknown failures {unknown}; harness failures {harness}"
    )
    lines += outage_lines(rollouts)
    dropped = manifest.get("dropped_starts") or {}
    if dropped:
        lines.append(f"open model: starts dropped at the in-flight cap: {sum(dropped.values())} ({dict(dropped)})")
    knee = manifest.get("shape_outcome") or {}
    if "knee" in knee and ending.cut_short:
        lines.append(
            f"knee: no verdict — the run was {ending.ending} during stage {manifest.get('final_stage') or '?'}"
        )
    elif "knee" in knee:
        lines.append(f"knee: {knee.get('knee')} in flight" + (f" ({knee['reason']})" if knee.get("reason") else ""))
    if verdicts:
        lines.append(format_verdicts(verdicts))
    for engine in engines:
        lines.append(_engine_line(engine, provider, run_id))
    lines += harness_bound_lines(run_dir)
    error = measurement_error(rollouts, load_truth(run_dir))
    if error:
        usable, first = error["vs_usable_ms"], error.get("vs_first_command_ms")
        line = (
            f"harness vs the simulated vendor's own records (n={error['samples']}, wall ms): TTI - accept->RUNNING "
            f"p50 {usable['p50']:.0f} ms, p99 {usable['p99']:.0f} ms (poll interval, round trips, first command)"
        )
        if first:
            line += (
                f"; TTI - accept->first command done p50 {first['p50']:.0f} ms, p99 {first['p99']:.0f} ms, "
                f"max {first['max']:.0f} ms (the timing error)"
            )
        lines.append(line)
    lines += vendor_loop_lines(run_dir, float(time_scale or 1.0))
    probe_line = readiness_probe_line(rollouts)
    if probe_line:
        lines.append(probe_line)
    lines.append(f"results: {run_dir}")
    return "\n".join(lines)


def readiness_probe_line(rollouts: pd.DataFrame) -> str | None:
    """SDK-observed readiness beside a direct probe's, where the provider probed (the prime provider does):
    how much of the vendor's apparent start-up is the SDK's own polling."""
    if "ready_probe_s" not in rollouts or rollouts["ready_probe_s"].isna().all():
        return None
    both = rollouts.dropna(subset=["ready_probe_s", "ready_s"])
    sdk, probe = quantiles(both["ready_s"]), quantiles(both["ready_probe_s"])
    missed = int(rollouts["ready_s"].notna().sum() - len(both))
    return (
        f"readiness (n={len(both)}): SDK-observed p50 {sdk['p50']:.3f} s, p99 {sdk['p99']:.3f} s; a direct probe saw it "
        f"p50 {probe['p50']:.3f} s, p99 {probe['p99']:.3f} s; the SDK's polling adds p50 "
        f"{sdk['p50'] - probe['p50']:.3f} s" + (f" ({missed} where the SDK saw it first)" if missed else "")
    )


def _engine_line(engine: Mapping[str, Any], provider: Any, run_id: Any) -> str:
    reaped = engine.get("reaped_by_label")
    health = engine.get("health") or {}
    trouble = engine.get("sweep_error") or engine.get("terminate_errors")
    return (
        f"engine {engine.get('worker', '?')}: {engine.get('terminated_leftovers', 0)} sandboxes terminated at drain, "
        f"{reaped if reaped is not None else '?'} reaped by run label"
        + (
            f" (sweep failed: {engine.get('sweep_error')}; once the vendor answers again, "
            f"`stampede cleanup --provider {shlex.quote(str(provider))} --run-id {shlex.quote(str(run_id))}` reaps"
            " what is left)"
            if trouble
            else ""
        )
        + f"; loop lag p99 {health.get('loop_lag_p99_ms', 0):.1f} ms, max {health.get('loop_lag_max_ms', 0):.1f} ms,"
        f" cpu {health.get('cpu_seconds', 0):.1f} s"
        + (
            f" (its Locust process {engine['locust_process'].get('cpu_seconds', 0):.1f} s)"
            if engine.get("locust_process")
            else ""
        )
    )
