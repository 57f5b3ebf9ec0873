"""The report's section for a burst-hold run (issue #32): the protocol's figures as tables, and a figure.

The numbers are the ones `stampede summary` prints and summary.json's `burst_hold` and `engine_health` carry:
`burst_hold_figures` (harness.results.figures.burst_hold) computes them and `worker_health`
(harness.results.figures.harness_bound) reads the engines' 5 s rows; this module only lays them out, so the
report cannot disagree with the summary. The figure draws what the tables condense: sandboxes held over time (the
held spans of `held_intervals` counted on a grid by `concurrency_at`, the same count `time_to_n` reads), each
engine's loop lag per 5 s row against the stall line that marks it bound, and TTI by submission quartile.
Everything is in wall seconds, as the protocol's figures are (it runs at time scale 1). Runs of other scenarios
have no view, so their report is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.results.figures.burst_hold import (
    COLUMNS,
    CREATE_FAILURES,
    FAILED,
    PARTIAL,
    READINESS_FAILED,
    SCENARIO,
    SUCCESS,
    BurstHoldFigures,
    burst_hold_figures,
    held_intervals,
    hold_of,
)
from harness.results.figures.harness_bound import (
    FD_SHARE,
    LAG_BOUND_MS,
    WorkerHealth,
    load_engine_health,
    worker_health,
)
from harness.results.figures.quantiles import supported
from harness.results.figures.stage_aggregate import RunStats
from harness.results.read.concurrency import concurrency_at
from harness.results.read.dataset import load_rollout_frame
from harness.results.render import figure_canvas as canvas
from harness.results.render.colours import IN_FLIGHT_COLOUR, READY_COLOUR
from harness.results.render.figure_canvas import plt
from harness.results.render.report_tables import Table, quantile_cell, seconds
from harness.results.figures.vendor_loop import VendorLoop, load_vendor_loops
from harness.wire.engine_health import HEALTH_INTERVAL_S

BURST_HOLD_FIGURE = (
    "burst_hold.png",
    "Burst-hold, a column per burst-hold run (wall s since the first submit): sandboxes held at once (ready and "
    "not yet being terminated) over the run, N dashed and the instant N were first held dotted; each engine's "
    f"worst loop lag per {HEALTH_INTERVAL_S:g} s row of engine_health/, the dashed line the {LAG_BOUND_MS:.0f} ms "
    "stall above which the harness bound its own figures; TTI p50 (solid) and p99 (dashed; hollow where its "
    "sample is small) by quarter of submission order (fairness: whether the last submitted waited longer).",
)
"""(file name, caption) of the figure a report with a burst-hold run adds."""
BURST_HOLD_NOTE = (
    "Burst-hold (issue #32's protocol; the figures of `stampede summary` and summary.json's burst_hold, in wall "
    "seconds): every attempt is in one of four states: success (ready within the hold and held to its end), "
    "partial (ready, then failed or cut short during the hold), readiness failed (created, never ready, or ready "
    "only after the hold's end) and failed (the create failed: timeout, http, network or other). Allocate is the "
    "create, readiness the wait from created to usable; time to N held is from the first submit to the instant N "
    "sandboxes were held at once. Harness bound: an engine whose loop lagged past the stall line or whose open "
    f"descriptors reached {100 * FD_SHARE:.0f}% of its limit timed its rollouts late or refused connections itself."
)
"""The footnote a report with a burst-hold run adds."""
GRID_POINTS = 1000
"""The held count is drawn at this many instants (the plot's resolution; the tables' figures use every row)."""
STATE_LABELS: tuple[tuple[str, str], ...] = (
    (SUCCESS, "success"),
    (PARTIAL, "partial"),
    (READINESS_FAILED, "readiness failed"),
    (FAILED, "failed"),
)


@dataclass(frozen=True, slots=True)
class BurstHoldView:
    """One burst-hold run as the report shows it: its figures, its engines' rows, and what the figure draws."""

    label: str
    figures: BurstHoldFigures
    workers: list[WorkerHealth]
    health: pd.DataFrame  # engine_health rows (`t` in epoch seconds)
    vendor_loops: list[VendorLoop]  # the simulated vendor's own loop, a process each (empty: an outside vendor)
    held_start: np.ndarray  # each held span, epoch seconds (`held_intervals`)
    held_end: np.ndarray
    t0: float  # the run's first submit, epoch seconds: the figure's zero


def load_view(run: RunStats) -> BurstHoldView | None:
    """The run's burst-hold view; None for any other scenario (its report says nothing more).

    The rows are read once: the figures (`load_burst_hold`'s own columns) and the held spans come from one frame."""
    info = run.info
    if info.manifest.get("scenario") != SCENARIO:
        return None
    frame = load_rollout_frame(info.run_dir, COLUMNS)
    figures = burst_hold_figures(frame, hold_of(dict(info.manifest)))
    start, end = held_intervals(frame)
    health = load_engine_health(info.run_dir)
    if not frame.empty:
        t0 = float(frame["t_submit"].min())
    else:
        t0 = float(health["t"].min()) if not health.empty else 0.0
    loops = load_vendor_loops(info.run_dir)
    return BurstHoldView(info.label, figures, worker_health(health), health, loops, start, end, t0)


def load_views(runs: Sequence[RunStats]) -> list[BurstHoldView]:
    """The burst-hold runs among `runs`, in their order."""
    return [view for view in (load_view(run) for run in runs) if view is not None]


def _count_share(count: int, total: int) -> list[str]:
    return [str(count), f"{100 * count / total:.1f}%" if total else "-"]


def states_table(view: BurstHoldView) -> Table:
    """The four result states (failed split by the create's failure), each as a count and a share of attempts."""
    f = view.figures
    hold = f", hold {f.hold_s:g} s" if f.hold_s is not None else ""
    attempts = f" in {f.rollouts} attempts" if f.rollouts != f.n else ""
    rows = []
    for state, name in STATE_LABELS:
        if state == READINESS_FAILED and f.ready_late:
            name += f" ({f.ready_late} ready after the hold)"
        rows.append([name, *_count_share(f.states[state], f.rollouts)])
        if state == FAILED:
            rows += [
                [f"  create {kind}", *_count_share(f.create_failures[kind], f.rollouts)] for kind in CREATE_FAILURES
            ]
    title = f"{view.label}: burst-hold, {f.n} sandboxes fired at t=0{hold}{attempts}: result states"
    return Table(title, ["state", "attempts", "share"], rows)


def latency_table(view: BurstHoldView) -> Table:
    """Allocate (the create) and readiness quantiles, `~` where the sample is small."""
    f = view.figures
    names = ("p50", "p95", "p99", "max")
    rows = [
        [phase, str(int(summary["n"])), *(quantile_cell(summary, name) for name in names)]
        for phase, summary in (("allocate (create)", f.allocate), ("readiness", f.readiness))
    ]
    header = ["phase", "n", "p50 (wall s)", "p95", "p99", "max"]
    return Table(f"{view.label}: burst-hold allocate and readiness (wall s)", header, rows)


def held_table(view: BurstHoldView) -> Table:
    """N, how long until N were held at once, and the most held at once."""
    f = view.figures
    reached = seconds(f.time_to_n_s) if f.time_to_n_s is not None else "never"
    header = ["N", "time to N held (wall s)", "peak held"]
    return Table(f"{view.label}: burst-hold held at once", header, [[str(f.n), reached, str(f.peak_held)]])


def quartile_table(view: BurstHoldView) -> Table:
    """TTI p50 and p99 by quarter of submission order."""
    rows = []
    for part in view.figures.quartiles:
        tti = {"n": float(part.answered), "p50": part.tti_p50_s, "p99": part.tti_p99_s}
        rows.append(
            [
                f"Q{part.quartile}",
                f"{seconds(part.submit_from_s)}..{seconds(part.submit_to_s)}",
                str(part.rollouts),
                str(part.answered),
                quantile_cell(tti, "p50"),
                quantile_cell(tti, "p99"),
            ]
        )
    header = ["quartile", "submitted (wall s)", "rollouts", "answered", "TTI p50 (wall s)", "TTI p99"]
    return Table(f"{view.label}: burst-hold TTI by submission quartile", header, rows)


def _bound_cell(health: WorkerHealth) -> str:
    reasons = health.bound_reasons()
    return "(!) bound: " + ", ".join(reasons) if reasons else "not bound"


def harness_table(view: BurstHoldView) -> Table | None:
    """Per engine, its worst 5 s row on each count and whether the harness bound the figures; None without rows."""
    if not view.workers:
        return None
    rows = [
        [
            w.worker,
            str(w.rows),
            f"{w.lag_max_ms:.0f}",
            str(w.fds_max),
            str(w.fd_limit) if w.fd_limit > 0 else "unlimited",
            str(w.sockets_max),
            _bound_cell(w),
        ]
        for w in view.workers
    ]
    header = ["worker", "rows", "loop lag max (ms)", "open fds max", "fd limit", "sockets max", "harness"]
    title = f"{view.label}: burst-hold, per engine (engine_health/, every {HEALTH_INTERVAL_S:g} s)"
    return Table(title, header, rows, left=frozenset({0, 6}))


def vendor_table(view: BurstHoldView) -> Table | None:
    """Per simulated vendor process, how late its own loop ran and whether it stalled; None for an outside vendor.
    Past 2,000 held on 2 cores it stalls before the engine does (bench/README, 2026-12-07 08:00)."""
    if not view.vendor_loops:
        return None
    rows = [
        [
            str(loop.shard),
            str(loop.probes),
            f"{loop.lag_p99_ms:.0f}",
            f"{loop.lag_max_ms:.0f}",
            f"(!) stalled past {LAG_BOUND_MS:.0f} ms" if loop.bound else "not stalled",
        ]
        for loop in view.vendor_loops
    ]
    header = ["shard", "probes", "loop lag p99 (ms)", "loop lag max (ms)", "vendor"]
    title = f"{view.label}: burst-hold, per simulated vendor process (its own loop, vendor_loop.json)"
    return Table(title, header, rows, left=frozenset({4}))


def tables(view: BurstHoldView) -> list[Table]:
    """The run's burst-hold tables, in the order the report prints them."""
    found = [
        states_table(view),
        latency_table(view),
        held_table(view),
        quartile_table(view),
        harness_table(view),
        vendor_table(view),
    ]
    return [table for table in found if table is not None]


def _held_panel(ax: plt.Axes, view: BurstHoldView) -> None:
    f = view.figures
    if view.held_start.size:
        finite = view.held_end[np.isfinite(view.held_end)]
        last = max(float(view.held_start.max()), float(finite.max()) if finite.size else view.t0)
        grid = np.linspace(view.t0, max(last, view.t0 + 1e-3), GRID_POINTS)
        held = concurrency_at(grid, view.held_start, view.held_end)
        ax.plot(grid - view.t0, held, color=READY_COLOUR, linewidth=1.8, label=f"held (peak {f.peak_held})")
    ax.axhline(f.n, color=IN_FLIGHT_COLOUR, linestyle="--", linewidth=0.9, label=f"N = {f.n}")
    if f.time_to_n_s is not None:
        ax.axvline(
            f.time_to_n_s, color="0.4", linestyle=":", linewidth=1, label=f"N held at {seconds(f.time_to_n_s)} s"
        )
    ax.set_ylim(bottom=0, top=max(f.n, f.peak_held, 1) * 1.1)
    ax.set_ylabel("sandboxes held")
    ax.set_title(view.label, fontsize=9)
    ax.legend(fontsize=7, loc="lower right")


def _lag_panel(ax: plt.Axes, view: BurstHoldView) -> None:
    top = LAG_BOUND_MS
    for index, (worker, rows) in enumerate(view.health.groupby("worker", sort=True, observed=True)):
        rows = rows.sort_values("t")
        t = rows["t"].to_numpy(dtype=float) - view.t0
        lag = rows["loop_lag_max_ms"].to_numpy(dtype=float)
        begin = t[0] - float(rows["interval_s"].iloc[0])
        # each row's worst lag holds over the interval that ends at its `t`
        ax.step(np.r_[begin, t], np.r_[lag[0], lag], where="pre", color=f"C{index % 10}", label=str(worker))
        ax.plot(t, lag, "o", color=f"C{index % 10}", markersize=3)
        top = max(top, float(lag.max()))
    ax.axhline(LAG_BOUND_MS, color="#d62728", linestyle="--", linewidth=0.9, label="stall: harness bound above")
    ax.set_ylim(bottom=0, top=top * 1.15)
    ax.set_xlabel("time since first submit (wall s)")
    ax.set_ylabel(f"loop lag max per {HEALTH_INTERVAL_S:g} s (ms)")
    ax.legend(fontsize=7, loc="upper right")


def _quartile_panel(ax: plt.Axes, view: BurstHoldView) -> None:
    parts = view.figures.quartiles
    x = [part.quartile for part in parts]
    p99 = [part.tti_p99_s for part in parts]
    small = [not supported(0.99, part.answered) for part in parts]
    ax.plot(x, [part.tti_p50_s for part in parts], "o-", color="C0", label="TTI p50")
    ax.plot(x, p99, "--", color="C0", label="TTI p99")
    for hollow in (False, True):
        ax.scatter(
            [q for q, s in zip(x, small, strict=True) if s is hollow],
            [v for v, s in zip(p99, small, strict=True) if s is hollow],
            marker="s",
            facecolors="white" if hollow else "C0",
            edgecolors="C0",
            zorder=3,
        )
    ax.set_xticks(x, [f"Q{p.quartile}\n{seconds(p.submit_from_s)}..{seconds(p.submit_to_s)} s" for p in parts])
    ax.set_xlabel("quarter of submission order (submitted, wall s)")
    values = [v for part in parts for v in (part.tti_p50_s, part.tti_p99_s) if v == v]
    ax.set_ylim(bottom=0, top=max(values, default=1.0) * 1.15)  # the markers clear of the frame
    ax.set_ylabel("TTI (wall s)")
    ax.legend(fontsize=7, loc="lower right")


def figure(views: Sequence[BurstHoldView]) -> bytes:
    """A column per burst-hold run: held over time, each engine's loop lag over time, TTI by quartile."""
    cols = max(len(views), 1)
    fig, axes = plt.subplots(3, cols, figsize=(6.5 * cols, 9.6), squeeze=False, layout="constrained")
    for col, view in enumerate(views):
        held_ax, lag_ax, quartile_ax = axes[0][col], axes[1][col], axes[2][col]
        lag_ax.sharex(held_ax)
        _held_panel(held_ax, view)
        _lag_panel(lag_ax, view)
        _quartile_panel(quartile_ax, view)
    return canvas.png_bytes(fig)
