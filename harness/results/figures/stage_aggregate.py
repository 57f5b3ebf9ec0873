"""Per run and stage: counts, failures by kind and phase, phase-duration quantiles, start rate, concurrency.

Conventions (docs/reports-and-model.md states them too):
- Phases (`PHASES`): TTI = create + ready + first command, per rollout, exactly: `first_command` is the rest of
  TTI (tti_s - create_s - ready_s: the first command's round trip plus the microseconds between phases).
  After TTI: `later_commands` (every command after the first: exec_s minus the first command; rollouts that ran
  only one have none) and `teardown` (terminate_s). Each phase's quantiles are over every rollout in which it
  completed, whatever the outcome; TTI's over every rollout that got its first command back.
- `StageStats.tti_share`: where TTI goes, each TTI part's mean / mean TTI over the rollouts that became
  interactive (a share of the mean, so the three parts sum to 100%).
- Failure rate = failed / (ok + failed). Cancelled rollouts (cut off at the end of a run) are censored, not
  failures: counted apart, split into those cut off before and after becoming interactive, and the TTI p99 is
  also given as if every rollout cut off before interactive had been slower than all the others (an upper
  bound on what censoring hides).
- Startup across retries (`STARTUP`): per logical rollout (every attempt of one rollout id on one worker), its
  first attempt's submit to the moment an attempt became interactive, grouped under the first attempt's stage: the
  wait a generator with retries sees, beside per-attempt TTI. A run that never retried has it equal to TTI.
- Durations are converted to vendor seconds unless wall seconds are asked for: with the simulator's truth only
  the vendor's own share is scaled (harness.results.read.vendor_time), else wall / time scale; start rates are per
  vendor second.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from foundation.quantiles import nearest_rank_index
from harness.results.figures.engine_load import EngineLoad, stage_engine_load
from harness.results.figures.quantiles import GroupedSample, group_sorted, quantile_summary
from harness.results.figures.timing_error import TimingError, per_rollout_error_s, stage_timing_error
from harness.results.read.concurrency import concurrency_during, stage_concurrency
from harness.results.read.dataset import RunInfo
from harness.results.read.vendor_time import DURATIONS, to_vendor_seconds

TimeBasis = Literal["vendor", "wall"]
PHASES: tuple[tuple[str, str], ...] = (
    ("tti", "tti_s"),
    ("create", "create_s"),
    ("ready", "ready_s"),
    ("first_command", "first_command_s"),
    ("later_commands", "later_commands_s"),
    ("teardown", "terminate_s"),
)
"""(phase name, its per-row column): the names are the keys of `StageStats.phases`, in the order tables print them.
`first_command_s` and `later_commands_s` are derived (`phase_durations`), the rest are the parquet's columns."""
TTI_PARTS: tuple[str, ...] = ("create", "ready", "first_command")
"""The phases that add up to TTI, per rollout."""
STARTUP = "startup"
"""Per logical rollout: first attempt's submit -> interactive (any attempt), a key of `StageStats.phases` beside
PHASES' and of `RunStats.phase_samples`; the denominator of its survival curve is `StageStats.logical_rollouts`."""
PHASE_LABELS: dict[str, str] = {
    "tti": "TTI",
    "create": "create",
    "ready": "ready",
    "first_command": "first command",
    "later_commands": "later commands",
    "teardown": "teardown",
    STARTUP: "startup across retries",
}


@dataclass(frozen=True, slots=True)
class StageStats:
    run_id: str
    provider: str
    profile: str
    stage: str
    concurrency: int  # measured: the stage's median of what each rollout met in flight, rounded (never the target)
    measured_concurrency: float  # that median unrounded (concurrency.concurrency_during: fleet-wide, sweep line)
    rollouts: int
    ok: int
    failed: int
    cancelled: int
    cancelled_before_tti: int
    retries: int  # rows that were a retry (attempt > 1): each attempt of a rollout is its own row
    gave_up: int  # rollouts whose last attempt failed (after the run's retries)
    failure_rate: float
    success_rate: float
    failures_by_kind: dict[str, int]
    failures_by_phase: dict[str, int]
    phases: dict[str, dict[str, float]]  # PHASES name -> p50 … p99.9, max, mean, n
    tti_p99_censored_upper: float
    start_rate: float  # rollouts submitted per (vendor or wall) second over the stage's submit span
    time_scale: float
    basis: TimeBasis
    timing_error: TimingError = field(default_factory=TimingError.unknown)  # the harness's share of a TTI
    target: int | None = None  # the stage's target in flight (closed model), shown beside the measured label
    tti_share: dict[str, float] = field(default_factory=dict)  # TTI_PARTS name -> mean / mean TTI (sums to 1)
    logical_rollouts: int = 0  # rollouts counted once however many attempts (first attempt in this stage)


@dataclass(slots=True)
class RunStats:
    """A run's stages plus the sorted TTI samples per stage (kept for the CDF plot)."""

    info: RunInfo
    basis: TimeBasis
    stages: list[StageStats]
    tti_sorted: dict[str, np.ndarray] = field(default_factory=dict)
    frame: pd.DataFrame | None = None  # converted to the basis; for the timeline
    engine_load: dict[str, EngineLoad] = field(default_factory=dict)  # the harness's own load per stage
    phase_samples: dict[str, GroupedSample] = field(default_factory=dict)  # PHASES name -> values per stage (index
    # into `stages`), sorted within each: what `stampede compare` resamples


def scale_for(info: RunInfo, basis: TimeBasis) -> float:
    """Factor turning the parquet's wall seconds into the report's seconds."""
    return 1.0 if basis == "wall" else info.to_vendor_seconds()


def stage_order(frame: pd.DataFrame) -> list[str]:
    """Stages in the order they ran (by first submit), which for ramps is also by concurrency."""
    if frame.empty:
        return []
    first = frame.groupby("stage", observed=True)["t_submit"].min().sort_values()
    return [str(s) for s in first.index]


def compute_run_stats(info: RunInfo, frame: pd.DataFrame, basis: TimeBasis = "vendor") -> RunStats:
    """Every per-stage statistic of one run, vectorised (one sort per phase metric for all stages)."""
    if frame.empty:
        return RunStats(info=info, basis=basis, stages=[], frame=frame)
    factor = scale_for(info, basis)
    stages = stage_order(frame)
    codes = stage_codes(frame, stages)
    n = len(stages)
    is_ok = (frame["outcome"] == "ok").to_numpy(dtype=bool)
    is_failed = (frame["outcome"] == "failed").to_numpy(dtype=bool)
    is_cxl = (frame["outcome"] == "cancelled").to_numpy(dtype=bool)
    ok = np.bincount(codes, weights=is_ok, minlength=n).astype(int)
    failed = np.bincount(codes, weights=is_failed, minlength=n).astype(int)
    cancelled = np.bincount(codes, weights=is_cxl, minlength=n).astype(int)
    rollouts = np.bincount(codes, minlength=n)
    tti_raw = frame["tti_s"].to_numpy(dtype=float)
    cxl_pre = np.bincount(codes, weights=is_cxl & np.isnan(tti_raw), minlength=n).astype(int)

    samples: dict[str, GroupedSample] = {}
    converted = to_vendor_seconds(info, frame) if basis == "vendor" else None
    raw = (
        converted.durations
        if converted is not None
        else {column: frame[column].to_numpy(dtype=float) * factor for column in DURATIONS}
    )
    durations = phase_durations(raw, frame["exec_count"].to_numpy(dtype=float) if "exec_count" in frame else None)
    for phase, column in PHASES:
        # TTI: every rollout that got its first command back, whatever happened to it later (a rollout cut
        # off by the end of the run, or failing in a later command, still became interactive at that time).
        samples[phase] = group_sorted(codes, durations[column], n)
    shares = _tti_shares(codes, durations, n)

    by_kind = _counts(frame.loc[is_failed], "failure_kind", stages)
    by_phase = _counts(frame.loc[is_failed], "failure_phase", stages)

    t_submit = frame["t_submit"].to_numpy(dtype=float)
    span_min = np.full(n, np.inf)
    span_max = np.full(n, -np.inf)
    np.minimum.at(span_min, codes, t_submit)
    np.maximum.at(span_max, codes, t_submit)
    # The start rate is over the stage's submit span (its first submit to its last), as the report's footnote and
    # docs/reports-and-model.md say: a stage's tail (the last stage's: the run's drain) never dilutes it; a burst's
    # is its release.
    measured = concurrency_during(frame)
    measured_median = pd.Series(measured).groupby(codes).median().reindex(range(n)).to_numpy(dtype=float)
    target = pd.Series(frame["target_users"].to_numpy()).groupby(codes).max().reindex(range(n)).to_numpy()

    attempt = frame["attempt"].to_numpy() if "attempt" in frame else np.ones(len(frame))
    retries = np.bincount(codes, weights=attempt > 1, minlength=n).astype(int)
    key = _logical_keys(info, frame) if retries.any() else None
    if key is None:
        gave_up = failed.copy()
        logical_codes, startup = codes, durations["tti_s"]
    else:
        gave_up = _gave_up(key, attempt, codes, n, is_failed)
        logical_codes, startup = _startup(key, codes, t_submit * factor, durations["tti_s"])
    samples[STARTUP] = group_sorted(logical_codes, startup, n)
    logical = np.bincount(logical_codes[logical_codes >= 0], minlength=n)

    # the harness's own seconds stay as measured where the vendor's share was separated from them
    errors = per_rollout_error_s(frame, 1.0 / (converted.harness_factor if converted is not None else factor))
    tti = samples["tti"]
    levels = np.array([0.99])
    stats: list[StageStats] = []
    sorted_tti: dict[str, np.ndarray] = {}
    for i, stage in enumerate(stages):  # one iteration per stage, never per row
        finished = ok[i] + failed[i]
        span_wall = span_max[i] - span_min[i]
        span = span_wall * factor
        phases = {phase: quantile_summary(sample, i) for phase, sample in samples.items()}
        stats.append(
            StageStats(
                run_id=info.run_id,
                provider=info.provider,
                profile=info.profile,
                stage=stage,
                concurrency=stage_concurrency(measured_median[i]),
                measured_concurrency=float(measured_median[i]),
                rollouts=int(rollouts[i]),
                ok=int(ok[i]),
                failed=int(failed[i]),
                cancelled=int(cancelled[i]),
                cancelled_before_tti=int(cxl_pre[i]),
                retries=int(retries[i]),
                gave_up=int(gave_up[i]),
                failure_rate=failed[i] / finished if finished else 0.0,
                success_rate=ok[i] / finished if finished else float("nan"),
                failures_by_kind=by_kind.get(stage, {}),
                failures_by_phase=by_phase.get(stage, {}),
                phases=phases,
                tti_p99_censored_upper=_censored_upper(tti.group(i), int(cxl_pre[i]), levels)[0],
                start_rate=rollouts[i] / span if span > 0 else float("nan"),
                time_scale=info.time_scale,
                basis=basis,
                timing_error=stage_timing_error(errors[codes == i], phases["tti"]["p50"]),
                target=int(target[i]) if target[i] == target[i] and target[i] > 0 else None,
                tti_share={part: float(shares[part][i]) for part in TTI_PARTS},
                logical_rollouts=int(logical[i]),
            )
        )
        sorted_tti[stage] = tti.group(i)
    # what the timeline needs, in the report's seconds
    first = float(t_submit.min())
    converted = pd.DataFrame(
        {
            "t_submit": first + (t_submit - first) * factor,
            "total_s": frame["total_s"].to_numpy(dtype=float) * factor,
            "create_s": frame["create_s"].to_numpy(dtype=float) * factor,
            "ready_s": frame["ready_s"].to_numpy(dtype=float) * factor,
            "outcome": frame["outcome"],
            "stage": frame["stage"].array,  # where each stage began (the timeline's marks)
            "failure_kind": frame["failure_kind"].array if "failure_kind" in frame else None,  # failures by kind
        }
    )
    return RunStats(
        info=info,
        basis=basis,
        stages=stats,
        tti_sorted=sorted_tti,
        frame=converted,
        engine_load=stage_engine_load(info.run_dir),
        phase_samples=samples,
    )


def phase_durations(columns: dict[str, np.ndarray], exec_count: np.ndarray | None) -> dict[str, np.ndarray]:
    """Every `PHASES` column per row, in the report's seconds: the parquet's durations plus the two derived ones.

    first command = TTI - create - ready (the rest of TTI, so the parts sum to TTI exactly); later commands =
    every command's seconds minus the first's, NaN for a rollout that ran one command or none.
    """
    tti, create, ready, exec_s = (columns[c] for c in ("tti_s", "create_s", "ready_s", "exec_s"))
    first = np.clip(tti - create - ready, 0.0, None)  # NaN wherever TTI is (no command came back)
    later = np.clip(exec_s - first, 0.0, None)
    if exec_count is not None:
        later = np.where(exec_count > 1, later, np.nan)
    return {**columns, "first_command_s": first, "later_commands_s": later}


def _tti_shares(codes: np.ndarray, durations: dict[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    """Per stage, each TTI part's mean / mean TTI over the rollouts that became interactive (NaN: none did)."""
    reached = ~np.isnan(durations["tti_s"]) & (codes >= 0)
    kept = codes[reached]
    total = np.bincount(kept, weights=durations["tti_s"][reached], minlength=n)
    shares: dict[str, np.ndarray] = {}
    for part, column in PHASES:
        if part in TTI_PARTS:
            summed = np.bincount(kept, weights=np.nan_to_num(durations[column][reached]), minlength=n)
            with np.errstate(divide="ignore", invalid="ignore"):
                shares[part] = np.where(total > 0, summed / total, np.nan)
    return shares


def _logical_keys(info: RunInfo, frame: pd.DataFrame) -> np.ndarray | None:
    """Each row's logical rollout (worker/rollout id: a retry keeps its rollout id), read only when a run retried;
    None when the ids do not line up with the frame (then every attempt counts as its own rollout)."""
    from harness.results.read.dataset import load_rollout_frame

    ids = load_rollout_frame(info.run_dir, ("rollout_id", "worker"))
    if len(ids) != len(frame):
        return None
    return np.asarray(ids["worker"].astype(str).to_numpy() + "/" + ids["rollout_id"].astype(str).to_numpy())


def _gave_up(key: np.ndarray, attempt: np.ndarray, codes: np.ndarray, n: int, is_failed: np.ndarray) -> np.ndarray:
    """Per stage, rollouts whose last attempt failed."""
    attempts = pd.Series(attempt)
    last = attempts.groupby(key).transform("max").to_numpy() == attempts.to_numpy()
    return np.bincount(codes, weights=last & is_failed, minlength=n).astype(int)


def _startup(
    key: np.ndarray, codes: np.ndarray, submit_s: np.ndarray, tti_s: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per logical rollout: (its first attempt's stage code, first submit -> first interactive, NaN if never).

    `submit_s` is each attempt's submit in the report's seconds, `tti_s` its TTI (NaN: not interactive), so an
    attempt became interactive at submit_s + tti_s; the gaps between attempts (backoff, queueing) count.
    """
    frame = pd.DataFrame({"key": key, "code": codes, "submit": submit_s, "interactive": submit_s + tti_s})
    first = frame.sort_values("submit", kind="stable").groupby("key", sort=False)
    grouped = first.agg(code=("code", "first"), submit=("submit", "first"), interactive=("interactive", "min"))
    return grouped["code"].to_numpy(dtype=np.int64), (grouped["interactive"] - grouped["submit"]).to_numpy(float)


def stage_codes(frame: pd.DataFrame, stages: list[str]) -> np.ndarray:
    """Each row's index in `stages`, from the categorical codes (no per-row strings)."""
    column = frame["stage"]
    if not isinstance(column.dtype, pd.CategoricalDtype):
        column = column.astype("category")
    position = {stage: i for i, stage in enumerate(stages)}
    lookup = np.array([position.get(str(c), -1) for c in column.cat.categories] + [-1], dtype=np.int64)
    return lookup[column.cat.codes.to_numpy()]  # code -1 (null stage) maps to the trailing -1


def _counts(failed: pd.DataFrame, column: str, stages: list[str]) -> dict[str, dict[str, int]]:
    if failed.empty:
        return {}
    table = failed.groupby(["stage", column], observed=True).size()
    result: dict[str, dict[str, int]] = {}
    for (stage, key), count in table.items():
        if count:
            result.setdefault(str(stage), {})[str(key)] = int(count)
    return {stage: dict(sorted(kinds.items(), key=lambda kv: -kv[1])) for stage, kinds in result.items()}


def _censored_upper(sorted_ok: np.ndarray, censored: int, levels: np.ndarray) -> list[float]:
    """Quantiles if the censored rollouts had been slower than every observed one (+inf past the data)."""
    n = sorted_ok.size + censored
    if n == 0:
        return [float("nan")] * len(levels)
    out = []
    for q in levels:
        rank = nearest_rank_index(n, float(q))
        out.append(float(sorted_ok[rank]) if rank < sorted_ok.size else float("inf"))
    return out
