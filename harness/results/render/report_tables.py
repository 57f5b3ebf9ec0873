"""The report's tables as plain data (header + rows of strings), printed to the terminal or put in HTML."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.results.figures.knee import Knee
from harness.results.figures.quantiles import (
    QUANTILE_NAMES,
    REPORT_QUANTILES,
    SMALL_SAMPLE_MARK,
    SMALL_SAMPLE_NOTE,
    supported,
)
from harness.results.figures.stage_aggregate import PHASE_LABELS, STARTUP, TTI_PARTS, RunStats, StageStats, TimeBasis
from harness.results.comparison.stage_matching import match_runs
from harness.results.figures.timing_error import FLAG_NOTE


@dataclass(frozen=True, slots=True)
class Table:
    title: str
    header: list[str]
    rows: list[list[str]]
    left: frozenset[int] = frozenset({0})  # left-aligned columns (the rest right-aligned)

    def to_text(self) -> str:
        table = [self.header, *self.rows]
        widths = [max(len(line[i]) for line in table) for i in range(len(self.header))]
        lines = [self.title] if self.title else []
        for n, line in enumerate(table):
            cells = [c.ljust(widths[i]) if i in self.left else c.rjust(widths[i]) for i, c in enumerate(line)]
            lines.append("  ".join(cells).rstrip())
            if n == 0:
                lines.append("  ".join("-" * w for w in widths))
        return "\n".join(lines)


def seconds(value: float) -> str:
    if value != value:
        return "-"
    if value == float("inf"):
        return "inf"
    if value < 10:
        return f"{value:.3f}"
    if value < 100:
        return f"{value:.2f}"
    return f"{value:.1f}"


STARTUP_QUANTILES = ("p50", "p99", "max")
"""Startup across retries beside TTI in the stage table (a run that retried)."""
FAIL_PERCENT = "fail%"
"""Failed / (ok + failed) in percent: the one name every table (run, summary, report, side by side) gives it."""


def start_rate_header(seconds_unit: str) -> str:
    """Rollouts submitted per second of the table's unit (`starts/vendor s`): one name everywhere."""
    return f"starts/{seconds_unit}"


REPORT_SMALL_SAMPLE_NOTE = f"{SMALL_SAMPLE_NOTE} (greyed in report.html; *_supported = False in stages.csv)"
_LEVELS = dict(REPORT_QUANTILES)


def unit(basis: TimeBasis) -> str:
    """The seconds every duration of a report is in, as headers state it."""
    return "vendor s" if basis == "vendor" else "wall s"


def quantile_cell(summary: dict[str, float], name: str) -> str:
    """A quantile (or max) of a phase summary, with `~` when its sample is too small (quantiles.supported)."""
    text = seconds(summary[name])
    level = _LEVELS.get(name)
    if level is None or text == "-" or supported(level, int(summary["n"])):
        return text
    return text + SMALL_SAMPLE_MARK


def _kinds(counts: dict[str, int]) -> str:
    return ", ".join(f"{kind} {count}" for kind, count in counts.items()) or "-"


def basis_note(run: RunStats) -> str:
    info = run.info
    scale = f"time scale {info.time_scale:g}" if info.time_scale_recorded else "no time scale recorded (1)"
    if run.basis == "wall" or info.time_scale == 1.0:
        which = "seconds are wall seconds" + (" = vendor seconds" if info.time_scale == 1.0 else "")
    else:
        which = f"seconds are vendor seconds (wall / {info.time_scale:g})"
    return f"{info.label}: {info.scenario}, status {info.status}, {scale}; {which}"


def stage_table(run: RunStats, knee: Knee | None = None) -> Table:
    seconds_unit = unit(run.basis)
    retried = any(s.retries for s in run.stages)
    header = [
        "stage",
        "conc",
        "target",
        "rollouts",
        "ok",
        "failed",
        "cxl",
        FAIL_PERCENT,
        f"TTI {QUANTILE_NAMES[0]} ({seconds_unit})",
        *QUANTILE_NAMES[1:],
        start_rate_header(seconds_unit),
        "harness err",
        "engine",
        "failures by kind",
        "by phase",
    ]
    if retried:  # each attempt is a row: say how many were retries and how many rollouts gave up
        header[3:4] = ["attempts", "retries", "gave up"]
        startup_at = header.index("max") + 1
        header[startup_at:startup_at] = [
            f"startup {QUANTILE_NAMES[0]} ({seconds_unit})",
            *STARTUP_QUANTILES[1:],
            "interactive/rollouts",
        ]
    rows = []
    for s in run.stages:
        tti = s.phases["tti"]
        marker = " *" if knee is not None and knee.stage == s.stage else ""
        row = [
            s.stage + marker,
            str(s.concurrency),
            "-" if s.target is None else str(s.target),
            str(s.rollouts),
            str(s.ok),
            str(s.failed),
            _cxl(s),
            "-" if s.success_rate != s.success_rate else f"{100 * s.failure_rate:.1f}",
            *(quantile_cell(tti, name) for name in QUANTILE_NAMES),
            "-" if s.start_rate != s.start_rate else f"{s.start_rate:.1f}",
            s.timing_error.describe(),
            run.engine_load[s.stage].describe() if s.stage in run.engine_load else "-",
            _kinds(s.failures_by_kind),
            _kinds(s.failures_by_phase),
        ]
        if retried:
            row[4:4] = [str(s.retries), str(s.gave_up)]
            startup = s.phases.get(STARTUP, {"n": 0})
            row[startup_at:startup_at] = [
                *(quantile_cell(startup, name) if name in startup else "-" for name in STARTUP_QUANTILES),
                f"{int(startup['n'])}/{s.logical_rollouts}",
            ]
        rows.append(row)
    title = f"{run.info.label}  [{seconds_unit}]"
    if any(s.timing_error.flagged for s in run.stages):
        title += "\n" + FLAG_NOTE
    return Table(title, header, rows, left=frozenset({0, len(header) - 2, len(header) - 1}))


def _cxl(s: StageStats) -> str:
    if not s.cancelled:
        return "0"
    return f"{s.cancelled} ({s.cancelled_before_tti} pre-TTI)"


def phase_table(run: RunStats) -> Table:
    """Where TTI goes: per stage, TTI and the three parts that sum to it, each part's share; then what follows TTI.

    The share is of the mean (each part's mean / mean TTI over the rollouts that became interactive), so the three
    shares add up to 100%; p50 and p99 are each phase's own, over every rollout that completed it.
    """
    seconds_unit = unit(run.basis)
    header = ["stage", "phase", "n", f"p50 ({seconds_unit})", "p99", "max", "mean", "share of TTI (of mean)"]
    rows = []
    for s in run.stages:
        for phase in ("tti", *TTI_PARTS, "later_commands", "teardown"):
            q = s.phases[phase]
            if phase == "tti":
                label, share = PHASE_LABELS[phase], "100%" if q["n"] else "-"
            elif phase in TTI_PARTS:
                label, share = "  " + PHASE_LABELS[phase], _percent(s.tti_share.get(phase, float("nan")))
            else:
                label, share = PHASE_LABELS[phase], "after TTI"
            rows.append(
                [
                    s.stage if phase == "tti" else "",
                    label,
                    str(q["n"]),
                    quantile_cell(q, "p50"),
                    quantile_cell(q, "p99"),
                    seconds(q["max"]),
                    seconds(q["mean"]),
                    share,
                ]
            )
    title = f"{run.info.label}: where TTI goes (TTI = create + ready + first command)  [{seconds_unit}]"
    return Table(title, header, rows, left=frozenset({0, 1}))


def _percent(share: float) -> str:
    return "-" if share != share else f"{100 * share:.1f}%"


def censoring_table(runs: Sequence[RunStats]) -> Table | None:
    rows = []
    for run in runs:
        for s in run.stages:
            if s.cancelled:
                tti = s.phases["tti"]
                upper = seconds(s.tti_p99_censored_upper)
                if upper not in ("-", "inf") and not supported(0.99, int(tti["n"]) + s.cancelled_before_tti):
                    upper += SMALL_SAMPLE_MARK
                rows.append(
                    [
                        run.info.label,
                        s.stage,
                        str(s.cancelled),
                        str(s.cancelled_before_tti),
                        quantile_cell(tti, "p99"),
                        upper,
                    ]
                )
    if not rows:
        return None
    seconds_unit = unit(runs[0].basis)
    header = [
        "run",
        "stage",
        "cancelled",
        "before TTI",
        f"TTI p99, interactive only ({seconds_unit})",
        f"p99 if those were slowest ({seconds_unit})",
    ]
    return Table("cancelled rollouts (censored, not failures)", header, rows, left=frozenset({0, 1}))


def comparison_table(runs: Sequence[RunStats]) -> Table:
    """Side by side: one row per load level, TTI p50/p99 and failure % per run.

    Stages are matched on what they measured in flight, never on targets (`stage_matching.match_runs`: one stage
    per run in a row, nearest first, within 15% of the row's first run's level), so a staggered 100 (~3 in flight)
    sits beside other runs' sequential stages, not beside a burst of 100; a stage with no partner gets its own row.
    `stampede compare` matches stages the same way and adds deltas, intervals and a verdict.
    """
    matched = match_runs([[s.measured_concurrency for s in run.stages] for run in runs])
    seconds_unit = "vendor s" if runs and runs[0].basis == "vendor" else "wall s"
    header = ["concurrency (measured)"]
    for name in run_names(runs):
        header += [f"{name} p50 ({seconds_unit})", f"p99 ({seconds_unit})", FAIL_PERCENT]
    rows = []
    for members in matched:
        labels = sorted({runs[r].stages[i].concurrency for r, i in enumerate(members) if i is not None})
        row = [str(labels[0]) if len(labels) == 1 else f"{labels[0]}-{labels[-1]}"]
        for r, index in enumerate(members):
            if index is None:
                row += ["-", "-", "-"]
                continue
            stage = runs[r].stages[index]
            tti = stage.phases["tti"]
            row += [_marked(tti, "p50", 0.5), _marked(tti, "p99", 0.99), f"{100 * stage.failure_rate:.1f}"]
        rows.append(row)
    return Table("side by side: TTI and failure rate by measured concurrency", header, rows)


def run_names(runs: Sequence[RunStats]) -> list[str]:
    """A name per run that tells it from the others beside it: provider/profile where that is unique, with the
    run id where two runs share it (two runs of stub/modal-like are not both headed "stub/modal-like")."""
    plain = [f"{run.info.provider}/{run.info.profile}" for run in runs]
    names = [
        name if plain.count(name) == 1 else f"{name} ({run.info.run_id})" for name, run in zip(plain, runs, strict=True)
    ]
    return [name if names.count(name) == 1 else f"{name} #{i + 1}" for i, name in enumerate(names)]


def _marked(summary: dict[str, float], name: str, level: float) -> str:
    """A comparison cell, `~` when too few samples support it (quantiles.supported)."""
    text = seconds(summary[name])
    return text if text == "-" or supported(level, int(summary["n"])) else text + "~"


def knee_table(runs: Sequence[RunStats], knees: Sequence[Knee]) -> Table:
    rows = [[run.info.label, knee.describe()] for run, knee in zip(runs, knees, strict=True)]
    return Table("knee", ["run", "knee"], rows, left=frozenset({0, 1}))
