"""The report's pages for a run with a plan (the `steps/` table), drawn the way the report draws today's phases:
a table per step (count, failures by phase, quantiles), where a rollout's time goes by step (a table and stacked
bars, as the TTI breakdown), survival curves per step kind (time to done, log-log, failed steps the floor, as the
TTI survival), and the infrastructure tax. Always vendor seconds (the steps' own basis, said in each title)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from harness.results.figures.step_figures import OVERHEAD, TAX_FORMULA, StepView, kind_order
from harness.results.render import figure_canvas as canvas
from harness.results.render.colours import PHASE_COLOURS
from harness.results.render.figure_canvas import plt
from harness.results.render.report_tables import Table, seconds
from harness.results.render.step_tables import step_rows

STEP_COLOURS: dict[str, str] = {
    "create": PHASE_COLOURS["create"],
    "pull": "#c44e52",
    "ready": PHASE_COLOURS["ready"],
    "fork": "#64b5cd",
    "upload": "#8c8c8c",
    "exec": PHASE_COLOURS["first_command"],
    OVERHEAD: "#2f6b3a",
    "background": "#8172b3",
    "download": "#da8bc3",
    "snapshot": "#ccb974",
    "terminate": PHASE_COLOURS["teardown"],
}
"""One colour per step kind; the phases a step shares with today's phases keep their colours."""

STEP_FIGURES: tuple[tuple[str, str], ...] = (
    (
        "step_breakdown.png",
        "Where a rollout's time goes by step: per stage, the vendor seconds each step kind took per rollout (its "
        "steps summed over the stage's rollouts); pull is drawn apart from the ready that holds it.",
    ),
    (
        "step_survival.png",
        "Time to done per step kind: the share of steps of that kind not yet done at each duration (log-log, as "
        "the TTI survival; exec.overhead: each tool call's time beyond its command's own). Failed steps never "
        "finish: they are the floor a curve levels off at.",
    ),
)
"""(file name, caption) of the figures a run with steps adds to the report."""


def step_table(label: str, view: StepView) -> Table:
    rows = step_rows(view.run)
    header = rows[0]
    return Table(f"{label}: steps (vendor seconds)", header, rows[1:], left=frozenset({0, len(header) - 1}))


def step_phase_table(label: str, view: StepView) -> Table:
    """Per stage: each step kind's seconds per rollout and its share of the rollout's step time."""
    header = ["stage", "step", "seconds per rollout (vendor s)", "share of step time"]
    rows = []
    for stage, per_kind in view.per_rollout_s.items():
        total = sum(per_kind.values())
        for n, (kind, value) in enumerate(per_kind.items()):
            share = f"{100 * value / total:.1f}%" if total > 0 else "-"
            rows.append([stage if n == 0 else "", kind, seconds(value), share])
    return Table(
        f"{label}: where a rollout's time goes, by step (pull apart from ready)", header, rows, frozenset({0, 1})
    )


def tax_table(label: str, view: StepView) -> Table | None:
    tax = view.tax
    if tax is None or not tax.parts:
        return None
    header = ["part", "count per trajectory", "vendor s per trajectory", "worker-hours per 1M trajectories"]
    rows = [
        [p.part, f"{p.count_per_trajectory:.2f}", f"{p.per_trajectory_s:.4f}", f"{p.worker_hours_per_million:,.1f}"]
        for p in tax.parts
    ]
    rows.append(["total", "", f"{tax.total_s:.4f}", f"{tax.worker_hours_per_million:,.1f}"])
    return Table(f"{label}: the infrastructure tax over {tax.trajectories} trajectories ({TAX_FORMULA})", header, rows)


def step_breakdown(views: Sequence[tuple[str, StepView]]) -> bytes:
    """Stacked bars per run and stage: each step kind's vendor seconds per rollout."""
    bars = [(label, stage, per_kind) for label, view in views for stage, per_kind in view.per_rollout_s.items()]
    fig, ax = plt.subplots(figsize=(9, 0.9 + 0.42 * max(len(bars), 1)), layout="constrained")
    y = np.arange(len(bars))[::-1]
    kinds = kind_order(k for _, _, per_kind in bars for k in per_kind)
    left = np.zeros(len(bars))
    for kind in kinds:
        widths = np.array([per_kind.get(kind, 0.0) for _, _, per_kind in bars])
        ax.barh(y, widths, left=left, color=STEP_COLOURS.get(kind, "#999999"), label=kind, height=0.7)
        left += widths
    ax.set_yticks(y, [(f"{label}  " if len(views) > 1 else "") + stage for label, stage, _ in bars])
    ax.set_xlabel("vendor seconds per rollout, by step kind")
    ax.set_xlim(left=0)
    ax.grid(axis="y", visible=False)
    ax.legend(fontsize=7, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=6, frameon=False)
    return canvas.png_bytes(fig)


def step_survival(views: Sequence[tuple[str, StepView]]) -> bytes:
    """A panel per run, a curve per step kind: the share of its steps not yet done at each duration."""
    from harness.results.render.plots import survival_points  # the TTI survival's own points

    fig, axes = canvas.panels(len(views), *((8.0, 4.6) if len(views) == 1 else (5.5, 3.6)))
    drawn = [v[v > 0] for _, view in views for v, _ in view.survival.values() if (v > 0).any()]
    low = min((float(v[0]) for v in drawn), default=1e-3) / 1.1
    high = max((float(v[-1]) for v in drawn), default=1.0) * 1.1
    lowest = min((1.0 / n for _, view in views for _, n in view.survival.values() if n), default=1.0)
    bottom = min(lowest / 2, 5e-4)
    for ax, (label, view) in zip(axes, views, strict=True):
        for kind, (values, count) in view.survival.items():
            x, remaining = survival_points(values, count)
            failed = count - int(values.size)
            name = f"{kind} (n={count}" + (f", {failed} failed)" if failed else ")")
            colour = STEP_COLOURS.get(kind, "#999999")
            if x.size == 0:
                ax.plot([], [], color=colour, label=name)
                continue
            ax.step(np.r_[x[0], x], np.r_[1.0, remaining], where="post", color=colour, label=name)
            if failed:
                ax.plot([x[-1], high], [failed / count] * 2, color=colour, linestyle=":", linewidth=1.4)
        ax.set_xscale("log")
        ax.set_xlim(low, high)
        ax.set_yscale("log")
        ax.set_ylim(bottom, 1.3)
        for level in (0.5, 0.1, 0.01, 0.001):
            if level > bottom:
                ax.axhline(level, color="0.55", linewidth=0.7, linestyle="--")
        ax.set_xlabel("step duration (vendor s)")
        ax.set_ylabel("steps not yet done (log)")
        ax.set_title(label, fontsize=9)
        ax.legend(fontsize=7, loc="lower left")
    return canvas.png_bytes(fig)
