"""`stampede compare`: a candidate run against a baseline, figure by figure, with a confidence interval and a verdict.

Stages are paired by measured concurrency (`stage_matching`), plus one whole-run row. For each pair, every
figure a user gates on: each phase's p50 … p99.9 (`StageStats.phases`) and the failure rates (all, init, and by
kind). Each gets baseline, candidate, delta (candidate - baseline), ratio, and a confidence interval for the delta:

- Quantiles: a percentile bootstrap, drawn exactly and in O(resamples) whatever the sample size: the k-th
  smallest of n values drawn with replacement from a sorted sample x is x[ceil(U·n)] with U ~ Beta(k, n+1-k)
  (the k-th order statistic of n uniforms pushed through the empirical inverse CDF), so a resample never
  materialises. Baseline and candidate are drawn independently; the delta's interval is the percentiles of the
  differences, the ratio's of the ratios. Seeded per figure (seed, row, figure name): reproducible, and one
  figure's interval does not depend on which others were computed.
- Rates: Newcombe's hybrid score interval for a difference of two proportions (Wilson intervals combined), which
  behaves at 0 failures, where a bootstrap of 0/n collapses to a point.

Verdict, per figure: `worse` / `better` when the interval excludes 0 AND the change is at least the minimum
practical effect, max(relative × baseline, absolute floor) (defaults: 5%, 0.01 s, 0.5 percentage point);
otherwise `within noise`. A quantile either run holds too few samples for (`quantiles.supported`: n·(1-q) < 10)
gets `few samples`, never a verdict; a figure one side has no data for gets `no data`. Higher is worse for every
figure here (durations and failure rates).

Gating: only the figures named in `gate` (default `DEFAULT_GATE`) can fail the comparison (exit
EXIT_REGRESSION), in every matched stage and in the whole-run row; the whole-run row gates only when every stage
of both runs matched (else it pools different loads), and is left out when each run has one stage (it would be
that stage again). Many figures are compared: a `worse` outside the gate is
shown, not acted on.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Literal

import numpy as np
import pandas as pd

from foundation.quantiles import nearest_rank, nearest_rank_index
from harness.errors import UsageError
from harness.results.comparison.stage_matching import match_stages
from harness.results.figures.quantiles import REPORT_QUANTILES, GroupedSample, supported
from harness.results.figures.stage_aggregate import PHASES, STARTUP, RunStats, StageStats
from harness.results.read.concurrency import LEVEL_TOLERANCE
from harness.wire.records import INIT_PHASES
from harness.wire.run_endings import EXIT_REGRESSION

Verdict = Literal["worse", "better", "within noise", "few samples", "no data"]
WORSE: Verdict = "worse"
BETTER: Verdict = "better"
NOISE: Verdict = "within noise"
FEW: Verdict = "few samples"
NO_DATA: Verdict = "no data"

DEFAULT_GATE: tuple[str, ...] = ("tti.p50", "tti.p99", "failure_rate")
"""What fails a comparison unless --gate says otherwise: typical and tail time to interactive, and failures."""
RATE_FIGURES: tuple[str, ...] = ("failure_rate", "init_failure_rate")
WHOLE_RUN = "whole run"


@dataclass(frozen=True, slots=True)
class Settings:
    """How figures are compared; every field is a `stampede compare` option."""

    confidence: float = 0.95
    resamples: int = 2000
    seed: int = 0
    min_relative: float = 0.05  # a change smaller than this fraction of the baseline is never a verdict
    min_seconds: float = 0.01  # ... nor a duration change below this many seconds
    min_rate: float = 0.005  # ... nor a rate change below this (0.005 = half a percentage point)
    tolerance: float = LEVEL_TOLERANCE  # stages match within this relative gap in measured concurrency
    gate: tuple[str, ...] = DEFAULT_GATE

    def describe(self) -> str:
        return (
            f"{100 * self.confidence:g}% intervals ({self.resamples} bootstrap resamples, seed {self.seed}; rates: "
            f"Newcombe); a verdict needs the interval to exclude 0 and a change of at least "
            f"max({100 * self.min_relative:g}% of baseline, {self.min_seconds:g} s or {100 * self.min_rate:g} "
            f"points); stages matched within {100 * self.tolerance:g}% of measured concurrency; gate: "
            + (", ".join(self.gate) or "none")
        )


@dataclass(frozen=True, slots=True)
class Sample:
    """One side of a row: a stage (or a whole run) as the comparison needs it, raw values included."""

    label: str
    concurrency: float  # measured
    values: dict[str, np.ndarray]  # phase -> that phase's durations (any order), NaN-free
    ok: int
    failed: int
    failures_by_kind: dict[str, int] = field(default_factory=dict)
    failures_by_phase: dict[str, int] = field(default_factory=dict)

    @property
    def finished(self) -> int:
        return self.ok + self.failed

    def rate(self, name: str) -> int:
        """The failure count behind a rate figure."""
        if name == "failure_rate":
            return self.failed
        if name == "init_failure_rate":
            return sum(self.failures_by_phase.get(phase, 0) for phase in INIT_PHASES)
        return self.failures_by_kind.get(name.removeprefix("failures."), 0)


@dataclass(frozen=True, slots=True)
class Figure:
    name: str  # `tti.p99`, `failure_rate`, `failures.capacity`: the --gate names
    unit: str  # "vendor s" / "wall s" / "rate"
    baseline: float
    candidate: float
    delta: float  # candidate - baseline
    ratio: float  # candidate / baseline (inf when the baseline is 0 and the candidate is not)
    ci_low: float  # the delta's interval
    ci_high: float
    ratio_low: float | None  # the ratio's interval (quantiles only)
    ratio_high: float | None
    n_baseline: int  # samples behind a quantile, finished rollouts behind a rate
    n_candidate: int
    verdict: Verdict
    gated: bool  # named in --gate and in a row that gates

    @property
    def regression(self) -> bool:
        return self.gated and self.verdict == WORSE


@dataclass(frozen=True, slots=True)
class RowComparison:
    """One matched stage pair (or the whole-run row) and its figures."""

    baseline: Sample
    candidate: Sample
    figures: list[Figure]
    gating: bool

    @property
    def label(self) -> str:
        if self.baseline.label in (WHOLE_RUN, self.candidate.label):
            return self.baseline.label
        return f"{self.baseline.label} ~ {self.candidate.label}"


@dataclass(frozen=True, slots=True)
class CandidateComparison:
    run: RunStats
    rows: list[RowComparison]
    unmatched_baseline: list[StageStats]
    unmatched_candidate: list[StageStats]

    @property
    def regressions(self) -> list[tuple[RowComparison, Figure]]:
        return [(row, f) for row in self.rows for f in row.figures if f.regression]


@dataclass(frozen=True, slots=True)
class Comparison:
    baseline: RunStats
    candidates: list[CandidateComparison]
    settings: Settings

    @property
    def regressed(self) -> bool:
        return any(c.regressions for c in self.candidates)

    @property
    def exit_code(self) -> int:
        return EXIT_REGRESSION if self.regressed else 0


# ---- samples from a run ---------------------------------------------------------------------------------------


def _phase_samples(run: RunStats) -> dict[str, GroupedSample]:
    samples = getattr(run, "phase_samples", None)
    if not samples:
        raise UsageError(f"{run.info.run_dir}: this version of the report code keeps no per-rollout phase samples")
    return samples


def stage_sample(run: RunStats, index: int) -> Sample:
    stage = run.stages[index]
    values = {phase: sample.group(index) for phase, sample in _phase_samples(run).items()}
    return Sample(
        stage.stage,
        stage.measured_concurrency,
        values,
        stage.ok,
        stage.failed,
        dict(stage.failures_by_kind),
        dict(stage.failures_by_phase),
    )


def whole_run_sample(run: RunStats) -> Sample:
    """Every stage pooled; its concurrency is the busiest stage's (a label only: whole runs are not matched)."""
    stages = run.stages
    kinds: dict[str, int] = {}
    phases: dict[str, int] = {}
    for s in stages:
        for kind, count in s.failures_by_kind.items():
            kinds[kind] = kinds.get(kind, 0) + count
        for phase, count in s.failures_by_phase.items():
            phases[phase] = phases.get(phase, 0) + count
    values = {phase: sample.sorted_values for phase, sample in _phase_samples(run).items()}
    peak = max((s.measured_concurrency for s in stages), default=float("nan"))
    return Sample(WHOLE_RUN, peak, values, sum(s.ok for s in stages), sum(s.failed for s in stages), kinds, phases)


# ---- the statistics --------------------------------------------------------------------------------------------


def bootstrap_quantile(sorted_values: np.ndarray, q: float, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """`resamples` draws of the nearest-rank q-quantile of a with-replacement resample of the sorted values."""
    n = sorted_values.size
    k = nearest_rank_index(n, q) + 1  # the 1-based rank every table prints
    u = rng.beta(k, n + 1 - k, size=resamples)  # the k-th smallest of n uniforms
    index = np.clip(np.ceil(u * n).astype(np.int64) - 1, 0, n - 1)
    return sorted_values[index]


def figure_rng(seed: int, row: str, name: str) -> np.random.Generator:
    """One generator per figure: reproducible, and independent of which other figures were computed."""
    return np.random.default_rng([seed, zlib.crc32(f"{row}\0{name}".encode())])


def quantile_delta_interval(
    baseline: np.ndarray, candidate: np.ndarray, q: float, settings: Settings, rng: np.random.Generator
) -> tuple[float, float, float, float]:
    """(delta low, delta high, ratio low, ratio high) of candidate vs baseline quantile q (inputs sorted)."""
    b = bootstrap_quantile(baseline, q, settings.resamples, rng)
    c = bootstrap_quantile(candidate, q, settings.resamples, rng)
    tail = 100 * (1 - settings.confidence) / 2
    low, high = np.percentile(c - b, [tail, 100 - tail])
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(b > 0, c / np.where(b > 0, b, 1.0), np.inf)
    r_low, r_high = np.percentile(ratios, [tail, 100 - tail])
    return float(low), float(high), float(r_low), float(r_high)


def wilson(successes: int, n: int, z: float) -> tuple[float, float]:
    """Wilson score interval of a proportion."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def rate_delta_interval(
    base_count: int, base_n: int, cand_count: int, cand_n: int, confidence: float
) -> tuple[float, float]:
    """Newcombe's hybrid score interval (his method 10) for candidate rate - baseline rate."""
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p_b, p_c = base_count / base_n, cand_count / cand_n
    l_b, u_b = wilson(base_count, base_n, z)
    l_c, u_c = wilson(cand_count, cand_n, z)
    delta = p_c - p_b
    return delta - math.hypot(p_c - l_c, u_b - p_b), delta + math.hypot(u_c - p_c, p_b - l_b)


def verdict_for(delta: float, low: float, high: float, baseline: float, floor: float, relative: float) -> Verdict:
    """worse/better when the interval excludes 0 and |delta| reaches max(relative × baseline, floor)."""
    if abs(delta) < max(relative * abs(baseline), floor):
        return NOISE
    if low > 0:
        return WORSE
    if high < 0:
        return BETTER
    return NOISE


def _ratio(candidate: float, baseline: float) -> float:
    if baseline == 0:
        return float("nan") if candidate == 0 else float("inf")
    return candidate / baseline


def compare_samples(baseline: Sample, candidate: Sample, settings: Settings, unit: str, gating: bool) -> RowComparison:
    """Every figure of one row; `gating` says whether this row's gated figures can fail the comparison."""
    figures: list[Figure] = []
    row_key = f"{baseline.label}|{candidate.label}"
    gate = set(settings.gate)
    phases = [p for p in baseline.values if p in candidate.values]
    for phase in phases:
        b_values = np.sort(baseline.values[phase])
        c_values = np.sort(candidate.values[phase])
        for q_name, q in REPORT_QUANTILES:
            name = f"{phase}.{q_name}"
            b, c = nearest_rank(b_values, q), nearest_rank(c_values, q)
            interval: tuple[float, float, float | None, float | None]
            if b_values.size == 0 or c_values.size == 0:
                verdict: Verdict = NO_DATA
                interval = (float("nan"), float("nan"), None, None)
            else:
                interval = quantile_delta_interval(
                    b_values, c_values, q, settings, figure_rng(settings.seed, row_key, name)
                )
                if supported(q, b_values.size) and supported(q, c_values.size):
                    verdict = verdict_for(
                        c - b, interval[0], interval[1], b, settings.min_seconds, settings.min_relative
                    )
                else:
                    verdict = FEW
            figures.append(
                Figure(
                    name,
                    unit,
                    b,
                    c,
                    c - b,
                    _ratio(c, b),
                    interval[0],
                    interval[1],
                    interval[2],
                    interval[3],
                    int(b_values.size),
                    int(c_values.size),
                    verdict,
                    gating and name in gate,
                )
            )
    kinds = sorted(set(baseline.failures_by_kind) | set(candidate.failures_by_kind))
    for name in (*RATE_FIGURES, *(f"failures.{kind}" for kind in kinds)):
        n_b, n_c = baseline.finished, candidate.finished
        if n_b == 0 or n_c == 0:
            b = baseline.rate(name) / n_b if n_b else float("nan")
            c = candidate.rate(name) / n_c if n_c else float("nan")
            figures.append(
                Figure(
                    name,
                    "rate",
                    b,
                    c,
                    c - b,
                    float("nan"),
                    float("nan"),
                    float("nan"),
                    None,
                    None,
                    n_b,
                    n_c,
                    NO_DATA,
                    gating and name in gate,
                )
            )
            continue
        b, c = baseline.rate(name) / n_b, candidate.rate(name) / n_c
        low, high = rate_delta_interval(baseline.rate(name), n_b, candidate.rate(name), n_c, settings.confidence)
        verdict = verdict_for(c - b, low, high, b, settings.min_rate, settings.min_relative)
        figures.append(
            Figure(
                name,
                "rate",
                b,
                c,
                c - b,
                _ratio(c, b),
                low,
                high,
                None,
                None,
                n_b,
                n_c,
                verdict,
                gating and name in gate,
            )
        )
    return RowComparison(baseline, candidate, figures, gating)


def compare_runs(baseline: RunStats, candidates: Sequence[RunStats], settings: Settings = Settings()) -> Comparison:
    """Each candidate against the baseline: matched stages, then the whole run.

    A candidate with no stage matching the baseline's is a UsageError: nothing would be compared, and a CI gate
    must not pass on that.
    """
    if not candidates:
        raise UsageError("compare needs a baseline and at least one candidate run")
    unit = "vendor s" if baseline.basis == "vendor" else "wall s"
    base_levels = [s.measured_concurrency for s in baseline.stages]
    results = []
    gated_steps = sorted({step for name in settings.gate if (step := gated_step(name)) is not None})
    base_steps = step_samples(baseline, gated_steps)
    for run in candidates:
        run_steps = step_samples(run, gated_steps)
        pairs = match_stages(base_levels, [s.measured_concurrency for s in run.stages], settings.tolerance)
        rows = [
            compare_samples(
                with_steps(stage_sample(baseline, p.reference), base_steps),
                with_steps(stage_sample(run, p.other), run_steps),
                settings,
                unit,
                True,
            )
            for p in pairs
            if p.reference is not None and p.other is not None
        ]
        unmatched_b = [baseline.stages[p.reference] for p in pairs if p.other is None and p.reference is not None]
        unmatched_c = [run.stages[p.other] for p in pairs if p.reference is None and p.other is not None]
        if not rows:  # a gate that compares nothing would pass whatever the runs did
            raise UsageError(
                f"{run.info.run_dir}: no stage ran within {100 * settings.tolerance:g}% of a baseline stage's measured "
                f"concurrency (baseline {_levels(baseline)}; candidate {_levels(run)}): compare runs of one shape, "
                "or widen --tolerance"
            )
        all_matched = not unmatched_b and not unmatched_c
        if len(baseline.stages) > 1 or len(run.stages) > 1:  # one stage each: the whole run is that stage
            rows.append(
                compare_samples(
                    with_steps(whole_run_sample(baseline), base_steps),
                    with_steps(whole_run_sample(run), run_steps),
                    settings,
                    unit,
                    all_matched,
                )
            )
        results.append(CandidateComparison(run, rows, unmatched_b, unmatched_c))
    return Comparison(baseline, results, settings)


STEP_GATE_PREFIX = "step:"


def gated_step(name: str) -> str | None:
    """The step a `step:KEY.QUANTILE` gate names (`step:upload.p99` -> `upload`), else None."""
    if not name.startswith(STEP_GATE_PREFIX):
        return None
    return name.removeprefix(STEP_GATE_PREFIX).rsplit(".", 2 if name.endswith(".p99.9") else 1)[0]


def step_samples(run: RunStats, steps: Sequence[str]) -> dict[str, dict[str, np.ndarray]]:
    """Per stage label (and `WHOLE_RUN`): `step:KEY` -> the gated steps' successful durations (vendor seconds).

    Only the steps a gate names are compared (a plan's every step at every quantile would bury the table); a step
    the run never ran is a one-line UsageError naming the steps it did run."""
    if not steps:
        return {}
    from harness.results.figures.step_figures import OVERHEAD, step_stats
    from harness.results.read.steps import load_steps

    frame = load_steps(run.info)
    known = [entry.key for entry in step_stats(frame)]
    for step in steps:
        if step not in known:
            has = f"its steps: {', '.join(known)}" if known else "it has no steps: a steps/ table is written by --plan"
            raise UsageError(f"--gate step:{step}: {run.info.label} has no step {step!r} ({has})")

    def values(rows: pd.DataFrame) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for step in steps:
            if step == OVERHEAD:
                part = rows.loc[(rows["kind"] == "exec") & rows["ok"], "overhead"]
            elif "[" in step:
                kind, name = step[:-1].split("[", 1)
                part = rows.loc[(rows["kind"] == kind) & (rows["name"] == name) & rows["ok"], "duration"]
            else:
                part = rows.loc[(rows["kind"] == step) & rows["ok"], "duration"]
            out[f"{STEP_GATE_PREFIX}{step}"] = part.dropna().to_numpy(dtype=float)
        return out

    by_stage = {str(stage): values(part) for stage, part in frame.groupby("stage", sort=False)}
    by_stage[WHOLE_RUN] = values(frame)
    return by_stage


def with_steps(sample: Sample, steps: dict[str, dict[str, np.ndarray]]) -> Sample:
    """The sample with its stage's gated step durations beside its phases (figures `step:KEY.p99`, ...)."""
    if not steps:
        return sample
    empty = {key: np.empty(0) for key in next(iter(steps.values()))}
    return dataclasses.replace(sample, values={**sample.values, **steps.get(sample.label, empty)})


def _levels(run: RunStats) -> str:
    return ", ".join(f"{s.measured_concurrency:.0f}" for s in run.stages) or "no stages"


def figure_names() -> list[str]:
    """Every figure name --gate may give (besides failures.<kind>): <phase>.<quantile> and the rates."""
    phases = [*(phase for phase, _ in PHASES), STARTUP]
    return [f"{phase}.{q}" for phase in phases for q, _ in REPORT_QUANTILES] + list(RATE_FIGURES)


def parse_gate(text: str) -> tuple[str, ...]:
    """`tti.p99,failure_rate` -> the names; `none` -> no gate. An unknown name is a one-line UsageError."""
    if text.strip().lower() == "none":
        return ()
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    known = set(figure_names())
    quantile_names = {q for q, _ in REPORT_QUANTILES}
    for name in names:
        if name.startswith(STEP_GATE_PREFIX):  # step:KEY.QUANTILE; whether the runs have KEY is checked on them
            step = gated_step(name)
            if not step or name.removeprefix(f"{STEP_GATE_PREFIX}{step}.") not in quantile_names:
                raise UsageError(
                    f"--gate: {name!r} is not step:STEP.QUANTILE (e.g. step:upload.p99, step:exec.overhead.p50; "
                    f"quantiles {', '.join(q for q, _ in REPORT_QUANTILES)})"
                )
            continue
        kind = name.removeprefix("failures.")
        if name not in known and not (name.startswith("failures.") and kind.replace("_", "").isalnum()):
            raise UsageError(
                f"--gate: unknown figure {name!r} (one of {', '.join(figure_names())}, failures.<kind>, or none)"
            )
    if not names:
        raise UsageError("--gate: give figure names separated by commas, or none")
    return names
