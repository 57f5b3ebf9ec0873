"""The report's figures as PNG bytes (matplotlib, Agg: no display needed).

Only what is drawn is downsampled (a CDF keeps ~2000 ranks per stage, a timeline ~1000 instants); every
statistic behind a figure was computed on all rows.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import NullFormatter, ScalarFormatter

from harness.results.concurrency import timeline
from harness.results.quantiles import downsample_sorted
from harness.results.stage_aggregate import RunStats

plt.rcParams.update({"figure.dpi": 100, "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})


def _png(fig: plt.Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def _panels(count: int, width: float = 5.5, height: float = 3.6) -> tuple[plt.Figure, list[plt.Axes]]:
    cols = min(count, 2)
    rows = math.ceil(count / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False, layout="constrained")
    flat = list(axes.ravel())
    for extra in flat[count:]:
        extra.set_visible(False)
    return fig, flat[:count]


def _unit(runs: Sequence[RunStats]) -> str:
    return "vendor s" if runs and runs[0].basis == "vendor" else "wall s"


def _concurrency_axis(ax: plt.Axes) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())


def tti_cdf(runs: Sequence[RunStats]) -> bytes:
    """Empirical CDF of TTI per stage, one panel per run, log x."""
    fig, axes = _panels(len(runs))
    for ax, run in zip(axes, runs, strict=True):
        for stage in run.stages:
            values = run.tti_sorted.get(stage.stage, np.empty(0))
            values = values[values > 0]
            if values.size == 0:
                continue
            x, y = downsample_sorted(values)
            ax.step(x, y, where="post", label=f"{stage.stage} (n={values.size})")
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_ylim(0, 1.01)
        ax.set_xlabel(f"TTI ({_unit(runs)})")
        ax.set_ylabel("fraction of ok rollouts")
        ax.set_title(run.info.label, fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
    return _png(fig)


def latency_vs_concurrency(runs: Sequence[RunStats]) -> bytes:
    """TTI p50 (solid) and p99 (dashed) against concurrency, one colour per run."""
    fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
    for index, run in enumerate(runs):
        ordered = sorted(run.stages, key=lambda s: s.concurrency)
        if not ordered:
            continue
        x = [s.concurrency for s in ordered]
        colour = f"C{index % 10}"
        ax.plot(x, [s.phases["tti"]["p50"] for s in ordered], "o-", color=colour, label=f"{run.info.label} p50")
        ax.plot(x, [s.phases["tti"]["p99"] for s in ordered], "s--", color=colour, label=f"{run.info.label} p99")
    _concurrency_axis(ax)
    ax.set_yscale("log")
    ax.set_xlabel("measured concurrency (rollouts in flight while starting)")
    ax.set_ylabel(f"TTI ({_unit(runs)})")
    ax.legend(fontsize=7)
    return _png(fig)


def failures_vs_concurrency(runs: Sequence[RunStats]) -> bytes:
    """Failure rate by kind against concurrency, one panel per run."""
    fig, axes = _panels(len(runs))
    for ax, run in zip(axes, runs, strict=True):
        ordered = sorted(run.stages, key=lambda s: s.concurrency)
        kinds = sorted({kind for s in ordered for kind in s.failures_by_kind})
        x = [s.concurrency for s in ordered]
        ax.plot(x, [100 * s.failure_rate for s in ordered], "k.-", label="all kinds")
        for kind in kinds:
            rates = [100 * s.failures_by_kind.get(kind, 0) / max(s.ok + s.failed, 1) for s in ordered]
            ax.plot(x, rates, "o-", label=kind)
        _concurrency_axis(ax)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("measured concurrency (rollouts in flight while starting)")
        ax.set_ylabel("failed / finished (%)")
        ax.set_title(run.info.label, fontsize=9)
        ax.legend(fontsize=7)
    return _png(fig)


def timelines(runs: Sequence[RunStats]) -> bytes:
    """In flight, sandboxes usable, and failures so far, over the run; one panel per run."""
    fig, axes = _panels(len(runs), width=6.5)
    for ax, run in zip(axes, runs, strict=True):
        if run.frame is None or run.frame.empty:
            continue
        line = timeline(run.frame)
        ax.plot(line.t, line.inflight, label="in flight")
        ax.plot(line.t, line.ready, label="ready (usable sandboxes)")
        twin = ax.twinx()
        twin.plot(line.t, line.failed_cumulative, color="C3", label="failed (cumulative)")
        twin.set_ylabel("failed so far", color="C3")
        twin.set_ylim(bottom=0, top=max(1, float(line.failed_cumulative.max()) * 1.05))
        ax.set_ylim(bottom=0)
        twin.grid(False)
        ax.set_xlabel(f"time since first submit ({_unit(runs)})")
        ax.set_ylabel("rollouts")
        ax.set_title(run.info.label, fontsize=9)
        handles = ax.get_legend_handles_labels()
        more = twin.get_legend_handles_labels()
        ax.legend(handles[0] + more[0], handles[1] + more[1], fontsize=7, loc="upper left")
    return _png(fig)
