"""`stampede export`: the latency model (ARCHITECTURE.md "Contracts", version 2) from one or more runs.

Version 2 adds, for runs with a plan (the steps/ table; harness.results.export.step_export): per bucket each step
kind's distribution (`steps`) and fork versus fresh starts (`starts`), per model the image cache's cold and warm
split (`image_pull`); failure kinds and phases gain the contract's new ones. Everything of version 1 is unchanged,
and version-1 files still load (harness.results.export.latency_schema validates either).

Runs of the same provider and profile are pooled after conversion to vendor seconds (the simulated vendor's own
share of each duration / time scale, harness time as measured: vendor_time.py; wall / time scale without the
vendor's truth), so a run at time scale 0.1 and one in real time describe one vendor. Rows are bucketed by measured concurrency:
per stage, the median over its rows of the most rollouts in flight fleet-wide while each ran (sweep line over
the rollout intervals, `concurrency.concurrency_during`), rounded. A closed-model stage's target is recorded
beside it (`target_concurrency`), never instead of it: a staggered 100 keeps ~3 in flight, and labelling it
100 would have the model read sequential latencies as 100-wide ones.

Per bucket and metric, the quantile grid is computed on every row (nearest rank, untrimmed); fits run on a
bounded random subset (see fits.py). Metrics:
- tti: submit → first command returned, rollouts that ended ok;
- startup: create + ready (submit → usable), rollouts that ended ok — what a rollout waits before its work;
- exec: all commands of a rollout, ok rollouts (with emulated generation, gen_s is recorded apart and is not
  in it);
- teardown: terminate, every rollout that terminated;
- init_failure_time: submit → failure for rollouts that failed in the create or ready phase (the time a failed
  start costs before a retry).
Failure probabilities are over finished rollouts (ok + failed); cancelled ones are censored and only counted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.errors import UsageError
from harness.results.export.latency_schema import LATENCY_MODEL_VERSION, validate_latency_model
from harness.results.export.step_export import bucket_blocks, image_pull_block, metric_maker, split_by_bucket
from harness.results.figures.fits import DEFAULT_MAX_FIT_SAMPLES, MIN_FIT_SAMPLES, fit_sample
from harness.results.figures.quantiles import group_sorted
from harness.results.figures.stage_aggregate import stage_order
from harness.results.figures.timing_error import per_rollout_error_s, stage_timing_error
from harness.results.figures.vendor_limits import ProfileResolver, limits_block
from harness.results.read.concurrency import concurrency_during, group_levels, stage_concurrency
from harness.results.read.dataset import RunInfo, load_rollout_frame, read_run_info
from harness.results.read.steps import load_steps
from harness.results.read.vendor_time import DURATIONS, VendorSeconds, to_vendor_seconds
from harness.wire.records import INIT_PHASES

QUANTILE_LEVELS: tuple[float, ...] = (
    0.0,
    0.001,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.15,
    0.2,
    0.25,
    0.3,
    0.35,
    0.4,
    0.45,
    0.5,
    0.55,
    0.6,
    0.65,
    0.7,
    0.75,
    0.8,
    0.85,
    0.9,
    0.925,
    0.95,
    0.975,
    0.99,
    0.995,
    0.999,
    0.9999,
    1.0,
)

TIME_BASES: tuple[str, ...] = ("vendor", "loop")
METRICS: tuple[str, ...] = ("tti", "startup", "exec", "teardown", "init_failure_time")
FITTED_METRICS: frozenset[str] = frozenset({"tti", "startup", "exec", "teardown", "init_failure_time"})
CONCURRENCY_BASIS = (
    "measured: per stage, the median over its rollouts of the most rollouts in flight fleet-wide while each ran "
    "(from the rollout intervals), rounded; a closed-model stage's target is in target_concurrency"
)


def _stampede_version() -> str:
    try:
        from importlib.metadata import version

        return version("stampede")
    except Exception:  # not installed (a checkout on sys.path)
        return "unknown"


def _prepare(info: RunInfo, clock: str = "vendor", ended_within: tuple[float, float] | None = None) -> pd.DataFrame:
    """One run's rows in vendor seconds (or, `clock="loop"`, every duration wall / time scale), with the bucket each
    row falls in; `ended_within` (epoch seconds) keeps the rollouts that ended in that window (concurrency and
    start rates are still measured over every row)."""
    frame = load_rollout_frame(info.run_dir)
    if frame.empty:
        return frame
    factor = info.to_vendor_seconds()
    out = pd.DataFrame(
        {
            "stage": frame["stage"].astype(str).to_numpy(),
            "outcome": frame["outcome"].astype(str).to_numpy(),
            "failure_kind": frame["failure_kind"].astype(object).to_numpy(),
            "failure_phase": frame["failure_phase"].astype(object).to_numpy(),
            "t_submit": frame["t_submit"].to_numpy(dtype=float),
        }
    )
    t_submit = out["t_submit"].to_numpy(dtype=float)
    out["t_vendor"] = (t_submit - np.nanmin(t_submit)) * factor if len(out) else t_submit
    # only the simulated vendor's own share of each duration is stretched by 1 / time scale (its truth says which
    # spans it held); harness time stays as measured, as in `stampede report` (vendor_time.py)
    if clock == "loop":
        converted = VendorSeconds({c: frame[c].to_numpy(dtype=float) * factor for c in DURATIONS}, factor)
    else:
        converted = to_vendor_seconds(info, frame)
    for column in ("create_s", "ready_s", "tti_s", "exec_s", "terminate_s", "total_s"):
        out[column] = converted.durations[column]
    measured = concurrency_during(frame).astype(float)
    out["measured"] = measured
    out["harness_error"] = per_rollout_error_s(frame, 1.0 / converted.harness_factor)
    target = frame["target_users"].to_numpy(dtype=float)
    stage_codes = pd.Categorical(out["stage"], categories=stage_order(frame)).codes
    per_stage_target = pd.Series(target).groupby(stage_codes).max()
    per_stage_measured = pd.Series(measured).groupby(stage_codes).median()
    level = {code: float(per_stage_measured[code]) for code in per_stage_measured.index}
    targets = {code: int(t) if t == t and t > 0 else 0 for code, t in per_stage_target.items()}
    out["stage_level"] = pd.Series(stage_codes).map(level).to_numpy(dtype=float)
    out["source"] = "measured"
    out["target"] = pd.Series(stage_codes).map(targets).to_numpy()
    out["run_id"] = info.run_id
    span = frame.groupby(stage_codes, observed=True)["t_submit"].agg(["min", "max", "size"])
    rates = {
        code: (row["size"] / ((row["max"] - row["min"]) * factor) if row["max"] > row["min"] else np.nan)
        for code, row in span.iterrows()
    }
    out["stage_start_rate"] = pd.Series(stage_codes).map(rates).to_numpy()
    if ended_within is not None:
        ended = frame["t_submit"].to_numpy(dtype=float) + frame["total_s"].to_numpy(dtype=float)
        out = out[(ended >= ended_within[0]) & (ended < ended_within[1])].reset_index(drop=True)
    return out


def _target(part: pd.DataFrame) -> int | None:
    """The closed-model target of a bucket's stages (the largest, if they differ); None for open-model ones."""
    largest = int(part["target"].max()) if len(part) else 0
    return largest if largest > 0 else None


def _metric_values(rows: pd.DataFrame) -> dict[str, np.ndarray]:
    ok = (rows["outcome"] == "ok").to_numpy()
    failed = (rows["outcome"] == "failed").to_numpy()
    init_failed = failed & rows["failure_phase"].isin(INIT_PHASES).to_numpy()
    nan = np.nan
    return {
        "tti": np.where(ok, rows["tti_s"], nan),
        "startup": np.where(ok, rows["create_s"] + rows["ready_s"], nan),
        "exec": np.where(ok, rows["exec_s"], nan),
        "teardown": rows["terminate_s"].to_numpy(dtype=float),
        "init_failure_time": np.where(init_failed, rows["total_s"], nan),
    }


def _assign_buckets(rows: pd.DataFrame) -> pd.DataFrame:
    """Pool stages (of every run) whose measured levels are close; label each pool by its rows' measured median."""
    stage_levels = rows.groupby(["run_id", "stage"], observed=True)["stage_level"].first()
    groups = dict(zip(stage_levels.index, group_levels(stage_levels.to_numpy().tolist()), strict=True))
    group = np.array([groups[key] for key in zip(rows["run_id"], rows["stage"], strict=True)], dtype=np.int64)
    labels = pd.Series(rows["measured"].to_numpy()).groupby(group).median()
    rows = rows.copy()
    rows["bucket"] = pd.Series(group).map({g: stage_concurrency(float(m)) for g, m in labels.items()}).to_numpy()
    return rows


def _buckets(
    rows: pd.DataFrame, fit: bool, max_fit_samples: int, steps: pd.DataFrame | None = None
) -> list[dict[str, Any]]:
    rows = _assign_buckets(rows)
    levels = sorted(int(b) for b in rows["bucket"].unique())
    stage_buckets = {
        (str(r), str(s)): int(b) for r, s, b in rows[["run_id", "stage", "bucket"]].drop_duplicates().itertuples(False)
    }
    steps_of = split_by_bucket(steps if steps is not None else pd.DataFrame(), stage_buckets)
    make = metric_maker(QUANTILE_LEVELS, fit, max_fit_samples)
    codes = pd.Categorical(rows["bucket"], categories=levels).codes.astype(np.int64)
    n = len(levels)
    grouped = {name: group_sorted(codes, values, n) for name, values in _metric_values(rows).items()}
    grids = {name: sample.quantiles(QUANTILE_LEVELS) for name, sample in grouped.items()}
    means = {name: sample.means() for name, sample in grouped.items()}
    result = []
    for i, level in enumerate(levels):  # one iteration per bucket
        part = rows.loc[codes == i]
        outcome = part["outcome"]
        ok, failed, cancelled = (int((outcome == o).sum()) for o in ("ok", "failed", "cancelled"))
        finished = ok + failed
        failed_rows = part.loc[outcome == "failed"]
        by_kind = failed_rows["failure_kind"].fillna("unknown").value_counts()
        by_phase = failed_rows["failure_phase"].dropna().value_counts()
        init = int(failed_rows["failure_phase"].isin(INIT_PHASES).sum())
        exec_failed = int((failed_rows["failure_phase"] == "exec").sum())
        denominator = finished or 1  # no finished rollout: every probability is 0
        metrics: dict[str, Any] = {}
        for name, sample in grouped.items():
            count = int(sample.counts[i])
            if count == 0:
                continue
            values = sample.group(i)
            fits = fit_sample(values, max_fit_samples=max_fit_samples) if fit and name in FITTED_METRICS else []
            metrics[name] = {
                "n": count,
                "mean": float(max(means[name][i], 0.0)),
                "quantiles": [float(max(v, 0.0)) for v in grids[name][i]],
                "fits": [f.to_json() for f in fits],
                "selected_fit": fits[0].family if fits else None,
            }
        stages = part.groupby(["run_id", "stage"], observed=True).size()
        rate = part["stage_start_rate"].dropna()
        ok_ttis = grouped["tti"].group(i)  # sorted
        tti_p50 = float(ok_ttis[math.ceil(0.5 * len(ok_ttis)) - 1]) if len(ok_ttis) else math.nan
        timing = stage_timing_error(part["harness_error"].to_numpy(dtype=float), tti_p50)
        result.append(
            {
                "concurrency": max(int(level), 1),
                "concurrency_source": str(part["source"].iloc[0]),
                "target_concurrency": _target(part),
                "measured_concurrency": {
                    "median": float(part["measured"].median()),
                    "max": float(part["measured"].max()),
                },
                "stages": [{"run_id": str(r), "stage": str(s), "rollouts": int(c)} for (r, s), c in stages.items()],
                "samples": {
                    "rollouts": len(part),
                    "ok": ok,
                    "failed": failed,
                    "cancelled": cancelled,
                    "cancelled_before_tti": int(((outcome == "cancelled") & part["tti_s"].isna()).sum()),
                    "finished": finished,
                },
                "failure_probability": {
                    "total": failed / denominator,
                    "init": init / denominator,
                    "exec": exec_failed / denominator,
                    "by_kind": {str(k): int(v) / denominator for k, v in by_kind.items() if v},
                    "by_phase": {str(k): int(v) / denominator for k, v in by_phase.items() if v},
                },
                "start_rate_per_s": float(rate.median()) if len(rate) else None,
                "harness_timing_error": {
                    "p99_s": None if timing.p99_s != timing.p99_s else timing.p99_s,
                    "limit_s": timing.limit_s,
                    "flagged": timing.flagged,
                },
                "metrics": metrics,
                **bucket_blocks(steps_of.get(int(level), pd.DataFrame()), make),
            }
        )
    return result


def _profile_limits(info: RunInfo, resolve: ProfileResolver | None) -> Any:
    """The simulated vendor's profile limits a run ran under (its name and overrides from run.json), or None."""
    name = info.manifest.get("profile") if info.manifest else None
    if resolve is None or not name:
        return None
    raw = info.manifest.get("parameters")
    parameters: dict[str, Any] = raw if isinstance(raw, dict) else {}
    overrides = parameters.get("profile_overrides") or {}
    return resolve(str(name), overrides if isinstance(overrides, dict) else {})


def build_latency_model(
    run_dirs: Sequence[str | Path],
    fit: bool = True,
    max_fit_samples: int = DEFAULT_MAX_FIT_SAMPLES,
    profile_limits: ProfileResolver | None = None,
    clock: str = "vendor",
    ended_within: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """The latency model of the runs; `profile_limits` resolves a simulated vendor's profile (name, overrides) to
    its limits, written under each model's `limits` beside what the rows show (harness/results/figures/vendor_limits.py).

    `clock="loop"` keeps the harness's own time scaled like the vendor's (every duration wall / time scale): the
    clock an emulated RL loop run at that time scale lives on (`stampede rehearse`), where a harness millisecond
    holds up the loop as long as a vendor's. `stampede export` writes vendor seconds. `ended_within` (epoch
    seconds) keeps only the rollouts that ended in that window: a rehearsal's measured steps, not its warm-up."""
    if clock not in TIME_BASES:
        raise ValueError(f"clock must be one of {TIME_BASES}")
    if not run_dirs:
        raise UsageError("give at least one run folder")
    infos = [read_run_info(d) for d in run_dirs]
    seen: set[str] = set()
    unique = []
    for info in infos:
        resolved = str(info.run_dir.resolve())
        if resolved not in seen:
            seen.add(resolved)
            unique.append(info)
    groups: dict[tuple[str, str], list[pd.DataFrame]] = {}
    step_groups: dict[tuple[str, str], list[pd.DataFrame]] = {}
    run_ids: dict[tuple[str, str], list[str]] = {}
    profiles: dict[tuple[str, str], Any] = {}
    provenance = []
    for info in unique:
        rows = _prepare(info, clock, ended_within)
        provenance.append(
            {
                "run_id": info.run_id,
                "path": str(info.run_dir),
                "provider": info.provider,
                "profile": info.profile,
                "scenario": info.scenario,
                "status": info.status,
                "time_scale": info.time_scale,
                "time_scale_recorded": info.time_scale_recorded,
                "rollouts": len(rows),
                "started_at": info.started_at,
                "stampede_version": info.stampede_version,
            }
        )
        if rows.empty:
            continue
        key = (info.provider, info.profile)
        groups.setdefault(key, []).append(rows)
        steps = _run_steps(info, ended_within)
        if not steps.empty:
            step_groups.setdefault(key, []).append(steps)
        run_ids.setdefault(key, []).append(info.run_id)
        if key not in profiles or profiles[key] is None:
            profiles[key] = _profile_limits(info, profile_limits)
    if not groups:
        raise UsageError("the runs have no rollouts to export")
    make = metric_maker(QUANTILE_LEVELS, fit, max_fit_samples)
    models = []
    for (provider, profile), frames in sorted(groups.items()):
        parts = step_groups.get((provider, profile))
        steps = pd.concat(parts, ignore_index=True) if parts else None
        model: dict[str, Any] = {
            "provider": provider,
            "profile": profile,
            "run_ids": run_ids[(provider, profile)],
            "buckets": _buckets(pd.concat(frames, ignore_index=True), fit, max_fit_samples, steps),
            "limits": limits_block(pd.concat(frames, ignore_index=True), profiles.get((provider, profile))),
        }
        pull = image_pull_block(steps, make) if steps is not None else None
        if pull is not None:
            model["image_pull"] = pull
        models.append(model)
    document = {
        "format": "stampede.latency_model",
        "version": LATENCY_MODEL_VERSION,
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "units": "seconds",
        "time_basis": clock,
        "concurrency_basis": CONCURRENCY_BASIS,
        "quantile_levels": list(QUANTILE_LEVELS),
        "provenance": {
            "stampede_version": _stampede_version(),
            "generated_by": "stampede export",
            "fit_settings": {
                "max_fit_samples": max_fit_samples,
                "min_fit_samples": MIN_FIT_SAMPLES,
                "selection": "smallest Kolmogorov-Smirnov statistic",
            },
            "runs": provenance,
        },
        "models": models,
    }
    validate_latency_model(document, "export")
    return document


def _run_steps(info: RunInfo, ended_within: tuple[float, float] | None) -> pd.DataFrame:
    """A run's steps with its run id (vendor seconds); with `ended_within`, the steps of rollouts begun in it."""
    steps = load_steps(info)
    if steps.empty:
        return steps
    steps = steps.assign(run_id=info.run_id)
    if ended_within is not None:
        begun = steps["t_rollout"].to_numpy(dtype=float)
        steps = steps.loc[(begun >= ended_within[0]) & (begun < ended_within[1])]
    return steps


def write_latency_model(document: dict[str, Any], path: Path) -> None:
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(document, indent=1, allow_nan=False) + "\n")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc}") from None
