"""`stampede compare`'s outputs: the terminal tables, compare.json (every figure), compare.html and its PNGs.

The terminal shows TTI, the failure rates and any other figure with a verdict; compare.json and compare.html hold
every figure. Units are in every header (vendor s unless --seconds wall; rates in %, their deltas in points).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import UsageError
from harness.results.comparison.compare import (
    BETTER,
    WHOLE_RUN,
    WORSE,
    CandidateComparison,
    Comparison,
    Figure,
    RowComparison,
    Settings,
    compare_runs,
)
from harness.results.export.json_schemas import SchemaMismatch, check_against
from harness.results.figures.stage_aggregate import STARTUP, RunStats, TimeBasis
from harness.results.figures.thresholds import Threshold, any_crossed, evaluate, format_verdicts
from harness.results.render import html_report
from harness.results.render.report import load_runs
from harness.results.render.report_tables import Table, basis_note, seconds
from harness.wire.run_endings import EXIT_SCHEMA_MISMATCH, EXIT_THRESHOLDS_CROSSED

COMPARE_VERSION = 1
"""compare.json's layout version: bump on any change a reader would notice."""

FOOTNOTES = (
    "Stages are paired by measured concurrency (the median of what each rollout met in flight), nearest first, "
    "one to one, within the stated tolerance; the whole-run row pools every stage of each run.",
    "delta = candidate - baseline; ratio = candidate / baseline. Quantile intervals: percentile bootstrap of each "
    "run's nearest-rank quantile (exact order-statistic draws, seeded); rate intervals: Newcombe's hybrid score "
    "interval for a difference of proportions.",
    "worse / better: the delta's interval excludes 0 and the change is at least the minimum practical effect; "
    "else within noise. few samples: a quantile one run cannot support (n·(1-q) < 10): no verdict. no data: a "
    "side has no value.",
    "Figures marked * gate the exit status (98 when one is worse); the whole-run row gates only when every stage "
    "of both runs matched.",
)


@dataclass(frozen=True, slots=True)
class CompareResult:
    out_dir: Path
    html_path: Path
    json_path: Path
    figures: list[Path]
    text: str
    comparison: Comparison
    exit_code: int


def _signed(value: float, digits: int | None = None) -> str:
    if value != value:
        return "-"
    if digits is not None:
        return f"{value:+.{digits}f}"
    return ("+" if value >= 0 else "-") + seconds(abs(value))


def _ratio(value: float) -> str:
    if value != value:
        return "-"
    return "- (base 0)" if math.isinf(value) else f"{value:.2f}x"


def _row_label(row: RowComparison) -> str:
    if row.baseline.label == WHOLE_RUN:
        return WHOLE_RUN + ("" if row.gating else " (not gating)")
    b, c = row.baseline, row.candidate
    if b.label == c.label:
        return f"{b.label} ({b.concurrency:.0f} ~ {c.concurrency:.0f})"
    return f"{b.label} ({b.concurrency:.0f}) ~ {c.label} ({c.concurrency:.0f})"


def _shown_in_text(figure: Figure) -> bool:
    return figure.name.startswith("tti.") or figure.unit == "rate" or figure.verdict in (WORSE, BETTER)


def _startup_differs(figure: Figure, tti: dict[str, tuple[float, float]]) -> bool:
    """Startup across retries is shown beside TTI where retries made it differ (without retries it is TTI)."""
    if not figure.name.startswith(f"{STARTUP}."):
        return False
    same = tti.get(figure.name.removeprefix(f"{STARTUP}."))
    return same is None or not np.allclose(same, (figure.baseline, figure.candidate), equal_nan=True)


def _verdict(figure: Figure) -> str:
    return figure.verdict.upper() if figure.verdict == WORSE and figure.gated else figure.verdict


def duration_table(candidate: CandidateComparison, unit: str, confidence: float, every: bool) -> Table:
    level = f"{100 * confidence:g}%"
    header = [
        "stages (baseline ~ candidate, conc)",
        "figure",
        f"baseline ({unit})",
        f"candidate ({unit})",
        f"delta ({unit})",
        f"{level} interval ({unit})",
        "ratio",
        "n base/cand",
        "verdict",
    ]
    rows = []
    for row in candidate.rows:
        tti = {f.name.removeprefix("tti."): (f.baseline, f.candidate) for f in row.figures if f.name.startswith("tti.")}
        for f in row.figures:
            if f.unit == "rate" or not (every or _shown_in_text(f) or _startup_differs(f, tti)):
                continue
            interval = "-" if f.ci_low != f.ci_low else f"[{_signed(f.ci_low)}, {_signed(f.ci_high)}]"
            rows.append(
                [
                    _row_label(row),
                    f.name + (" *" if f.gated else ""),
                    seconds(f.baseline),
                    seconds(f.candidate),
                    _signed(f.delta),
                    interval,
                    _ratio(f.ratio),
                    f"{f.n_baseline}/{f.n_candidate}",
                    _verdict(f),
                ]
            )
    title = f"{candidate.run.info.label} vs baseline: durations [{unit}]"
    return Table(title, header, rows, left=frozenset({0, 1, 8}))


def rate_table(candidate: CandidateComparison, confidence: float) -> Table:
    level = f"{100 * confidence:g}%"
    header = [
        "stages (baseline ~ candidate, conc)",
        "figure",
        "baseline (%)",
        "candidate (%)",
        "delta (points)",
        f"{level} interval (points)",
        "ratio",
        "finished base/cand",
        "verdict",
    ]
    rows = []
    for row in candidate.rows:
        for f in row.figures:
            if f.unit != "rate":
                continue
            interval = "-" if f.ci_low != f.ci_low else f"[{100 * f.ci_low:+.2f}, {100 * f.ci_high:+.2f}]"
            rows.append(
                [
                    _row_label(row),
                    f.name + (" *" if f.gated else ""),
                    _percent(f.baseline),
                    _percent(f.candidate),
                    _signed(100 * f.delta, 2),
                    interval,
                    _ratio(f.ratio),
                    f"{f.n_baseline}/{f.n_candidate}",
                    _verdict(f),
                ]
            )
    return Table(f"{candidate.run.info.label} vs baseline: failure rates [%]", header, rows, left=frozenset({0, 1, 8}))


def _percent(value: float) -> str:
    return "-" if value != value else f"{100 * value:.2f}"


def matching_table(comparison: Comparison, candidate: CandidateComparison) -> Table:
    header = ["baseline stage", "measured conc", "candidate stage", "measured conc", "gap"]
    rows = []
    for row in candidate.rows:
        if row.baseline.label == WHOLE_RUN:
            continue
        gap = abs(row.candidate.concurrency - row.baseline.concurrency) / max(row.baseline.concurrency, 1.0)
        rows.append(
            [
                row.baseline.label,
                f"{row.baseline.concurrency:.1f}",
                row.candidate.label,
                f"{row.candidate.concurrency:.1f}",
                f"{100 * gap:.0f}%",
            ]
        )
    for s in candidate.unmatched_baseline:
        rows.append([s.stage, f"{s.measured_concurrency:.1f}", "(unmatched)", "-", "-"])
    for s in candidate.unmatched_candidate:
        rows.append(["(unmatched)", "-", s.stage, f"{s.measured_concurrency:.1f}", "-"])
    tolerance = 100 * comparison.settings.tolerance
    title = f"{candidate.run.info.label} vs baseline: stages matched by measured concurrency (within {tolerance:g}%)"
    return Table(title, header, rows, left=frozenset({0, 2}))


def headline_table(comparison: Comparison, unit: str) -> Table:
    """The gated figures of every candidate and row, one line each: what decided the exit status."""
    level = f"{100 * comparison.settings.confidence:g}%"
    header = [
        "candidate",
        "stages (baseline ~ candidate, conc)",
        "figure",
        f"baseline ({unit} | %)",
        f"candidate ({unit} | %)",
        f"delta ({unit} | points)",
        f"{level} interval",
        "ratio",
        "verdict",
    ]
    rows = []
    for candidate in comparison.candidates:
        for row in candidate.rows:
            for f in row.figures:
                if f.name not in comparison.settings.gate:
                    continue
                if f.unit == "rate":
                    cells = [
                        _percent(f.baseline),
                        _percent(f.candidate),
                        _signed(100 * f.delta, 2),
                        "-" if f.ci_low != f.ci_low else f"[{100 * f.ci_low:+.2f}, {100 * f.ci_high:+.2f}]",
                    ]
                else:
                    cells = [
                        seconds(f.baseline),
                        seconds(f.candidate),
                        _signed(f.delta),
                        "-" if f.ci_low != f.ci_low else f"[{_signed(f.ci_low)}, {_signed(f.ci_high)}]",
                    ]
                rows.append([candidate.run.info.label, _row_label(row), f.name, *cells, _ratio(f.ratio), _verdict(f)])
    return Table("gated figures (what decides the exit status)", header, rows, left=frozenset({0, 1, 2, 8}))


def verdict_lines(comparison: Comparison) -> list[str]:
    """Per candidate: each gated regression, or that there is none (and what was gated)."""
    gate = ", ".join(comparison.settings.gate) or "none"
    lines = []
    for candidate in comparison.candidates:
        name = candidate.run.info.label
        found = candidate.regressions
        if not found:
            lines.append(f"{name}: no regression in the gated figures ({gate})")
            continue
        for row, f in found:
            if f.unit == "rate":
                change = f"{100 * f.baseline:.2f}% -> {100 * f.candidate:.2f}% ({_signed(100 * f.delta, 2)} points)"
            else:
                change = f"{seconds(f.baseline)} -> {seconds(f.candidate)} {f.unit} ({_ratio(f.ratio)})"
            lines.append(f"{name}: REGRESSION {f.name} at {_row_label(row)}: {change}")
    return lines


def _num(value: float | None) -> float | None:
    """A JSON number, or null for a figure that has no finite value (JSON has no NaN or infinity)."""
    if value is None or value != value or math.isinf(value):
        return None
    return value


def ratio_note(f: Figure) -> str | None:
    """Why a figure's ratio (or its interval) is null: a zero denominator, said rather than written as inf."""
    if f.baseline == 0 and f.candidate == f.candidate:
        return "baseline is 0 and candidate is 0" if f.candidate == 0 else "baseline is 0: no ratio"
    if f.ratio_high is not None and math.isinf(f.ratio_high):
        return "the baseline's quantile was 0 in some resamples: the ratio's interval has no upper end"
    return None


def _run_ref(run: RunStats) -> dict[str, Any]:
    info = run.info
    return {
        "run_id": info.run_id,
        "dir": str(info.run_dir),
        "provider": info.provider,
        "profile": info.profile,
        "scenario": info.scenario,
        "status": info.status,
        "time_scale": info.time_scale,
    }


def _figure_json(f: Figure) -> dict[str, Any]:
    return {
        "name": f.name,
        "unit": f.unit,
        "baseline": _num(f.baseline),
        "candidate": _num(f.candidate),
        "delta": _num(f.delta),
        "ratio": _num(f.ratio),
        "ci": [_num(f.ci_low), _num(f.ci_high)],
        "ratio_ci": None if f.ratio_low is None else [_num(f.ratio_low), _num(f.ratio_high)],
        "ratio_note": ratio_note(f),
        "n_baseline": f.n_baseline,
        "n_candidate": f.n_candidate,
        "verdict": f.verdict,
        "gated": f.gated,
    }


def comparison_json(comparison: Comparison, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """compare.json: every row, figure, interval and verdict, and the exit status they imply."""
    s = comparison.settings
    candidates = []
    for c in comparison.candidates:
        rows = [
            {
                "baseline": {"stage": r.baseline.label, "measured_concurrency": _num(r.baseline.concurrency)},
                "candidate": {"stage": r.candidate.label, "measured_concurrency": _num(r.candidate.concurrency)},
                "gating": r.gating,
                "figures": [_figure_json(f) for f in r.figures],
            }
            for r in c.rows
        ]
        candidates.append(
            {
                "run": _run_ref(c.run),
                "rows": rows,
                "unmatched_baseline": [
                    {"stage": x.stage, "measured_concurrency": x.measured_concurrency} for x in c.unmatched_baseline
                ],
                "unmatched_candidate": [
                    {"stage": x.stage, "measured_concurrency": x.measured_concurrency} for x in c.unmatched_candidate
                ],
                "regressions": [{"row": r.label, "figure": f.name} for r, f in c.regressions],
            }
        )
    basis = comparison.baseline.basis
    return {
        "compare_version": COMPARE_VERSION,
        "unit": "vendor_seconds" if basis == "vendor" else "wall_seconds",
        "settings": {
            "confidence": s.confidence,
            "resamples": s.resamples,
            "seed": s.seed,
            "min_relative": s.min_relative,
            "min_seconds": s.min_seconds,
            "min_rate": s.min_rate,
            "tolerance": s.tolerance,
            "gate": list(s.gate),
        },
        "baseline": _run_ref(comparison.baseline),
        "candidates": candidates,
        "regressed": comparison.regressed,
        "exit_code": comparison.exit_code,
        **(extra or {}),
    }


SCHEMA_RESOURCE = "compare.v1.schema.json"


def validate_comparison(document: Any, source: str = "compare.json") -> None:
    """Raise UsageError naming the first place compare.json departs from its schema (checked before each write)."""
    check_against(document, SCHEMA_RESOURCE, f"compare v{COMPARE_VERSION}", source)


def default_out_dir() -> Path:
    return Path("stampede-compare")


def build_compare(
    run_dirs: Sequence[str | Path],
    out_dir: Path | None = None,
    basis: TimeBasis = "vendor",
    settings: Settings = Settings(),
    figures: bool = True,
    thresholds: Sequence[Threshold] = (),
) -> CompareResult:
    """Load the runs (the first is the baseline), compare, write compare.json, compare.html and the PNGs.

    `thresholds` are checked on each candidate's own figures (vendor seconds, whatever `basis`): one crossed makes
    the exit status EXIT_THRESHOLDS_CROSSED, which comes before EXIT_REGRESSION.
    """
    if len(run_dirs) < 2:
        raise UsageError("compare needs a baseline run folder and at least one candidate run folder")
    runs = load_runs(run_dirs, basis)
    if len(runs) < 2:
        raise UsageError("compare needs two different run folders (the baseline was given again as a candidate)")
    for run in runs:
        if not run.stages:
            raise UsageError(f"{run.info.run_dir} has no rollouts to compare")
    comparison = compare_runs(runs[0], runs[1:], settings)
    out = Path(out_dir) if out_dir is not None else default_out_dir()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create {out}: {exc}") from None
    unit = "vendor s" if basis == "vendor" else "wall s"

    text = [f"baseline: {runs[0].info.label}", *(basis_note(run) for run in runs), settings.describe()]
    sections: list[tuple[str, list[Table], list[tuple[str, bytes]]]] = []
    for candidate in comparison.candidates:
        matching = matching_table(comparison, candidate)
        rates = rate_table(candidate, settings.confidence)
        text += [
            "",
            matching.to_text(),
            "",
            duration_table(candidate, unit, settings.confidence, every=False).to_text(),
            "",
            rates.to_text(),
        ]
        every = duration_table(candidate, unit, settings.confidence, every=True)
        sections.append((f"{candidate.run.info.label} vs {runs[0].info.label}", [matching, every, rates], []))
    verdicts = verdict_lines(comparison)
    crossed, threshold_lines, threshold_json = _check_thresholds(thresholds, [c.run for c in comparison.candidates])
    exit_code = EXIT_THRESHOLDS_CROSSED if crossed else comparison.exit_code
    verdicts += threshold_lines
    reasons = ["a threshold is crossed"] if crossed else []
    reasons += ["a gated figure is worse"] if comparison.regressed else []
    verdicts.append(
        f"exit {exit_code}: "
        + (" and ".join(reasons) or "no regression" + (", every threshold holds" if thresholds else ""))
    )
    headline = headline_table(comparison, unit)
    sections.insert(0, ("Gated figures", [headline], []))
    text += [
        "",
        headline.to_text(),
        "",
        "(* gates the exit status; the tables above show TTI, rates and every figure with a verdict; "
        "compare.html and compare.json hold every figure)",
        *verdicts,
    ]

    written: list[Path] = []
    if figures:
        from harness.results.comparison.compare_plots import figure_files  # matplotlib only when figures are drawn

        images = []
        for name, caption, png in figure_files(comparison):
            path = out / name
            path.write_bytes(png)
            written.append(path)
            images.append((caption, png))
        sections.append(("Figures", [], images))
    json_path = out / "compare.json"
    saved = comparison_json(comparison, {"thresholds": threshold_json, "exit_code": exit_code})
    try:
        validate_comparison(saved)
    except SchemaMismatch as mismatch:  # stampede's own bug: the tables above still stand, the file is not written
        exit_code = EXIT_SCHEMA_MISMATCH
        verdicts.append(f"exit {EXIT_SCHEMA_MISMATCH}: {mismatch} (a stampede bug: compare.json not written)")
        text.append(verdicts[-1])
    else:
        json_path.write_text(json.dumps(saved, indent=1, allow_nan=False) + "\n")
    html_path = out / "compare.html"
    title = f"stampede compare: {runs[0].info.run_id} (baseline) vs " + ", ".join(r.info.run_id for r in runs[1:])
    alarming = ("REGRESSION", "CROSSED", "is worse", "is crossed")
    endings = [(line, any(word in line for word in alarming)) for line in verdicts]
    notes = [basis_note(run) for run in runs] + [settings.describe()]
    html_path.write_text(html_report.render(title, notes, sections, FOOTNOTES, endings=endings))
    text += [f"compare: {html_path}", f"json: {json_path}"]
    return CompareResult(out, html_path, json_path, [*written, json_path], "\n".join(text), comparison, exit_code)


def _check_thresholds(
    thresholds: Sequence[Threshold], candidates: Sequence[RunStats]
) -> tuple[bool, list[str], list[dict[str, Any]]]:
    """Each candidate's threshold verdicts: (any crossed, lines to print, compare.json's `thresholds`)."""
    if not thresholds:
        return False, [], []
    from harness.results.figures.run_figures import load_aggregate, run_figures
    from harness.results.figures.step_figures import load_step_view
    from harness.results.figures.thresholds import check_steps

    crossed, lines, saved = False, [], []
    for run in candidates:
        info, aggregate = load_aggregate(run.info.run_dir, "vendor")
        figures = run_figures(aggregate, load_step_view(info))
        check_steps(thresholds, figures, f"candidate {info.label}")  # a step it never ran: one line, exit 2
        verdicts = evaluate(thresholds, figures)
        lines += [f"{run.info.label}: {line}" for line in format_verdicts(verdicts).splitlines()]
        saved.append({"run_id": info.run_id, "verdicts": [v.to_dict() for v in verdicts]})
        crossed = crossed or any_crossed(verdicts)
    return crossed, lines, saved
