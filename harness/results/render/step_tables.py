"""The steps table a run with a plan prints after its stage table (`stampede run`, `stampede summary`, the report):
per step kind and named step, how many ran, how many failed and in which phase, and their durations' quantiles
in vendor seconds (`~`: the one small-sample mark), then the infrastructure tax of the run's shape."""

from __future__ import annotations

from collections.abc import Sequence

from harness.results.figures.quantiles import REPORT_QUANTILES, SMALL_SAMPLE_MARK, SMALL_SAMPLE_NOTE, supported
from harness.results.figures.step_figures import OVERHEAD, StepStats, StepView, format_tax

_LEVELS = dict(REPORT_QUANTILES)
STEP_NOTE = (
    "steps: every step of a kind pooled, then its named steps (KIND[NAME]); exec.overhead: each call's time beyond "
    "its command's own; pull lies inside ready; quantiles over successful steps"
)


def _seconds(value: float) -> str:
    if value != value:
        return "-"
    if 0 < value < 0.01:
        return f"{1000 * value:.2f}ms"
    if value < 10:
        return f"{value:.3f}"
    if value < 100:
        return f"{value:.2f}"
    return f"{value:.1f}"


def _cell(durations: dict[str, float], name: str) -> str:
    text = _seconds(durations.get(name, float("nan")))
    level = _LEVELS.get(name)
    if text != "-" and level is not None and not supported(level, int(durations.get("n", 0))):
        text += SMALL_SAMPLE_MARK
    return text


def step_rows(stats: Sequence[StepStats]) -> list[list[str]]:
    """Header and one row per step, the cells as printed (the report's HTML table reads the same rows)."""
    header = ["step", "count", "per rollout", "failed", "p50 (vendor s)", "p90", "p99", "max", "failures by phase"]
    rows = [header]
    for entry in stats:
        phases = ", ".join(f"{k} {v}" for k, v in sorted(entry.failures_by_phase.items(), key=lambda kv: -kv[1]))
        label = entry.key if entry.name in (entry.kind, OVERHEAD) else f"  {entry.key}"
        rows.append(
            [
                label,
                str(entry.count),
                f"{entry.per_rollout:.2f}",
                str(entry.failed),
                *(_cell(entry.durations, name) for name in ("p50", "p90", "p99")),
                _seconds(entry.durations.get("max", float("nan"))),
                phases or "-",
            ]
        )
    return rows


def format_step_table(view: StepView) -> str:
    """The whole run's steps, then the infrastructure tax (with its formula)."""
    rows = step_rows(view.run)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        cells = [c.ljust(widths[i]) if i in (0, len(row) - 1) else c.rjust(widths[i]) for i, c in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append(STEP_NOTE)
    if any(cell.endswith(SMALL_SAMPLE_MARK) for row in rows[1:] for cell in row[4:7]):
        lines.append(SMALL_SAMPLE_NOTE)
    if view.tax is not None and view.tax.parts:
        lines.append(format_tax(view.tax))
    return "\n".join(lines)
