"""Per-step figures of a run with a plan (the `steps/` table): what the summary's step table, summary.json's
`steps`, the report's step phases and survival curves, `step:` thresholds and the infrastructure tax read.

Durations are vendor seconds (harness.results.read.steps) and quantiles nearest rank, the one rule: a plain
`np.quantile(df.duration_vendor_s, q, method='inverted_cdf')` over one kind's rows gives the same number.
A step is named by its kind (every step of that kind pooled: `upload`) or by its plan name when that differs
(`pytest`); an exec step's overhead beyond its command's own time is its own entry, `exec.overhead`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from harness.results.figures.quantiles import quantiles
from harness.results.read.dataset import RunInfo
from harness.results.read.steps import STEP_KINDS, load_steps

OVERHEAD = "exec.overhead"
"""The per-call overhead of exec steps (duration - the command's own time), pooled over every exec step."""


@dataclass(frozen=True, slots=True)
class StepStats:
    """One step (a kind, or a kind's named steps) over one scope: its count, failures and duration quantiles."""

    kind: str
    name: str  # the kind itself when pooled over every step of the kind
    count: int
    failed: int
    durations: dict[str, float]  # n, mean, p50 .. p99.9, max: vendor seconds, successful steps
    failures_by_phase: dict[str, int] = field(default_factory=dict)
    failures_by_kind: dict[str, int] = field(default_factory=dict)
    per_rollout: float = 0.0  # mean count per rollout that ran steps

    @property
    def key(self) -> str:
        """How thresholds and summary.json name it: `upload`, `exec.overhead`, `exec[pytest]`."""
        return self.name if self.name in (self.kind, OVERHEAD) else f"{self.kind}[{self.name}]"

    @property
    def failure_rate(self) -> float:
        return self.failed / self.count if self.count else 0.0


def _summary(values: pd.Series) -> dict[str, float]:
    finite = values.dropna().to_numpy(dtype=float)
    block = quantiles(finite)
    block["n"] = float(finite.size)
    block["mean"] = float(finite.mean()) if finite.size else float("nan")
    return block


def _stats(kind: str, name: str, rows: pd.DataFrame, rollouts: int, values: pd.Series | None = None) -> StepStats:
    failed_rows = rows.loc[~rows["ok"]]
    ok_rows = rows.loc[rows["ok"]]
    durations = _summary(values if values is not None else ok_rows["duration"])
    return StepStats(
        kind=kind,
        name=name,
        count=len(rows),
        failed=len(failed_rows),
        durations=durations,
        failures_by_phase={str(k): int(v) for k, v in failed_rows["failure_phase"].dropna().value_counts().items()},
        failures_by_kind={str(k): int(v) for k, v in failed_rows["failure_kind"].dropna().value_counts().items()},
        per_rollout=len(rows) / rollouts if rollouts else 0.0,
    )


def kind_order(kinds: Iterable[str]) -> list[str]:
    """Kinds in the order a rollout meets them, unknown ones after, by name."""
    known = {kind: i for i, kind in enumerate(STEP_KINDS)}
    return sorted(set(kinds), key=lambda k: (known.get(k, len(known)), k))


def step_stats(steps: pd.DataFrame) -> list[StepStats]:
    """Per kind (pooled), then each named step of a kind that has names of its own, then `exec.overhead`."""
    if steps.empty:
        return []
    rollouts = int(steps[["rollout_id", "attempt"]].drop_duplicates().shape[0])
    result: list[StepStats] = []
    for kind in kind_order(steps["kind"]):
        rows = steps.loc[steps["kind"] == kind]
        result.append(_stats(kind, kind, rows, rollouts))
        names = sorted(str(n) for n in rows["name"].unique())
        if len(names) > 1:  # one name throughout says nothing the kind's row does not
            for name in (n for n in names if n not in (kind, OVERHEAD)):
                result.append(_stats(kind, name, rows.loc[rows["name"] == name], rollouts))
        if kind == "exec" and rows["overhead"].notna().any():
            measured = rows.loc[rows["overhead"].notna()]
            result.append(_stats(kind, OVERHEAD, measured, rollouts, measured.loc[measured["ok"], "overhead"]))
    return result


def steps_by_stage(steps: pd.DataFrame) -> dict[str, list[StepStats]]:
    return {str(stage): step_stats(part) for stage, part in steps.groupby("stage", sort=False)}


def step_figures(stats: Iterable[StepStats]) -> dict[str, float]:
    """Threshold metrics: `step:KEY.STAT` (vendor seconds), `step:KEY.failures`, `step:KEY.failure_rate`."""
    figures: dict[str, float] = {}
    for entry in stats:
        prefix = f"step:{entry.key}"
        for stat, value in entry.durations.items():
            if stat != "n":
                figures[f"{prefix}.{stat}"] = float(value)
        figures[f"{prefix}.failures"] = float(entry.failed)
        figures[f"{prefix}.failure_rate"] = entry.failure_rate
    return figures


# --- the infrastructure tax -------------------------------------------------------------------------------------

SECONDS_PER_HOUR = 3600.0
TRAJECTORIES = 1_000_000
TAX_FORMULA = (
    "worker-hours per 1M trajectories = (seconds of the step per trajectory) x 1,000,000 / 3,600; a trajectory's "
    "seconds of a step = its count per trajectory x its mean vendor seconds (exec: only the overhead beyond the "
    "command's own time). 10 ms on each of 150 tool calls = 1.5 s per trajectory = 417 worker-hours "
    "(arXiv 2607.01415)"
)
TAX_PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("pull", ("pull",)),
    ("create/ready", ("create", "ready")),
    ("fork", ("fork",)),
    ("upload", ("upload",)),
    ("exec overhead", ("exec",)),
    ("background", ("background",)),
    ("download", ("download",)),
    ("snapshot", ("snapshot",)),
    ("terminate", ("terminate",)),
)
"""The tax's parts, in the order the paper's breakdown reads; create/ready excludes the pull inside ready."""


@dataclass(frozen=True, slots=True)
class TaxPart:
    part: str
    per_trajectory_s: float  # vendor seconds of this part per trajectory
    count_per_trajectory: float  # steps of this part per trajectory

    @property
    def worker_hours_per_million(self) -> float:
        return worker_hours(self.per_trajectory_s)


@dataclass(frozen=True, slots=True)
class InfraTax:
    """The per-trajectory overhead of a run's shape, by part, priced in worker-hours per million trajectories."""

    trajectories: int  # rollouts that ran at least one exec step (a grpo group's prepared sandbox is shared)
    parts: tuple[TaxPart, ...]

    @property
    def total_s(self) -> float:
        return sum(p.per_trajectory_s for p in self.parts)

    @property
    def worker_hours_per_million(self) -> float:
        return worker_hours(self.total_s)

    def to_dict(self) -> dict[str, object]:
        return {
            "trajectories": self.trajectories,
            "per_trajectory_s": self.total_s,
            "worker_hours_per_million": self.worker_hours_per_million,
            "parts": [
                {
                    "part": p.part,
                    "per_trajectory_s": p.per_trajectory_s,
                    "count_per_trajectory": p.count_per_trajectory,
                    "worker_hours_per_million": p.worker_hours_per_million,
                }
                for p in self.parts
            ],
        }


def worker_hours(per_trajectory_s: float, trajectories: int = TRAJECTORIES) -> float:
    """Seconds per trajectory priced over `trajectories` trajectories, in hours (the paper's unit)."""
    return per_trajectory_s * trajectories / SECONDS_PER_HOUR


def tax_from_parts(parts: dict[str, tuple[float, float]], trajectories: int) -> InfraTax:
    """From part -> (seconds per trajectory, count per trajectory), in TAX_PARTS order (absent parts left out)."""
    order = [name for name, _ in TAX_PARTS]
    chosen = sorted((p for p in parts if parts[p][1] > 0 or parts[p][0] > 0), key=order.index)
    return InfraTax(trajectories, tuple(TaxPart(p, parts[p][0], parts[p][1]) for p in chosen))


def infra_tax(steps: pd.DataFrame) -> InfraTax | None:
    """The run's own shape: every step's vendor seconds (exec: overhead only) over the trajectories it served (the
    rollouts that ran a tool call, a GRPO group's prepared sandbox not one of them: its steps are shared)."""
    if steps.empty:
        return None
    keys = ["rollout_id", "attempt"]
    prepared = steps.loc[steps["kind"] == "fork", keys].drop_duplicates()  # a group's prepared sandbox forks
    ran = steps.loc[steps["kind"] == "exec", keys].drop_duplicates()
    trajectories = len(ran.merge(prepared, how="left", indicator=True).query("_merge == 'left_only'"))
    if trajectories == 0:
        return None
    parts: dict[str, tuple[float, float]] = {}
    pull_total = float(np.nansum(steps.loc[steps["kind"] == "pull", "duration"]))
    for part, kinds in TAX_PARTS:
        rows = steps.loc[steps["kind"].isin(kinds)]
        if rows.empty:
            continue
        column = "overhead" if part == "exec overhead" else "duration"
        total = float(np.nansum(rows[column]))
        if part == "create/ready":
            total = max(total - pull_total, 0.0)  # a pull lies inside its ready step's duration
        count = len(rows.loc[rows["kind"] == kinds[-1]]) if part == "create/ready" else len(rows)
        if part == "exec overhead":  # the calls whose command's own time is known (a probe's is not)
            count = int(rows["overhead"].notna().sum())
            if count == 0:
                continue
        parts[part] = (total / trajectories, count / trajectories)
    return tax_from_parts(parts, trajectories)


def format_tax(tax: InfraTax, head: str = "infrastructure tax") -> str:
    """The lines the summary, report and model print: each part per trajectory and in worker-hours per 1M."""
    lines = [
        f"{head} (vendor seconds per trajectory; worker-hours per 1M trajectories, over {tax.trajectories} "
        "trajectories):"
    ]
    width = max(len(p.part) for p in tax.parts) if tax.parts else 5
    for part in tax.parts:
        lines.append(
            f"  {part.part.ljust(width)}  {part.count_per_trajectory:6.2f}/traj  {part.per_trajectory_s:9.4f} s"
            f"  {part.worker_hours_per_million:12,.1f} h"
        )
    lines.append(
        f"  {'total'.ljust(width)}  {'':6}       {tax.total_s:9.4f} s  {tax.worker_hours_per_million:12,.1f} h"
    )
    lines.append(f"  ({TAX_FORMULA})")
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class StepView:
    """A run's steps, whole run pooled and per stage, with its infrastructure tax: one read serves every printer."""

    run: list[StepStats]
    stages: dict[str, list[StepStats]]
    tax: InfraTax | None
    survival: dict[str, tuple[np.ndarray, int]] = field(default_factory=dict)
    """Per kind (and exec.overhead): its successful steps' sorted vendor seconds, and every step of it (the
    denominator of a survival curve: failed steps never finish, they are its floor)."""
    per_rollout_s: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per stage, per kind: vendor seconds the kind took per rollout (its steps summed, over the stage's rollouts;
    pull apart from ready, which holds it): the report's breakdown of where a rollout's time goes."""

    def keys(self) -> list[str]:
        return [entry.key for entry in self.run]


def step_view(steps: pd.DataFrame) -> StepView | None:
    """None for a run without steps (no plan): every printer then prints what it printed before."""
    if steps.empty:
        return None
    survival: dict[str, tuple[np.ndarray, int]] = {}
    for kind in kind_order(steps["kind"]):
        rows = steps.loc[steps["kind"] == kind]
        survival[kind] = (np.sort(rows.loc[rows["ok"], "duration"].dropna().to_numpy(dtype=float)), len(rows))
        if kind == "exec" and rows["overhead"].notna().any():
            measured = rows.loc[rows["overhead"].notna()]
            values = measured.loc[measured["ok"], "overhead"].to_numpy(dtype=float)
            survival[OVERHEAD] = (np.sort(values), len(measured))
    per_rollout: dict[str, dict[str, float]] = {}
    for stage, part in steps.groupby("stage", sort=False):
        rollouts = max(int(part[["rollout_id", "attempt"]].drop_duplicates().shape[0]), 1)
        sums = part.groupby("kind")["duration"].sum()
        shares = {str(k): float(v) / rollouts for k, v in sums.items()}
        if "pull" in shares and "ready" in shares:  # a pull lies inside its ready: the bar shows them apart
            shares["ready"] = max(shares["ready"] - shares["pull"], 0.0)
        per_rollout[str(stage)] = {k: shares[k] for k in kind_order(shares)}
    return StepView(
        run=step_stats(steps),
        stages=steps_by_stage(steps),
        tax=infra_tax(steps),
        survival=survival,
        per_rollout_s=per_rollout,
    )


def load_step_view(info: RunInfo) -> StepView | None:
    """A run folder's steps (None without a steps/ table)."""
    return step_view(load_steps(info))
