"""The report's figures as PNG bytes (matplotlib, Agg: no display needed).

Only what is drawn is downsampled (a survival curve keeps ~2000 ranks per stage, a timeline ~1000 instants);
every statistic behind a figure was computed on all rows. Every duration axis states the report's seconds (vendor
or wall); a failure kind has one colour in every figure (harness.results.render.colours); concurrency axes are ticked
at the stages' measured values, not at powers of two.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib
import numpy as np
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, MaxNLocator, NullFormatter, NullLocator

from harness.results.render import figure_canvas as canvas
from harness.results.render.colours import (
    IN_FLIGHT_COLOUR,
    PHASE_COLOURS,
    READY_COLOUR,
    failure_colour,
    kind_order,
)
from harness.results.read.concurrency import interval_ends, timeline
from harness.results.render.figure_canvas import plt
from harness.results.figures.quantiles import downsample_sorted, supported
from harness.results.figures.stage_aggregate import PHASE_LABELS, STARTUP, TTI_PARTS, RunStats, StageStats, stage_order

SURVIVAL_LEVELS: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p90", 0.1), ("p99", 0.01), ("p99.9", 0.001))
"""(quantile, the share of rollouts still not interactive there): the reference lines of the survival plot."""


def _unit(runs: Sequence[RunStats]) -> str:
    return "vendor s" if runs and runs[0].basis == "vendor" else "wall s"


def _plain(value: float, _position: object = None) -> str:
    return f"{value:g}"


def _log_seconds_axis(axis: matplotlib.axis.Axis, low: float, high: float) -> None:
    """A log axis of seconds labelled in plain numbers (0.2, 0.5, 1, 2), denser when the data span less than a
    decade (matplotlib's default labels only powers of ten: one label, 10^-1, on a 0.1-0.2 s burst)."""
    span = high / low if low > 0 and high > low else 10.0
    if span < 4:
        subs: tuple[float, ...] = (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0)
    elif span < 12:
        subs = (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.0)
    elif span < 100:
        subs = (1.0, 2.0, 3.0, 5.0)
    else:
        subs = (1.0, 2.0, 5.0) if span < 1e4 else (1.0,)
    axis.set_major_locator(LogLocator(base=10, subs=subs, numticks=40))
    axis.set_major_formatter(FuncFormatter(_plain))
    axis.set_minor_locator(NullLocator())
    axis.set_minor_formatter(NullFormatter())


def stage_colours(count: int) -> list[tuple[float, float, float, float]]:
    """Stages in run order from dark to light (a ramp reads low to high load); viridis stops before its yellow."""
    return [plt.cm.viridis(x) for x in np.linspace(0.0, 0.8, max(count, 1))][:count]


def concurrency_ticks(levels: Sequence[float], separation: float = 1.12) -> list[float]:
    """The measured levels to tick, dropping any within `separation`x of the one below (labels would overlap)."""
    ticks: list[float] = []
    for level in sorted(v for v in levels if v == v and v > 0):
        if not ticks or level >= ticks[-1] * separation:
            ticks.append(level)
    return ticks


def _concurrency_axis(ax: plt.Axes, stages: Sequence[StageStats]) -> None:
    """Log x ticked at the stages' measured concurrency, labelled as the tables print it."""
    ticks = concurrency_ticks([s.measured_concurrency for s in stages])
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(ticks, [f"{t:.0f}" if t >= 10 else f"{t:.2g}" for t in ticks])
    if ticks:
        ax.set_xlim(ticks[0] / 1.4, ticks[-1] * 1.4)
    ax.set_xlabel("measured concurrency (median in flight while each rollout ran)")


def survival_points(sorted_tti: np.ndarray, rollouts: int) -> tuple[np.ndarray, np.ndarray]:
    """(TTI, share of all the stage's rollouts not interactive by then) after each drawn rank, zero dropped.

    The denominator is every rollout, interactive or not, so the curve levels off at the share that never became
    interactive (failed or cut off first) instead of reaching zero.
    """
    values = sorted_tti[sorted_tti > 0]
    if values.size == 0 or rollouts <= 0:
        return np.empty(0), np.empty(0)
    x, fraction = downsample_sorted(values)
    remaining = 1.0 - fraction * values.size / rollouts
    keep = remaining > 0
    return x[keep], remaining[keep]


def tti_cdf(runs: Sequence[RunStats], per_rollout: bool = False) -> bytes:
    """TTI survival (1 - CDF) per stage on log-log axes, one panel per run; failures are the curve's floor.

    `per_rollout`: one curve point per logical rollout (startup across retries: first attempt's submit to
    interactive, `STARTUP`), every attempt of a rollout counted once, instead of one per attempt.

    Every panel has the same axes, so runs compare by eye: the x range spans every run's TTI, the y range reaches
    down to the smallest share any stage can show (one rollout of the largest stage, or its never-interactive floor).
    """
    panels = _survival_panels(runs, per_rollout)
    fig, axes = canvas.panels(len(panels), *((8.0, 4.6) if len(panels) == 1 else (5.5, 3.6)))
    drawn = [v[v > 0] for _, curves in panels for _, _, v, _ in curves if (v > 0).any()]
    low = min((float(v[0]) for v in drawn), default=0.1) / 1.1
    high = max((float(v[-1]) for v in drawn), default=1.0) * 1.1
    lowest = min((1.0 / n for _, curves in panels for _, _, _, n in curves if n), default=1.0)
    bottom = min(lowest / 2, 5e-4)
    for ax, (title, curves) in zip(axes, panels, strict=True):
        for name, colour, values, rollouts in curves:
            x, remaining = survival_points(values, rollouts)
            never = rollouts - int((values > 0).sum())
            share = never / rollouts if rollouts else 0.0
            label = f"{name} (n={rollouts}" + (f", {100 * share:.1f}% never interactive)" if never else ")")
            if x.size == 0:
                ax.plot([], [], color=colour, label=label)
                continue
            # start at (first TTI, 1): nobody was interactive before the fastest rollout
            ax.step(np.r_[x[0], x], np.r_[1.0, remaining], where="post", color=colour, label=label)
            if never:  # the floor: rollouts that never became interactive, drawn on to the right edge
                ax.plot([x[-1], high], [share, share], color=colour, linestyle=":", linewidth=1.4)
        ax.set_xscale("log")
        ax.set_xlim(low, high)
        _log_seconds_axis(ax.xaxis, low, high)
        ax.set_yscale("log")
        ax.set_ylim(bottom, 1.3)
        for name, level in SURVIVAL_LEVELS:
            if level > bottom:
                ax.axhline(level, color="0.55", linewidth=0.7, linestyle="--")
                ax.annotate(
                    name,
                    (1.0, level),
                    xycoords=("axes fraction", "data"),
                    xytext=(3, 0),
                    textcoords="offset points",
                    va="center",
                    fontsize=7,
                    color="0.35",
                )
        decades = 1 + max(0, int(-math.log10(bottom)))
        ax.set_yticks(
            [1, 0.1, 0.01, 0.001, 1e-4, 1e-5][:decades], ["100%", "10%", "1%", "0.1%", "0.01%", "0.001%"][:decades]
        )
        ax.yaxis.set_minor_formatter(NullFormatter())
        if per_rollout:
            ax.set_xlabel(f"startup across retries: first attempt's submit to interactive ({_unit(runs)})")
            ax.set_ylabel("rollouts (each once) not yet interactive (log)")
        else:
            ax.set_xlabel(f"TTI per attempt ({_unit(runs)})")
            ax.set_ylabel("attempts not yet interactive (log)")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7, loc="lower left")
    return canvas.png_bytes(fig)


Curve = tuple[str, object, np.ndarray, int]  # (legend name, colour, sorted TTI, rollouts in the denominator)


def _survival_panels(runs: Sequence[RunStats], per_rollout: bool = False) -> list[tuple[str, list[Curve]]]:
    """A panel per run with a curve per stage; runs of one stage each (vendors side by side) share one panel, a
    colour per run as in the concurrency figure, so they compare on one pair of axes."""

    def sample(run: RunStats, stage: StageStats) -> np.ndarray:
        if per_rollout and STARTUP in run.phase_samples:
            return run.phase_samples[STARTUP].group(run.stages.index(stage))
        return run.tti_sorted.get(stage.stage, np.empty(0))

    def count(stage: StageStats) -> int:
        return stage.logical_rollouts if per_rollout and stage.logical_rollouts else stage.rollouts

    if len(runs) > 1 and all(len(run.stages) == 1 for run in runs):
        curves: list[Curve] = [
            (
                f"{run.info.label} {run.stages[0].stage}",
                f"C{i % 10}",
                sample(run, run.stages[0]),
                count(run.stages[0]),
            )
            for i, run in enumerate(runs)
        ]
        return [("one stage per run", curves)]
    return [
        (
            run.info.label,
            [
                (s.stage, colour, sample(run, s), count(s))
                for colour, s in zip(stage_colours(len(run.stages)), run.stages, strict=True)
            ],
        )
        for run in runs
    ]


def latency_vs_concurrency(runs: Sequence[RunStats]) -> bytes:
    """TTI p50 (solid) and p99 (dashed; hollow where its sample is small) against concurrency, a colour per run."""
    fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
    every: list[StageStats] = []
    for index, run in enumerate(runs):
        ordered = sorted(run.stages, key=lambda s: s.measured_concurrency)
        if not ordered:
            continue
        every += ordered
        x = [s.measured_concurrency for s in ordered]
        colour = f"C{index % 10}"
        p99 = [s.phases["tti"]["p99"] for s in ordered]
        ax.plot(x, [s.phases["tti"]["p50"] for s in ordered], "o-", color=colour, label=f"{run.info.label} p50")
        ax.plot(x, p99, "--", color=colour, label=f"{run.info.label} p99")
        small = [not supported(0.99, int(s.phases["tti"]["n"])) for s in ordered]
        ax.scatter(
            [v for v, f in zip(x, small, strict=True) if not f],
            [v for v, f in zip(p99, small, strict=True) if not f],
            marker="s",
            color=colour,
            zorder=3,
        )
        ax.scatter(
            [v for v, f in zip(x, small, strict=True) if f],
            [v for v, f in zip(p99, small, strict=True) if f],
            marker="s",
            facecolors="white",
            edgecolors=colour,
            zorder=3,
        )
    _concurrency_axis(ax, every)
    ax.set_yscale("log")
    values = [v for s in every for v in (s.phases["tti"]["p50"], s.phases["tti"]["p99"]) if v == v and v > 0]
    if values:
        ax.set_ylim(min(values) / 1.25, max(values) * 1.25)
        _log_seconds_axis(ax.yaxis, min(values) / 1.25, max(values) * 1.25)
    ax.set_ylabel(f"TTI ({_unit(runs)})")
    ax.legend(fontsize=7)
    return canvas.png_bytes(fig)


def failures_vs_concurrency(runs: Sequence[RunStats]) -> bytes:
    """Failure rate per stage stacked by kind (one colour per kind in every figure), one panel per run.

    A bar per stage, in order of measured concurrency and labelled with it (a ramp doubles, so evenly spaced bars
    read as a log axis); the number on a bar is the stage's failure rate over every kind. Runs of one stage each
    share one panel, a bar per run.
    """
    if len(runs) > 1 and all(len(run.stages) == 1 for run in runs):
        panels = [("one stage per run", [(run.stages[0], run.info.label) for run in runs])]
    else:
        panels = [
            (run.info.label, [(s, s.stage) for s in sorted(run.stages, key=lambda s: s.measured_concurrency)])
            for run in runs
        ]
    fig, axes = canvas.panels(len(panels), width=max(5.5, 1.6 * max(len(bars) for _, bars in panels)))
    top = max((100 * s.failure_rate for run in runs for s in run.stages), default=0.0)
    for ax, (title, bars) in zip(axes, panels, strict=True):
        ordered = [s for s, _ in bars]
        kinds = kind_order({kind for s in ordered for kind in s.failures_by_kind})
        x = np.arange(len(ordered))
        base = np.zeros(len(ordered))
        for kind in kinds:
            rates = np.array([100 * s.failures_by_kind.get(kind, 0) / max(s.ok + s.failed, 1) for s in ordered])
            ax.bar(x, rates, bottom=base, width=0.6, color=failure_colour(kind), label=kind)
            base += rates
        for position, stage in zip(x, ordered, strict=True):
            ax.annotate(
                f"{100 * stage.failure_rate:.1f}%",
                (position, 100 * stage.failure_rate),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=7,
            )
        ax.set_xticks(x, [f"{s.measured_concurrency:.0f}\n{name}" for s, name in bars], fontsize=7)
        ax.set_xlim(-0.6, max(len(ordered) - 0.4, 0.6))
        ax.set_xlabel("measured concurrency (median in flight while each rollout ran)")
        ax.set_ylim(0, max(1.0, top * 1.15))  # one scale for every panel
        ax.grid(axis="x", visible=False)
        ax.set_axisbelow(True)
        ax.set_ylabel("failed / finished (%)")
        ax.set_title(title, fontsize=9)
        if kinds:
            ax.legend(fontsize=7, loc="upper left")
        else:
            ax.text(0.5, 0.5, "no failures", transform=ax.transAxes, ha="center", va="center", color="0.4")
    return canvas.png_bytes(fig)


def stage_starts(run: RunStats) -> list[tuple[str, float]]:
    """(stage, its first submit in the report's seconds since the run's first submit), in the order they ran."""
    frame = run.frame
    if frame is None or frame.empty or "stage" not in frame:
        return []
    first = frame.groupby("stage", observed=True)["t_submit"].min()
    t0 = float(frame["t_submit"].min())
    return [(stage, float(first[stage]) - t0) for stage in stage_order(frame)]


def failures_by_kind_over_time(run: RunStats, grid: np.ndarray) -> dict[str, np.ndarray]:
    """Per failure kind (the table's order), how many had failed by each instant of `grid` (seconds since t0)."""
    frame = run.frame
    if frame is None or frame.empty or "failure_kind" not in frame:
        return {}
    failed = (frame["outcome"] == "failed").to_numpy()
    if not failed.any():
        return {}
    ends = interval_ends(frame) - float(frame["t_submit"].min())
    kinds = frame["failure_kind"].astype(str).to_numpy()
    return {
        kind: np.searchsorted(np.sort(ends[failed & (kinds == kind)]), grid, side="right")
        for kind in kind_order(set(kinds[failed]))
    }


def timelines(runs: Sequence[RunStats]) -> bytes:
    """In flight, sandboxes usable, and failures so far stacked by kind over the run, stage starts marked; a
    panel per run. Failures have their own axis on the right, never scaled tighter than the rollouts axis: one
    failure stays a sliver (not a full-height band), and 1,333 refused creates do not squash 400 in flight."""
    fig, axes = canvas.panels(len(runs), width=6.5, height=3.9)
    for ax, run in zip(axes, runs, strict=True):
        if run.frame is None or run.frame.empty:
            continue
        line = timeline(run.frame)
        by_kind = failures_by_kind_over_time(run, line.t)
        # ready drawn wide under in flight: once every sandbox is usable the two lines coincide, both stay visible
        ax.plot(line.t, line.ready, color=READY_COLOUR, linewidth=2.6, alpha=0.8, label="ready (usable sandboxes)")
        ax.plot(line.t, line.inflight, color=IN_FLIGHT_COLOUR, linewidth=1.1, label="in flight")
        top = max(1.0, float(line.inflight.max())) * 1.08
        ax.set_ylim(bottom=0, top=top)
        handles, labels = ax.get_legend_handles_labels()
        if by_kind:
            twin = ax.twinx()
            twin.stackplot(
                line.t,
                *by_kind.values(),
                colors=[failure_colour(k) for k in by_kind],
                alpha=0.5,
                labels=[f"failed so far: {kind}" for kind in by_kind],
            )
            failed_total = float(sum(v[-1] for v in by_kind.values()))
            twin.set_ylim(bottom=0, top=max(top, failed_total * 1.08))
            twin.yaxis.set_major_locator(MaxNLocator(integer=True))
            twin.set_ylabel("failed so far (stacked by kind)")
            twin.grid(False)
            ax.set_zorder(twin.get_zorder() + 1)  # the lines above the shaded failures
            ax.patch.set_visible(False)
            more_handles, more_labels = twin.get_legend_handles_labels()
            handles, labels = handles + more_handles, labels + more_labels
        span = float(line.t[-1]) if line.t.size else 1.0
        previous = -np.inf
        row = 0
        for name, start in stage_starts(run):
            ax.axvline(start, color="0.4", linestyle=":", linewidth=1)
            row = 1 - row if start - previous < 0.12 * span else 0  # close stages: labels on two rows
            previous = start
            ax.annotate(
                name,
                (start, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(0, 2 + 9 * row),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=7,
                color="0.3",
            )
        ax.set_xlabel(f"time since first submit ({_unit(runs)})")
        ax.set_ylabel("rollouts")
        ax.set_title(run.info.label, fontsize=9, pad=22)
        ax.legend(handles, labels, fontsize=7, loc="upper right")
    return canvas.png_bytes(fig)


def tti_breakdown(runs: Sequence[RunStats]) -> bytes:
    """Where TTI goes: per run and stage, mean TTI split into create, ready and first command (stacked bars).

    The same shares as the phase table (each part's mean over the rollouts that became interactive), drawn in
    seconds so the stages and runs compare at a glance; each part's share is printed inside its bar.
    """
    rows = [(run, s) for run in runs for s in run.stages if s.phases["tti"]["n"]]
    fig, ax = plt.subplots(figsize=(9, 0.9 + 0.42 * max(len(rows), 1)), layout="constrained")
    labels = [(f"{run.info.label}  " if len(runs) > 1 else "") + s.stage for run, s in rows]
    y = np.arange(len(rows))[::-1]
    for part in TTI_PARTS:
        left = np.array([sum(s.tti_share.get(p, 0.0) for p in TTI_PARTS[: TTI_PARTS.index(part)]) for _, s in rows])
        share = np.array([s.tti_share.get(part, float("nan")) for _, s in rows])
        mean_tti = np.array([s.phases["tti"]["mean"] for _, s in rows])
        widths, starts = np.nan_to_num(share * mean_tti), np.nan_to_num(left * mean_tti)
        bars = ax.barh(y, widths, left=starts, color=PHASE_COLOURS[part], label=PHASE_LABELS[part], height=0.7)
        for bar, fraction in zip(bars, share, strict=True):
            if fraction == fraction and fraction >= 0.06:
                ax.text(
                    bar.get_x() + bar.get_width() / 2,
                    bar.get_y() + bar.get_height() / 2,
                    f"{100 * fraction:.0f}%",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white",
                )
    ax.set_yticks(y, labels)
    ax.set_xlabel(f"mean TTI ({_unit(runs)}) = create + ready + first command")
    ax.set_xlim(left=0)
    ax.grid(axis="y", visible=False)
    ax.set_axisbelow(True)
    ax.legend(fontsize=7, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=3, frameon=False)
    return canvas.png_bytes(fig)
