"""`stampede report`: per provider, profile and stage, for one run or several side by side.

Writes report.html (self-contained), the PNG figures, stages.csv (one row per run and stage, every number in
the tables) and returns the terminal text. Vectorised end to end: a million-row run takes seconds.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import UsageError
from harness.results.figures.knee import Knee, KneeThresholds, find_knee
from harness.results.figures.quantiles import QUANTILE_NAMES, REPORT_QUANTILES, SMALL_SAMPLE_MARK, supported
from harness.results.figures.stage_aggregate import PHASES, TTI_PARTS, RunStats, TimeBasis, compute_run_stats
from harness.results.figures.step_figures import StepView
from harness.results.figures.thresholds import Threshold, Verdict, any_crossed, evaluate
from harness.results.read.dataset import RunInfo, load_rollout_frame, read_run_info
from harness.results.read.run_ending import RunEnding, run_ending
from harness.results.read.run_pointer import resolve_run_dir
from harness.results.render import burst_hold_report, html_report, plots, step_report
from harness.results.render.report_tables import (
    REPORT_SMALL_SAMPLE_NOTE,
    Table,
    basis_note,
    censoring_table,
    comparison_table,
    knee_table,
    phase_table,
    stage_table,
)
from harness.wire.run_endings import EXIT_THRESHOLDS_CROSSED

FIGURES: tuple[tuple[str, str], ...] = (
    (
        "tti_breakdown.png",
        "Where TTI goes: mean TTI per stage split into create, ready and first command (the same "
        "shares as the phase table: each part's mean over the rollouts that became interactive).",
    ),
    (
        "tti_cdf.png",
        "TTI survival per stage: the share of rollouts not yet interactive at each TTI (log-log, so "
        "p99 and p99.9 are the crossings of the 1% and 0.1% lines). Failed and cut-off rollouts never "
        "became interactive: they are the floor the curve levels off at (a cut-off one might have "
        "become interactive later, so the floor is an upper bound).",
    ),
    (
        "latency_vs_concurrency.png",
        "TTI p50 and p99 against measured concurrency (hollow p99: fewer than 1,000 samples, a rough figure).",
    ),
    (
        "failures_vs_concurrency.png",
        "Failure rate by kind against measured concurrency (one colour per kind in every figure).",
    ),
    (
        "timeline.png",
        "In flight, usable, and failures so far by kind over the run; dotted lines mark where each stage began.",
    ),
)
"""(file name, caption): the caption is printed under the figure in report.html."""
STARTUP_FIGURE = (
    "startup_cdf.png",
    "Startup across retries survival per stage: the share of rollouts (each counted once, however many attempts) "
    "not yet interactive at each time since their first attempt was submitted. Drawn when the run retried: the "
    "TTI survival above counts every attempt, so a rollout that failed twice before starting adds three points.",
)
"""Per logical rollout, beside the per-attempt TTI survival: only for runs that retried."""

FOOTNOTES = (
    "Percentiles are nearest-rank and untrimmed: every value printed was observed.",
    "TTI (submit → first command returned) = create (submit → the vendor acknowledged an id) + ready (→ usable) + "
    "first command (the rest of TTI: the first command's round trip). Each phase's quantiles are over every "
    "rollout in which it completed (TTI: every rollout that got its first command back, whatever came after); a "
    "part's share of TTI is its mean / mean TTI over the rollouts that became interactive, so the three sum to "
    "100%. After TTI: later commands (every command after the first, summed per rollout) and teardown.",
    REPORT_SMALL_SAMPLE_NOTE,
    "Failure rate = failed / (ok + failed). Cancelled rollouts were cut off by the end of the run: censored "
    "observations, counted apart (cxl), never failures; when some were cut off before becoming interactive, "
    "the censoring table gives TTI p99 as if they had been the slowest (an upper bound).",
    "Concurrency (conc) is measured: per stage, the median over its rollouts of the most rollouts in flight "
    "fleet-wide while each ran, from the rollout intervals (a sweep line), so distributed runs count right and a "
    "burst of N reads N; a closed-model stage's target is shown beside it (target), never instead of it.",
    "Vendor seconds: with a simulated vendor's truth, the harness's share of a duration is kept as measured and "
    "the vendor's share is in the vendor's own seconds (harness.results.read.vendor_time); without it, wall seconds / "
    "time scale, which also stretches harness and network overheads (at 0.1, 2 ms reads as 20 ms).",
    "starts/vendor s (start rate; starts/wall s with --seconds wall) = rollouts submitted in the stage / the "
    "stage's submit span; a burst submits all at once. fail% = failed / (ok + failed), as in `stampede run`.",
)


@dataclass(frozen=True, slots=True)
class ReportResult:
    out_dir: Path
    html_path: Path
    figures: list[Path]
    text: str
    runs: list[RunStats]
    knees: list[Knee]
    tables: list[Table] = field(default_factory=list)  # every table the report printed, in order
    verdicts: list[tuple[str, list[Verdict]]] = field(default_factory=list)  # (run id, its --threshold verdicts)

    @property
    def exit_code(self) -> int:
        """99 when a threshold of any run was crossed (harness.wire.run_endings), else 0."""
        crossed = any(any_crossed(verdicts) for _, verdicts in self.verdicts)
        return EXIT_THRESHOLDS_CROSSED if crossed else 0


def load_runs(run_dirs: Sequence[str | Path], basis: TimeBasis) -> list[RunStats]:
    if not run_dirs:
        raise UsageError("give at least one run folder")
    infos: list[RunInfo] = []
    seen: set[Path] = set()
    for run_dir in run_dirs:
        info = read_run_info(run_dir)
        resolved = info.run_dir.resolve()
        if resolved in seen:
            continue
        seen.add(resolved)
        infos.append(info)
    return [compute_run_stats(info, load_rollout_frame(info.run_dir), basis) for info in infos]


def default_out_dir(run_dirs: Sequence[str | Path]) -> Path:
    """One run: RUN_DIR/report; several: ./stampede-report."""
    return resolve_run_dir(run_dirs[0]) / "report" if len(run_dirs) == 1 else Path("stampede-report")


def build_report(
    run_dirs: Sequence[str | Path],
    out_dir: Path | None = None,
    basis: TimeBasis = "vendor",
    thresholds: KneeThresholds = KneeThresholds(),
    figures: bool = True,
    pass_fail: Sequence[Threshold] = (),
) -> ReportResult:
    """`pass_fail` (`--threshold`) are checked on each run's own figures in vendor seconds, whatever `basis`;
    their verdicts head report.html, so the page says what the exit status says."""
    runs = load_runs(run_dirs, basis)
    verdicts = [(run.info.run_id, _verdicts(run, pass_fail)) for run in runs] if pass_fail else []
    out = Path(out_dir) if out_dir is not None else default_out_dir(run_dirs)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create {out}: {exc}") from None
    run_endings = [_ending_of(run) for run in runs]
    # a cut-short run's last stage did not run its course: its knee verdict is withheld, not guessed
    knees = [withhold_knee(find_knee(run.stages, thresholds), end) for run, end in zip(runs, run_endings, strict=True)]

    per_run: list[tuple[RunStats, Table, Table]] = [
        (run, stage_table(run, knee), phase_table(run)) for run, knee in zip(runs, knees, strict=True)
    ]
    knees_t = knee_table(runs, knees)
    step_views = _step_views(runs)
    step_tables = {label: _step_tables(label, view) for label, view in step_views}
    burst_views = burst_hold_report.load_views(runs)  # none unless a run's scenario is burst-hold
    burst_tables = {view.label: burst_hold_report.tables(view) for view in burst_views}
    comparison = comparison_table(runs) if len(runs) > 1 else None
    censored = censoring_table(runs)

    ending_lines = [
        (f"{run.info.run_id}: {end.banner()}", end.cut_short) for run, end in zip(runs, run_endings, strict=True)
    ]
    text_parts = [line for line, _ in ending_lines] + [basis_note(run) for run in runs]
    for run, stages_t, phases_t in per_run:
        text_parts += ["", stages_t.to_text(), "", phases_t.to_text()]
        for table in [*step_tables.get(run.info.label, []), *burst_tables.get(run.info.label, [])]:
            text_parts += ["", table.to_text()]
    if comparison is not None:
        text_parts += ["", comparison.to_text()]
    if censored is not None:
        text_parts += ["", censored.to_text()]
    text_parts += ["", knees_t.to_text(), f"knee thresholds: {thresholds.describe()} (* marks the knee stage)"]
    if any(
        SMALL_SAMPLE_MARK in cell
        for table in [*_tables(per_run, comparison, censored), *(t for ts in burst_tables.values() for t in ts)]
        for row in table.rows
        for cell in row
    ):
        text_parts += [REPORT_SMALL_SAMPLE_NOTE]

    written: list[Path] = []
    images: list[tuple[str, bytes]] = []
    if figures:
        makers = (
            plots.tti_breakdown,
            plots.tti_cdf,
            plots.latency_vs_concurrency,
            plots.failures_vs_concurrency,
            plots.timelines,
        )
        drawn = [(name, alt, make) for (name, alt), make in zip(FIGURES, makers, strict=True)]
        if any(s.retries for run in runs for s in run.stages):
            drawn.insert(2, (*STARTUP_FIGURE, lambda runs: plots.tti_cdf(runs, per_rollout=True)))
        if step_views:
            step_makers = (step_report.step_breakdown, step_report.step_survival)
            for (name, alt), step_make in zip(step_report.STEP_FIGURES, step_makers, strict=True):
                drawn.append((name, alt, lambda _runs, make=step_make: make(step_views)))  # type: ignore[misc]
        if burst_views:
            drawn.append((*burst_hold_report.BURST_HOLD_FIGURE, lambda runs: burst_hold_report.figure(burst_views)))
        for name, alt, make in drawn:
            png = make(runs)
            path = out / name
            path.write_bytes(png)
            written.append(path)
            images.append((alt, png))

    csv_path = out / "stages.csv"
    _write_csv(csv_path, runs)
    sections: list[tuple[str, list[Table], list[tuple[str, bytes]]]] = [
        ("Knee", [knees_t], []),
    ]
    if comparison is not None:
        sections.append(("Side by side", [comparison], []))
    for run, stages_t, phases_t in per_run:
        sections.append((run.info.label, [stages_t, phases_t, *step_tables.get(run.info.label, [])], []))
        if run.info.label in burst_tables:
            sections.append((f"{run.info.label}: burst-hold", burst_tables[run.info.label], []))
    if censored is not None:
        sections.append(("Censored rollouts", [censored], []))
    sections.append(("Figures", [], images))
    notes = [basis_note(run) for run in runs] + [f"knee thresholds: {thresholds.describe()}"]
    title = "stampede report: " + ", ".join(run.info.run_id for run in runs)
    html_path = out / "report.html"
    html_path.write_text(
        html_report.render(
            title,
            notes,
            sections,
            (*FOOTNOTES, *((burst_hold_report.BURST_HOLD_NOTE,) if burst_views else ())),
            endings=ending_lines,
            thresholds=threshold_banner(verdicts),
        )
    )
    text_parts += ["", f"report: {html_path}"]
    tables = [knees_t, *_tables(per_run, comparison, censored), *(t for ts in step_tables.values() for t in ts)]
    tables += [t for ts in burst_tables.values() for t in ts]
    return ReportResult(out, html_path, [*written, csv_path], "\n".join(text_parts), runs, knees, tables, verdicts)


def _step_views(runs: Sequence[RunStats]) -> list[tuple[str, StepView]]:
    """(label, steps) of each run with a plan; none for the others (their report is unchanged)."""
    from harness.results.figures.step_figures import load_step_view

    views = [(run.info.label, load_step_view(run.info)) for run in runs]
    return [(label, view) for label, view in views if view is not None]


def _step_tables(label: str, view: StepView) -> list[Table]:
    tables = [step_report.step_table(label, view), step_report.step_phase_table(label, view)]
    tax = step_report.tax_table(label, view)
    return tables + ([tax] if tax is not None else [])


def _verdicts(run: RunStats, pass_fail: Sequence[Threshold]) -> list[Verdict]:
    """Thresholds are in vendor seconds: the run is aggregated on that basis (whole run pooled, and per stage)."""
    from harness.results.figures.run_figures import aggregate_run, run_figures
    from harness.results.figures.step_figures import load_step_view
    from harness.results.figures.thresholds import check_steps

    aggregate = aggregate_run(run.info, load_rollout_frame(run.info.run_dir), "vendor")
    figures = run_figures(aggregate, load_step_view(run.info))
    check_steps(pass_fail, figures, f"run {run.info.label}")  # a step the run never ran: one line, exit 2
    return evaluate(pass_fail, figures)


def threshold_banner(verdicts: Sequence[tuple[str, Sequence[Verdict]]]) -> tuple[str, Table, bool] | None:
    """(headline, every threshold with its observed value and verdict, crossed?) for the top of report.html."""
    if not verdicts:
        return None
    rows = [
        [run_id, v.threshold.text, v.scope, v.observed_text(), v.verdict.upper()]
        for run_id, run_verdicts in verdicts
        for v in run_verdicts
    ]
    crossed = sum(v.crossed for _, run_verdicts in verdicts for v in run_verdicts)
    total = sum(len(run_verdicts) for _, run_verdicts in verdicts)
    headline = (
        f"thresholds: {crossed} of {total} CROSSED (exit {EXIT_THRESHOLDS_CROSSED})"
        if crossed
        else f"thresholds: all {total} hold"
    )
    header = ["run", "threshold", "scope", "observed (durations in vendor s)", "verdict"]
    return headline, Table("", header, rows, left=frozenset({0, 1, 2, 4})), bool(crossed)


def _tables(
    per_run: Sequence[tuple[RunStats, Table, Table]], comparison: Table | None, censored: Table | None
) -> list[Table]:
    tables = [t for _, stages_t, phases_t in per_run for t in (stages_t, phases_t)]
    return tables + [t for t in (comparison, censored) if t is not None]


def _ending_of(run: RunStats) -> RunEnding:
    outcomes = run.frame["outcome"] if run.frame is not None and "outcome" in run.frame else None
    return run_ending(run.info.manifest, outcomes)


def withhold_knee(knee: Knee, ending: RunEnding) -> Knee:
    """A cut-short run gets no knee verdict: its last stage ended early, so no stage can be called the limit."""
    if not ending.cut_short:
        return knee
    return WithheldKnee(None, None, None, f"no verdict: the run was {ending.ending} before its stages ran their course")


@dataclass(frozen=True, slots=True)
class WithheldKnee(Knee):
    """A knee verdict withheld: `describe` says why instead of naming a stage."""

    def describe(self) -> str:
        return self.reason


def _write_csv(path: Path, runs: Sequence[RunStats]) -> None:
    header = [
        "run_id",
        "provider",
        "profile",
        "stage",
        "concurrency",
        "measured_concurrency",
        "target_concurrency",
        "rollouts",
        "ok",
        "failed",
        "cancelled",
        "cancelled_before_tti",
        "retries",
        "gave_up",
        "success_rate",
        "failure_rate",
        "start_rate",
        "time_scale",
        "basis",
        "failures_by_kind",
        "failures_by_phase",
    ]
    phases = [name for name, _ in PHASES]
    header += [f"{phase}_{q}" for phase in phases for q in (*QUANTILE_NAMES, "mean", "n")]
    # the small-sample rule per quantile (quantiles.supported): False = fewer than 10 samples beyond it
    header += [f"{phase}_{name}_supported" for phase in phases for name, _ in REPORT_QUANTILES]
    header += [f"tti_share_{part}" for part in TTI_PARTS]
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for run in runs:
            for s in run.stages:
                row = [
                    s.run_id,
                    s.provider,
                    s.profile,
                    s.stage,
                    s.concurrency,
                    f"{s.measured_concurrency:g}",
                    "" if s.target is None else s.target,
                    s.rollouts,
                    s.ok,
                    s.failed,
                    s.cancelled,
                    s.cancelled_before_tti,
                    s.retries,
                    s.gave_up,
                    f"{s.success_rate:.6g}",
                    f"{s.failure_rate:.6g}",
                    f"{s.start_rate:.6g}",
                    s.time_scale,
                    s.basis,
                    ";".join(f"{k}={v}" for k, v in s.failures_by_kind.items()),
                    ";".join(f"{k}={v}" for k, v in s.failures_by_phase.items()),
                ]
                row += [repr(float(s.phases[p][q])) for p in phases for q in (*QUANTILE_NAMES, "mean", "n")]
                row += [supported(level, int(s.phases[p]["n"])) for p in phases for _, level in REPORT_QUANTILES]
                row += [f"{s.tti_share.get(part, float('nan')):.6g}" for part in TTI_PARTS]
                writer.writerow(row)
