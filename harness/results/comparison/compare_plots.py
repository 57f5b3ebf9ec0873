"""`stampede compare`'s figures as PNG bytes: overlaid TTI survival curves per matched stage, deltas with intervals.

Survival (the fraction of rollouts slower than x, log y) rather than a CDF: the tails a comparison is about (p99,
p99.9) get a decade each instead of a pixel. Only what is drawn is downsampled; every number was computed on all
values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeGuard

import numpy as np
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

from harness.results.render import figure_canvas as canvas
from harness.results.comparison.compare import BETTER, WORSE, Comparison, Figure, Sample
from harness.results.render.figure_canvas import plt
from harness.results.render.plain_units import ratio
from harness.results.figures.quantiles import downsample_sorted

VERDICT_COLOURS = {WORSE: "#c0392b", BETTER: "#1e8449"}
NEUTRAL = "#555555"


def survival_points(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(x, fraction of values >= x) at up to ~2000 ranks; the smallest fraction drawn is 1/n."""
    ordered = np.sort(values[values > 0])
    x, cdf = downsample_sorted(ordered)
    return x, 1.0 - cdf + 1.0 / max(ordered.size, 1)


def tti_survival(comparison: Comparison) -> bytes:
    """One axis per baseline stage matched by any candidate (and the whole run): baseline and candidates overlaid."""
    panels: list[tuple[str, list[tuple[str, Sample]]]] = []
    base_label = comparison.baseline.info.label
    by_stage: dict[str, list[tuple[str, Sample]]] = {}
    for candidate in comparison.candidates:
        for row in candidate.rows:
            curves = by_stage.setdefault(row.baseline.label, [(f"baseline {base_label}", row.baseline)])
            curves.append((candidate.run.info.label, row.candidate))
    for label, curves in by_stage.items():
        title = label if label != "whole run" else "whole run (every stage pooled)"
        panels.append((title, curves))
    fig, axes = canvas.panels(len(panels), height=3.8)
    unit = "vendor s" if comparison.baseline.basis == "vendor" else "wall s"
    for ax, (title, curves) in zip(axes, panels, strict=True):
        for index, (name, sample) in enumerate(curves):
            values = sample.values.get("tti", np.empty(0))
            if values.size == 0:
                continue
            x, y = survival_points(values)
            style = {"color": "black", "linewidth": 1.8} if index == 0 else {"color": f"C{index - 1}"}
            conc = f"{sample.concurrency:.0f}" if sample.concurrency == sample.concurrency else "-"
            ax.step(x, y, where="post", label=f"{name}: {sample.label} (conc {conc}, n={values.size})", **style)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        for q in (0.5, 0.9, 0.99, 0.999):
            ax.axhline(1 - q, color="grey", linewidth=0.6, linestyle=":")
            ax.annotate(
                f"p{100 * q:g}",
                (1.0, 1 - q),
                xycoords=("axes fraction", "data"),
                fontsize=7,
                color="grey",
                va="bottom",
                ha="right",
            )
        ax.set_xlabel(f"TTI ({unit})")
        ax.set_ylabel("fraction of interactive rollouts with TTI >= x")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7, loc="lower left")
    return canvas.png_bytes(fig)


def delta_chart(comparison: Comparison, prefix: str) -> bytes:
    """Every figure whose name starts with `prefix` (a phase, or "rates"), candidate vs baseline with its interval.

    Durations as the ratio candidate / baseline on a log axis (stages of different scale share it, and 2x slower
    sits as far from 1 as 2x faster), rates as the change in percentage points; red = worse, green = better,
    grey = within noise (or no verdict).
    """
    return canvas.png_bytes(delta_figure(comparison, prefix))


RATIO_MANTISSAS: tuple[tuple[float, ...], ...] = ((1.0,), (2.0, 5.0), (1.5, 3.0, 8.0), (1.2, 9.0), (1.1,), (1.05, 9.5))
"""Ratio ticks coarse to fine, each times every power of ten: 1x, 2x, 5x, 0.5x first; 0.95x, 1.05x last."""


def ratio_ticks(low: float, high: float, most: int = 9) -> list[float]:
    """Ticks for a log ratio axis from `low` to `high`: numbers a reader says (0.95x, 1x, 2x, never 9.5x10^-1),
    the finest set that leaves at most `most` ticks (at least the coarsest one that has any)."""
    chosen: list[float] = []
    mantissas: list[float] = []
    for level in RATIO_MANTISSAS:
        mantissas += level
        ticks = sorted(
            {round(m * 10.0**d, 6) for m in mantissas for d in range(-6, 7) if low <= round(m * 10.0**d, 6) <= high}
        )
        if len(ticks) > most and chosen:
            break
        chosen = ticks
    return chosen or [math.sqrt(low * high)]


def delta_figure(comparison: Comparison, prefix: str) -> plt.Figure:
    """The delta chart as a matplotlib figure (`delta_chart` renders it)."""
    rates = prefix == "rates"
    entries: list[tuple[str, Figure]] = []
    for candidate in comparison.candidates:
        tag = f"{candidate.run.info.label}: " if len(comparison.candidates) > 1 else ""
        for row in candidate.rows:
            for figure in row.figures:
                if (figure.unit == "rate") == rates and (rates or figure.name.split(".")[0] == prefix):
                    entries.append((f"{tag}{row.label}  {figure.name}", figure))
    fig, ax = plt.subplots(figsize=(8, 0.9 + 0.22 * max(len(entries), 1)), layout="constrained")
    drawn = False
    for y, (_, figure) in enumerate(reversed(entries)):
        value, low, high = _scaled(figure, rates)
        colour = VERDICT_COLOURS.get(figure.verdict, NEUTRAL)
        if _drawable(low, rates) and _drawable(high, rates):
            ax.plot([low, high], [y, y], color=colour, linewidth=2)
        if _drawable(value, rates):
            ax.plot([value], [y], "o", color=colour, markersize=4)
            drawn = True
    ax.set_yticks(range(len(entries)), [label for label, _ in reversed(entries)], fontsize=7)
    if rates:
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_xlabel("candidate - baseline (percentage points)")
    else:
        ax.axvline(1, color="black", linewidth=0.8)
        if drawn:
            ax.set_xscale("log")
            low, high = ax.get_xlim()
            ax.xaxis.set_major_locator(FixedLocator(ratio_ticks(low, high)))
            ax.xaxis.set_major_formatter(FuncFormatter(ratio))
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("candidate / baseline (log; 1× = no change)")
    level = f"{100 * comparison.settings.confidence:g}%"
    title = "failure rates: delta" if rates else f"{prefix}: ratio"
    ax.set_title(
        f"{title} with {level} interval (red worse, green better, grey within noise or no verdict)", fontsize=9
    )
    return fig


def _drawable(value: float | None, rates: bool) -> TypeGuard[float]:
    """A finite number (and, for a ratio on its log axis, a positive one)."""
    return value is not None and math.isfinite(value) and (rates or value > 0)


def _scaled(figure: Figure, rates: bool) -> tuple[float, float | None, float | None]:
    if rates:
        return 100 * figure.delta, 100 * figure.ci_low, 100 * figure.ci_high
    return figure.ratio, figure.ratio_low, figure.ratio_high


def chart_prefixes(comparison: Comparison) -> list[str]:
    """The phases compared (in order) and "rates": one delta chart each."""
    seen: list[str] = []
    for candidate in comparison.candidates:
        for row in candidate.rows:
            for figure in row.figures:
                prefix = "rates" if figure.unit == "rate" else figure.name.split(".")[0]
                if prefix not in seen:
                    seen.append(prefix)
    return seen


def figure_files(comparison: Comparison) -> Sequence[tuple[str, str, bytes]]:
    """(file name, caption, png) of every compare figure."""
    files = [
        (
            "tti_survival.png",
            "TTI survival per matched stage, baseline (black) and candidates overlaid",
            tti_survival(comparison),
        )
    ]
    for prefix in chart_prefixes(comparison):
        caption = "failure rates" if prefix == "rates" else f"{prefix} quantiles"
        files.append(
            (f"delta_{prefix}.png", f"{caption}: candidate - baseline with interval", delta_chart(comparison, prefix))
        )
    return files
